package train

// Sampled evaluation (the recipe's eval.samples, eval.temperature,
// eval.pass_k): n answers per held-out problem at a temperature, scored
// as the usual LLM evaluation harnesses do. eval_accuracy is mean@n, the
// mean reward over every answer (with n = 1 and temperature 0, the greedy
// accuracy as before, computed and written exactly as before); pass@k is
// the unbiased estimator of Chen et al. 2021 (HumanEval), 1 − C(n−c, k) /
// C(n, k) per problem with c of its n answers correct (reward 1),
// averaged over problems; maj@n is majority voting over the final answers
// the math and gsm8k verifiers extract (the code verifier has none: no
// maj@n). Seeds: answer s of held-out problem p in turn t samples with a
// seed hashed from (run seed, p's ID, s, t), sent with a request of its
// own (N = 1), so it depends on nothing else — not on which engine,
// rollout actor or batch serves it, nor on eval.held_out or the other
// answers — and every evaluation of a run uses the same seeds (the
// weights are what changes between them). Multi-turn episodes play n
// independent episodes per problem; turn accuracies are means over all
// episodes, the flip rates fractions of all episodes (turn 1 and the
// final turn of the same episode), pass@k and maj@n the final turn's.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// EvalSampling is how evaluations sample. The zero value is greedy, one
// answer per problem.
type EvalSampling struct {
	// Samples is the answers per held-out problem; 0 means 1. More than
	// one needs Temperature > 0 (greedy answers are all the same).
	Samples int
	// Temperature > 0 samples (no top-p or top-k: the whole distribution
	// at that temperature); 0 is greedy.
	Temperature float64
	// PassK are the k of pass@k, ascending, each in 1..Samples; nil: 1
	// and Samples. Sampled evaluations only.
	PassK []int
}

func (e EvalSampling) sampled() bool { return e.Temperature > 0 }

func (e EvalSampling) samples() int { return max(e.Samples, 1) }

// passK is PassK or its default, {1, n}.
func (e EvalSampling) passK() []int {
	if e.PassK != nil {
		return e.PassK
	}
	if n := e.samples(); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

func (e EvalSampling) validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("train config: eval_sampling.%s %v: %s", field, v, want)
	}
	switch {
	case e.Samples < 0:
		return bad("samples", e.Samples, "want ≥ 0 (0: 1)")
	case !(e.Temperature >= 0) || math.IsInf(e.Temperature, 1):
		return bad("temperature", e.Temperature, "want a finite value ≥ 0 (0: greedy)")
	case e.Samples > 1 && e.Temperature == 0:
		return bad("samples", e.Samples, "greedy answers (temperature 0) are all the same: set temperature > 0 or samples 1")
	case e.PassK != nil && e.Temperature == 0:
		return bad("pass_k", e.PassK, "pass@k needs sampled answers (temperature > 0)")
	case e.PassK != nil && len(e.PassK) == 0:
		return bad("pass_k", e.PassK, "empty: leave it unset for the default (1 and samples)")
	}
	for i, k := range e.PassK {
		switch {
		case k < 1 || k > e.samples():
			return bad("pass_k", e.PassK, fmt.Sprintf("%d: want 1..samples (%d)", k, e.samples()))
		case i > 0 && k <= e.PassK[i-1]:
			return bad("pass_k", e.PassK, "want ascending values, each once")
		}
	}
	return nil
}

// SampledEval is what a sampled evaluation reports besides the mean
// accuracy: how it sampled, pass@k per k, and maj@n. JSON (and
// metrics.jsonl with the prefix eval_) writes it flat: samples,
// temperature, pass_at_K for each k, maj_at_N.
type SampledEval struct {
	Samples     int
	Temperature float64
	// PassAt[k] is pass@k: the mean over problems of 1 − C(n−c, k)/C(n, k).
	PassAt map[int]float64
	// Majority is maj@n: the share of problems whose most voted final
	// answer (verify.Equivalent classes of the extracted answers; ties go
	// to the answer given first) is correct; nil with the code verifier.
	Majority *float64
}

