package native

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
)

func testEngine(t testing.TB, cfg Config) (*Engine, *model.Model) {
	t.Helper()
	m := nativetest.Model(t, nativetest.Config(), 1)
	e, err := New(m, tokenizer.Builtin(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, m
}

// testCtx bounds a test's engine calls: a guard against hangs, generous
// enough for a machine under heavy load (the emulated GPU's tests took over
// 30 s at a load average of 136).
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// referenceLogits scores prompt+response with the training forward (a
// fresh model with the engine's weights) and returns the logits that
// predict each response token.
func referenceLogits(t *testing.T, weights map[string][]float32, prompt, response []int) [][]float32 {
	t.Helper()
	ref, err := model.New(nativetest.Config(), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ref.Params() {
		ref.B.Upload(p.W, weights[p.Name])
	}
	seq := model.Sequence{Prompt: toInt32(prompt), Response: toInt32(response)}
	bt, err := model.NewBatch([]model.Sequence{seq}, 0, false, ref.Config.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ref.Forward(bt); err != nil {
		t.Fatal(err)
	}
	z := ref.Logits()
	V := ref.Config.VocabSize
	out := make([][]float32, len(response))
	for k := range response {
		out[k] = z[k*V : (k+1)*V]
	}
	return out
}

// logSoftmaxT is log softmax(z/T)[i] in float64.
func logSoftmaxT(z []float32, T float64, i int) float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, float64(v)/T)
	}
	var s float64
	for _, v := range z {
		s += math.Exp(float64(v)/T - m)
	}
	return float64(z[i])/T - m - math.Log(s)
}

const logpTol = 2e-4

// checkLogProbs holds every sample of res to the training forward: each
// logprob is log softmax(logits/T) of the token, and greedy tokens are the
// argmax.
func checkLogProbs(t *testing.T, weights map[string][]float32, res engine.Result, p engine.SamplingParams) {
	t.Helper()
	T := p.Temperature
	if T == 0 {
		T = 1
	}
	for si, s := range res.Samples {
		if len(s.LogProbs) != len(s.TokenIDs) || len(s.TokenIDs) == 0 {
			t.Fatalf("sample %d: %d tokens, %d logprobs", si, len(s.TokenIDs), len(s.LogProbs))
		}
		z := referenceLogits(t, weights, res.PromptTokenIDs, s.TokenIDs)
		for k, tok := range s.TokenIDs {
			want := logSoftmaxT(z[k], T, tok)
			if math.Abs(float64(s.LogProbs[k])-want) > logpTol {
				t.Errorf("request %s sample %d token %d (id %d): logprob %v, training forward %v", res.RequestID, si, k, tok, s.LogProbs[k], want)
			}
			if p.Temperature == 0 {
				best := 0
				for i, v := range z[k] {
					if v > z[k][best] {
						best = i
					}
				}
				if z[k][best]-z[k][tok] > 1e-4 {
					t.Errorf("request %s token %d: greedy picked %d, argmax is %d", res.RequestID, k, tok, best)
				}
			}
		}
	}
}

func TestLogProbsMatchTrainingForward(t *testing.T) {
	e, m := testEngine(t, Config{})
	weights := m.Weights()
	tok := tokenizer.Builtin()
	seed := int64(11)
	tests := []struct {
		name string
		req  engine.Request
	}{
		{"greedy", engine.Request{ID: "g", Prompt: tok.Encode("Tom has 3 apples."), Params: engine.SamplingParams{MaxTokens: 24}}},
		{"temperature", engine.Request{ID: "t", Prompt: tok.Encode("Let's think step by step."), Params: engine.SamplingParams{MaxTokens: 24, Temperature: 0.7, Seed: &seed, N: 3}}},
		{"top-k top-p", engine.Request{ID: "k", Prompt: tok.Encode("5 + 7 ="), Params: engine.SamplingParams{MaxTokens: 16, Temperature: 1.3, TopK: 20, TopP: 0.8, Seed: &seed}}},
		{"chat", engine.Request{ID: "c", Messages: []tokenizer.Message{{Role: "user", Content: "What is 2 + 2?"}}, Params: engine.SamplingParams{MaxTokens: 12}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.Generate(testCtx(t), []engine.Request{tc.req})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || res[0].RequestID != tc.req.ID || len(res[0].Samples) != max(tc.req.Params.N, 1) {
				t.Fatalf("got %+v", res)
			}
			if tc.req.Messages != nil {
				want := tok.EncodeChat(tc.req.Messages, true)
				if !equalInts(res[0].PromptTokenIDs, want) {
					t.Errorf("chat prompt ids %v, want %v", res[0].PromptTokenIDs, want)
				}
			}
			checkLogProbs(t, weights, res[0], tc.req.Params)
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// plainText decodes ids without special tokens, as Sample.Text is written.
func plainText(ids []int) string {
	tok := tokenizer.Builtin()
	var keep []int
	for _, id := range ids {
		if !tok.IsSpecial(id) {
			keep = append(keep, id)
		}
	}
	return tok.Decode(keep)
}

func TestSeedReproducible(t *testing.T) {
	e, _ := testEngine(t, Config{})
	tok := tokenizer.Builtin()
	run := func(seed int64) []engine.Sample {
		t.Helper()
		res, err := e.Generate(testCtx(t), []engine.Request{{Prompt: tok.Encode("Anna has"),
			Params: engine.SamplingParams{N: 4, MaxTokens: 20, Temperature: 1, Seed: &seed}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Samples
	}
	a, b, c := run(5), run(5), run(6)
	same := func(x, y []engine.Sample) bool {
		for i := range x {
			if !equalInts(x[i].TokenIDs, y[i].TokenIDs) {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("the same seed gave different samples")
	}
	if same(a, c) {
		t.Error("seeds 5 and 6 gave the same samples")
	}
	if equalInts(a[0].TokenIDs, a[1].TokenIDs) && equalInts(a[1].TokenIDs, a[2].TokenIDs) {
		t.Error("the samples of one request are all alike")
	}
}

// Many concurrent requests of different lengths share the batch; each
// result still matches the training forward, and the batch is used.
func TestContinuousBatching(t *testing.T) {
	e, m := testEngine(t, Config{MaxBatch: 8, MaxStepTokens: 16})
	weights := m.Weights()
	tok := tokenizer.Builtin()
	prompts := []string{"Tom", "Anna has 12 apples and gives 5 to Sam.", "def add(a, b):", "7 * 8 =",
		"The quick brown fox jumps over the lazy dog. Let's think step by step.", "Max", "Question: How many are left?\nAnswer:",
		"She has twice as many", "12 + 30 =", "Emma"}
	var wg sync.WaitGroup
	results := make([]engine.Result, len(prompts))
	errs := make([]error, len(prompts))
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := int64(i)
			r, err := e.Generate(testCtx(t), []engine.Request{{ID: p, Prompt: tok.Encode(p),
				Params: engine.SamplingParams{MaxTokens: 5 + 3*i, Temperature: 0.9, Seed: &seed, N: 1 + i%3}}})
			if err == nil {
				results[i] = r[0]
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range prompts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		checkLogProbs(t, weights, results[i], engine.SamplingParams{Temperature: 0.9})
		for _, s := range results[i].Samples {
			if s.FinishReason == "length" && len(s.TokenIDs) != 5+3*i {
				t.Errorf("request %d: finished for length after %d tokens, max %d", i, len(s.TokenIDs), 5+3*i)
			}
		}
	}
}

func TestStopConditions(t *testing.T) {
	e, _ := testEngine(t, Config{})
	tok := tokenizer.Builtin()
	prompt := tok.Encode("Sam has 4 books and")
	gen := func(p engine.SamplingParams) engine.Sample {
		t.Helper()
		res, err := e.Generate(testCtx(t), []engine.Request{{Prompt: prompt, Params: p}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Samples[0]
	}
	// The greedy continuation, long enough to cut.
	base := gen(engine.SamplingParams{MaxTokens: 40})
	if base.FinishReason != "length" || len(base.TokenIDs) != 40 {
		// The test model and prompt are fixed, so this is a stop-handling
		// regression (or a changed test model: then pick another prompt).
		t.Fatalf("greedy continuation stopped early (%s after %d tokens, want length after 40)", base.FinishReason, len(base.TokenIDs))
	}
	if base.Text != plainText(base.TokenIDs) {
		t.Errorf("text %q, decode of the ids %q", base.Text, plainText(base.TokenIDs))
	}

	// A stop id ends at its first occurrence and is kept in the ids.
	stopID := base.TokenIDs[5]
	first := 0
	for base.TokenIDs[first] != stopID {
		first++
	}
	s := gen(engine.SamplingParams{MaxTokens: 40, StopTokenIDs: []int{stopID}})
	if s.FinishReason != "stop" || !equalInts(s.TokenIDs, base.TokenIDs[:first+1]) {
		t.Errorf("stop id %d: %s after %v, want stop after %v", stopID, s.FinishReason, s.TokenIDs, base.TokenIDs[:first+1])
	}
	if s.Text != plainText(base.TokenIDs[:first]) {
		t.Errorf("stop id: text %q, want %q", s.Text, plainText(base.TokenIDs[:first]))
	}

	// A stop string spanning tokens: the text ends before it.
	text := base.Text
	stop := text[len(text)/2 : len(text)/2+3]
	s = gen(engine.SamplingParams{MaxTokens: 40, Stop: []string{"never-there", stop}})
	cut := strings.Index(text, stop)
	if s.FinishReason != "stop" || s.Text != text[:cut] {
		t.Errorf("stop %q: %s with text %q, want stop with %q", stop, s.FinishReason, s.Text, text[:cut])
	}
	if got := plainText(s.TokenIDs); !strings.Contains(got, stop) || strings.Contains(plainText(s.TokenIDs[:len(s.TokenIDs)-1]), stop) {
		t.Errorf("stop %q: generation did not end at the token completing it: %q", stop, got)
	}

	// Max tokens.
	s = gen(engine.SamplingParams{MaxTokens: 3})
	if s.FinishReason != "length" || !equalInts(s.TokenIDs, base.TokenIDs[:3]) {
		t.Errorf("max tokens 3: %s %v", s.FinishReason, s.TokenIDs)
	}
}

// The tokenizer's end-of-turn ids end generation although the request
// names no stop ids.
func TestEOSEndsGeneration(t *testing.T) {
	m := nativetest.Model(t, nativetest.Config(), 1)
	tok := tokenizer.Builtin()
	eos := tok.StopIDs()[0]
	// Make eos the greedy choice after the prompt: with tied embeddings its
	// logit is its embedding row times the final hidden state, so a copy of
	// the chosen token's row, 4× longer, outscores it.
	w := m.Weights()
	row := w["model.embed_tokens.weight"][eos*32 : (eos+1)*32]
	e0, err := New(m, tok, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e0.Close()
	prompt := tok.Encode("Lily")
	res, err := e0.Generate(testCtx(t), []engine.Request{{Prompt: prompt, Params: engine.SamplingParams{MaxTokens: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	chosen := res[0].Samples[0].TokenIDs[0]
	copy(row, w["model.embed_tokens.weight"][chosen*32:(chosen+1)*32])
	for i := range row {
		row[i] *= 4
	}
	if err := e0.SetWeights(testCtx(t), 1, map[string][]float32{"model.embed_tokens.weight": w["model.embed_tokens.weight"]}); err != nil {
		t.Fatal(err)
	}
	res, err = e0.Generate(testCtx(t), []engine.Request{{Prompt: prompt, Params: engine.SamplingParams{MaxTokens: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	s := res[0].Samples[0]
	if s.FinishReason != "stop" || s.TokenIDs[len(s.TokenIDs)-1] != eos {
		t.Fatalf("finish %s with ids %v, want stop at eos %d", s.FinishReason, s.TokenIDs, eos)
	}
	if strings.Contains(s.Text, tokenizer.IMEnd) || strings.Contains(s.Text, tokenizer.EndOfText) {
		t.Errorf("text %q holds the end-of-turn token", s.Text)
	}
	if res[0].WeightVersion != 1 {
		t.Errorf("weight version %d, want 1", res[0].WeightVersion)
	}
}

func TestBadRequests(t *testing.T) {
	e, _ := testEngine(t, Config{MaxBatch: 4})
	ok := engine.SamplingParams{MaxTokens: 4}
	tests := []struct {
		name string
		req  engine.Request
		want string
	}{
		{"empty", engine.Request{Params: ok}, "empty prompt"},
		{"both", engine.Request{Prompt: []int{1}, Messages: []tokenizer.Message{{Role: "user", Content: "x"}}, Params: ok}, "both a prompt and chat messages"},
		{"bad id", engine.Request{Prompt: []int{1, 9999}, Params: ok}, "prompt token 1: id 9999 out of range"},
		{"max tokens", engine.Request{Prompt: []int{1}}, "max_tokens = 0 must be positive"},
		{"context", engine.Request{Prompt: []int{1, 2}, Params: engine.SamplingParams{MaxTokens: 255}}, "exceeds the model's context of 256 tokens"},
		{"n", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, N: 5}}, "n = 5 exceeds the engine's batch of 4"},
		{"temperature", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Temperature: -1}}, "temperature = -1"},
		{"nan temperature", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Temperature: math.NaN()}}, "temperature = NaN"},
		{"top_p", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, TopP: 1.5}}, "top_p = 1.5"},
		{"top_k", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, TopK: -2}}, "top_k = -2"},
		{"stop", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Stop: []string{""}}}, "stop string 0 is empty"},
		{"stops", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Stop: make([]string, engine.MaxStopStrings+1)}}, "65 stop strings, more than the 64 allowed"},
		{"long stop", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Stop: []string{"a", strings.Repeat("s", engine.MaxStopBytes+1)}}}, "stop string 1 is 1025 bytes, more than the 1024 allowed"},
		{"stop bytes", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Stop: slices.Repeat([]string{strings.Repeat("s", 1000)}, 9)}}, "9000 bytes in all, more than the 8192 allowed"},
		{"stop ids", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, StopTokenIDs: make([]int, engine.MaxStopTokenIDs+1)}}, "1025 stop token ids, more than the 1024 allowed"},
		{"stop id", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, StopTokenIDs: []int{-3}}}, "stop token id 0: -3"},
	}
	for _, tc := range tests {
		tc.req.ID = tc.name
		_, err := e.Generate(testCtx(t), []engine.Request{{Prompt: []int{1}, Params: ok}, tc.req})
		if !errors.Is(err, engine.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `request 1 (id "`+tc.name+`")`) {
			t.Errorf("%s: error %v, want ErrBadRequest naming request 1 and %q", tc.name, err, tc.want)
		}
		if full := errors.Is(err, engine.ErrContextFull); full != (tc.name == "context") {
			t.Errorf("%s: errors.Is(err, ErrContextFull) = %v: want it for the context's refusal alone", tc.name, full)
		}
	}
}

