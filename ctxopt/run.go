package ctxopt

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/rlnode/rlnode/internal/atomicfile"
)

// TrainOptions drive Train.
type TrainOptions struct {
	Iterations int
	Batch      int // episodes per PPO update (16–64)
	Seed       uint64
	Log        func(IterStats) // called after every iteration; may be nil
}

// IterStats are one training iteration's numbers.
type IterStats struct {
	Iter        int                    `json:"iter"`
	Reward      float64                `json:"reward"`
	Accuracy    float64                `json:"accuracy"`
	Cost        float64                `json:"cost"`
	Updates     map[string]UpdateStats `json:"updates"`
	ExecPerSec  float64                `json:"executions_per_s"`
	CallsPerSec float64                `json:"model_calls_per_s"`
	Elapsed     float64                `json:"elapsed_s"`
}

// Train runs opts.Iterations PPO iterations: sample a batch of questions,
// let the method choose configurations (sampling), execute them, and
// update the method from the rewards.
func Train(ctx context.Context, m Method, x *Executor, qs []Question, opts TrainOptions) ([]IterStats, error) {
	if len(qs) == 0 {
		return nil, fmt.Errorf("train: no questions")
	}
	if opts.Batch < 1 || opts.Iterations < 1 {
		return nil, fmt.Errorf("train: batch %d and iterations %d must be positive", opts.Batch, opts.Iterations)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	start := time.Now()
	var out []IterStats
	for it := range opts.Iterations {
		batch := make([]Question, opts.Batch)
		for i := range batch {
			batch[i] = qs[rng.IntN(len(qs))]
		}
		cs, recs, err := m.Choose(batch, rng, false)
		if err != nil {
			return out, fmt.Errorf("train: iteration %d: %w", it, err)
		}
		jobs := make([]Job, len(batch))
		for i := range batch {
			jobs[i] = Job{Q: batch[i], C: cs[i], Seed: int64(opts.Seed)<<32 + int64(it*opts.Batch+i)}
		}
		t0 := time.Now()
		outs, err := x.RunBatch(ctx, jobs)
		if err != nil {
			return out, fmt.Errorf("train: iteration %d: %w", it, err)
		}
		dt := time.Since(t0).Seconds()
		rewards := make([]float64, len(outs))
		st := IterStats{Iter: it}
		var calls int
		for i, o := range outs {
			rewards[i] = o.Reward
			st.Reward += o.Reward / float64(len(outs))
			st.Cost += o.Cost / float64(len(outs))
			if o.Correct {
				st.Accuracy += 1 / float64(len(outs))
			}
			calls += o.Usage.ModelCalls
		}
		if st.Updates, err = m.Learn(recs, rewards); err != nil {
			return out, fmt.Errorf("train: iteration %d: %w", it, err)
		}
		if dt > 0 {
			st.ExecPerSec, st.CallsPerSec = float64(len(outs))/dt, float64(calls)/dt
		}
		st.Elapsed = time.Since(start).Seconds()
		out = append(out, st)
		if opts.Log != nil {
			opts.Log(st)
		}
	}
	return out, nil
}

// Summary is a policy's numbers on a question set, with 95% confidence
// half-widths (normal approximation, 1.96·sd/√n).
type Summary struct {
	Name       string         `json:"name"`
	N          int            `json:"n"`
	Accuracy   float64        `json:"accuracy"`
	AccuracyCI float64        `json:"accuracy_ci"`
	Cost       float64        `json:"cost"`
	CostCI     float64        `json:"cost_ci"`
	Reward     float64        `json:"reward"`
	RewardCI   float64        `json:"reward_ci"`
	Structures map[string]int `json:"structures"` // how often each structure was chosen
}

func meanCI(x []float64) (float64, float64) {
	if len(x) == 0 {
		return 0, 0
	}
	var m float64
	for _, v := range x {
		m += v
	}
	m /= float64(len(x))
	if len(x) < 2 {
		return m, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - m) * (v - m)
	}
	return m, 1.96 * math.Sqrt(ss/float64(len(x)-1)/float64(len(x)))
}

