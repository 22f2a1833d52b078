package model

import (
	"fmt"
	"math"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/optim"
)

// Objective turns one micro-batch's per-output log probabilities and
// entropies (laid out as bt.Outputs) into its loss and the loss's gradients
// with respect to them (dEntropy may be nil). Losses in learner/rl have
// this shape; micro says which micro-batch of the step this is.
type Objective func(micro int, bt *Batch, logp, entropy []float32) (loss float64, dLogp, dEntropy []float32, err error)

// Scores are one micro-batch's forward results at its scored outputs, laid
// out as bt.Outputs: log probabilities, entropies and, on a model with a
// value head, values (else nil).
type Scores struct {
	LogProbs, Entropy, Values []float32
}

// ScoreGrads are a loss's gradients with respect to Scores; a nil field is
// zero.
type ScoreGrads struct {
	LogProbs, Entropy, Values []float32
}

// ActorCriticObjective is Objective for a policy with a value head (a
// shared-trunk critic): the loss may take the values too (PPO's policy
// loss plus vf_coef times the value loss), and its gradient with respect
// to them flows through the head and the trunk in the same backward pass.
type ActorCriticObjective func(micro int, bt *Batch, s Scores) (loss float64, d ScoreGrads, err error)

// Trainer runs optimizer steps on a model's trainable parameters (all
// weights, or only the LoRA adapters and a value head) with gradient
// accumulation over micro-batches.
type Trainer struct {
	Model       *Model
	Opt         *optim.AdamW
	MaxGradNorm float64 // global-norm clipping; 0 turns it off

	// Update, when set, replaces the step's local check, clip and Opt.Step
	// once every micro-batch's backward is done: it gets the trainable
	// parameters with this process's accumulated gradients and must leave
	// in Data the weights after one update with learning rate lr, returning
	// the gradient norm before clipping. A data-parallel rank (learner/shard)
	// reduces the gradients across ranks here.
	Update func(step int, params []*optim.Param, lr float64) (gradNorm float64, err error)

	// GradsReady, when set beside Update, is called during the backward
	// pass of the step's last micro-batch each time a group of gradients
	// (GradGroups, in order) is final for the step, so a data-parallel rank
	// can start reducing them while backward goes on with earlier layers.
	// params are the views Update gets next (their Grad already holds the
	// final gradients of ready, indices into params); the views stay valid
	// until Update returns. It runs on the backward pass's goroutine and
	// must not block: it may only copy the gradients and hand them off.
	// The backward pass cannot fail once it runs, so Update follows on
	// every step where GradsReady was called.
	GradsReady func(step int, params []*optim.Param, ready []int)

	// DeviceUpdate, set beside Update, says that Update steps on the
	// device where the backend has a fused AdamW and no host memory
	// (StepOnDevice, StepSlicesOnDevice), reading no weights from params:
	// there the trainer downloads only the gradients before it, and
	// params' Data holds what it last held (what Update wrote, or zeros).
	DeviceUpdate bool

	step      int
	dev       deviceOptim             // the optimizer's state on a FusedAdamW backend
	zdev      deviceOptim             // a ZeRO-1 rank's slices' state there (StepSlicesOnDevice)
	onDevice  bool                    // Update stepped through StepOnDevice
	host      map[*Param]*optim.Param // host copies when the backend has no host memory (page-locked where it gives some)
	views     []*optim.Param
	lastMicro bool // the micro-batch running is the step's last
	armed     bool // GradsReady fired this step
	fetched   int  // gradients GradsReady's groups downloaded this step
}

// StepStats reports one step.
type StepStats struct {
	Step     int     // 1-based number of the step just taken
	Loss     float64 // sum of the micro-batches' losses
	GradNorm float64 // global gradient norm before clipping
}