// appendFields writes s's flat keys, each with prefix, as JSON object
// members (each preceded by a comma).
func (s *SampledEval) appendFields(b []byte, prefix string) []byte {
	num := func(key string, v float64) {
		b = append(b, ',')
		b = strconv.AppendQuote(b, prefix+key)
		b = append(b, ':')
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	num("samples", float64(s.Samples))
	num("temperature", s.Temperature)
	ks := make([]int, 0, len(s.PassAt))
	for k := range s.PassAt {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	for _, k := range ks {
		num(fmt.Sprintf("pass_at_%d", k), s.PassAt[k])
	}
	if s.Majority != nil {
		num(fmt.Sprintf("maj_at_%d", s.Samples), *s.Majority)
	}
	return b
}

// readSampled reads the flat keys with prefix out of an object's
// members; nil when it has no samples key.
func readSampled(raw map[string]json.RawMessage, prefix string) (*SampledEval, error) {
	v, ok := raw[prefix+"samples"]
	if !ok {
		return nil, nil
	}
	s := &SampledEval{PassAt: map[int]float64{}}
	if err := json.Unmarshal(v, &s.Samples); err != nil {
		return nil, fmt.Errorf("%ssamples: %w", prefix, err)
	}
	for key, v := range raw {
		name, ok := strings.CutPrefix(key, prefix)
		if !ok || name == "samples" {
			continue
		}
		k, err := strconv.Atoi(strings.TrimPrefix(name, "pass_at_"))
		pass := strings.HasPrefix(name, "pass_at_")
		if pass && (err != nil || k < 1) {
			return nil, fmt.Errorf("%s: not a pass@k key", key)
		}
		if !pass && name != "temperature" && name != fmt.Sprintf("maj_at_%d", s.Samples) {
			continue
		}
		var x float64
		if err := json.Unmarshal(v, &x); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		switch {
		case pass:
			s.PassAt[k] = x
		case name == "temperature":
			s.Temperature = x
		default:
			s.Majority = &x
		}
	}
	return s, nil
}

// MarshalJSON writes s flat: samples, temperature, pass_at_K, maj_at_N.
func (s SampledEval) MarshalJSON() ([]byte, error) {
	b := s.appendFields(nil, "")
	b[0] = '{'
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *SampledEval) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	got, err := readSampled(raw, "")
	if err != nil {
		return err
	}
	if got == nil {
		return fmt.Errorf("sampled evaluation: no samples key")
	}
	*s = *got
	return nil
}

// metricsPlain is Metrics without its JSON methods.
type metricsPlain Metrics

// MarshalJSON writes m's fields as tagged, then a sampled evaluation's
// figures flat with the prefix eval_ (eval_samples, eval_temperature,
// eval_pass_at_K, eval_maj_at_N). Lines without one are byte for byte
// what the plain struct encodes.
func (m Metrics) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(metricsPlain(m))
	if err != nil || m.EvalSampled == nil {
		return b, err
	}
	b = bytes.TrimSuffix(b, []byte("}"))
	b = m.EvalSampled.appendFields(b, "eval_")
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Metrics) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, (*metricsPlain)(m)); err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	s, err := readSampled(raw, "eval_")
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	m.EvalSampled = s
	return nil
}

// passAtK is the unbiased pass@k estimate for one problem with c correct
// answers out of n: 1 − C(n−c, k)/C(n, k), computed as 1 − Π_{i=n−c+1}^{n}
// (1 − k/i), which needs no large binomials. NaN unless 1 ≤ k ≤ n and
// 0 ≤ c ≤ n.
func passAtK(n, c, k int) float64 {
	if k < 1 || k > n || c < 0 || c > n {
		return math.NaN()
	}
	if n-c < k {
		return 1 // every k-subset holds a correct answer
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// evalSeed is the sampling seed of answer s to the held-out problem with
// id in turn t (1 the first answer, 2 MLMT's feedback, 3 the final answer
// of MLMT and SCoRe).
func evalSeed(seed uint64, id string, s, turn int) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "eval/%d/%s/%d/%d", seed, id, s, turn)
	return int64(h.Sum64() >> 1)
}

// evalEpisodes lists every answer an evaluation samples: problem i's n
// episodes at i*n … i*n+n−1.
func evalEpisodes(probs []task.Problem, n int) []task.Problem {
	if n == 1 {
		return probs
	}
	out := make([]task.Problem, 0, len(probs)*n)
	for _, p := range probs {
		for range n {
			out = append(out, p)
		}
	}
	return out
}