// Summarize reduces outcomes of configurations cs.
func Summarize(name string, outs []Outcome, cs []Config) Summary {
	acc, cost, rew := make([]float64, len(outs)), make([]float64, len(outs)), make([]float64, len(outs))
	s := Summary{Name: name, N: len(outs), Structures: map[string]int{}}
	for i, o := range outs {
		if o.Correct {
			acc[i] = 1
		}
		cost[i], rew[i] = o.Cost, o.Reward
		s.Structures[cs[i].Structure.String()]++
	}
	s.Accuracy, s.AccuracyCI = meanCI(acc)
	s.Cost, s.CostCI = meanCI(cost)
	s.Reward, s.RewardCI = meanCI(rew)
	return s
}

// Execute runs cs[i] on qs[i] with evaluation seeds.
func Execute(ctx context.Context, x *Executor, qs []Question, cs []Config, seed uint64) ([]Outcome, error) {
	jobs := make([]Job, len(qs))
	for i := range qs {
		jobs[i] = Job{Q: qs[i], C: cs[i], Seed: -(int64(seed)<<32 + int64(i) + 1)}
	}
	return x.RunBatch(ctx, jobs)
}

// RandomConfigs draws, per question, a configuration uniformly: the
// structure, every agent's tools and budget, and one atom or none.
func RandomConfigs(sp Space, n int, rng *rand.Rand) []Config {
	cs := make([]Config, n)
	for i := range cs {
		cs[i].Structure = Structure(rng.IntN(int(NumStructures)))
		for r := range cs[i].Agents {
			cs[i].Agents[r] = Agent{Tools: rng.IntN(sp.ToolSets()), Budget: rng.IntN(len(sp.Budgets))}
			if a := rng.IntN(len(sp.Atoms) + 1); a > 0 {
				cs[i].Agents[r].Atoms = []int{a - 1}
			}
		}
	}
	return cs
}

func repeat(c Config, n int) []Config {
	cs := make([]Config, n)
	for i := range cs {
		cs[i] = c
	}
	return cs
}

// Result is a benchmark: the learned policy against the baselines on
// held-out questions.
type Result struct {
	Learned     Summary   `json:"learned"`
	Random      Summary   `json:"random"`
	BestPerType Summary   `json:"best_fixed_per_type"`
	Fixed       []Summary `json:"fixed"`
	Front       []string  `json:"pareto_front"` // fixed configurations on the accuracy/cost front
	// Dominated names the fixed configurations with at least the learned
	// policy's accuracy at no more cost (one strictly better); empty when
	// the learned policy is on or beyond the front.
	Dominated []string         `json:"learned_dominated_by"`
	Chosen    map[string]int   `json:"learned_configs"` // the learned policy's configurations, by how often
	PerType   map[string][]int `json:"learned_structures_per_type"`
	// ConfigsPerType counts the learned policy's whole configurations
	// (structure, every agent's tools, budget and atoms) per question type.
	ConfigsPerType map[string]map[string]int `json:"learned_configs_per_type"`
}

// Benchmark evaluates the method's greedy policy, a random policy, every
// fixed configuration, and the best fixed configuration per question type
// (picked on tune, scored on test).
func Benchmark(ctx context.Context, x *Executor, m Method, tune, test []Question, seed uint64) (Result, error) {
	var res Result
	rng := rand.New(rand.NewPCG(seed, 0xbe7c))
	cs, _, err := m.Choose(test, rng, true)
	if err != nil {
		return res, err
	}
	outs, err := Execute(ctx, x, test, cs, seed)
	if err != nil {
		return res, err
	}
	res.Learned = Summarize("learned", outs, cs)
	res.Chosen, res.PerType = map[string]int{}, StructuresPerType(test, cs)
	res.ConfigsPerType = ConfigsPerType(x.Space, test, cs)
	for _, c := range cs {
		res.Chosen[x.Space.Describe(c)]++
	}
	rc := RandomConfigs(x.Space, len(test), rng)
	if outs, err = Execute(ctx, x, test, rc, seed); err != nil {
		return res, err
	}
	res.Random = Summarize("random", outs, rc)

	fixed := x.Space.FixedConfigs()
	best := map[string]int{}
	bestR := map[string]float64{}
	for k, c := range fixed {
		tuneOuts, err := Execute(ctx, x, tune, repeat(c, len(tune)), seed+1)
		if err != nil {
			return res, err
		}
		sum, n := map[string]float64{}, map[string]int{}
		for i, o := range tuneOuts {
			sum[tune[i].Type] += o.Reward
			n[tune[i].Type]++
		}
		for t := range sum {
			if r := sum[t] / float64(n[t]); k == 0 || r > bestR[t] {
				best[t], bestR[t] = k, r
			}
		}
		testOuts, err := Execute(ctx, x, test, repeat(c, len(test)), seed)
		if err != nil {
			return res, err
		}
		res.Fixed = append(res.Fixed, Summarize(x.Space.Describe(c), testOuts, repeat(c, len(test))))
	}
	bc := make([]Config, len(test))
	for i, q := range test {
		bc[i] = fixed[best[q.Type]]
	}
	if outs, err = Execute(ctx, x, test, bc, seed); err != nil {
		return res, err
	}
	res.BestPerType = Summarize("best fixed per type", outs, bc)
	for i, f := range res.Fixed {
		if !dominated(f, res.Fixed, i) {
			res.Front = append(res.Front, f.Name)
		}
	}
	res.Dominated = res.DominatedBy(res.Learned)
	return res, nil
}

