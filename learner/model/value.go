package model

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// Checkpoint names of the value head's tensors. They follow TRL's
// AutoModelForCausalLMWithValueHead (a ValueHead module "v_head" whose
// Linear is "summary"), the layout of a shared-trunk policy+critic
// checkpoint next to the causal LM's own tensors, so such a checkpoint
// loads here and there unchanged. verl's separate critic
// (AutoModelForTokenClassification, "score.*") has no lm_head and is not
// this layout.
const (
	ValueHeadWeight = "v_head.summary.weight" // 1×hidden
	ValueHeadBias   = "v_head.summary.bias"   // 1
)

// ValueHead is the critic's scalar head, V = h·w + b on the final-norm
// hidden state h of a token (as TRL's ValueHead, without its dropout). The
// value of response token t is read at the token before it, where t's
// log probability is scored: V(s_t) of the state t is sampled from.
type ValueHead struct {
	Weight *Param // 1×hidden
	Bias   *Param // 1
	frozen bool
	// DetachTrunk stops the value loss's gradient at the head: it trains
	// the head's weights and leaves the trunk's gradient to the policy
	// terms (bi-level MLMT's stop_value_gradients).
	DetachTrunk bool
}

func (v *ValueHead) params() []*Param { return []*Param{v.Weight, v.Bias} }

// owns reports whether p is one of the head's parameters (false for a nil
// head).
func (v *ValueHead) owns(p *Param) bool {
	return v != nil && (p == v.Weight || p == v.Bias)
}

// trains reports whether p is a parameter of a trainable head.
func (v *ValueHead) trains(p *Param) bool { return v.owns(p) && !v.frozen }

// AddValueHead gives the model a fresh value head, initialized as Hugging
// Face initializes a Linear (weight normal with std 0.02 from seed, bias
// 0), and trainable even when the base is frozen under LoRA. Its tensors
// join Params (after the others), Save, Weights and the optimizer's
// TrainableParams.
func (m *Model) AddValueHead(seed uint64) error {
	if m.Value != nil {
		return fmt.Errorf("add value head: the model already has one")
	}
	v := m.addValueHead()
	rng := rand.New(rand.NewPCG(seed, 0x7668656164))
	w := make([]float32, v.Weight.Len())
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	m.B.Upload(v.Weight.W, w)
	m.B.Zero(v.Bias.W)
	return nil
}

// addValueHead allocates the head's parameters (zero) and drops the kept
// forward pass, whose buffers lack the values.
func (m *Model) addValueHead() *ValueHead {
	v := &ValueHead{}
	for _, p := range []**Param{&v.Weight, &v.Bias} {
		*p = &Param{}
	}
	v.Weight.Name, v.Weight.Shape = ValueHeadWeight, []int{1, m.Config.HiddenSize}
	v.Bias.Name, v.Bias.Shape = ValueHeadBias, []int{1}
	for _, p := range v.params() {
		p.W = m.B.Alloc(p.Len())
		m.B.Zero(p.W)
		m.params = append(m.params, p)
	}
	m.Value = v
	m.dropPass()
	return v
}

// ForwardWithValues is Forward that also returns the value head's value at
// each scored output (laid out as bt.Outputs, like logp). The model must
// have a value head.
func (m *Model) ForwardWithValues(bt *Batch) (logp, entropy, values []float32, err error) {
	if m.Value == nil {
		return nil, nil, nil, fmt.Errorf("forward: the model has no value head (AddValueHead)")
	}
	logp, entropy, err = m.Forward(bt)
	if err != nil || len(logp) == 0 {
		return logp, entropy, nil, err
	}
	values = make([]float32, len(logp))
	m.B.Download(values, m.pass.values)
	if err := backend.Err(m.B); err != nil {
		return nil, nil, nil, fmt.Errorf("forward: values: %w", err)
	}
	return logp, entropy, values, nil
}

// BackwardWithValues adds to every trainable parameter's gradient the
// gradient of sum(dLogp*logp + dEntropy*entropy + dValues*values) over the
// last Forward's outputs: one pass through the shared trunk for the policy
// and the value loss. Any of the three may be nil (zero); with dLogp and
// dEntropy both nil (a value loss alone) the lm_head is skipped. dValues
// needs a value head. Gradients accumulate until ZeroGrad.
func (m *Model) BackwardWithValues(dLogp, dEntropy, dValues []float32) error {
	p := m.pass
	if p == nil || p.batch == nil {
		return fmt.Errorf("backward: no forward pass to differentiate")
	}
	if dValues != nil && m.Value == nil {
		return fmt.Errorf("backward: dLoss/dValue given but the model has no value head")
	}
	for _, d := range []struct {
		name string
		v    []float32
	}{{"dLogp", dLogp}, {"dEntropy", dEntropy}, {"dValues", dValues}} {
		if d.v == nil {
			continue
		}
		if len(d.v) != p.M {
			return fmt.Errorf("backward: %d %s values for %d outputs", len(d.v), d.name, p.M)
		}
		if !finite(d.v) {
			return fmt.Errorf("backward: %s is not finite", d.name)
		}
	}
	m.backward(dLogp, dEntropy, dValues)
	return nil
}

// ValueHeadFile is where SaveLoRA puts a value head beside the adapter:
// PEFT and vLLM read only the adapter's two files, and the head, trained
// with the adapters, is the critic's share of the run's state.
const ValueHeadFile = "value_head.safetensors"

// saveValueHead writes the head's tensors to dir/ValueHeadFile.
func (m *Model) saveValueHead(dir string) error {
	var ts []safetensors.Tensor
	for _, p := range m.Value.params() {
		t, err := safetensors.FromFloat32(p.Name, safetensors.F32, p.Shape, m.download(p.W))
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	return safetensors.WriteFile(filepath.Join(dir, ValueHeadFile), ts, map[string]string{"format": "pt"})
}

// readValueHead reads dir/ValueHeadFile, checked whole: exactly the head's
// two tensors with this model's shapes. A missing file gives nil.
func (m *Model) readValueHead(dir string) (map[string][]float32, error) {
	path := filepath.Join(dir, ValueHeadFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	want := map[string][]int{ValueHeadWeight: {1, m.Config.HiddenSize}, ValueHeadBias: {1}}
	out := map[string][]float32{}
	for name, shape := range want {
		t, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("load value head %s: tensor %q: missing", path, name)
		}
		if !sameShape(t.Shape, shape) {
			return nil, fmt.Errorf("load value head %s: tensor %q: shape %v, want %v", path, name, t.Shape, shape)
		}
		if out[name], err = t.FiniteFloat32(); err != nil {
			return nil, fmt.Errorf("load value head %s: %w", path, err)
		}
	}
	for _, name := range f.Names() {
		if _, ok := want[name]; !ok {
			return nil, fmt.Errorf("load value head %s: tensor %q: not a value head tensor", path, name)
		}
	}
	return out, nil
}

// setValueHead gives the model a head (if it has none) holding w.
func (m *Model) setValueHead(w map[string][]float32) {
	if m.Value == nil {
		m.addValueHead()
	}
	for _, p := range m.Value.params() {
		m.B.Upload(p.W, w[p.Name])
	}
}