// Step zeroes the gradients, runs forward, objective and backward on each
// micro-batch (gradients add up; the objective normalizes), clips, and
// applies one optimizer update with learning rate lr. A non-finite loss or
// gradient stops the step with an error naming the step and the first bad
// micro-batch or tensor; the weights are then untouched.
func (t *Trainer) Step(micro []*Batch, lr float64, obj Objective) (StepStats, error) {
	return t.takeStep(micro, lr, func(i int, bt *Batch) (float64, error) {
		logp, ent, err := t.Model.Forward(bt)
		if err != nil {
			return 0, err
		}
		t.arm()
		loss, dLogp, dEnt, err := obj(i, bt, logp, ent)
		if err != nil {
			return 0, fmt.Errorf("objective: %w", err)
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return 0, fmt.Errorf("loss is %v", loss)
		}
		return loss, t.Model.Backward(dLogp, dEnt)
	})
}

// StepActorCritic is Step with an ActorCriticObjective: each micro-batch's
// forward pass also yields the value head's values (on a model with one),
// and one backward pass takes the loss's gradients with respect to log
// probabilities, entropies and values, updating policy, trunk and head
// together.
func (t *Trainer) StepActorCritic(micro []*Batch, lr float64, obj ActorCriticObjective) (StepStats, error) {
	return t.takeStep(micro, lr, func(i int, bt *Batch) (float64, error) {
		m := t.Model
		var s Scores
		var err error
		if m.Value != nil {
			s.LogProbs, s.Entropy, s.Values, err = m.ForwardWithValues(bt)
		} else {
			s.LogProbs, s.Entropy, err = m.Forward(bt)
		}
		if err != nil {
			return 0, err
		}
		t.arm()
		loss, d, err := obj(i, bt, s)
		if err != nil {
			return 0, fmt.Errorf("objective: %w", err)
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return 0, fmt.Errorf("loss is %v", loss)
		}
		return loss, m.BackwardWithValues(d.LogProbs, d.Entropy, d.Values)
	})
}

// takeStep is one optimizer step; microStep runs forward, objective and
// backward of micro-batch i and returns its loss.
func (t *Trainer) takeStep(micro []*Batch, lr float64, microStep func(i int, bt *Batch) (float64, error)) (StepStats, error) {
	m := t.Model
	st := StepStats{Step: t.step + 1}
	if len(micro) == 0 {
		return st, fmt.Errorf("train step %d: no micro-batches", st.Step)
	}
	m.ZeroGrad()
	t.armed, t.fetched = false, 0
	if t.fused() != nil {
		// The moments first, so that they do not take cached blocks
		// the step's temporaries then need afresh.
		if err := t.deviceMoments(m.TrainableParams()); err != nil {
			return st, fmt.Errorf("train step %d: %w", st.Step, err)
		}
	}
	for i, bt := range micro {
		t.lastMicro = i == len(micro)-1
		loss, err := microStep(i, bt) // the loss counts once computed, as Step always reported it
		if m.pass != nil {
			m.pass.gradsFinal = nil
		}
		st.Loss += loss
		if err != nil {
			return st, fmt.Errorf("train step %d: micro-batch %d: %w", st.Step, i, err)
		}
	}
	if f := t.fused(); f != nil {
		norm, err := t.fusedUpdate(f, lr)
		st.GradNorm = norm
		if err != nil {
			return st, fmt.Errorf("train step %d: %w", st.Step, err)
		}
		t.step++
		return st, nil
	}
	params := t.optimParams()
	if t.Update != nil {
		t.onDevice = false
		norm, err := t.Update(st.Step, params, lr)
		st.GradNorm = norm
		if err != nil {
			return st, fmt.Errorf("train step %d: %w", st.Step, err)
		}
		if !t.onDevice {
			t.syncBack()
		}
		t.step++
		return st, nil
	}
	if err := optim.CheckFinite(params); err != nil {
		return st, fmt.Errorf("train step %d: %w", st.Step, err)
	}
	if t.MaxGradNorm > 0 {
		st.GradNorm = optim.ClipGradNorm(params, t.MaxGradNorm)
	} else {
		st.GradNorm = gradNorm(params)
	}
	if err := t.Opt.Step(params, lr); err != nil {
		return st, fmt.Errorf("train step %d: %w", st.Step, err)
	}
	t.syncBack()
	t.step++
	return st, nil
}

