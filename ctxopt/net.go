package ctxopt

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/rlnode/rlnode/learner/optim"
)

// MLP is a fully connected network with tanh between layers and a linear
// output. Its weights are optim.Params so learner/optim updates them.
type MLP struct {
	Sizes []int          // input, hidden..., output
	W, B  []*optim.Param // W[l] is Sizes[l+1]×Sizes[l], row-major
}

// NewMLP initialises weights with scaled normals (std gain/√fan-in; the
// last layer's gain is outGain) and zero biases.
func NewMLP(name string, sizes []int, outGain float64, rng *rand.Rand) *MLP {
	m := &MLP{Sizes: sizes}
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		gain := math.Sqrt(2)
		if l+2 == len(sizes) {
			gain = outGain
		}
		w := &optim.Param{Name: fmt.Sprintf("%s.%d.weight", name, l), Data: make([]float32, in*out), Grad: make([]float32, in*out)}
		std := gain / math.Sqrt(float64(in))
		for i := range w.Data {
			w.Data[i] = float32(rng.NormFloat64() * std)
		}
		m.W = append(m.W, w)
		m.B = append(m.B, &optim.Param{Name: fmt.Sprintf("%s.%d.bias", name, l), Data: make([]float32, out), Grad: make([]float32, out)})
	}
	return m
}

// Params lists the weights and biases.
func (m *MLP) Params() []*optim.Param {
	var ps []*optim.Param
	for l := range m.W {
		ps = append(ps, m.W[l], m.B[l])
	}
	return ps
}

// mlpTrace holds one forward pass's activations for Backward.
type mlpTrace struct {
	acts [][]float64 // acts[0] input, acts[l] layer l's output (post-tanh for hidden layers)
}

// Forward returns the output for x and the trace Backward needs.
func (m *MLP) Forward(x []float32) ([]float64, *mlpTrace, error) {
	if len(x) != m.Sizes[0] {
		return nil, nil, fmt.Errorf("mlp: input of %d values, want %d", len(x), m.Sizes[0])
	}
	a := make([]float64, len(x))
	for i, v := range x {
		a[i] = float64(v)
	}
	tr := &mlpTrace{acts: [][]float64{a}}
	for l := range m.W {
		in, out := m.Sizes[l], m.Sizes[l+1]
		z := make([]float64, out)
		w, b := m.W[l].Data, m.B[l].Data
		for o := range out {
			s := float64(b[o])
			row := w[o*in : (o+1)*in]
			for i, av := range a {
				s += float64(row[i]) * av
			}
			if l+1 < len(m.W) {
				s = math.Tanh(s)
			}
			z[o] = s
		}
		tr.acts = append(tr.acts, z)
		a = z
	}
	return a, tr, nil
}

// Backward adds dLoss/dweights to the params' Grad given dLoss/doutput.
func (m *MLP) Backward(tr *mlpTrace, dout []float64) {
	d := dout
	for l := len(m.W) - 1; l >= 0; l-- {
		in, out := m.Sizes[l], m.Sizes[l+1]
		a := tr.acts[l]
		if l+1 < len(m.W) { // through tanh: d/dz = d·(1−y²)
			y := tr.acts[l+1]
			dz := make([]float64, out)
			for o := range out {
				dz[o] = d[o] * (1 - y[o]*y[o])
			}
			d = dz
		}
		w, gw, gb := m.W[l].Data, m.W[l].Grad, m.B[l].Grad
		din := make([]float64, in)
		for o := range out {
			if d[o] == 0 {
				continue
			}
			gb[o] += float32(d[o])
			row, grow := w[o*in:(o+1)*in], gw[o*in:(o+1)*in]
			for i := range in {
				grow[i] += float32(d[o] * a[i])
				din[i] += d[o] * float64(row[i])
			}
		}
		d = din
	}
}

// Policy is an MLP whose output is split into categorical heads: one head
// is a Discrete action, several a MultiDiscrete one.
type Policy struct {
	Net   *MLP
	Heads []int // categories per head
}

// NewPolicy builds a policy over obs inputs with the given hidden sizes and
// heads; the output layer starts near zero, so the first policy is close
// to uniform.
func NewPolicy(name string, obs int, hidden []int, heads []int, rng *rand.Rand) *Policy {
	total := 0
	for _, h := range heads {
		total += h
	}
	sizes := append(append([]int{obs}, hidden...), total)
	return &Policy{Net: NewMLP(name, sizes, 0.01, rng), Heads: heads}
}

// Act is one decision's action masks and which heads count: Mask[h] (nil:
// every category allowed) and Active[h] (nil: every head). An inactive
// head's action is ignored: it adds nothing to the logprob or entropy
// (e.g. the verifier's tools when no verifier runs).
type Act struct {
	Mask   [][]bool
	Active []bool
}