// DominatedBy names the fixed configurations with at least s's accuracy
// at no more cost, one of them strictly better.
func (r Result) DominatedBy(s Summary) []string {
	var out []string
	for _, f := range r.Fixed {
		if f.Accuracy >= s.Accuracy && f.Cost <= s.Cost && (f.Accuracy > s.Accuracy || f.Cost < s.Cost) {
			out = append(out, f.Name)
		}
	}
	return out
}

// StructuresPerType counts, per question type, how often cs chose each
// structure.
func StructuresPerType(qs []Question, cs []Config) map[string][]int {
	out := map[string][]int{}
	for i, c := range cs {
		t := qs[i].Type
		if out[t] == nil {
			out[t] = make([]int, NumStructures)
		}
		out[t][c.Structure]++
	}
	return out
}

// ConfigsPerType counts, per question type, how often cs chose each whole
// configuration (sp.Describe).
func ConfigsPerType(sp Space, qs []Question, cs []Config) map[string]map[string]int {
	out := map[string]map[string]int{}
	for i, c := range cs {
		t := qs[i].Type
		if out[t] == nil {
			out[t] = map[string]int{}
		}
		out[t][sp.Describe(c)]++
	}
	return out
}

func dominated(f Summary, all []Summary, self int) bool {
	for j, g := range all {
		if j != self && g.Accuracy >= f.Accuracy && g.Cost <= f.Cost && (g.Accuracy > f.Accuracy || g.Cost < f.Cost) {
			return true
		}
	}
	return false
}

// TopFixed returns the n fixed configurations with the highest reward.
func (r Result) TopFixed(n int) []Summary {
	s := append([]Summary(nil), r.Fixed...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Reward > s[j].Reward })
	return s[:min(n, len(s))]
}

// maxPolicyBytes bounds a saved policy file.
const maxPolicyBytes = 64 << 20

// SavePolicy writes the method's weights as JSON: learner → param →
// values. The file is replaced atomically: a save that fails midway (a
// full disk, a crash) leaves the previous one whole.
func SavePolicy(path string, m Method) error {
	out := map[string]map[string][]float32{}
	for name, l := range m.Learners() {
		ps := map[string][]float32{}
		for _, p := range l.Params() {
			ps[p.Name] = p.Data
		}
		out[name] = ps
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("policy %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, b, 0o644)
}

// LoadPolicy reads weights SavePolicy wrote into m, checking that every
// parameter is there with its shape.
func LoadPolicy(path string, m Method) error {
	b, err := readBounded(path, maxPolicyBytes)
	if err != nil {
		return fmt.Errorf("policy %s: %w", path, err)
	}
	var in map[string]map[string][]float32
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("policy %s: %w", path, err)
	}
	for name, l := range m.Learners() {
		ps, ok := in[name]
		if !ok {
			return fmt.Errorf("policy %s: no %q learner (was it trained with another formulation?)", path, name)
		}
		for _, p := range l.Params() {
			v, ok := ps[p.Name]
			if !ok || len(v) != len(p.Data) {
				return fmt.Errorf("policy %s: %s: %d values, want %d (another recipe's space or network?)", path, p.Name, len(v), len(p.Data))
			}
			copy(p.Data, v)
		}
	}
	return nil
}