// GradGroups are Model.GradGroups as indices into the parameters Update
// and GradsReady get (TrainableParams' order).
func (t *Trainer) GradGroups() [][]int {
	m := t.Model
	idx := map[*Param]int{}
	for i, p := range m.TrainableParams() {
		idx[p] = i
	}
	groups := m.GradGroups()
	out := make([][]int, len(groups))
	for k, g := range groups {
		out[k] = make([]int, 0, len(g))
		for _, p := range g {
			out[k] = append(out[k], idx[p])
		}
	}
	return out
}

// arm hooks GradsReady into the backward pass of the step's last
// micro-batch (called after its forward pass, which may have made a new
// pass).
func (t *Trainer) arm() {
	m := t.Model
	if m.pass == nil {
		return
	}
	m.pass.gradsFinal = nil
	if t.GradsReady == nil || t.Update == nil || !t.lastMicro {
		return
	}
	groups := t.GradGroups() // per step: LoRA or a value head may come later
	step := t.step + 1
	m.pass.gradsFinal = func(k int) {
		if !t.armed {
			t.armed = true
			t.viewParams()
		}
		if _, isHost := m.B.(backend.HostMemory); !isHost {
			tp := m.TrainableParams()
			for _, i := range groups[k] {
				m.B.Download(t.views[i].Grad, tp[i].G)
			}
			t.fetched += len(groups[k])
		}
		t.GradsReady(step, t.views, groups[k])
	}
}

// viewParams builds the optim.Param views without refreshing host copies.
func (t *Trainer) viewParams() []*optim.Param {
	m := t.Model
	hm, isHost := m.B.(backend.HostMemory)
	t.views = t.views[:0]
	for _, p := range m.TrainableParams() {
		if isHost {
			t.views = append(t.views, &optim.Param{Name: p.Name, Data: hm.Host(p.W), Grad: hm.Host(p.G)})
			continue
		}
		if t.host == nil {
			t.host = map[*Param]*optim.Param{}
		}
		h := t.host[p]
		if h == nil {
			h = &optim.Param{Name: p.Name, Data: hostBuffer(m.B, p.Len()), Grad: hostBuffer(m.B, p.Len())}
			t.host[p] = h
		}
		t.views = append(t.views, h)
	}
	if len(t.host) > len(t.views) {
		// Parameters that no longer train (LoRA's base weights): their
		// copies go.
		tp := map[*Param]bool{}
		for _, p := range m.TrainableParams() {
			tp[p] = true
		}
		ph, _ := m.B.(backend.PinnedHost)
		for p, h := range t.host {
			if !tp[p] {
				if ph != nil {
					ph.FreeHostBuffer(h.Data)
					ph.FreeHostBuffer(h.Grad)
				}
				delete(t.host, p)
			}
		}
	}
	return t.views
}

// optimParams views the trainable parameters as optim.Params: in place on
// a host-memory backend, else through host copies refreshed from the
// device (the gradients unless GradsReady's groups brought them all, the
// weights unless Update steps on the device: DeviceUpdate).
func (t *Trainer) optimParams() []*optim.Param {
	m := t.Model
	armed := t.armed
	views := t.viewParams()
	if _, isHost := m.B.(backend.HostMemory); !isHost {
		tp := m.TrainableParams()
		weights := t.Update == nil || !t.DeviceUpdate || deviceAdamW(m.B) == nil
		grads := !armed || t.fetched != len(tp)
		for i, p := range tp {
			if weights {
				m.B.Download(views[i].Data, p.W)
			}
			if grads {
				m.B.Download(views[i].Grad, p.G)
			}
		}
	}
	return views
}

// hostBuffer is n float32s of b's page-locked host memory where it has
// some (backend.PinnedHost), else ordinary memory.
func hostBuffer(b backend.Backend, n int) []float32 {
	if ph, ok := b.(backend.PinnedHost); ok {
		if x := ph.HostBuffer(n); x != nil {
			return x
		}
	}
	return make([]float32, n)
}

func (t *Trainer) syncBack() {
	if _, isHost := t.Model.B.(backend.HostMemory); isHost {
		return
	}
	for p, h := range t.host {
		t.Model.B.Upload(p.W, h.Data)
	}
}

func gradNorm(params []*optim.Param) float64 {
	var s float64
	for _, p := range params {
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
	}
	return math.Sqrt(s)
}