func (a Act) active(h int) bool { return a.Active == nil || a.Active[h] }

func (a Act) allowed(h, k int) bool {
	return a.Mask == nil || a.Mask[h] == nil || a.Mask[h][k]
}

// dist is one head's masked softmax.
type dist struct {
	p, logp []float64 // masked entries: p 0, logp −Inf
	entropy float64
}

func (pol *Policy) dists(logits []float64, act Act) ([]dist, error) {
	ds := make([]dist, len(pol.Heads))
	off := 0
	for h, n := range pol.Heads {
		if act.Mask != nil && act.Mask[h] != nil && len(act.Mask[h]) != n {
			return nil, fmt.Errorf("policy: mask of head %d has %d entries, want %d", h, len(act.Mask[h]), n)
		}
		z := logits[off : off+n]
		off += n
		mx := math.Inf(-1)
		for k, v := range z {
			if act.allowed(h, k) && v > mx {
				mx = v
			}
		}
		if math.IsInf(mx, -1) {
			return nil, fmt.Errorf("policy: head %d has no allowed action", h)
		}
		var sum float64
		d := dist{p: make([]float64, n), logp: make([]float64, n)}
		for k, v := range z {
			if act.allowed(h, k) {
				sum += math.Exp(v - mx)
			}
		}
		ls := math.Log(sum)
		for k, v := range z {
			if !act.allowed(h, k) {
				d.logp[k] = math.Inf(-1)
				continue
			}
			d.logp[k] = v - mx - ls
			d.p[k] = math.Exp(d.logp[k])
			d.entropy -= d.p[k] * d.logp[k]
		}
		ds[h] = d
	}
	return ds, nil
}

// Decision is a sampled (or greedy) action with its logprob and entropy,
// summed over the active heads.
type Decision struct {
	Actions []int
	LogProb float64
	Entropy float64
}

// Sample draws an action (the most likely one when greedy is set).
func (pol *Policy) Sample(obs []float32, act Act, rng *rand.Rand, greedy bool) (Decision, error) {
	logits, _, err := pol.Net.Forward(obs)
	if err != nil {
		return Decision{}, err
	}
	ds, err := pol.dists(logits, act)
	if err != nil {
		return Decision{}, err
	}
	dec := Decision{Actions: make([]int, len(ds))}
	for h, d := range ds {
		k := 0
		if greedy {
			for j := range d.p {
				if d.p[j] > d.p[k] {
					k = j
				}
			}
		} else {
			u, c := rng.Float64(), 0.0
			k = -1
			for j, pj := range d.p {
				if pj == 0 {
					continue
				}
				c += pj
				k = j
				if u < c {
					break
				}
			}
		}
		dec.Actions[h] = k
		if act.active(h) {
			dec.LogProb += d.logp[k]
			dec.Entropy += d.entropy
		}
	}
	return dec, nil
}

// Evaluate returns the logprob and entropy of actions under the current
// weights, and a function that adds to the params' Grad the gradient of
// dLogProb·logprob + dEntropy·entropy.
func (pol *Policy) Evaluate(obs []float32, act Act, actions []int) (logp, entropy float64, backward func(dLogProb, dEntropy float64), err error) {
	if len(actions) != len(pol.Heads) {
		return 0, 0, nil, fmt.Errorf("policy: %d actions for %d heads", len(actions), len(pol.Heads))
	}
	logits, tr, err := pol.Net.Forward(obs)
	if err != nil {
		return 0, 0, nil, err
	}
	ds, err := pol.dists(logits, act)
	if err != nil {
		return 0, 0, nil, err
	}
	for h, d := range ds {
		a := actions[h]
		if a < 0 || a >= len(d.p) || !act.allowed(h, a) {
			return 0, 0, nil, fmt.Errorf("policy: action %d of head %d is out of range or masked", a, h)
		}
		if act.active(h) {
			logp += d.logp[a]
			entropy += d.entropy
		}
	}
	backward = func(dLogProb, dEntropy float64) {
		dz := make([]float64, len(logits))
		off := 0
		for h, d := range ds {
			if act.active(h) {
				for k := range d.p {
					if d.p[k] == 0 {
						continue
					}
					g := -dLogProb * d.p[k] // d logp_a / dz_k = 1[k=a] − p_k
					if k == actions[h] {
						g += dLogProb
					}
					// dH/dz_k = −p_k (log p_k + H)
					g += dEntropy * (-d.p[k] * (d.logp[k] + d.entropy))
					dz[off+k] = g
				}
			}
			off += len(d.p)
		}
		pol.Net.Backward(tr, dz)
	}
	return logp, entropy, backward, nil
}
