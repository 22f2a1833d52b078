package native

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/rollout/engine"
)

func softmaxT(z []float32, T float64) []float64 {
	p := make([]float64, len(z))
	var s float64
	for i, v := range z {
		p[i] = math.Exp(float64(v) / T)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// The sampler's draws follow softmax(z/T) restricted by top-k and top-p,
// and its reported logprob is always the untruncated log softmax(z/T).
func TestSamplerDistribution(t *testing.T) {
	z := []float32{2, 1, 0.5, 0, -1, 0.2, 1.5, -3}
	tests := []struct {
		name string
		p    engine.SamplingParams
		keep []int // tokens that may be drawn
	}{
		{"full", engine.SamplingParams{Temperature: 1}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"cold", engine.SamplingParams{Temperature: 0.5}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"top-k 2", engine.SamplingParams{Temperature: 1, TopK: 2}, []int{0, 6}},
		// Probabilities at T=1: 0.359, 0.218 (token 6), 0.132, ...: top-p 0.5
		// needs the first two.
		{"top-p 0.5", engine.SamplingParams{Temperature: 1, TopP: 0.5}, []int{0, 6}},
		{"top-k 3 top-p 0.9", engine.SamplingParams{Temperature: 1, TopK: 3, TopP: 0.9}, []int{0, 6, 1}},
	}
	const draws = 40000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s sampler
			rng := rand.New(rand.NewPCG(1, 2))
			full := softmaxT(z, tc.p.Temperature)
			var mass float64
			for _, i := range tc.keep {
				mass += full[i]
			}
			count := make([]int, len(z))
			for n := 0; n < draws; n++ {
				tok, lp, _ := s.sample(z, &tc.p, rng, 0)
				count[tok]++
				if math.Abs(float64(lp)-math.Log(full[tok])) > 1e-5 {
					t.Fatalf("token %d: logprob %v, want %v", tok, lp, math.Log(full[tok]))
				}
			}
			for i := range z {
				want := 0.0
				for _, k := range tc.keep {
					if k == i {
						want = full[i] / mass
					}
				}
				got := float64(count[i]) / draws
				if math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/draws)+1e-9 {
					t.Errorf("token %d drawn %.4f of the time, want %.4f", i, got, want)
				}
			}
		})
	}
}

func TestSamplerGreedyAndTop(t *testing.T) {
	z := []float32{0.1, 3, -2, 3, 1}
	var s sampler
	p := engine.SamplingParams{}
	tok, lp, top := s.sample(z, &p, rand.New(rand.NewPCG(1, 1)), 3)
	full := softmaxT(z, 1)
	if tok != 1 || math.Abs(float64(lp)-math.Log(full[1])) > 1e-6 {
		t.Errorf("greedy: token %d logprob %v, want 1 (the first of a tie) and %v", tok, lp, math.Log(full[1]))
	}
	want := []int{1, 3, 4}
	for i, c := range top {
		if c.TokenID != want[i] || math.Abs(float64(c.LogProb)-math.Log(full[want[i]])) > 1e-6 {
			t.Errorf("top %d: %+v, want token %d", i, c, want[i])
		}
	}
	if len(top) != 3 {
		t.Errorf("%d top entries, want 3", len(top))
	}
	// The partial selection path (k small against the vocabulary) agrees
	// with a full sort.
	big := make([]float32, 1000)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range big {
		big[i] = float32(rng.NormFloat64())
	}
	a := append([]int(nil), s.largest(big, 5)...)
	b := s.largest(big, 900)[:5]
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("top 5 by partial selection %v, by sorting %v", a, b)
		}
	}
}

func TestDetokenizer(t *testing.T) {
	type step struct {
		add       string
		stopped   bool
		delta     string
		finalText string // checked when stopped
	}
	tests := []struct {
		name  string
		stops []string
		steps []step
		text  string
	}{
		{"plain", nil, []step{{add: "ab", delta: "ab"}, {add: "c", delta: "c"}}, "abc"},
		{"stop across tokens", []string{"END"}, []step{{add: "xE", delta: "x"}, {add: "N", delta: ""}, {add: "D!", stopped: true, delta: ""}}, "x"},
		{"held tail released", []string{"END"}, []step{{add: "abEN", delta: "ab"}, {add: "x", delta: "ENx"}}, "abENx"},
		{"earliest stop wins", []string{"cd", "b"}, []step{{add: "abcd", stopped: true, delta: "a"}}, "a"},
		{"utf-8 cut between tokens", nil, []step{{add: "a\xe2\x82", delta: "a"}, {add: "\xac", delta: "€"}}, "a€"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetokenizer(tc.stops)
			var all string
			for i, s := range tc.steps {
				stopped := d.add([]byte(s.add))
				if stopped != s.stopped {
					t.Fatalf("step %d: stopped %v, want %v", i, stopped, s.stopped)
				}
				delta := d.delta(stopped)
				if delta != s.delta {
					t.Errorf("step %d: delta %q, want %q", i, delta, s.delta)
				}
				all += delta
			}
			all += d.delta(true)
			if all != tc.text || d.text() != tc.text {
				t.Errorf("streamed %q, text %q, want %q", all, d.text(), tc.text)
			}
		})
	}
}
