package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/optim"
)

// deviceOptim is a Trainer's AdamW state on a backend.FusedAdamW: the
// moments as backend tensors by parameter name, for Opt at its step count
// stepped (the device's moments are current; Opt's are not until
// SyncOptimizer).
type deviceOptim struct {
	opt     *optim.AdamW
	stepped int
	moments map[string][2]backend.Tensor
	sums    []float64
	grads   []backend.Tensor
	sets    []backend.AdamWTensors
}

// fused is the backend's FusedAdamW where the step runs there: a backend
// without host memory, no Update hook (a data-parallel rank reduces and
// steps on the host).
func (t *Trainer) fused() backend.FusedAdamW {
	if t.Update != nil {
		return nil
	}
	if _, isHost := t.Model.B.(backend.HostMemory); isHost {
		return nil
	}
	f, _ := t.Model.B.(backend.FusedAdamW)
	return f
}

// fusedUpdate is the step's check, clip and AdamW update on the device:
// the gradients' sums of squares are the only numbers that come to the
// host. It returns the gradient norm before clipping.
func (t *Trainer) fusedUpdate(f backend.FusedAdamW, lr float64) (float64, error) {
	m := t.Model
	tp := m.TrainableParams()
	d := &t.dev
	d.grads = d.grads[:0]
	for _, p := range tp {
		d.grads = append(d.grads, p.G)
	}
	if cap(d.sums) < len(tp) {
		d.sums = make([]float64, len(tp))
	}
	sums := d.sums[:len(tp)]
	if err := f.SumSquares(sums, d.grads); err != nil {
		return 0, err
	}
	var sq float64
	for i, s := range sums {
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return math.NaN(), t.nonFinite(tp[i])
		}
		sq += s
	}
	norm := math.Sqrt(sq)
	scale := float32(1)
	if t.MaxGradNorm > 0 {
		// As optim.ClipGradNorm.
		if coef := t.MaxGradNorm / (norm + 1e-6); coef < 1 {
			scale = float32(coef)
		}
	}
	if err := t.deviceMoments(tp); err != nil {
		return norm, err
	}
	c, err := t.Opt.Advance(lr)
	if err != nil {
		return norm, err
	}
	d.stepped = t.Opt.StepCount()
	d.sets = d.sets[:0]
	for _, p := range tp {
		mv := d.moments[p.Name]
		d.sets = append(d.sets, backend.AdamWTensors{W: p.W, G: p.G, M: mv[0], V: mv[1]})
	}
	return norm, f.AdamW(d.sets, backend.AdamWCoef{GradScale: scale, Decay: c.Decay, Beta1: c.Beta1, Beta2: c.Beta2,
		OneMinusB1: c.OneMinusB1, OneMinusB2: c.OneMinusB2, BC2Sqrt: c.BC2Sqrt, Eps: c.Eps, StepSize: c.StepSize})
}

// nonFinite names p's first NaN or ±Inf gradient, as optim.CheckFinite
// does on the host.
func (t *Trainer) nonFinite(p *Param) error {
	g := make([]float32, p.Len())
	t.Model.B.Download(g, p.G)
	err := optim.CheckFinite([]*optim.Param{{Name: p.Name, Data: g, Grad: g}})
	if err == nil {
		err = fmt.Errorf("gradient of %q: its sum of squares is not finite", p.Name)
	}
	return err
}

