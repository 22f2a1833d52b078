package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
)

// pass@k on numbers worked by hand: 1 − C(n−c, k)/C(n, k).
func TestPassAtK(t *testing.T) {
	for _, c := range []struct {
		n, c, k int
		want    float64
	}{
		{5, 0, 1, 0},             // nothing correct
		{5, 0, 5, 0},             // nothing correct, all drawn
		{5, 5, 1, 1},             // everything correct
		{5, 5, 5, 1},             // everything correct, all drawn
		{5, 2, 1, 0.4},           // pass@1 = c/n
		{5, 2, 2, 0.7},           // 1 − C(3,2)/C(5,2) = 1 − 3/10
		{5, 2, 3, 0.9},           // 1 − C(3,3)/C(5,3) = 1 − 1/10
		{5, 2, 4, 1},             // n − c = 3 < k: every 4 of 5 hold a correct one
		{4, 1, 4, 1},             // n − c < k
		{10, 3, 5, 1 - 21.0/252}, // 1 − C(7,5)/C(10,5)
		{8, 1, 2, 0.25},          // 1 − C(7,2)/C(8,2) = 1 − 21/28
		{1, 0, 1, 0},
		{1, 1, 1, 1},
	} {
		if got := passAtK(c.n, c.c, c.k); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("pass@%d with %d of %d correct: %v, want %v", c.k, c.c, c.n, got, c.want)
		}
	}
	for _, c := range [][3]int{{5, 2, 0}, {5, 2, 6}, {5, 6, 1}, {5, -1, 1}} {
		if got := passAtK(c[0], c[1], c[2]); !math.IsNaN(got) {
			t.Errorf("passAtK(n %d, c %d, k %d) = %v, want NaN", c[0], c[1], c[2], got)
		}
	}
	for n := 1; n <= 16; n++ {
		for c := 0; c <= n; c++ {
			if got, want := passAtK(n, c, 1), float64(c)/float64(n); math.Abs(got-want) > 1e-12 {
				t.Errorf("pass@1 with %d of %d: %v, want %v", c, n, got, want)
			}
		}
	}
}

// The seeds of an evaluation differ across problems, samples and turns,
// depend on the run's seed, and on nothing else.
func TestEvalSeeds(t *testing.T) {
	cfg := tinyRun(t.TempDir())
	src, err := newSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := src.heldOut(64)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	cfg.EvalSampling = EvalSampling{Samples: n, Temperature: 1}
	eps := evalEpisodes(probs, n)
	seeds := func(c Config, eps []task.Problem, stage int) []int64 {
		f := c.evalSeeds(eps)
		out := make([]int64, len(eps))
		for j := range eps {
			out[j] = *f(stage, j)
		}
		return out
	}
	if p := cfg.evalParams(); p.Temperature != 1 || p.MaxTokens != cfg.MaxTokens {
		t.Fatalf("sampled evaluation params %+v", p)
	}
	seen := map[int64]string{}
	for stage := 0; stage <= 2; stage++ {
		turn := stage + 1
		for j, s := range seeds(cfg, eps, stage) {
			who := fmt.Sprintf("turn %d problem %s sample %d", turn, eps[j].ID, j%n)
			if other, dup := seen[s]; dup {
				t.Fatalf("%s has the seed of %s", who, other)
			}
			seen[s] = who
			if s != evalSeed(cfg.Seed, eps[j].ID, j%n, turn) {
				t.Fatalf("%s: seed is not a function of (seed, problem, sample, turn)", who)
			}
		}
	}
	// Fewer held-out problems: the same seeds for the ones kept.
	if sub, all := seeds(cfg, evalEpisodes(probs[:3], n), 0), seeds(cfg, eps, 0); !slices.Equal(sub, all[:3*n]) {
		t.Errorf("the seeds of the first problems changed with eval_problems")
	}
	other := cfg
	other.Seed++
	if a, b := seeds(cfg, eps, 0), seeds(other, eps, 0); a[0] == b[0] {
		t.Errorf("the evaluation seed does not depend on the run's seed")
	}
	greedy := &Config{MaxTokens: 4}
	if f, p := greedy.evalSeeds(eps), greedy.evalParams(); f != nil || p.Temperature != 0 {
		t.Errorf("greedy evaluation sends seeds at temperature %v", p.Temperature)
	}
}

