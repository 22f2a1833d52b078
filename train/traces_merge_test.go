package train

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// conversation is the shape of conversationTraces' traces: each call's
// prompt is the previous call's prompt and answer and then inserted
// tokens (a tool's result, an observation), as an agent's chat grows.
type conversation struct {
	traces, calls            int
	system, answer, inserted int
	vocab                    int
	seed                     uint64
}

// conversationTraces makes c.traces agent traces of c.calls calls of the
// model "policy" each, with token ids and sampled logprobs recorded, and
// a judge reward on each trace's root: traces 2k and 2k+1 share their
// first prompt (a GRPO group of two).
func conversationTraces(c conversation) []traces.Trace {
	rng := rand.New(rand.NewPCG(c.seed, 7))
	ids := func(n int) []int32 {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(1 + rng.IntN(c.vocab-1))
		}
		return v
	}
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var out []traces.Trace
	var system []int32
	for k := range c.traces {
		tid := [16]byte{byte(k + 1), byte((k + 1) >> 8), 0xc0}
		if k%2 == 0 {
			system = ids(c.system)
		}
		root := traces.NewSpan()
		root.TraceID, root.SpanID, root.Operation = tid, [8]byte{1}, traces.OpInvokeAgent
		root.Start, root.End = t0, t0.Add(time.Hour)
		root.Rewards = []traces.Reward{{Name: "judge", Value: float64(rng.IntN(3))}}
		t := traces.Trace{ID: tid, Spans: []traces.Span{root}}
		prompt := system
		for i := range c.calls {
			s := traces.NewSpan()
			s.TraceID, s.SpanID, s.ParentID, s.Operation = tid, [8]byte{byte(i + 2)}, root.SpanID, traces.OpChat
			s.RequestModel, s.ResponseModel = "policy", "policy"
			s.Start = t0.Add(time.Duration(i) * time.Second)
			s.End = s.Start.Add(time.Second / 2)
			answer := ids(c.answer)
			s.PromptTokenIDs, s.OutputTokenIDs = prompt, answer
			s.OutputLogprobs = make([]float32, len(answer))
			for j := range answer {
				s.OutputLogprobs[j] = -float32(rng.Float64())
			}
			s.InputTokens, s.OutputTokens = int64(len(prompt)), int64(len(answer))
			s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"x"}]}]`
			t.Spans = append(t.Spans, s)
			prompt = slices.Concat(prompt, answer, ids(c.inserted))
		}
		out = append(out, t)
	}
	return out
}

// rowsBothWays builds ts's rows merged and one per call.
func rowsBothWays(t testing.TB, ts []traces.Trace) (merged, perCall *traces.Built) {
	t.Helper()
	opt := traces.TrajectoryOptions{Policy: "solver", Reward: "judge", Model: "policy"}
	merged, err := traces.Build(ts, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.PerCall = true
	if perCall, err = traces.Build(ts, opt); err != nil {
		t.Fatal(err)
	}
	return merged, perCall
}

// scoredBatch lays out the batch's sequences for the model, each in its
// own row, and the loss mask as one weight per scored token.
func scoredBatch(t testing.TB, b learner.Batch, vocab int) (*model.Batch, []float32) {
	t.Helper()
	seqs := make([]model.Sequence, len(b.Prompts))
	for i := range seqs {
		seqs[i] = model.Sequence{Prompt: b.Prompts[i], Response: b.Responses[i]}
	}
	bt, err := model.NewBatch(seqs, 0, false, vocab)
	if err != nil {
		t.Fatal(err)
	}
	masks := b.Masks
	if masks == nil {
		for _, r := range b.Responses {
			masks = append(masks, slices.Repeat([]float32{1}, len(r)))
		}
	}
	w, err := bt.Join(masks)
	if err != nil {
		t.Fatal(err)
	}
	return bt, w
}

func tinyLearnerConfig(alg string) learner.Config {
	cfg := learner.DefaultConfig()
	cfg.Algorithm, cfg.Seed = alg, 3
	cfg.Model = &model.Config{Architecture: model.Qwen2, HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4,
		NumKVHeads: 2, HeadDim: 8, VocabSize: 48, MaxPositions: 128, RMSNormEps: 1e-6, RopeTheta: 10000,
		TorchDType: "float32", AttentionBias: true, TieWordEmbeddings: true}
	return cfg
}

// Merging a conversation's calls into one row changes what the learner
// computes, not what it learns: every answer token's log-probability
// under the learner's model is the one its own call's row gives (the
// same tokens before it, at the same positions), and the gradient of the
// merged rows' token-summed loss Σ mask·log p is the sum of the per-call
// rows' gradients. With the learner's default token-mean aggregation the
// loss tokens and their count are the same either way, so one SFT step
// and one offline GRPO step give the same loss, gradient norm and
// weights, within float32 rounding.
func TestMergedCallsTrainAsTheirCalls(t *testing.T) {
	conv := conversation{traces: 4, calls: 4, system: 5, answer: 4, inserted: 3, vocab: 48, seed: 11}
	ts := conversationTraces(conv)
	merged, perCall := rowsBothWays(t, ts)
	if len(merged.Turns) != conv.traces || len(perCall.Turns) != conv.traces*conv.calls || merged.Calls != perCall.Calls || len(merged.Splits) != 0 {
		t.Fatalf("%d merged rows (%d calls, splits %v), %d per call; want %d and %d", len(merged.Turns), merged.Calls, merged.Splits,
			len(perCall.Turns), conv.traces, conv.traces*conv.calls)
	}
	mb, err := BatchFromTrajectories("solver", merged.Turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := BatchFromTrajectories("solver", perCall.Turns, nil)
	if err != nil {
		t.Fatal(err)
	}

	l, err := learner.New(tinyLearnerConfig(learner.SFT))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m := l.Model()
	grads := func(b learner.Batch) ([][]float32, map[string][]float32) {
		bt, w := scoredBatch(t, b, conv.vocab)
		logp, _, err := m.Forward(bt)
		if err != nil {
			t.Fatal(err)
		}
		m.ZeroGrad()
		if err := m.Backward(w, nil); err != nil {
			t.Fatal(err)
		}
		return bt.Split(logp), m.Grads()
	}
	mLogp, mGrad := grads(mb)
	pLogp, pGrad := grads(pb)

	// Each per-call sequence is a prefix of one merged row's (its trace's);
	// its answer sits in that row after the call's prompt.
	const logpTol = 1e-5
	for i := range pb.Prompts {
		call := slices.Concat(pb.Prompts[i], pb.Responses[i])
		k := -1
		for m := range mb.Prompts {
			if whole := slices.Concat(mb.Prompts[m], mb.Responses[m]); len(whole) >= len(call) && slices.Equal(whole[:len(call)], call) {
				k = m
				break
			}
		}
		if k < 0 {
			t.Fatalf("per-call sequence %d is no merged row's prefix", i)
		}
		at := len(pb.Prompts[i]) - len(mb.Prompts[k])
		for j, id := range pb.Responses[i] {
			if mb.Responses[k][at+j] != id || mb.Masks[k][at+j] != 1 || mb.SampleLogProbs[k][at+j] != pb.SampleLogProbs[i][j] {
				t.Fatalf("merged row %d token %d: id %d mask %v logprob %v; per-call sequence %d's %d, 1, %v", k, at+j,
					mb.Responses[k][at+j], mb.Masks[k][at+j], mb.SampleLogProbs[k][at+j], i, id, pb.SampleLogProbs[i][j])
			}
			if d := math.Abs(float64(mLogp[k][at+j] - pLogp[i][j])); d > logpTol {
				t.Errorf("merged row %d token %d: log p %v; per-call sequence %d token %d: %v (|Δ| %g > %g)",
					k, at+j, mLogp[k][at+j], i, j, pLogp[i][j], d, logpTol)
			}
		}
	}
	var loss [2]float64
	for k, lp := range mLogp {
		for j, v := range lp {
			loss[0] += float64(mb.Masks[k][j] * v)
		}
	}
	for _, lp := range pLogp {
		for _, v := range lp {
			loss[1] += float64(v)
		}
	}
	if math.Abs(loss[0]-loss[1]) > 1e-4*math.Abs(loss[1]) {
		t.Errorf("Σ mask·log p: merged %v, per call %v", loss[0], loss[1])
	}
	checked := 0
	for name, g := range pGrad {
		var scale float64
		for _, v := range g {
			scale = max(scale, math.Abs(float64(v)))
		}
		for j, v := range g {
			if d := math.Abs(float64(mGrad[name][j] - v)); d > 1e-4*scale+1e-6 {
				t.Fatalf("gradient %s[%d]: merged %v, per call summed %v (|Δ| %g, largest %g)", name, j, mGrad[name][j], v, d, scale)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no gradient compared")
	}

	// One optimizer step each way, from the same weights.
	groupsOf := func(b *traces.Built) learner.Batch {
		g, err := newTraceGroups(b.Turns, 2, conv.traces/2, 1)
		if err != nil {
			t.Fatal(err)
		}
		turns, err := g.batch(0, learner.GRPO)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := BatchFromTrajectories("solver", turns, nil)
		if err != nil {
			t.Fatal(err)
		}
		return batch
	}
	for _, c := range []struct {
		alg             string
		merged, perCall learner.Batch
	}{
		{learner.SFT, mb, pb},
		{learner.GRPO, groupsOf(merged), groupsOf(perCall)},
	} {
		var stats [2]learner.Stats
		var weights [2]map[string][]float32
		for i, b := range []learner.Batch{c.merged, c.perCall} {
			l, err := learner.New(tinyLearnerConfig(c.alg))
			if err != nil {
				t.Fatal(err)
			}
			if stats[i], err = l.Train(b); err != nil {
				t.Fatalf("%s, %d sequences: %v", c.alg, len(b.Prompts), err)
			}
			weights[i] = l.PolicyWeights()
			l.Close()
		}
		s, p := stats[0], stats[1]
		if s.Tokens != p.Tokens || s.Tokens == 0 || math.Abs(s.Loss-p.Loss) > 1e-5*math.Abs(p.Loss)+1e-7 ||
			math.Abs(s.GradNorm-p.GradNorm) > 1e-4*p.GradNorm || !(p.GradNorm > 0) {
			t.Errorf("%s: merged rows: loss %v, gradient norm %v, %d tokens; per call: %v, %v, %d", c.alg, s.Loss, s.GradNorm, s.Tokens, p.Loss, p.GradNorm, p.Tokens)
		}
		for name, w := range weights[1] {
			for j, v := range w {
				if d := math.Abs(float64(weights[0][name][j] - v)); d > 1e-6 {
					t.Fatalf("%s: weight %s[%d] after a step: merged rows %v, per call %v", c.alg, name, j, weights[0][name][j], v)
				}
			}
		}
	}
}

// BenchmarkTraceRows trains one SFT step of the learner on 8 agent traces
// of 8-call conversations (a 64-token system prompt, 32-token answers,
// 32-token tool results between them: 544 tokens at the last call), with
// the calls merged into one row per conversation and with one row per
// call (data.traces.merge_calls: false). It reports the rows, the tokens
// the learner computes (prompt and response of every row) and the loss
// tokens, which are the same either way.
func BenchmarkTraceRows(b *testing.B) {
	conv := conversation{traces: 8, calls: 8, system: 64, answer: 32, inserted: 32, vocab: 512, seed: 5}
	merged, perCall := rowsBothWays(b, conversationTraces(conv))
	for _, c := range []struct {
		name string
		rows []data.Turn
	}{{"merged", merged.Turns}, {"per-call", perCall.Turns}} {
		b.Run(c.name, func(b *testing.B) {
			batch, err := BatchFromTrajectories("solver", c.rows, nil)
			if err != nil {
				b.Fatal(err)
			}
			var tokens, loss int
			for _, r := range c.rows {
				tokens += len(r.PromptIDs) + len(r.ResponseIDs)
				for _, m := range r.LossMask {
					loss += int(m)
				}
			}
			cfg := learner.DefaultConfig()
			cfg.Algorithm, cfg.Seed = learner.SFT, 1
			cfg.Model = &model.Config{Architecture: model.Qwen2, HiddenSize: 128, IntermediateSize: 384, NumLayers: 2, NumHeads: 4,
				NumKVHeads: 2, HeadDim: 32, VocabSize: conv.vocab, MaxPositions: 1024, RMSNormEps: 1e-6, RopeTheta: 10000,
				TorchDType: "float32", AttentionBias: true, TieWordEmbeddings: true}
			l, err := learner.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.ResetTimer()
			for range b.N {
				if _, err := l.Train(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(c.rows)), "rows")
			b.ReportMetric(float64(tokens), "tokens")
			b.ReportMetric(float64(loss), "loss-tokens")
		})
	}
}
