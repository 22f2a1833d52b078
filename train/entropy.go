package train

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rlnode/rlnode/learner"
)

// EntropyControl adapts each trained policy's entropy coefficient toward a
// target mean token entropy (recipe algorithm.entropy_target; Skywork-OR1's
// adaptive entropy control). A fixed bonus −coef·H is unsafe under AdamW:
// where a batch carries little advantage signal, the bonus alone sets the
// normalized step and the policy goes uniform in a few steps; and its
// weight against the policy gradient depends on the advantages' scale. The
// controller instead raises a policy's coefficient by Step after an RL
// step whose measured mean token entropy was below Target, lowers it by
// Step after one above, keeps it within [0, Max], and applies it only
// while the last measured entropy is below Target. Each policy (the
// solver, MLMT's feedback policy) has a controller of its own.
type EntropyControl struct {
	// Target is the mean token entropy (nats) the coefficients steer to;
	// > 0.
	Target float64
	// Step is a coefficient's change per RL step; ≥ 0.
	Step float64
	// Max is the coefficients' ceiling, in [0, learner.MaxEntropyCoef];
	// each starts at its learner's Loss.EntropyCoef, which must not
	// exceed it.
	Max float64
}

func (c *EntropyControl) validate(start float64) error {
	bad := func(field string, v float64, want string) error {
		return fmt.Errorf("train config: entropy_control.%s %v: %s", field, v, want)
	}
	switch {
	case !(c.Target > 0) || math.IsInf(c.Target, 0):
		return bad("target", c.Target, "want a finite mean token entropy > 0")
	case !(c.Step >= 0) || math.IsInf(c.Step, 0):
		return bad("step", c.Step, "want a finite value ≥ 0")
	case !(c.Max >= 0 && c.Max <= learner.MaxEntropyCoef):
		return bad("max", c.Max, fmt.Sprintf("want a value in [0, %v]", learner.MaxEntropyCoef))
	case start > c.Max:
		return bad("max", c.Max, fmt.Sprintf("below the starting coefficient (learner loss entropy_coef %v)", start))
	}
	return nil
}

// entropyState is one policy's controller state, kept in the driver state
// of checkpoints so that a resumed run adapts as an uninterrupted one.
type entropyState struct {
	// Coef is the coefficient the controller has reached.
	Coef float64 `json:"coef"`
	// Entropy is the policy's mean token entropy at its last RL step
	// (learner.Stats.Entropy); nil before its first.
	Entropy *float64 `json:"entropy,omitempty"`
}

// applied is the coefficient of the policy's next RL step's loss: Coef
// while the last measured entropy is below the target, else 0, so that a
// policy at or above the target gets no push toward uniform. The gate uses
// the entropy of the step before (the learner measures a batch's entropy
// in the same pass that takes its gradient), so a policy's first RL step,
// with nothing measured yet, gets no bonus either.
func (c *EntropyControl) applied(s entropyState) float64 {
	if s.Entropy == nil || !(*s.Entropy < c.Target) {
		return 0
	}
	return s.Coef
}

// observe is s after an RL step of the policy measured mean token entropy
// h: the coefficient moves one Step toward more entropy when h is below
// the target and toward less when above, clamped to [0, Max]; h at the
// target keeps it.
func (c *EntropyControl) observe(s entropyState, h float64) entropyState {
	switch {
	case h < c.Target:
		s.Coef += c.Step
	case h > c.Target:
		s.Coef -= c.Step
	}
	s.Coef = min(max(s.Coef, 0), c.Max)
	s.Entropy = &h
	return s
}

// entropyTerm says whether a learner of l has an entropy bonus to adapt in
// RL: a policy-gradient loss on the policy (rw_sft has none; a value
// baseline that trains the value alone leaves the policy untouched).
func entropyTerm(l learner.Config) bool {
	if l.Algorithm == learner.SFT || l.Algorithm == learner.RWSFT {
		return false
	}
	return l.ValueBaseline == nil || !l.ValueBaseline.ValueOnly
}