func TestEvalSamplingValidate(t *testing.T) {
	for _, c := range []struct {
		es   EvalSampling
		want string // "" valid
	}{
		{EvalSampling{}, ""},
		{EvalSampling{Samples: 1}, ""},
		{EvalSampling{Samples: 8, Temperature: 1}, ""},
		{EvalSampling{Samples: 8, Temperature: 0.6, PassK: []int{1, 4, 8}}, ""},
		{EvalSampling{Samples: 8}, "eval_sampling.samples 8: greedy answers"},
		{EvalSampling{Samples: -1, Temperature: 1}, "eval_sampling.samples -1"},
		{EvalSampling{Temperature: math.NaN()}, "eval_sampling.temperature NaN"},
		{EvalSampling{Temperature: math.Inf(1)}, "eval_sampling.temperature +Inf"},
		{EvalSampling{PassK: []int{1}}, "pass@k needs sampled answers"},
		{EvalSampling{Samples: 4, Temperature: 1, PassK: []int{}}, "empty"},
		{EvalSampling{Samples: 4, Temperature: 1, PassK: []int{8}}, "8: want 1..samples (4)"},
		{EvalSampling{Samples: 4, Temperature: 1, PassK: []int{2, 1}}, "ascending"},
	} {
		err := c.es.validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.es, err, c.want)
		}
	}
}