// deviceMoments gives every trainable parameter its moments on the
// device: Opt's (uploaded) when Opt is new to the device or was loaded or
// replaced since the last fused step, zeros for a name Opt has not seen.
func (t *Trainer) deviceMoments(tp []*Param) error {
	d, b := &t.dev, t.Model.B
	if d.opt != t.Opt || d.stepped != t.Opt.StepCount() {
		t.freeMoments()
		d.opt, d.stepped = t.Opt, t.Opt.StepCount()
		d.moments = map[string][2]backend.Tensor{}
		st := t.Opt.State()
		byName := map[string][]float32{}
		for _, x := range st.Tensors {
			byName[x.Name] = x.Data
		}
		for _, x := range st.Tensors {
			name, ok := strings.CutPrefix(x.Name, optim.ExpAvgPrefix)
			if !ok {
				continue
			}
			v := byName[optim.ExpAvgSqPrefix+name]
			if len(v) != len(x.Data) {
				return fmt.Errorf("adamw state of %q: %d first and %d second moments", name, len(x.Data), len(v))
			}
			mv := [2]backend.Tensor{b.Alloc(len(x.Data)), b.Alloc(len(v))}
			b.Upload(mv[0], x.Data)
			b.Upload(mv[1], v)
			d.moments[name] = mv
		}
	}
	for _, p := range tp {
		mv, ok := d.moments[p.Name]
		if !ok {
			mv = [2]backend.Tensor{b.Alloc(p.Len()), b.Alloc(p.Len())}
			d.moments[p.Name] = mv
		}
		if mv[0].Len() != p.Len() {
			return fmt.Errorf("adamw step %d: param %q has %d elements but its moments have %d", t.Opt.StepCount()+1, p.Name, p.Len(), mv[0].Len())
		}
	}
	return nil
}

func (t *Trainer) freeMoments() {
	for _, mv := range t.dev.moments {
		t.Model.B.Free(mv[0])
		t.Model.B.Free(mv[1])
	}
	t.dev.moments = nil
}

// SyncOptimizer brings Opt's moments up to date with those the fused
// AdamW keeps on the device (a copy to the host), so that Opt.State is the
// optimizer's state; without fused steps since Opt was set it does
// nothing. Call it before reading Opt's state (a checkpoint).
func (t *Trainer) SyncOptimizer() error {
	d := &t.dev
	if d.moments == nil || d.opt != t.Opt || d.stepped != t.Opt.StepCount() {
		return nil
	}
	names := make([]*optim.Param, 0, len(d.moments))
	st := optim.AdamWState{Step: d.stepped}
	for name, mv := range d.moments {
		m, v := make([]float32, mv[0].Len()), make([]float32, mv[1].Len())
		t.Model.B.Download(m, mv[0])
		t.Model.B.Download(v, mv[1])
		st.Tensors = append(st.Tensors, optim.Tensor{Name: optim.ExpAvgPrefix + name, Data: m}, optim.Tensor{Name: optim.ExpAvgSqPrefix + name, Data: v})
		names = append(names, &optim.Param{Name: name, Data: m, Grad: m})
	}
	for _, x := range st.Tensors {
		for _, f := range x.Data {
			if f != f {
				return fmt.Errorf("adamw state: %q could not be read from the device", x.Name)
			}
		}
	}
	return t.Opt.LoadState(names, st)
}

// StepOnDevice is for an Update hook on a backend with a fused AdamW (a
// data-parallel rank on a GPU): it uploads params' Grad (the gradients
// reduced across ranks) into the model's gradient tensors and takes the
// step's check, clip and AdamW update on the device, as a Trainer without
// Update does; the trainer then leaves the device's weights as they are
// (params' Data is neither read nor uploaded). It returns the gradient
// norm before clipping; ok is false, with nothing done, where the backend
// has host memory or no fused AdamW.
func (t *Trainer) StepOnDevice(params []*optim.Param, lr float64) (norm float64, ok bool, err error) {
	b := t.Model.B
	if _, isHost := b.(backend.HostMemory); isHost {
		return 0, false, nil
	}
	f, fused := b.(backend.FusedAdamW)
	if !fused {
		return 0, false, nil
	}
	tp := t.Model.TrainableParams()
	if len(params) != len(tp) {
		return 0, true, fmt.Errorf("step on device: %d gradients for %d trainable tensors", len(params), len(tp))
	}
	for i, p := range tp {
		if params[i].Name != p.Name || len(params[i].Grad) != p.Len() {
			return 0, true, fmt.Errorf("step on device: gradient %d is %q of %d elements, the trainable tensor %q has %d", i, params[i].Name, len(params[i].Grad), p.Name, p.Len())
		}
		b.Upload(p.G, params[i].Grad)
	}
	t.onDevice = true
	norm, err = t.fusedUpdate(f, lr)
	return norm, true, err
}
