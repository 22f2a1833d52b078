package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// call is one recorded chat call of a test store: its trace, prompt and
// answer token ids, and the rewards on it.
type call struct {
	trace    byte
	prompt   []int32
	answer   []int32
	rewards  []traces.Reward
	agent    string
	startSec int64
	input    string // gen_ai.input.messages, for calls without ids
	model    string
}

// writeStore writes calls into a new store, one span each, calls of one
// trace in the order given.
func writeStore(t *testing.T, calls ...call) string {
	t.Helper()
	store := t.TempDir()
	w, err := traces.OpenWriter(store, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		s := traces.NewSpan()
		s.TraceID, s.SpanID = [16]byte{c.trace}, [8]byte{byte(i + 1)}
		s.Operation, s.Source, s.AgentName = traces.OpChat, "a", c.agent
		s.Start = time.Unix(1e9+c.startSec, int64(i)*1000)
		s.End = s.Start.Add(time.Microsecond)
		s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"x"}]}]`
		s.PromptTokenIDs, s.OutputTokenIDs, s.Rewards, s.InputMessages = c.prompt, c.answer, c.rewards, c.input
		s.RequestModel = c.model
		w.Add(s)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return store
}

func judge(v float64) []traces.Reward { return []traces.Reward{{Name: "judge", Value: v}} }

var testContext = &policyContext{positions: 64, field: "models.policy.init.max_positions"}

func TestLoadTracesWarmup(t *testing.T) {
	store := writeStore(t,
		call{trace: 1, prompt: []int32{1, 2, 0}, answer: []int32{7}},
		call{trace: 2, prompt: []int32{1, 2, 1}, answer: []int32{7, 7}, rewards: judge(1)},
		call{trace: 3, prompt: []int32{1, 2, 2}, answer: []int32{7, 7, 7}, rewards: judge(2)})
	load := func(d TraceData) (*loadedTraces, error) {
		if d.Store == "" {
			d.Store = store
		}
		d.Filter.MinReward, d.Filter.MaxReward = math.NaN(), math.NaN()
		if d.MinReward == 0 {
			d.MinReward = math.NaN()
		}
		return loadTraces(&d, nil, testContext, 1, true, 2, 1)
	}
	all, err := load(TraceData{})
	if err != nil || len(all.warmup) != 3 || all.rows != 3 || all.retokenized != 0 {
		t.Fatalf("every call: %+v, %v", all, err)
	}
	best, err := load(TraceData{Reward: "judge", MinReward: 2})
	if err != nil || len(best.warmup) != 1 || len(best.warmup[0].ResponseIDs) != 3 {
		t.Fatalf("judge ≥ 2: %+v, %v", best, err)
	}
	filtered, err := load(TraceData{Reward: "judge", Weighting: "filter", Threshold: 1})
	if err != nil || len(filtered.warmup) != 2 {
		t.Fatalf("filter judge ≥ 1: %+v, %v", filtered, err)
	}
	weighted, err := load(TraceData{Reward: "judge", Weighting: "exp", Beta: 1})
	if err != nil || len(weighted.warmup) != 2 {
		t.Fatalf("exp weighting keeps the rewarded calls: %+v, %v", weighted, err)
	}

	// Batches take the shuffled rows in turn, the same for the same step;
	// exp weighting weighs them exp(reward/beta), mean 1.
	d := &TraceData{Weighting: "exp", Beta: 1}
	b0, _ := warmupBatchFromTraces(weighted.warmup, 0, 2, d)
	b1, _ := warmupBatchFromTraces(weighted.warmup, 1, 2, d)
	rows := weighted.warmup
	if !slices.EqualFunc(b0.Prompts, [][]int32{rows[0].PromptIDs, rows[1].PromptIDs}, slices.Equal) ||
		!slices.EqualFunc(b1.Prompts, [][]int32{rows[0].PromptIDs, rows[1].PromptIDs}, slices.Equal) {
		t.Errorf("batches %v %v of rows %v", b0.Prompts, b1.Prompts, rows)
	}
	hi := 0
	if rows[1].Reward > rows[0].Reward {
		hi = 1
	}
	e := math.E // rewards 2 and 1: weights ∝ e² and e
	if w := b0.Weights; len(w) != 2 || math.Abs(w[0]+w[1]-2) > 1e-12 || math.Abs(w[hi]/w[1-hi]-e) > 1e-9 {
		t.Errorf("exp weights %v for rewards %v, %v", w, rows[0].Reward, rows[1].Reward)
	}
	if plain, _ := warmupBatchFromTraces(rows, 0, 2, &TraceData{}); plain.Weights != nil {
		t.Errorf("plain warm-up weights %v", plain.Weights)
	}
}

// A warm-up batch on traces keeps each row's loss mask: tokens the model
// did not write (a tool's result inside a turn) carry no loss. Rows that
// are all the model's leave the batch's masks nil, as before.
func TestWarmupBatchFromTracesKeepsMasks(t *testing.T) {
	rows := []data.Turn{
		{PromptIDs: []int32{1}, ResponseIDs: []int32{5, 6, 7, 8}, LossMask: []float32{1, 0, 0, 1}},
		{PromptIDs: []int32{2}, ResponseIDs: []int32{9}, LossMask: []float32{1}},
	}
	b, err := warmupBatchFromTraces(rows, 0, 2, &TraceData{})
	if err != nil || !slices.EqualFunc(b.Masks, [][]float32{{1, 0, 0, 1}, {1}}, slices.Equal) {
		t.Errorf("masks %v, %v; want the rows'", b.Masks, err)
	}
	if b, _ := warmupBatchFromTraces(rows[1:], 0, 2, &TraceData{}); b.Masks != nil {
		t.Errorf("masks %v of unmasked rows, want nil", b.Masks)
	}
}

// Each way data.traces can select nothing to train on is an error naming
// the recipe field to change.
func TestLoadTracesRefusals(t *testing.T) {
	store := writeStore(t,
		call{trace: 1, prompt: []int32{1, 2}, answer: []int32{7}, rewards: judge(1), agent: "solver-bot"},
		call{trace: 2, prompt: []int32{1, 2}, answer: []int32{7, 7}, rewards: judge(0), agent: "solver-bot"},
		call{trace: 3, prompt: []int32{3}, answer: []int32{7, 7, 7}, agent: "solver-bot"})
	unrewarded := writeStore(t, call{trace: 1, prompt: []int32{1}, answer: []int32{2}}, call{trace: 2, prompt: []int32{1}, answer: []int32{3}})
	huge := writeStore(t, call{trace: 1, prompt: []int32{1}, answer: []int32{2}, rewards: judge(1e308)}, call{trace: 2, prompt: []int32{1}, answer: []int32{3}, rewards: judge(1e308)})
	judged := writeStore(t, call{trace: 1, prompt: []int32{1}, answer: []int32{2}, model: "policy"}, call{trace: 1, prompt: []int32{1, 2, 5}, answer: []int32{3}, model: "judge"})
	for _, c := range []struct {
		name       string
		d          TraceData
		warmup     bool
		group      int
		ctx        int
		field, msg string
	}{
		{"empty store", TraceData{Store: t.TempDir()}, true, 2, 64, "data.traces.store", "holds no traces"},
		{"no trace passes", TraceData{Filter: traces.Filter{Agent: "nobody"}}, true, 2, 64, "data.traces",
			"none of the 3 traces in " + store + " passes the filters (agent nobody)"},
		{"unknown reward", TraceData{Reward: "judgee"}, true, 2, 64, "data.traces.reward",
			`"judgee": no trace of the 3 that pass the filters carries it (rewards there: judge)`},
		{"min_reward above all", TraceData{Reward: "judge", MinReward: 5}, true, 2, 64, "data.traces.min_reward",
			"5: none of the 2 model calls is rewarded that much (reward judge)"},
		{"filter above all", TraceData{Reward: "judge", Weighting: "filter", Threshold: 3}, true, 2, 64, "sft.threshold",
			"3: none of the 2 model calls is rewarded that much"},
		{"context", TraceData{}, true, 2, 3, "data.traces", "tokens exceed the policy's context 3 (models.policy.init.max_positions)"},
		{"groups of size 1", TraceData{Reward: "judge", RL: true, Filter: traces.Filter{TraceID: "01"}}, false, 2, 64, "algorithm.group_size",
			"2: no prompt of data.traces has that many traces (offline RL groups traces by their first prompt): the 1 prompts have at most 1"},
		{"groups smaller than group_size", TraceData{Reward: "judge", RL: true}, false, 3, 64, "algorithm.group_size",
			"3: no prompt of data.traces has that many traces"},
		{"rewards that overflow a group", TraceData{Store: huge, Reward: "judge", RL: true}, false, 2, 64, "data.traces.reward",
			"row 0: reward 1e+308: want at most 1e+09 in magnitude"},
		{"calls of two models, none named", TraceData{Store: judged}, true, 2, 64, "data.traces.model",
			`model calls of "policy" and "judge" in one trace, and no model is named as the one being trained`},
		{"RL without rewards", TraceData{Store: unrewarded, RL: true}, false, 2, 64, "data.traces",
			"2 traces pass the filters, but no model call of them can be trained on (2 dropped; trace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			if d.Store == "" {
				d.Store = store
			}
			f := &d.Filter
			f.MinReward, f.MaxReward = math.NaN(), math.NaN()
			if d.MinReward == 0 {
				d.MinReward = math.NaN()
			}
			pc := &policyContext{positions: c.ctx, field: "models.policy.init.max_positions"}
			_, err := loadTraces(&d, nil, pc, 1, c.warmup, c.group, 1)
			if err == nil || traceField(err) != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v (field %s), want %s: …%s…", err, traceField(err), c.field, c.msg)
			}
		})
	}
}

// data.traces.skip_refused leaves the two-model trace out, counted with
// its reason, and loads the other.
func TestLoadTracesSkipRefused(t *testing.T) {
	store := writeStore(t,
		call{trace: 1, prompt: []int32{1}, answer: []int32{2}, model: "policy"},
		call{trace: 1, prompt: []int32{1, 2, 5}, answer: []int32{3}, model: "judge"},
		call{trace: 2, prompt: []int32{1}, answer: []int32{4}, model: "policy"})
	d := &TraceData{Store: store, Filter: traces.Any(), MinReward: math.NaN(), SkipRefused: true}
	d.Filter.MinReward, d.Filter.MaxReward = math.NaN(), math.NaN()
	lt, err := loadTraces(d, nil, testContext, 1, true, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if lt.rows != 1 || lt.refused != 1 || !strings.Contains(lt.firstRefused, `model calls of "policy" and "judge" in one trace`) {
		t.Errorf("%d rows, %d refused (%q); want 1 row, trace 1 refused for its two models", lt.rows, lt.refused, lt.firstRefused)
	}
	d.SkipRefused = false
	if _, err := loadTraces(d, nil, testContext, 1, true, 2, 1); err == nil || traceField(err) != "data.traces.model" {
		t.Errorf("without skip_refused: %v, want the trace refused at data.traces.model", err)
	}
}

// A conversation's calls whose prompts extend each other load as one row;
// a call whose prompt does not (its context cut) starts a row of its own,
// counted by reason with the first named. data.traces.merge_calls: false
// (PerCall) loads a row per call.
func TestLoadTracesMergesConversations(t *testing.T) {
	store := writeStore(t,
		call{trace: 1, prompt: []int32{1, 2}, answer: []int32{3}, rewards: judge(0)},
		call{trace: 1, prompt: []int32{1, 2, 3, 4}, answer: []int32{5}, rewards: judge(1)},
		call{trace: 1, prompt: []int32{4, 5, 6}, answer: []int32{7}},
		call{trace: 2, prompt: []int32{1, 2}, answer: []int32{8}})
	for _, c := range []struct {
		perCall bool
		rows    int
		splits  []TraceSplit
	}{
		{false, 3, []TraceSplit{{Reason: traces.SplitPrefix, Calls: 1, First: "trace " + traces.Span{TraceID: [16]byte{1}}.TraceID.String() +
			" span " + traces.Span{SpanID: [8]byte{3}}.SpanID.String() + ": its prompt has 3 tokens, fewer than the 5 of the conversation so far"}}},
		{true, 4, nil},
	} {
		d := &TraceData{Store: store, Filter: traces.Any(), Reward: "judge", MinReward: math.NaN(), PerCall: c.perCall}
		d.Filter.MinReward, d.Filter.MaxReward = math.NaN(), math.NaN()
		lt, err := loadTraces(d, nil, testContext, 1, true, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		splits := lt.splits
		if lt.calls != 4 || lt.rows != c.rows || len(lt.warmup) != c.rows || len(splits) != len(c.splits) {
			t.Fatalf("per call %v: %d calls in %d rows (%d warm-up), splits %+v; want 4 in %d, splits %+v", c.perCall, lt.calls, lt.rows, len(lt.warmup), splits, c.rows, c.splits)
		}
		for i, sp := range splits {
			if want := c.splits[i]; sp.Reason != want.Reason || sp.Calls != want.Calls || !strings.HasPrefix(sp.First, want.First) {
				t.Errorf("split %+v, want %+v", sp, want)
			}
		}
		if c.perCall {
			continue
		}
		var merged *data.Turn
		for i := range lt.warmup {
			if len(lt.warmup[i].ResponseIDs) > 1 {
				merged = &lt.warmup[i]
			}
		}
		if merged == nil || !slices.Equal(merged.PromptIDs, []int32{1, 2}) || !slices.Equal(merged.ResponseIDs, []int32{3, 4, 5}) ||
			!slices.Equal(merged.LossMask, []float32{1, 0, 1}) {
			t.Errorf("warm-up rows %+v, want trace 1's first two calls as [1 2] | [3 4 5] with mask [1 0 1]", lt.warmup)
		}
	}
	// The first two calls' own rewards differ (0 and 1): a warm-up that
	// reads them (min_reward) keeps them apart, and says so (trace 2, with
	// no judge reward, is left out).
	d := &TraceData{Store: store, Filter: traces.Any(), Reward: "judge", MinReward: 0}
	d.Filter.MinReward, d.Filter.MaxReward = math.NaN(), math.NaN()
	lt, err := loadTraces(d, nil, testContext, 1, true, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if splits := lt.splits; lt.rows != 3 || len(splits) != 2 || splits[0].Reason != traces.SplitReward || splits[0].Calls != 1 {
		t.Errorf("min_reward: %d rows, splits %+v; want trace 1's 3 calls apart, the second split for its reward", lt.rows, splits)
	}
}

// Offline RL's batches: groups of traces with the same first prompt, each
// slot a group of its own, every call of a trace credited with the
// trace's group-relative advantage; the learner's batch holds the
// recorded tokens exactly. The two calls of trace 2 (the second's prompt
// extends the first's prompt and answer) are one row by default, the
// token between them without loss, and a row each with PerCall.
func TestTraceGroupBatches(t *testing.T) {
	for _, perCall := range []bool{false, true} {
		t.Run(fmt.Sprintf("per call %v", perCall), func(t *testing.T) { testTraceGroupBatches(t, perCall) })
	}
}

func testTraceGroupBatches(t *testing.T, perCall bool) {
	p, q := []int32{1, 2, 3}, []int32{4, 5}
	calls := []call{
		{trace: 1, prompt: p, answer: []int32{10}, rewards: judge(1)},
		{trace: 2, prompt: p, answer: []int32{11, 12}},
		{trace: 2, prompt: []int32{1, 2, 3, 11, 12, 6}, answer: []int32{13}, rewards: judge(0.5)}, // a second call
		{trace: 3, prompt: q, answer: []int32{20}, rewards: judge(2)},
		{trace: 4, prompt: q, answer: []int32{21}, rewards: judge(0)},
		{trace: 5, prompt: q, answer: []int32{22}, rewards: judge(1)},
		{trace: 6, prompt: []int32{9}, answer: []int32{30}, rewards: judge(1)}, // alone: left out
	}
	for i := range calls {
		calls[i].startSec = int64(calls[i].trace)
	}
	store := writeStore(t, calls...)
	d := &TraceData{Store: store, Filter: traces.Any(), Reward: "judge", MinReward: math.NaN(), RL: true, PerCall: perCall}
	lt, err := loadTraces(d, nil, testContext, 3, false, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	rows, masks := 7, map[string][]float32{}
	if !perCall {
		// Trace 2's row: its first prompt, then both answers with the
		// token its second prompt added between them.
		calls = slices.Concat(calls[:1], []call{{trace: 2, prompt: p, answer: []int32{11, 12, 6, 13}, rewards: judge(0.5)}}, calls[3:])
		masks[traces.Span{TraceID: [16]byte{2}}.TraceID.String()] = []float32{1, 1, 0, 1}
		rows = 6
	}
	if lt.warmup != nil || len(lt.groups.groups) != 2 || lt.rows != rows || lt.calls != 7 || len(lt.splits) != 0 {
		t.Fatalf("loaded %+v, groups %v; want %d rows of 7 calls", lt, lt.groups.groups, rows)
	}
	byTrace := map[string][]call{}
	for _, c := range calls {
		id := traces.Span{TraceID: [16]byte{c.trace}}.TraceID.String()
		byTrace[id] = append(byTrace[id], c)
	}
	var first [][]data.Turn
	for j := range 3 {
		turns, err := lt.groups.batch(j, learner.GRPO)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, turns)
		slots := map[int64][]data.Turn{}
		for _, r := range turns {
			slots[r.GroupID] = append(slots[r.GroupID], r)
		}
		if len(slots) != 2 || slots[int64(2*j)] == nil || slots[int64(2*j+1)] == nil {
			t.Fatalf("batch %d slots %v", j, slots)
		}
		for slot, rows := range slots {
			// Two traces of one prompt, their rewards' GRPO advantages.
			var eps []string
			var rewards []float64
			for _, r := range rows {
				if len(eps) == 0 || eps[len(eps)-1] != r.EpisodeID {
					eps = append(eps, r.EpisodeID)
					rewards = append(rewards, byTrace[r.EpisodeID][len(byTrace[r.EpisodeID])-1].rewards[0].Value)
				}
			}
			if len(eps) != 2 || !slices.Equal(byTrace[eps[0]][0].prompt, byTrace[eps[1]][0].prompt) {
				t.Fatalf("batch %d slot %d traces %v", j, slot, eps)
			}
			adv, _ := rl.GRPOAdvantages(rewards, 2)
			if !(adv[0] > 0) == (rewards[0] > rewards[1]) {
				t.Fatalf("advantages %v for rewards %v", adv, rewards)
			}
			k, calls := 0, 0
			for i, r := range rows {
				if i > 0 && r.EpisodeID != rows[i-1].EpisodeID {
					k, calls = k+1, 0
				}
				c := byTrace[r.EpisodeID][calls]
				calls++
				if !slices.Equal(r.PromptIDs, c.prompt) || !slices.Equal(r.ResponseIDs, c.answer) || r.Reward != rewards[k] {
					t.Errorf("batch %d row %+v, recorded %+v", j, r, c)
				}
				mask := masks[r.EpisodeID]
				if mask == nil {
					mask = []float32{1}
					for range len(r.ResponseIDs) - 1 {
						mask = append(mask, 1)
					}
				}
				if !slices.Equal(r.LossMask, mask) {
					t.Errorf("batch %d trace %s mask %v, want %v", j, r.EpisodeID, r.LossMask, mask)
				}
				for i, a := range r.Advantages {
					if want := float32(adv[k]) * mask[i]; a != want {
						t.Errorf("batch %d trace %s token %d advantage %v, want %v", j, r.EpisodeID, i, a, want)
					}
				}
			}
		}
		// The learner's batch is those rows' tokens, token for token.
		b, err := BatchFromTrajectories("solver", turns, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Prompts) != len(turns) || b.Advantages == nil {
			t.Fatalf("batch %d: %d sequences for %d rows", j, len(b.Prompts), len(turns))
		}
		for i := range b.Prompts {
			found := slices.ContainsFunc(turns, func(r data.Turn) bool {
				return slices.Equal(r.PromptIDs, b.Prompts[i]) && slices.Equal(r.ResponseIDs, b.Responses[i]) && slices.Equal(r.Advantages, b.Advantages[i])
			})
			if !found {
				t.Errorf("batch %d sequence %d (%v → %v) is no recorded call", j, i, b.Prompts[i], b.Responses[i])
			}
		}
	}
	// A batch follows from its number alone (a resumed run draws the same);
	// the three-trace prompt gives two of its three traces, picked by slot.
	again, _ := loadTraces(d, nil, testContext, 3, false, 2, 2)
	for _, j := range []int{2, 0} {
		turns, _ := again.groups.batch(j, learner.GRPO)
		if !slices.EqualFunc(turns, first[j], func(a, b data.Turn) bool {
			return a.EpisodeID == b.EpisodeID && a.GroupID == b.GroupID && slices.Equal(a.Advantages, b.Advantages)
		}) {
			t.Errorf("batch %d drawn again differs", j)
		}
	}
}

// Calls recorded without token ids (an OTLP import) are re-tokenized with
// the policy's tokenizer, say so, and group by their re-tokenized prompt.
func TestTraceGroupsRetokenized(t *testing.T) {
	in := `[{"role":"user","parts":[{"type":"text","content":"2+2?"}]}]`
	store := writeStore(t, call{trace: 1, input: in, rewards: judge(1)}, call{trace: 2, input: in, rewards: judge(0)})
	tok := tokenizer.Builtin()
	d := &TraceData{Store: store, Filter: traces.Any(), Reward: "judge", MinReward: math.NaN(), RL: true}
	lt, err := loadTraces(d, tok, &policyContext{positions: 512}, 1, false, 2, 1)
	if err != nil || lt.retokenized != 2 {
		t.Fatalf("loaded %+v, %v", lt, err)
	}
	turns, err := lt.groups.batch(0, learner.GRPO)
	if err != nil || len(turns) != 2 {
		t.Fatalf("batch %+v, %v", turns, err)
	}
	answer := toInt32(tok.Encode("x")) // writeStore's answer text
	for _, r := range turns {
		if !strings.Contains(r.Note, "re-tokenized") || !slices.Equal(r.ResponseIDs, answer) || len(r.PromptIDs) == 0 ||
			!slices.Equal(r.PromptIDs, turns[0].PromptIDs) || r.GroupID != 0 {
			t.Errorf("row %+v, want the answer re-tokenized as %v, one prompt", r, answer)
		}
	}
	if !(turns[0].Advantages[0] > 0 && turns[1].Advantages[0] < 0) {
		t.Errorf("advantages %v %v for rewards 1, 0", turns[0].Advantages, turns[1].Advantages)
	}
}

// train.Check (rlnode recipe validate) reads data.traces's store with the
// policy's tokenizer and reports what a run would refuse at the field's
// line of the recipe file.
func TestCheckReadsTheTraceStore(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("..", "recipes", "builtin", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	store := writeStore(t,
		call{trace: 1, prompt: []int32{1, 2}, answer: []int32{7}, rewards: judge(1)},
		call{trace: 2, prompt: []int32{1, 2}, answer: []int32{7, 7}, rewards: judge(0)},
		call{trace: 3, prompt: []int32{3}, answer: []int32{7, 7, 7}, rewards: judge(1)})
	// data.traces is inserted at lines 32-35 (data: is line 31; a problem
	// with the section is on its first key); the
	// algorithm's group_size moves from line 51 to 55.
	for _, c := range []struct {
		name    string
		store   string
		section string
		want    string // the error's line, after the file's name
	}{
		{"empty store", t.TempDir(), "train: warmup\n    reward: judge", ":33: data.traces.store: "},
		{"unknown reward", store, "train: warmup\n    reward: judgee", `:35: data.traces.reward: "judgee": no trace of the 3 that pass the filters carries it (rewards there: judge)`},
		{"no trace passes", store, "agent: nobody\n    reward: judge", ":33: data.traces: none of the 3 traces in "},
		{"groups of 8", store, "train: rl\n    reward: judge", ":55: algorithm.group_size: 8: no prompt of data.traces has that many traces (offline RL groups traces by their first prompt): the 2 prompts have at most 2"},
		{"ok", store, "train: rl\n    reward: judge", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := strings.Replace(string(base), "data:\n", "data:\n  traces:\n    store: "+c.store+"\n    "+c.section+"\n", 1)
			file := filepath.Join(t.TempDir(), "r.yaml")
			if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}
			var sets []string
			if c.want == "" {
				sets = []string{"algorithm.group_size=2", "algorithm.batch_prompts=2"}
			}
			l, err := recipes.Load(file, sets)
			if err != nil {
				t.Fatal(err)
			}
			err = Check(l)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), file+c.want)):
				t.Fatalf("Check: %v\nwant %s%s", err, file, c.want)
			}
		})
	}
}