func TestCancelLeavesOthersRunning(t *testing.T) {
	e, _ := testEngine(t, Config{MaxBatch: 4})
	tok := tokenizer.Builtin()
	ctx, cancel := context.WithCancel(testCtx(t))
	st, err := e.Stream(ctx, engine.Request{Prompt: tok.Encode("Ben"), Params: engine.SamplingParams{MaxTokens: 200}}, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	cancel()
	for {
		_, err := st.Next(testCtx(t))
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("after cancel: %v, want context.Canceled", err)
		}
		break
	}
	res, err := e.Generate(testCtx(t), []engine.Request{{Prompt: tok.Encode("Mia"), Params: engine.SamplingParams{MaxTokens: 5}}})
	if err != nil || len(res[0].Samples[0].TokenIDs) != 5 {
		t.Fatalf("after a cancelled request: %v %+v", err, res)
	}
}

func TestStreamEventsMatchResult(t *testing.T) {
	e, _ := testEngine(t, Config{})
	tok := tokenizer.Builtin()
	seed := int64(3)
	st, err := e.Stream(testCtx(t), engine.Request{Prompt: tok.Encode("Jack has"),
		Params: engine.SamplingParams{N: 2, MaxTokens: 30, Temperature: 0.8, Seed: &seed, Stop: []string{"."}}}, StreamOptions{TopLogProbs: 3})
	if err != nil {
		t.Fatal(err)
	}
	text := make([]string, 2)
	ids := make([][]int, 2)
	finish := make([]string, 2)
	for {
		ev, err := st.Next(testCtx(t))
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatal(err)
			}
			break
		}
		if finish[ev.Sample] != "" {
			t.Fatalf("sample %d: event after its finish", ev.Sample)
		}
		text[ev.Sample] += ev.Text
		ids[ev.Sample] = append(ids[ev.Sample], ev.TokenID)
		finish[ev.Sample] = ev.FinishReason
		if len(ev.TopLogProbs) != 3 || ev.TopLogProbs[0].LogProb < ev.TopLogProbs[1].LogProb || ev.TopLogProbs[0].LogProb < ev.LogProb-1e-6 {
			t.Fatalf("top logprobs %+v for chosen logprob %v", ev.TopLogProbs, ev.LogProb)
		}
	}
	res := st.Result()
	for i, s := range res.Samples {
		if text[i] != s.Text || !equalInts(ids[i], s.TokenIDs) || finish[i] != s.FinishReason {
			t.Errorf("sample %d: streamed %q %v %s, result %q %v %s", i, text[i], ids[i], finish[i], s.Text, s.TokenIDs, s.FinishReason)
		}
	}
}