// evalSeeds are the sampling seeds of an evaluation of episodes eps
// (evalEpisodes of n per problem): stage t of episode j samples with
// evalSeed(seed, its problem's ID, j mod n, t+1); nil when greedy.
func (c *Config) evalSeeds(eps []task.Problem) func(stage, j int) *int64 {
	if !c.EvalSampling.sampled() {
		return nil
	}
	seed, n := c.Seed, c.EvalSampling.samples()
	return func(stage, j int) *int64 {
		s := evalSeed(seed, eps[j].ID, j%n, stage+1)
		return &s
	}
}

// evalParams is how evaluations sample: greedily, or at the temperature.
func (c *Config) evalParams() engine.SamplingParams {
	p := engine.SamplingParams{MaxTokens: c.MaxTokens}
	if c.EvalSampling.sampled() {
		p.Temperature = c.EvalSampling.Temperature
	}
	return p
}

// evalPassK are the k of pass@k an evaluation reports: none when greedy.
func (c *Config) evalPassK() []int {
	if !c.EvalSampling.sampled() {
		return nil
	}
	return c.EvalSampling.passK()
}

// sampledEval computes pass@k and maj@n from the rewards and texts of
// every episode (n per problem, in evalEpisodes' order).
func sampledEval(cfg Config, rewards []float64, texts []string) *SampledEval {
	return sampledFigures(cfg.EvalSampling, rewards, texts, answerExtractor(cfg.Verifier))
}

// sampledFigures is sampledEval with the final answers' extractor (nil:
// no maj@n).
func sampledFigures(es EvalSampling, rewards []float64, texts []string, extract func(string) (string, error)) *SampledEval {
	n := es.samples()
	probs := len(rewards) / n
	s := &SampledEval{Samples: n, Temperature: es.Temperature, PassAt: map[int]float64{}}
	var maj float64
	for i := range probs {
		c := 0
		for _, x := range rewards[i*n : (i+1)*n] {
			if x == 1 {
				c++
			}
		}
		for _, k := range es.passK() {
			s.PassAt[k] += passAtK(n, c, k)
		}
		if extract != nil && majorityCorrect(texts[i*n:(i+1)*n], rewards[i*n:(i+1)*n], extract) {
			maj++
		}
	}
	for k := range s.PassAt {
		s.PassAt[k] /= float64(probs)
	}
	if extract != nil {
		maj /= float64(probs)
		s.Majority = &maj
	}
	return s
}

// answerExtractor is the final-answer extractor of the run's verifier;
// nil for code, whose answers are programs.
func answerExtractor(verifier string) func(string) (string, error) {
	switch verifier {
	case "", VerifierMath:
		return verify.ExtractAnswer
	case VerifierGSM8K:
		return func(s string) (string, error) { return verify.ExtractGSM8K(s, false) }
	}
	return nil
}

// majorityCorrect votes over one problem's answers: each extracted answer
// joins the first class whose answer it is equivalent to; the class with
// the most votes wins (ties: the class first seen), and it is correct when
// the answer that opened it has reward 1. Answers without an extractable
// final answer do not vote; with no votes at all the problem is wrong.
func majorityCorrect(texts []string, rewards []float64, extract func(string) (string, error)) bool {
	type class struct {
		answer       string
		votes, first int
	}
	var classes []class
	for s, t := range texts {
		a, err := extract(t)
		if err != nil {
			continue
		}
		i := slices.IndexFunc(classes, func(c class) bool { return equivalent(a, c.answer) })
		if i < 0 {
			classes = append(classes, class{answer: a, first: s})
			i = len(classes) - 1
		}
		classes[i].votes++
	}
	if len(classes) == 0 {
		return false
	}
	best := 0
	for i, c := range classes {
		if c.votes > classes[best].votes {
			best = i
		}
	}
	return rewards[classes[best].first] == 1
}

// equivalent is verify.Equivalent, with a failure on input nobody
// foresaw counted as "not equivalent" (the verifiers do the same).
func equivalent(a, b string) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return verify.Equivalent(a, b)
}
