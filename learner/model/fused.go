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
	return deviceAdamW(t.Model.B)
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
	if err := backend.Err(t.Model.B); err != nil {
		return fmt.Errorf("gradient of %q: %w", p.Name, err)
	}
	err := optim.CheckFinite([]*optim.Param{{Name: p.Name, Data: g, Grad: g}})
	if err == nil {
		err = fmt.Errorf("gradient of %q: its sum of squares is not finite", p.Name)
	}
	return err
}

// deviceMoments gives every trainable parameter its moments on the
// device (deviceOptim.ensure with Opt).
func (t *Trainer) deviceMoments(tp []*Param) error {
	return t.dev.ensure(t.Model.B, t.Opt, len(tp), func(i int) (string, int) { return tp[i].Name, tp[i].Len() })
}

// ensure gives each of n tensors (name and length from at) its moments
// on b: opt's (uploaded) when opt is new to the device or was loaded or
// stepped elsewhere since the last fused step, zeros for a name opt has
// not seen.
func (d *deviceOptim) ensure(b backend.Backend, opt *optim.AdamW, n int, at func(i int) (string, int)) error {
	if d.opt != opt || d.stepped != opt.StepCount() {
		d.free(b)
		d.opt, d.stepped = opt, opt.StepCount()
		d.moments = map[string][2]backend.Tensor{}
		st := opt.State()
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
	for i := range n {
		name, size := at(i)
		mv, ok := d.moments[name]
		if !ok {
			mv = [2]backend.Tensor{b.Alloc(size), b.Alloc(size)}
			d.moments[name] = mv
		}
		if mv[0].Len() != size {
			return fmt.Errorf("adamw step %d: param %q has %d elements but its moments have %d", opt.StepCount()+1, name, size, mv[0].Len())
		}
	}
	return nil
}

func (t *Trainer) freeMoments() { t.dev.free(t.Model.B) }

func (d *deviceOptim) free(b backend.Backend) {
	for _, mv := range d.moments {
		b.Free(mv[0])
		b.Free(mv[1])
	}
	d.moments = nil
}

// SyncOptimizer brings Opt's moments up to date with those the fused
// AdamW keeps on the device (a copy to the host), so that Opt.State is the
// optimizer's state; without fused steps since Opt was set it does
// nothing. Call it before reading Opt's state (a checkpoint).
func (t *Trainer) SyncOptimizer() error { return t.dev.sync(t.Model.B, t.Opt) }

// sync copies d's moments into opt when they are opt's current state.
func (d *deviceOptim) sync(b backend.Backend, opt *optim.AdamW) error {
	if d.moments == nil || d.opt != opt || d.stepped != opt.StepCount() {
		return nil
	}
	names := make([]*optim.Param, 0, len(d.moments))
	st := optim.AdamWState{Step: d.stepped}
	for name, mv := range d.moments {
		m, v := make([]float32, mv[0].Len()), make([]float32, mv[1].Len())
		b.Download(m, mv[0])
		b.Download(v, mv[1])
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
	return opt.LoadState(names, st)
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
	f := deviceAdamW(b)
	if f == nil {
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

// Slice is elements [Lo, Hi) of trainable tensor Param (an index into
// TrainableParams); Name is its name in an optimizer's state.
type Slice struct {
	Param, Lo, Hi int
	Name          string
}

// StepSlicesOnDevice is for a ZeRO-1 rank's Update hook on a backend with
// a fused AdamW: it uploads grads[i], the reduced gradient of slice i, into
// the model's gradient tensor there, takes one step of opt over the
// slices' weights on the device with the gradients multiplied by
// gradScale (the clipping coefficient; 1 for none), and downloads the
// slices' updated weights into weights[i] (which may be grads[i]'s
// memory: every upload comes before the step). The moments live on the
// device by slice name, uploaded from opt's state where opt is new to the
// device or was loaded or stepped elsewhere since; SyncSlices copies them
// back. The caller has checked the gradients (finite) and computed the
// scale. ok is false, with nothing done, where the backend has host memory
// or no fused AdamW.
func (t *Trainer) StepSlicesOnDevice(opt *optim.AdamW, slices []Slice, grads, weights [][]float32, gradScale float32, lr float64) (ok bool, err error) {
	b := t.Model.B
	f := deviceAdamW(b)
	if f == nil {
		return false, nil
	}
	tp := t.Model.TrainableParams()
	if len(grads) != len(slices) || len(weights) != len(slices) {
		return true, fmt.Errorf("step slices on device: %d slices, %d gradients, %d weight buffers", len(slices), len(grads), len(weights))
	}
	for i, s := range slices {
		if s.Param < 0 || s.Param >= len(tp) || s.Lo < 0 || s.Hi <= s.Lo || s.Hi > tp[s.Param].Len() {
			return true, fmt.Errorf("step slices on device: slice %q is [%d, %d) of trainable tensor %d of %d", s.Name, s.Lo, s.Hi, s.Param, len(tp))
		}
		if n := s.Hi - s.Lo; len(grads[i]) != n || len(weights[i]) != n {
			return true, fmt.Errorf("step slices on device: slice %q of %d elements with a gradient of %d and a weight buffer of %d", s.Name, n, len(grads[i]), len(weights[i]))
		}
	}
	d := &t.zdev
	if err := d.ensure(b, opt, len(slices), func(i int) (string, int) { return slices[i].Name, slices[i].Hi - slices[i].Lo }); err != nil {
		return true, err
	}
	c, err := opt.Advance(lr)
	if err != nil {
		return true, err
	}
	d.stepped = opt.StepCount()
	d.sets = d.sets[:0]
	for i, s := range slices {
		p, n := tp[s.Param], s.Hi-s.Lo
		g := b.View(p.G, s.Lo, n)
		b.Upload(g, grads[i])
		mv := d.moments[s.Name]
		d.sets = append(d.sets, backend.AdamWTensors{W: b.View(p.W, s.Lo, n), G: g, M: mv[0], V: mv[1]})
	}
	if err := f.AdamW(d.sets, backend.AdamWCoef{GradScale: gradScale, Decay: c.Decay, Beta1: c.Beta1, Beta2: c.Beta2,
		OneMinusB1: c.OneMinusB1, OneMinusB2: c.OneMinusB2, BC2Sqrt: c.BC2Sqrt, Eps: c.Eps, StepSize: c.StepSize}); err != nil {
		return true, err
	}
	for i, s := range d.sets {
		b.Download(weights[i], s.W)
	}
	if e, ok := b.(interface{ Err() error }); ok && e.Err() != nil {
		return true, fmt.Errorf("step slices on device: %w", e.Err())
	}
	return true, nil
}

// SyncSlices brings opt's moments up to date with those
// StepSlicesOnDevice keeps on the device for it, as SyncOptimizer does for
// Opt; it does nothing where opt has not stepped there since it was set.
func (t *Trainer) SyncSlices(opt *optim.AdamW) error { return t.zdev.sync(t.Model.B, opt) }

// deviceAdamW is b's fused AdamW where the optimizer's step runs on the
// device: b has no host memory.
func deviceAdamW(b backend.Backend) backend.FusedAdamW {
	if _, isHost := b.(backend.HostMemory); isHost {
		return nil
	}
	f, _ := b.(backend.FusedAdamW)
	return f
}

// Release frees what the trainer keeps beside the model on a device: the
// optimizer state of its fused steps and of StepSlicesOnDevice (sync what
// is to be kept first) and its host copies of the parameters.
func (t *Trainer) Release() {
	t.dev.free(t.Model.B)
	t.zdev.free(t.Model.B)
	t.dev, t.zdev = deviceOptim{}, deviceOptim{}
	if ph, ok := t.Model.B.(backend.PinnedHost); ok {
		for _, h := range t.host {
			ph.FreeHostBuffer(h.Data)
			ph.FreeHostBuffer(h.Grad)
		}
	}
	t.host, t.views = nil, nil
}