func TestSetWeights(t *testing.T) {
	e, m := testEngine(t, Config{WeightVersion: 3})
	w := m.Weights()
	name := "model.layers.0.mlp.up_proj.weight"
	nan := make([]float32, len(w[name]))
	nan[7] = float32(math.NaN())
	tests := []struct {
		version int64
		weights map[string][]float32
		want    string
	}{
		{4, nil, "no tensors"},
		{2, map[string][]float32{name: w[name]}, "older than the served version 3"},
		{4, map[string][]float32{"model.layers.9.mlp.up_proj.weight": w[name]}, `tensor "model.layers.9.mlp.up_proj.weight": not a parameter`},
		{4, map[string][]float32{name: w[name][1:]}, `tensor "model.layers.0.mlp.up_proj.weight": 1535 values, want 1536 (shape [48 32])`},
		{4, map[string][]float32{name: nan}, "value 7 is NaN"},
		{4, map[string][]float32{"lm_head.weight": w["model.embed_tokens.weight"]}, "ties it to model.embed_tokens.weight"},
	}
	for _, tc := range tests {
		err := e.SetWeights(testCtx(t), tc.version, tc.weights)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
	if v := e.WeightVersion(); v != 3 {
		t.Fatalf("failed swaps changed the version to %d", v)
	}

	// A swap while a long request runs waits for it, which keeps version 3.
	tok := tokenizer.Builtin()
	st, err := e.Stream(testCtx(t), engine.Request{Prompt: tok.Encode("Leo"), Params: engine.SamplingParams{MaxTokens: 60}}, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	other := nativetest.Model(t, nativetest.Config(), 99).Weights()
	swapped := make(chan error, 1)
	go func() { swapped <- e.SetWeights(testCtx(t), 7, other) }()
	for {
		if _, err := st.Next(testCtx(t)); err != nil {
			break
		}
	}
	if v := st.Result().WeightVersion; v != 3 {
		t.Errorf("request running across the swap reports version %d, want 3", v)
	}
	if err := <-swapped; err != nil {
		t.Fatal(err)
	}
	if v := e.WeightVersion(); v != 7 {
		t.Fatalf("version %d after the swap, want 7", v)
	}
	res, err := e.Generate(testCtx(t), []engine.Request{{ID: "after", Prompt: tok.Encode("Leo"), Params: engine.SamplingParams{MaxTokens: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].WeightVersion != 7 {
		t.Errorf("result version %d, want 7", res[0].WeightVersion)
	}
	checkLogProbs(t, other, res[0], engine.SamplingParams{})
}

func TestClosed(t *testing.T) {
	e, _ := testEngine(t, Config{})
	e.Close()
	_, err := e.Generate(testCtx(t), []engine.Request{{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 2}}})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("generate after close: %v, want ErrClosed", err)
	}
	if err := e.SetWeights(testCtx(t), 1, map[string][]float32{"model.norm.weight": make([]float32, 32)}); !errors.Is(err, ErrClosed) {
		t.Errorf("set weights after close: %v, want ErrClosed", err)
	}
}

// Requests of one batch that wait for room in the engine's batch start at
// their own times: with room for one sequence, each request is admitted
// after the one before it was done, inside the Generate call.
func TestRequestsOfABatchStartWhenAdmitted(t *testing.T) {
	e, _ := testEngine(t, Config{MaxBatch: 1})
	prompt := tokenizer.Builtin().Encode("Sam has 4 books and")
	var reqs []engine.Request
	for i, n := range []int{5, 3, 4} {
		reqs = append(reqs, engine.Request{ID: strconv.Itoa(i), Prompt: prompt, Params: engine.SamplingParams{MaxTokens: n}})
	}
	before := time.Now()
	res, err := e.Generate(testCtx(t), reqs)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	var samples []engine.Sample
	for i, r := range res {
		s := r.Samples[0]
		if s.Started.Before(before) || s.Finished.After(after) || s.Finished.Before(s.Started) {
			t.Errorf("request %d: %v–%v, outside the call's %v–%v", i, s.Started, s.Finished, before, after)
		}
		samples = append(samples, s)
	}
	slices.SortFunc(samples, func(a, b engine.Sample) int { return a.Started.Compare(b.Started) })
	for i := 1; i < len(samples); i++ {
		if samples[i].Started.Before(samples[i-1].Finished) {
			t.Errorf("a request started at %v, before the one admitted before it was done (%v)", samples[i].Started, samples[i-1].Finished)
		}
	}
}

// The sequences of one batch are done at their own times: each sample's
// Finished falls inside the Generate call, and one that decoded more tokens
// finished later than one that decoded fewer.
func TestSamplesOfABatchFinishAtTheirOwnTimes(t *testing.T) {
	e, _ := testEngine(t, Config{})
	prompt := tokenizer.Builtin().Encode("Sam has 4 books and")
	var reqs []engine.Request
	for i, n := range []int{40, 2, 10} {
		reqs = append(reqs, engine.Request{ID: strconv.Itoa(i), Prompt: prompt, Params: engine.SamplingParams{MaxTokens: n}})
	}
	before := time.Now()
	res, err := e.Generate(testCtx(t), reqs)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	var done []engine.Sample
	for i, r := range res {
		s := r.Samples[0]
		if s.FinishReason != "length" || len(s.TokenIDs) != reqs[i].Params.MaxTokens {
			// The greedy continuation of this prompt runs 40 tokens
			// (TestStopConditions); a shorter one is that test's failure.
			t.Fatalf("request %d: %s after %d tokens, want length after %d", i, s.FinishReason, len(s.TokenIDs), reqs[i].Params.MaxTokens)
		}
		if s.Finished.Before(before) || s.Finished.After(after) {
			t.Errorf("request %d: finished at %v, outside the call's %v–%v", i, s.Finished, before, after)
		}
		done = append(done, s)
	}
	slices.SortFunc(done, func(a, b engine.Sample) int { return len(a.TokenIDs) - len(b.TokenIDs) })
	for i := 1; i < len(done); i++ {
		if !done[i].Finished.After(done[i-1].Finished) {
			t.Errorf("%d tokens finished at %v, not after %d tokens at %v", len(done[i].TokenIDs), done[i].Finished,
				len(done[i-1].TokenIDs), done[i-1].Finished)
		}
	}
}
