package native

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/rlnode/rlnode/rollout/engine"
)

// TokenLogProb is one candidate token and its log probability.
type TokenLogProb struct {
	TokenID int
	LogProb float32
}

// sampler draws one token from a row of logits. Its scratch slices are
// reused between calls; one sampler per goroutine.
type sampler struct {
	idx   []int
	probs []float64
}

// sample picks the next token under p and returns it with its log
// probability under softmax(logits/T) (T = 1 when greedy), before top-k
// and top-p truncation, as engine.Sample.LogProbs defines. With top > 0 it
// also returns the top most likely tokens under that distribution.
func (s *sampler) sample(logits []float32, p *engine.SamplingParams, rng *rand.Rand, top int) (int, float32, []TokenLogProb) {
	T := p.Temperature
	if T <= 0 {
		T = 1
	}
	inv := 1 / T
	m := math.Inf(-1)
	arg := 0
	for i, v := range logits {
		if float64(v) > m {
			m, arg = float64(v), i
		}
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp((float64(v) - m) * inv)
	}
	lse := math.Log(sum) // of (z - max)/T
	logp := func(i int) float32 { return float32((float64(logits[i])-m)*inv - lse) }

	tok := arg
	if p.Temperature > 0 {
		tok = s.draw(logits, m, inv, lse, p, rng)
	}
	var tops []TokenLogProb
	if top > 0 {
		for _, i := range s.largest(logits, min(top, len(logits))) {
			tops = append(tops, TokenLogProb{TokenID: i, LogProb: logp(i)})
		}
	}
	return tok, logp(tok), tops
}

// draw samples from softmax(z/T) restricted to the top-k tokens and then to
// the smallest set of the most likely whose mass reaches top-p.
func (s *sampler) draw(z []float32, m, inv, lse float64, p *engine.SamplingParams, rng *rand.Rand) int {
	V := len(z)
	k := p.TopK
	if k <= 0 || k > V {
		k = V
	}
	nucleus := p.TopP > 0 && p.TopP < 1
	prob := func(i int) float64 { return math.Exp((float64(z[i])-m)*inv - lse) }
	if k == V && !nucleus {
		// Inverse-CDF over the whole vocabulary.
		u := rng.Float64()
		var c float64
		for i := range z {
			c += prob(i)
			if u < c {
				return i
			}
		}
		return lastPositive(z, m, inv, lse)
	}
	cands := s.largest(z, k) // most likely first
	s.probs = s.probs[:0]
	var mass float64
	for _, i := range cands {
		q := prob(i)
		s.probs = append(s.probs, q)
		mass += q
	}
	if nucleus {
		// Keep the prefix whose mass (renormalized over the top-k set)
		// first reaches top_p; at least one token.
		var c float64
		n := len(cands)
		for j, q := range s.probs {
			c += q
			if c >= p.TopP*mass {
				n = j + 1
				break
			}
		}
		cands, s.probs = cands[:n], s.probs[:n]
		mass = 0
		for _, q := range s.probs {
			mass += q
		}
	}
	u := rng.Float64() * mass
	var c float64
	for j, q := range s.probs {
		c += q
		if u < c {
			return cands[j]
		}
	}
	return cands[len(cands)-1]
}

// lastPositive is the largest index with nonzero probability: where
// rounding leaves the cumulative sum just below u.
func lastPositive(z []float32, m, inv, lse float64) int {
	for i := len(z) - 1; i >= 0; i-- {
		if math.Exp((float64(z[i])-m)*inv-lse) > 0 {
			return i
		}
	}
	return 0
}

// largest returns the indices of the k largest values of z, largest first
// (ties: lower index first).
func (s *sampler) largest(z []float32, k int) []int {
	s.idx = s.idx[:0]
	for i := range z {
		s.idx = append(s.idx, i)
	}
	less := func(a, b int) bool {
		if z[a] != z[b] {
			return z[a] > z[b]
		}
		return a < b
	}
	if k < len(z)/8 {
		// Partial selection: keep a sorted window of the best k.
		best := make([]int, 0, k+1)
		for _, i := range s.idx {
			if len(best) == k && !less(i, best[k-1]) {
				continue
			}
			at := sort.Search(len(best), func(j int) bool { return less(i, best[j]) })
			best = slices.Insert(best, at, i)
			if len(best) > k {
				best = best[:k]
			}
		}
		return best
	}
	sort.Slice(s.idx, func(a, b int) bool { return less(s.idx[a], s.idx[b]) })
	return s.idx[:k]
}