// entropyControlled lists the policies whose coefficient c.EntropyControl
// adapts: those that train in RL with an entropy term.
func (c *Config) entropyControlled() []string {
	if c.EntropyControl == nil {
		return nil
	}
	var ids []string
	if !c.FreezeSolver && entropyTerm(c.Learner) {
		ids = append(ids, "solver")
	}
	if f := c.Feedback; f != nil && f.Train && !c.SharedWeights && entropyTerm(f.learnerConfig(*c)) {
		ids = append(ids, "feedback")
	}
	return ids
}

// validateEntropyControl checks c.EntropyControl against the policies it
// would adapt.
func (c *Config) validateEntropyControl() error {
	ec := c.EntropyControl
	if ec == nil {
		return nil
	}
	if err := ec.validate(c.Learner.Loss.EntropyCoef); err != nil {
		return err
	}
	if len(c.entropyControlled()) == 0 {
		algos := c.Learner.Algorithm
		if f := c.Feedback; f != nil {
			algos += ", feedback " + f.learnerConfig(*c).Algorithm
		}
		return fmt.Errorf("train config: entropy_control: no policy this run trains in RL has an entropy term to adapt (algorithm %s)", algos)
	}
	return nil
}

// startEntropyControl gives every controlled policy its starting state:
// its learner's configured coefficient, nothing measured.
func (r *run) startEntropyControl() {
	r.entropy = nil
	for _, id := range r.cfg.entropyControlled() {
		if r.entropy == nil {
			r.entropy = map[string]entropyState{}
		}
		r.entropy[id] = entropyState{Coef: r.cfg.Learner.Loss.EntropyCoef}
	}
}

// resumeEntropyControl sets the controller's state from a checkpoint's
// driver state (read from path); a checkpoint without one (written by a
// run without entropy control, or none: a restart from the first step)
// starts it afresh.
func (r *run) resumeEntropyControl(ds driverState, path string) error {
	r.startEntropyControl()
	if ds.EntropyControl == nil {
		if r.entropy != nil && path != "" {
			r.log.Warn("the checkpoint has no entropy control state: the entropy coefficients start again from algorithm.entropy_coef", "checkpoint", path)
		}
		return nil
	}
	if r.entropy == nil {
		return fmt.Errorf("resume: %s: the checkpoint's run adapted its entropy coefficients (algorithm.entropy_target), this one does not", path)
	}
	var got []string
	for id := range ds.EntropyControl {
		got = append(got, id)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(r.cfg.entropyControlled()))
	if !slices.Equal(got, want) {
		return fmt.Errorf("resume: %s: entropy control of policies %s, this run adapts %s", path, strings.Join(got, ", "), strings.Join(want, ", "))
	}
	ec := r.cfg.EntropyControl
	for id, s := range ds.EntropyControl {
		if !(s.Coef >= 0 && s.Coef <= ec.Max) {
			return fmt.Errorf("resume: %s: entropy_control.%s.coef %v: want a value in [0, %v] (algorithm.entropy_coef_max)", path, id, s.Coef, ec.Max)
		}
		if s.Entropy != nil && (!(*s.Entropy >= 0) || math.IsInf(*s.Entropy, 0)) {
			return fmt.Errorf("resume: %s: entropy_control.%s.entropy %v: want a finite value ≥ 0", path, id, *s.Entropy)
		}
		r.entropy[id] = s
	}
	return nil
}

// trainRL is train for an RL step's batch: under entropy control the batch
// carries the policy's coefficient, and the step's measured entropy adapts
// it. It also reports the coefficient the step's loss used (nil without
// control of this policy).
func (r *run) trainRL(ctx context.Context, p *policy, b learner.Batch) (learner.Stats, *float64, error) {
	s, ok := r.entropy[p.id]
	if !ok {
		st, err := r.train(ctx, p, b)
		return st, nil, err
	}
	coef := r.cfg.EntropyControl.applied(s)
	b.EntropyCoef = &coef
	st, err := r.train(ctx, p, b)
	if err != nil {
		return st, nil, err
	}
	if st.Tokens > 0 { // a batch with no loss token measured no entropy (Stats.Entropy 0)
		r.entropy[p.id] = r.cfg.EntropyControl.observe(s, st.Entropy)
	}
	return st, &coef, nil
}
