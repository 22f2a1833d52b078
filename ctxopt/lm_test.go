package ctxopt

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// smallLM is the CI variant of the executor model: it trains in seconds
// and follows the format only roughly.
var smallLM = LMConfig{Hidden: 32, Intermediate: 64, Layers: 1, Heads: 2, KVHeads: 1, Context: 1024,
	Vocab: 512, Episodes: 120, Steps: 4, Batch: 8, LR: 1e-3, Seed: 1, DecaySteps: 2, AnswerFirst: 1,
	Verbatim: true, MaskComputed: true, CopyWeight: 4}

func TestLMTrainCacheRun(t *testing.T) {
	t.Setenv("RLNODE_CACHE", t.TempDir())
	sp := testSpace()
	var log bytes.Buffer
	dir, err := EnsureLM(context.Background(), smallLM, sp, false, &log)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "warmup.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("trained model: %v", err)
		}
	}
	if filepath.Base(dir) != smallLM.Key(sp, false) || !strings.Contains(log.String(), "SFT step 4/4") {
		t.Errorf("dir %s, log:\n%s", dir, log.String())
	}
	if m := regexp.MustCompile(`, (\d+) computed digits out of the loss, (\d+) copying tool calls weighted`).FindStringSubmatch(log.String()); m == nil || m[1] == "0" || m[2] == "0" {
		t.Errorf("mask_computed and copy_weight left nothing out and weighted nothing: %v in\n%s", m, log.String())
	}
	log.Reset()
	again, err := EnsureLM(context.Background(), smallLM, sp, false, &log)
	if err != nil || again != dir || log.Len() != 0 {
		t.Errorf("second EnsureLM: %s, %v, log %q: want the cached %s without training", again, err, log.String(), dir)
	}
	other := smallLM
	other.Seed = 2
	if other.Key(sp, false) == smallLM.Key(sp, false) || smallLM.Key(sp, true) == smallLM.Key(sp, false) {
		t.Error("the cache key ignores the seed or the python tool")
	}

	eng, err := LoadLM(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	x := &Executor{Engine: eng, Verifier: verify.GSM8K{}, Space: sp, CorrectReward: 5, Cost: CostWeights{ModelCall: 0.1}}
	qs, err := Questions(1, task.HeldOut, []string{task.Word}, []int{2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	c.Structure = ReasonAnswer
	o, err := x.Run(context.Background(), qs[0], c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Usage.ModelCalls < 2 || o.Usage.PromptTokens == 0 || o.Usage.CompletionTokens == 0 || o.Usage.CompletionTokens > 2*sp.Budgets[0] {
		t.Errorf("usage %+v: want a reasoner and an answerer call within the %d-token budgets", o.Usage, sp.Budgets[0])
	}
}

// Question features from the executor model: its mean-pooled hidden
// states, normalised, then the statistics; cached per question; batched
// and one-by-one the same. A recipe with embed: lm builds its policy on
// them.
func TestLMFeatures(t *testing.T) {
	t.Setenv("RLNODE_CACHE", t.TempDir())
	r, err := LoadRecipe("ctxopt_bandit_lm")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(r.source), "embed_dim: 64", "embed_dim: 64\nembed: lm", 1)
	for _, kv := range [][2]string{{"hidden: 128", "hidden: 32"}, {"intermediate: 384", "intermediate: 64"}, {"layers: 2", "layers: 1"},
		{"heads: 4", "heads: 2"}, {"kv_heads: 2", "kv_heads: 1"}, {"vocab: 1024", "vocab: 512"}, {"episodes: 6000", "episodes: 120"},
		{"steps: 3000", "steps: 4"}, {"decay_steps: 1000", "decay_steps: 2"}, {"steps: 1500", "steps: 2"}, {"decay_steps: 1000", "decay_steps: 1"}, {"answer_first: 200", "answer_first: 1"}, {"batch: 32", "batch: 8"}, {"python: true", "python: false"}, {"tools: [calculator, python]", "tools: [calculator]"},
		{"train_per_type: 40", "train_per_type: 4"}, {"eval_per_type: 20", "eval_per_type: 2"}} {
		if !strings.Contains(src, kv[0]) {
			t.Fatalf("%q not in the recipe", kv[0])
		}
		src = strings.Replace(src, kv[0], kv[1], 1)
	}
	r, err = ParseRecipe("small.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Method(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	emb := m.(*Bandit).Emb
	if emb.Source == nil || emb.Size() != 32+NumStats {
		t.Fatalf("embedder of %d values with source %v, want the model's 32 hidden + %d statistics", emb.Size(), emb.Source, NumStats)
	}
	qs, err := Questions(1, task.HeldOut, []string{task.Word, task.Arithmetic}, []int{1, 5}, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := EnsureLM(context.Background(), *r.Executor.LM, r.SpaceOf(), false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := LoadLMFeatures(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	one := NewSourceEmbedder(f)
	batched := NewSourceEmbedder(f)
	if err := batched.Prepare(qs); err != nil {
		t.Fatal(err)
	}
	for i, q := range qs {
		a, b := one.Embed(q.Text), batched.Embed(q.Text)
		var norm float64
		for j := range a {
			if d := a[j] - b[j]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("question %d, value %d: alone %v, batched %v", i, j, a[j], b[j])
			}
			if j < 32 {
				norm += float64(a[j]) * float64(a[j])
			}
		}
		if norm < 0.999 || norm > 1.001 {
			t.Errorf("question %d: features of squared norm %v, want 1", i, norm)
		}
		if &one.Embed(q.Text)[0] != &a[0] {
			t.Errorf("question %d: embedding not cached", i)
		}
		if got := a[32:]; got[0] != Stats(q.Text)[0] || got[2] != Stats(q.Text)[2] {
			t.Errorf("question %d: statistics %v, want %v", i, got, Stats(q.Text))
		}
	}
	if a, b := one.Embed(qs[0].Text), one.Embed(qs[1].Text); slices.Equal(a[:32], b[:32]) {
		t.Error("two questions have the same features")
	}
	if one.Err() != nil || batched.Err() != nil {
		t.Errorf("source errors: %v, %v", one.Err(), batched.Err())
	}
}

// The SFT rate: constant without a decay; with one, linear from lr over
// the last decay_steps, ending one step above zero; bad decays refused.
func TestLMStepLR(t *testing.T) {
	c := LMConfig{Steps: 10, LR: 2e-3, DecaySteps: 4}
	for _, tc := range []struct {
		cfg  LMConfig
		step int
		lr   float64
		set  bool
	}{
		{LMConfig{Steps: 10, LR: 2e-3}, 9, 0, false},
		{c, 0, 0, false},
		{c, 5, 0, false},
		{c, 6, 2e-3, true},
		{c, 7, 1.5e-3, true},
		{c, 9, 0.5e-3, true},
	} {
		lr, set := tc.cfg.stepLR(tc.step)
		if set != tc.set || math.Abs(lr-tc.lr) > 1e-12 {
			t.Errorf("%+v step %d: rate %v set %v, want %v %v", tc.cfg, tc.step, lr, set, tc.lr, tc.set)
		}
	}
	bad := smallLM
	bad.DecaySteps = smallLM.Steps + 1
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "decay_steps 5 not in 0..steps (4)") {
		t.Errorf("decay over more than the steps: %v", err)
	}
	// An unset decay leaves the cache key of an earlier config unchanged:
	// the 600-step model of the first ctxopt_*_lm recipes keeps its entry.
	r, err := LoadRecipe("ctxopt_bandit_lm")
	if err != nil {
		t.Fatal(err)
	}
	old := LMConfig{Hidden: 128, Intermediate: 384, Layers: 2, Heads: 4, KVHeads: 2, Context: 1024, Vocab: 1024,
		Episodes: 6000, Steps: 600, Batch: 32, LR: 2e-3, Seed: 1}
	if k := old.Key(r.SpaceOf(), true); k != "e6739861e80fc16be84d281d" {
		t.Errorf("key of the 600-step model %s, want e6739861e80fc16be84d281d", k)
	}
}

// The curriculum: the first answer_first batches hold answer-line samples
// only, each epoch of them a permutation; after it the batches are those
// of the plain sampler, whose order the curriculum does not change.
func TestLMSamplerAnswerFirst(t *testing.T) {
	answers := []int{1, 4, 6}
	c := LMConfig{Batch: 4, Seed: 3, AnswerFirst: 3, Steps: 6}
	plain := c
	plain.AnswerFirst = 0
	s, p := newSampler(c, 10, answers), newSampler(plain, 10, answers)
	var early []int
	for step := range 3 {
		early = append(early, s.batch(step)...)
	}
	for e := 0; e+3 <= len(early); e += 3 {
		got := slices.Sorted(slices.Values(early[e : e+3]))
		if !slices.Equal(got, answers) {
			t.Fatalf("curriculum epoch %v: want a permutation of the answer samples %v", early[e:e+3], answers)
		}
	}
	for step := 3; step < 6; step++ {
		if got, want := s.batch(step), p.batch(step-3); !slices.Equal(got, want) {
			t.Errorf("step %d: %v, want the plain sampler's %v", step, got, want)
		}
	}
	for _, tc := range []struct {
		text string
		want bool
	}{{"#### 12", true}, {"\n#### 7<|im_end|>", true}, {"Based on the work above.\n#### 3", false}, {"<tool_call>{}</tool_call>", false}} {
		if got := isAnswerLine(tc.text); got != tc.want {
			t.Errorf("isAnswerLine(%q) = %v", tc.text, got)
		}
	}
	bad := smallLM
	bad.AnswerFirst = -1
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "answer_first -1 not in 0..steps (4)") {
		t.Errorf("negative answer_first: %v", err)
	}
}

// mask_computed: the digits of numbers the prompt does not hold are out
// of the loss (the tokens under the zeros decode to exactly them); copied
// numbers and the rest stay in.
func TestLMMaskComputed(t *testing.T) {
	q := []tokenizer.Message{{Role: "system", Content: "Token budget: 256."}, {Role: "user", Content: "Question:\nWhat is 30 + 21 * 4?\n\n"}}
	withTool := append(slices.Clone(q), tokenizer.Message{Role: "assistant", Content: "<tool_call>...</tool_call>"},
		tokenizer.Message{Role: "user", Content: "<tool_response>\n114\n</tool_response>"})
	tok, err := tokenizer.Train([]string{"Step 1: 21 * 4 = 84.\nStep 2: 30 + 84 = 114.\n#### 114", tokenizer.ChatTemplate(q, true)}, 300, lmSpecials)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		msgs          []tokenizer.Message
		text, dropped string
	}{
		{q, "Step 1: 21 * 4 = 84.\nStep 2: 30 + 84 = 114.\n", "184284114"}, // step labels too: not in the prompt
		{q, `<tool_call>{"arguments":{"expression":"30 + 21 * 4"},"name":"calculator"}</tool_call>`, ""},
		{q, "#### 114", "114"},
		{withTool, "#### 114", ""},
		{q, "I cannot solve this.", ""},
	} {
		call := TeacherCall{Messages: tc.msgs, Text: tc.text, FinishReason: "stop"}
		_, resp := sftSample(tok, call)
		m := computedMask(tok, call, resp)
		if len(m) != len(resp) {
			t.Fatalf("%q: mask of %d for %d tokens", tc.text, len(m), len(resp))
		}
		var dropped []int
		for i, v := range m {
			if v == 0 {
				dropped = append(dropped, int(resp[i]))
			} else if v != 1 {
				t.Fatalf("%q: mask value %v", tc.text, v)
			}
		}
		if got := tok.Decode(dropped); got != tc.dropped {
			t.Errorf("%q after %q: out of the loss %q, want %q", tc.text, tc.msgs[len(tc.msgs)-1].Content, got, tc.dropped)
		}
	}
	// Unset, the new settings leave the shipped model's cache key as it was.
	r, err := LoadRecipe("ctxopt_bandit_lm")
	if err != nil {
		t.Fatal(err)
	}
	shipped := LMConfig{Hidden: 128, Intermediate: 384, Layers: 2, Heads: 4, KVHeads: 2, Context: 1024, Vocab: 1024,
		Episodes: 6000, Steps: 1500, Batch: 32, LR: 2e-3, Seed: 1, DecaySteps: 500, AnswerFirst: 200}
	if k := shipped.Key(r.SpaceOf(), true); k != "5f92089deca1a21f0be4d2c2" {
		t.Errorf("key of the 1,500-step model %s, want 5f92089deca1a21f0be4d2c2", k)
	}
	shipped.MaskComputed, shipped.Verbatim = true, true
	if shipped.Key(r.SpaceOf(), true) == "5f92089deca1a21f0be4d2c2" {
		t.Error("mask_computed and verbatim do not change the cache key")
	}
}

// copy_weight picks the tool calls whose numbers all come from the
// prompt; a weight out of range is refused.
func TestLMCopyWeight(t *testing.T) {
	q := []tokenizer.Message{{Role: "system", Content: "Token budget: 256."}, {Role: "user", Content: "Question:\nWhat is 30 + 21 * 4?\n\n"}}
	for _, tc := range []struct {
		text string
		want bool
	}{
		{`<tool_call>{"arguments":{"expression":"30 + 21 * 4"},"name":"calculator"}</tool_call>`, true},
		{"Step 1: 21 * 4 = 84.\n" + `<tool_call>{"arguments":{"expression":"30 + 21"},"name":"calculator"}</tool_call>`, true},
		{`<tool_call>{"arguments":{"expression":"30 + 84"},"name":"calculator"}</tool_call>`, false},
		{"#### 30", false},
		{`<tool_call>{"arguments":{"expression":"x"},"name":"calculator"}</tool_call>`, false},
	} {
		if got := isToolCopy(TeacherCall{Messages: q, Text: tc.text}); got != tc.want {
			t.Errorf("isToolCopy(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	bad := smallLM
	bad.CopyWeight = -1
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "copy_weight -1 not in 0..100") {
		t.Errorf("copy_weight -1: %v", err)
	}
}

// Phases: a second phase starts from the first one's weights (a phase at
// a vanishing rate leaves them as they were, a phase at a real rate moves
// them), every phase logs its steps, no phase's directory is left behind,
// and bad phases are refused.
func TestLMPhases(t *testing.T) {
	sp := testSpace()
	one := smallLM
	one.CopyWeight = 0
	train := func(c LMConfig) (map[string][]float32, string, string) {
		t.Helper()
		dir := t.TempDir()
		var log bytes.Buffer
		if err := TrainLM(context.Background(), c, sp, false, dir, &log); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		return m.Weights(), dir, log.String()
	}
	maxDiff := func(a, b map[string][]float32) float64 {
		var d float64
		for k, v := range a {
			for i := range v {
				d = max(d, math.Abs(float64(v[i]-b[k][i])))
			}
		}
		return d
	}
	w1, _, _ := train(one)
	still := one
	still.Phases = []LMPhase{{Steps: 2, LR: 1e-12}}
	w2, dir, log := train(still)
	if d := maxDiff(w1, w2); d > 1e-6 {
		t.Errorf("a second phase at rate 1e-12 moved a weight by %v: it did not start from the first phase's weights", d)
	}
	for _, want := range []string{"SFT phase 1/2 step 4/4", "SFT phase 2/2 step 2/2"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "phase-*")); len(left) != 0 {
		t.Errorf("phase directories left in the model's directory: %v", left)
	}
	moved := one
	moved.Phases = []LMPhase{{Steps: 2, LR: 1e-3, DecaySteps: 1, AnswerFirst: 1}}
	w3, _, _ := train(moved)
	if d := maxDiff(w1, w3); d < 1e-5 {
		t.Errorf("a second phase at rate 1e-3 moved no weight (at most %v)", d)
	}
	if moved.Key(sp, false) == one.Key(sp, false) || moved.Key(sp, false) == still.Key(sp, false) {
		t.Error("the cache key ignores the phases")
	}
	if moved.TotalSteps() != 6 {
		t.Errorf("total steps %d, want 6", moved.TotalSteps())
	}
	for _, tc := range []struct {
		phases []LMPhase
		want   string
	}{
		{[]LMPhase{{Steps: 0, LR: 1e-3}}, "phases[0]: steps 0 not in 1..100000"},
		{[]LMPhase{{Steps: 2, LR: 1e-3}, {Steps: 2, LR: 0}}, "phases[1]: lr 0 not in (0, 1)"},
		{[]LMPhase{{Steps: 2, LR: 1e-3, DecaySteps: 3}}, "phases[0]: decay_steps 3 not in 0..steps (2)"},
		{[]LMPhase{{Steps: 2, LR: 1e-3, AnswerFirst: -1}}, "phases[0]: answer_first -1 not in 0..steps (2)"},
		{make([]LMPhase, 9), "9 phases: at most 8"},
		{[]LMPhase{{Steps: 99999, LR: 1e-3}}, "100003 SFT steps in all: at most 100000"},
	} {
		bad := one
		bad.Phases = tc.phases
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("phases %+v: %v, want %q", tc.phases, err, tc.want)
		}
	}
	// The shipped recipes: 3,000 steps, then 1,500 from those weights.
	r, err := LoadRecipe("ctxopt_hierarchical_lm")
	if err != nil {
		t.Fatal(err)
	}
	if lm := r.Executor.LM; len(lm.Phases) != 1 || lm.TotalSteps() != 4500 {
		t.Errorf("ctxopt_hierarchical_lm's executor model: phases %+v, %d steps in all; want one more phase, 4,500 steps", lm.Phases, lm.TotalSteps())
	}
}

// A training directory left by a killed warm-up is removed by the next
// one once it has not changed for a day; a live one (changed within the
// day), finished models and other files stay.
func TestRemoveStaleTrainings(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	for name, age := range map[string]time.Duration{"tmp-old": 25 * time.Hour, "tmp-live": time.Hour, "0047af04fe7e648298d11833": 48 * time.Hour} {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	var log strings.Builder
	removeStaleTrainings(root, now, &log)
	for name, want := range map[string]bool{"tmp-old": false, "tmp-live": true, "0047af04fe7e648298d11833": true} {
		if _, err := os.Stat(filepath.Join(root, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", name, err == nil, want)
		}
	}
	if !strings.Contains(log.String(), "tmp-old") {
		t.Errorf("log %q does not name the removed directory", log.String())
	}
}

// TestLMCacheTornEntry: a cache entry whose files are cut short or empty
// (what a power loss can leave of a folder renamed into place before its
// files reached the disk) is trained again, not loaded: EnsureLM returned
// it as the model. An entry written before the checksums were kept is
// still taken when its files are whole.
func TestLMCacheTornEntry(t *testing.T) {
	t.Setenv("RLNODE_CACHE", t.TempDir())
	sp := testSpace()
	dir, err := EnsureLM(context.Background(), smallLM, sp, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tear func(t *testing.T)
	}{
		{"model cut", func(t *testing.T) {
			if err := os.Truncate(filepath.Join(dir, "model.safetensors"), int64(len(model)/2)); err != nil {
				t.Fatal(err)
			}
		}},
		{"every file empty", func(t *testing.T) {
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if err := os.Truncate(filepath.Join(dir, e.Name()), 0); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"no checksums, model empty", func(t *testing.T) {
			os.Remove(filepath.Join(dir, lmChecksums))
			if err := os.Truncate(filepath.Join(dir, "model.safetensors"), 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tear(t)
			var log bytes.Buffer
			again, err := EnsureLM(context.Background(), smallLM, sp, false, &log)
			if err != nil {
				t.Fatal(err)
			}
			if again != dir || !strings.Contains(log.String(), "training it again") || !strings.Contains(log.String(), dir) {
				t.Errorf("EnsureLM over a torn entry: %s, log:\n%s", again, log.String())
			}
			if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors")); err != nil || !bytes.Equal(b, model) {
				t.Errorf("model.safetensors after the rebuild: %d bytes, %v; want the %d bytes trained first", len(b), err, len(model))
			}
			eng, err := LoadLM(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			eng.Close()
		})
	}
	// An entry from before the checksums, whole, is used as it is.
	if err := os.Remove(filepath.Join(dir, lmChecksums)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if again, err := EnsureLM(context.Background(), smallLM, sp, false, &log); err != nil || again != dir || log.Len() != 0 {
		t.Errorf("EnsureLM over a whole entry without checksums: %s, %v, log %q: want it used", again, err, log.String())
	}
}