// Majority voting over extracted answers: equivalent answers vote
// together, ties go to the answer seen first, answers without a final
// answer do not vote.
func TestMajorityVote(t *testing.T) {
	extract := answerExtractor(VerifierMath)
	ans := func(a string) string { return "so the answer is " + a }
	for _, c := range []struct {
		name    string
		texts   []string
		rewards []float64
		want    bool
	}{
		{"majority right", []string{ans("3"), ans("4"), ans("3")}, []float64{1, 0, 1}, true},
		{"majority wrong", []string{ans("4"), ans("3"), ans("4")}, []float64{0, 1, 0}, false},
		{"equivalent forms vote together", []string{ans("0.5"), ans("2"), ans("1/2"), ans("2")}, []float64{1, 0, 1, 0}, true},
		{"tie: first seen wins", []string{ans("4"), ans("3"), ans("3"), ans("4")}, []float64{0, 1, 1, 0}, false},
		{"no answer does not vote", []string{"no idea", "still none", ans("3")}, []float64{0, 0, 1}, true},
		{"no votes at all", []string{"no idea", ""}, []float64{0, 0}, false},
	} {
		if got := majorityCorrect(c.texts, c.rewards, extract); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if answerExtractor(VerifierCode) != nil {
		t.Errorf("code answers are programs: no majority vote")
	}
}

// A sampled evaluation's figures go into metrics.jsonl flat; a line
// without one is byte for byte the plain struct's encoding.
func TestSampledMetricsJSON(t *testing.T) {
	acc, maj := 0.375, 0.5
	m := Metrics{Step: 7, Phase: "rl", EvalAccuracy: &acc,
		EvalSampled: &SampledEval{Samples: 8, Temperature: 0.7, PassAt: map[int]float64{8: 0.75, 1: 0.375, 4: 0.625}, Majority: &maj}}
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	s := string(js)
	want := `"eval_samples":8,"eval_temperature":0.7,"eval_pass_at_1":0.375,"eval_pass_at_4":0.625,"eval_pass_at_8":0.75,"eval_maj_at_8":0.5}`
	if !strings.HasSuffix(s, want) || !strings.Contains(s, `"eval_accuracy":0.375`) {
		t.Errorf("metrics line %s\nwant it to end with %s", s, want)
	}
	var back Metrics
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.EvalSampled == nil || back.EvalSampled.Samples != 8 || back.EvalSampled.Temperature != 0.7 ||
		len(back.EvalSampled.PassAt) != 3 || back.EvalSampled.PassAt[4] != 0.625 || *back.EvalSampled.Majority != 0.5 || back.Step != 7 {
		t.Errorf("round trip: %+v sampled %+v", back, back.EvalSampled)
	}
	m.EvalSampled = nil
	js, _ = json.Marshal(m)
	plain, _ := json.Marshal(metricsPlain(m))
	if string(js) != string(plain) || strings.Contains(string(js), "eval_samples") {
		t.Errorf("greedy line %s, want %s", js, plain)
	}
	if err := json.Unmarshal(js, &back); err != nil || back.EvalSampled != nil {
		t.Errorf("greedy line read back: %v, sampled %+v", err, back.EvalSampled)
	}
	one, _ := json.Marshal(SampledEval{Samples: 2, Temperature: 1, PassAt: map[int]float64{1: 0.5}})
	if string(one) != `{"samples":2,"temperature":1,"pass_at_1":0.5}` {
		t.Errorf("SampledEval JSON %s", one)
	}
}

// recordingEngine serves requests in chunks of 3, last chunk first, each
// chunk concurrently with the others, and records what it saw.
type recordingEngine struct {
	engine.Engine
	mu   sync.Mutex
	reqs []engine.Request
}

func (e *recordingEngine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	e.mu.Lock()
	e.reqs = append(e.reqs, reqs...)
	e.mu.Unlock()
	out := make([]engine.Result, len(reqs))
	var wg sync.WaitGroup
	errs := make(chan error, len(reqs))
	for hi := len(reqs); hi > 0; hi -= 3 {
		lo := max(hi-3, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Engine.Generate(ctx, reqs[lo:hi])
			if err != nil {
				errs <- err
				return
			}
			copy(out[lo:hi], res)
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return out, nil
}

// evalWith evaluates the checkpoint in dir as a run of cfg would, on eng
// built from it.
func evalWith(t *testing.T, ctx context.Context, cfg Config, eng engine.Engine, ne *native.Engine) SingleEval {
	t.Helper()
	tpl, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	src, err := newSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := src.heldOut(cfg.EvalProblems)
	if err != nil {
		t.Fatal(err)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cfg: cfg, tpl: tpl, src: src, verifier: v, eval: probs,
		solver: &policy{id: "solver", eng: &policyEngine{Engine: eng, tok: ne.Tokenizer()}, tok: ne.Tokenizer()}}
	se, err := r.evaluate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return se
}

// easyRows are dataset rows whose answer is the question's first digit (1
// or 2), learned well enough in a short warm-up that sampled answers at
// temperature 1 are often, not always, right; the hint column h names it
// too (for MLMT's feedback policy).
func easyRows(n int) []map[string]any {
	rows := make([]map[string]any, n)
	for i := range rows {
		a := fmt.Sprint(i%2 + 1)
		rows[i] = map[string]any{"q": fmt.Sprintf("%s%d%d", a, i%7, i%5), "a": a, "meta": map[string]any{"a": a}, "h": a}
	}
	return rows
}

// A tiny run with a sampled evaluation: metrics.jsonl carries mean@n,
// pass@k and maj@n at evaluation steps, the same in a second run with the
// same seed; the run's checkpoint evaluated again — alone, or served in
// chunks out of order — gives the run's last figures; each answer has a
// seed of its own, and the answers to a problem differ.
func TestSampledEvalRepeats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	evalKeys := func(m map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			if strings.HasPrefix(k, "eval_") && k != "eval_s" {
				out[k] = v
			}
		}
		return out
	}
	const n = 4
	train := writeJSONL(t, easyRows(96))
	var runs [2][]map[string]any
	var cfg Config
	for i := range runs {
		out := t.TempDir()
		cfg = datasetRun(out, train)
		cfg.WarmupSteps, cfg.EvalProblems, cfg.EvalEvery = 150, 16, 75
		cfg.EvalSampling = EvalSampling{Samples: n, Temperature: 1, PassK: []int{1, 2, 4}}
		if _, err := Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		for _, m := range readMetrics(t, filepath.Join(out, "metrics.jsonl")) {
			if e := evalKeys(m); len(e) > 0 {
				runs[i] = append(runs[i], e)
			}
		}
	}
	if len(runs[0]) != 3 {
		t.Fatalf("%d evaluations, want 3 (warm-up steps 75 and 150, the last RL step)", len(runs[0]))
	}
	for j, e := range runs[0] {
		for _, k := range []string{"eval_accuracy", "eval_samples", "eval_temperature", "eval_pass_at_1", "eval_pass_at_2", "eval_pass_at_4", "eval_maj_at_4"} {
			if _, ok := e[k].(float64); !ok {
				t.Errorf("evaluation %d: %s = %v, want a number", j+1, k, e[k])
			}
		}
		p1, p2, p4 := e["eval_pass_at_1"].(float64), e["eval_pass_at_2"].(float64), e["eval_pass_at_4"].(float64)
		if math.Abs(p1-e["eval_accuracy"].(float64)) > 1e-12 || p1 > p2 || p2 > p4 {
			t.Errorf("evaluation %d: accuracy %v, pass@1 %v, pass@2 %v, pass@4 %v: want pass@1 = accuracy (0/1 rewards) ≤ pass@2 ≤ pass@4", j+1, e["eval_accuracy"], p1, p2, p4)
		}
		t.Logf("evaluation %d: %v", j+1, e)
	}
	if e := runs[0][len(runs[0])-1]; !(e["eval_pass_at_1"].(float64) > 0 && e["eval_pass_at_4"].(float64) > e["eval_pass_at_1"].(float64) &&
		e["eval_maj_at_4"].(float64) <= e["eval_pass_at_4"].(float64)) {
		t.Errorf("last evaluation %v: want 0 < pass@1 < pass@4 and maj@4 ≤ pass@4 (the dataset is meant to be half learned)", e)
	}
	if fmt.Sprint(runs[0]) != fmt.Sprint(runs[1]) {
		t.Errorf("two runs with seed %d evaluated differently:\n%v\n%v", cfg.Seed, runs[0], runs[1])
	}

	// The last checkpoint again, in one batch and in chunks served out
	// of order: the run's last figures.
	last := runs[1][len(runs[1])-1]
	dir := filepath.Join(cfg.Out, "checkpoints", fmt.Sprintf("step-%d", cfg.WarmupSteps+cfg.Steps))
	se, err := EvaluateSingleCheckpoint(ctx, cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if se.Accuracy != last["eval_accuracy"] || se.Sampled == nil || se.Sampled.PassAt[4] != last["eval_pass_at_4"] || *se.Sampled.Majority != last["eval_maj_at_4"] {
		t.Errorf("checkpoint evaluated again: %+v %+v; the run's last evaluation %v", se, se.Sampled, last)
	}
	ne, err := native.Load(dir, native.Config{MaxBatch: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer ne.Close()
	rec := &recordingEngine{Engine: ne}
	chunked := evalWith(t, ctx, cfg, rec, ne)
	if chunked.Accuracy != se.Accuracy || fmt.Sprint(chunked.Sampled.PassAt) != fmt.Sprint(se.Sampled.PassAt) {
		t.Errorf("served in chunks out of order: %+v %v; in one batch %+v %v", chunked, chunked.Sampled.PassAt, se, se.Sampled.PassAt)
	}

	// Each answer its own seed; the answers to a problem are not all the
	// same (random-ish weights at temperature 1).
	seeds := map[int64]bool{}
	for _, rq := range rec.reqs {
		if rq.Params.Seed == nil || rq.Params.N != 1 || rq.Params.Temperature != 1 {
			t.Fatalf("request %s: seed %v, n %d, temperature %v", rq.ID, rq.Params.Seed, rq.Params.N, rq.Params.Temperature)
		}
		seeds[*rq.Params.Seed] = true
	}
	if len(seeds) != len(rec.reqs) || len(rec.reqs) != n*cfg.EvalProblems {
		t.Errorf("%d distinct seeds over %d requests, want %d", len(seeds), len(rec.reqs), n*cfg.EvalProblems)
	}
	res, err := ne.Generate(ctx, rec.reqs)
	if err != nil {
		t.Fatal(err)
	}
	varied := 0
	for i := 0; i < len(res); i += n {
		texts := map[string]bool{}
		for _, r := range res[i : i+n] {
			texts[r.Samples[0].Text] = true
		}
		if len(texts) > 1 {
			varied++
		}

	}
	if varied == 0 {
		t.Errorf("every problem got %d identical answers: the samples are not independent", n)
	}
	t.Logf("%d of %d problems got differing answers", varied, cfg.EvalProblems)
}

// Multi-turn sampled evaluation: n episodes per problem, every turn of
// every episode with a seed of its own; two runs with the same seed give
// the same turn figures, pass@k and maj@n, and the checkpoint evaluated
// again (rlnode eval's path) gives the run's last ones; flip rates are
// over episodes, so incorrect→correct − correct→incorrect = Δ.
func TestSampledEvalMultiTurn(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		keys []string
	}{
		{"mlmt", func(*Config) {}, []string{"turn1_accuracy", "turn3_accuracy", "turn3_accuracy_static"}},
		{"score", func(c *Config) {
			c.Episode, c.Feedback, c.ReviewTemplate, c.ScoreAlpha = EpisodeSCoRe, nil, "check and answer again", 10
		}, []string{"turn1_accuracy", "turn2_accuracy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			const n = 3
			var lasts [2]map[string]any
			var cfg Config
			train := writeJSONL(t, easyRows(96))
			for i := range lasts {
				cfg = tinyMLMTData(t.TempDir(), train)
				cfg.WarmupSteps, cfg.EvalProblems, cfg.EvalEvery = 150, 16, 150
				tc.edit(&cfg)
				cfg.EvalSampling = EvalSampling{Samples: n, Temperature: 1}
				if _, err := Run(ctx, cfg); err != nil {
					t.Fatal(err)
				}
				lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
				lasts[i] = lines[len(lines)-1]
			}
			last := lasts[0]
			t.Logf("last evaluation: %v", last)
			for _, k := range append(tc.keys, "eval_accuracy", "delta", "incorrect_to_correct", "correct_to_incorrect", "eval_pass_at_1", "eval_pass_at_3", "eval_maj_at_3") {
				if _, ok := last[k].(float64); !ok {
					t.Errorf("%s = %v, want a number", k, last[k])
				}
			}
			if !(last["eval_pass_at_3"].(float64) > 0 && last["turn1_accuracy"].(float64) > 0) {
				t.Errorf("pass@3 %v, turn-1 accuracy %v: want both above 0 (the dataset is meant to be half learned)", last["eval_pass_at_3"], last["turn1_accuracy"])
			}
			if d := last["incorrect_to_correct"].(float64) - last["correct_to_incorrect"].(float64); math.Abs(d-last["delta"].(float64)) > 1e-9 {
				t.Errorf("incorrect→correct − correct→incorrect = %v, delta %v", d, last["delta"])
			}
			if fmt.Sprint(lasts[0]) != fmt.Sprint(lasts[1]) {
				// elapsed and timings differ: compare the evaluation only
				for k, v := range lasts[0] {
					if !strings.HasSuffix(k, "_s") && fmt.Sprint(lasts[1][k]) != fmt.Sprint(v) {
						t.Errorf("%s: %v in one run, %v in the other", k, v, lasts[1][k])
					}
				}
			}
			te, err := EvaluateCheckpoint(ctx, cfg, filepath.Join(cfg.Out, "checkpoints", fmt.Sprintf("step-%d", cfg.WarmupSteps+cfg.Steps)))
			if err != nil {
				t.Fatal(err)
			}
			if te.Final != last["eval_accuracy"] || te.Turn1 != last["turn1_accuracy"] || te.Sampled == nil ||
				te.Sampled.PassAt[3] != last["eval_pass_at_3"] || *te.Sampled.Majority != last["eval_maj_at_3"] {
				t.Errorf("checkpoint evaluated again: %+v %+v; the run's last evaluation %v", te, te.Sampled, last)
			}
		})
	}
}

// A sampled evaluation on two rollout actors, the requests cut into
// chunks of 3 spread over them, gives the in-process engine's figures:
// the seeds travel with the requests, and nothing depends on which actor
// or batch serves an answer.
func TestSampledEvalOnRolloutActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	train := writeJSONL(t, easyRows(96))
	var evals [2][]string
	for i, ro := range []*Rollout{nil, {Replicas: 2, ChunkSize: 3}} {
		cfg := datasetRun(t.TempDir(), train)
		cfg.WarmupSteps, cfg.EvalProblems, cfg.EvalEvery = 150, 16, 75
		cfg.EvalSampling = EvalSampling{Samples: 4, Temperature: 1}
		cfg.Rollout = ro
		if _, err := Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		for _, m := range readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl")) {
			if live, _ := m["rollout_live"].(float64); ro != nil && live != 2 {
				t.Fatalf("step %v: rollout_live %v, want 2", m["step"], m["rollout_live"])
			}
			if _, ok := m["eval_pass_at_4"]; ok {
				evals[i] = append(evals[i], fmt.Sprint(m["step"], m["eval_accuracy"], m["eval_pass_at_1"], m["eval_pass_at_4"], m["eval_maj_at_4"]))
			}
		}
	}
	t.Logf("step, mean, pass@1, pass@4, maj@4: %q", evals[0])
	if len(evals[0]) != 3 || !slices.Equal(evals[0], evals[1]) {
		t.Errorf("in-process %q\nrollout actors %q: want the same 3 evaluations", evals[0], evals[1])
	}
}

// A sampled evaluation on (fake) vLLM servers: the evaluation requests go
// through the client with their seeds, and the figures come out the same
// in a second run (the fake answers by prompt, seed and weights; it cannot
// learn, so this checks plumbing, not accuracy).
func TestSampledEvalOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var evals [2][]string
	for i := range evals {
		cfg, a, b := vllmRun(t)
		cfg.EvalSampling = EvalSampling{Samples: 4, Temperature: 1}
		if _, err := Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if a.Generated() == 0 || b.Generated() == 0 {
			t.Errorf("requests answered: %d and %d, want both > 0", a.Generated(), b.Generated())
		}
		for _, m := range readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl")) {
			if _, ok := m["eval_accuracy"]; ok {
				evals[i] = append(evals[i], fmt.Sprint(m["step"], m["eval_samples"], m["eval_accuracy"], m["eval_pass_at_1"], m["eval_pass_at_4"], m["eval_maj_at_4"]))
			}
		}
	}
	if len(evals[0]) != 3 || !slices.Equal(evals[0], evals[1]) || strings.Contains(evals[0][0], "nil") {
		t.Errorf("evaluations %q and %q: want the same 3, with eval_samples, pass@1, pass@4 and maj@4", evals[0], evals[1])
	}
}
