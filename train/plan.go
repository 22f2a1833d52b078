package train

// The step planner: what the next step of a run does, decided from the
// schedule and what the run has done, with no IO (as raft's Step decides
// and its Ready handling carries out). The loop asks Plan before every
// step, carries the plan out, and moves its State on with After.

// Phase is the part of a run a step belongs to.
type Phase string

// The phases, in order. A step of the warm-up is supervised (learner.SFT
// on reference answers); a step of RL trains on generated episodes.
const (
	PhaseWarmup Phase = "warmup"
	PhaseRL     Phase = "rl"
)

// Schedule is what the planner reads of a run's configuration.
type Schedule struct {
	WarmupSteps int // SFT steps before RL
	Steps       int // RL steps
	EvalEvery   int // 0: evaluate only after the last RL step (and never when the run has no evaluation)
	// CheckpointEvery counts the steps of each phase: every N-th warm-up
	// step and every N-th RL step is checkpointed; 0: none of them. The
	// warm-up's last step and the run's last are checkpointed either way.
	CheckpointEvery int
	// MaxStaleness is the asynchronous pipeline's depth k: while RL step t
	// trains, the batches of steps t+1..t+k are drawn and generated. 0 is
	// synchronous.
	MaxStaleness int
	// RolloutActors: generation runs on rollout actors. A single-turn
	// warm-up step then pushes no weights unless it evaluates: the actors
	// sit idle through it.
	RolloutActors bool
	MultiTurn     bool // mlmt or score: the warm-up samples first attempts, so it pushes weights every step
	// Stage1Steps are the first RL steps that are SCoRe's stage I.
	Stage1Steps int
	// UpdateRatio [high, low]: of every high + low RL steps the first
	// high train the high level (MLMT's feedback policy) only, the rest
	// the low level (the solver) only. Zero: both every step.
	UpdateRatio [2]int
	Evaluates   bool // the run evaluates on held-out problems (EvalEvery > 0)
	// ProbeEvery: every ProbeEvery-th warm-up step but the last probes
	// whether the warm-up may end there (Config.WarmupUntil); 0 is never.
	ProbeEvery int
}

// State is what the loop has done, as the planner needs it.
type State struct {
	// Step counts the steps trained, warm-up and RL together (a resumed or
	// restarted run starts at its checkpoint's step).
	Step int
	// Ahead counts the RL batches drawn and not trained yet (an
	// asynchronous run's pipeline; a restart drops them: 0).
	Ahead int
	// Learners is the phase whose algorithm the learners run ("" after a
	// start, a resume or a restart: none set yet).
	Learners Phase
}

// StepPlan is one step: what to train, what to draw, and what follows the
// training.
type StepPlan struct {
	Done   bool  // no step left: Step is the last one trained
	Phase  Phase // of the step to train
	Step   int   // 1-based over the whole run
	RLStep int   // 1-based within RL; 0 in the warm-up
	// Stage1: an RL step of SCoRe's stage I (Schedule.Stage1Steps).
	Stage1 bool
	// TrainHigh and TrainLow: an RL step trains the high level (MLMT's
	// feedback policy) and the low level (the solver); both unless the
	// schedule alternates them (Schedule.UpdateRatio).
	TrainHigh, TrainLow bool
	// SetAlgorithm: switch the learners to the phase's algorithm (and
	// learning rate) before the step.
	SetAlgorithm bool
	// DrawOwn: RL only; the step's batch was not drawn ahead, so draw it
	// now for on-policy version OnPolicy and generate it at once.
	DrawOwn  bool
	OnPolicy int64
	// Ahead are the on-policy versions of the batches to draw, in order,
	// once this step's batch is generated: each generates after the one
	// before it (an asynchronous run's next steps, never past the last).
	Ahead []int64
	// Push: push the new weights to the engines after training.
	Push bool
	// Eval: evaluate on the held-out problems after the push.
	Eval bool
	// PostWarmup: this evaluation is the figure after the warm-up.
	PostWarmup bool
	// Probe: a warm-up step that, after its push, measures whether the
	// warm-up ends with it (the step then evaluates as the last does).
	Probe bool
	// Checkpoint: save a checkpoint after the step.
	Checkpoint bool
	// Stop: the run ends after this step, before its schedule does (a
	// stop was asked while it ran); the step is checkpointed.
	Stop bool
}

// Plan is the next step of a run in state s under schedule sc.
func Plan(sc Schedule, s State) StepPlan {
	step := s.Step + 1
	if step > sc.WarmupSteps+sc.Steps {
		return StepPlan{Done: true, Step: s.Step}
	}
	if step <= sc.WarmupSteps {
		last := step == sc.WarmupSteps
		eval := sc.Evaluates && (last || step%sc.EvalEvery == 0)
		probe := !last && sc.ProbeEvery > 0 && step%sc.ProbeEvery == 0
		return StepPlan{
			Phase: PhaseWarmup, Step: step,
			SetAlgorithm: s.Learners != PhaseWarmup,
			// Rollout actors get the weights when an evaluation or a probe
			// needs them (and after the last warm-up step), not at every
			// SFT step.
			Push:       last || eval || probe || !sc.RolloutActors || sc.MultiTurn,
			Probe:      probe,
			Eval:       eval,
			PostWarmup: last && eval,
			// The warm-up's end is checkpointed, so that a learner lost in
			// RL, or a second run tuning RL, starts from the warmed-up
			// weights instead of training the warm-up again.
			Checkpoint: last || (sc.CheckpointEvery > 0 && step%sc.CheckpointEvery == 0),
		}
	}
	k := step - sc.WarmupSteps
	last := k == sc.Steps
	p := StepPlan{
		Phase: PhaseRL, Step: step, RLStep: k, Stage1: k <= sc.Stage1Steps,
		TrainHigh: true, TrainLow: true,
		SetAlgorithm: s.Learners != PhaseRL,
		DrawOwn:      s.Ahead == 0,
		OnPolicy:     int64(s.Step),
		Push:         true,
		Eval:         sc.Evaluates && (last || k%sc.EvalEvery == 0),
		Checkpoint:   last || (sc.CheckpointEvery > 0 && k%sc.CheckpointEvery == 0),
	}
	if h, l := sc.UpdateRatio[0], sc.UpdateRatio[1]; h > 0 && l > 0 {
		p.TrainHigh = (k-1)%(h+l) < h
		p.TrainLow = !p.TrainHigh
	}
	// On-policy for the batch j steps ahead is the version j − 1 steps
	// after this one trains; the engines may serve it up to k versions
	// older, so it may start on today's weights.
	left := max(s.Ahead-1, 0)
	for j := left + 1; j <= pipelineAhead(sc.MaxStaleness, k, sc.Steps); j++ {
		p.Ahead = append(p.Ahead, int64(s.Step+j))
	}
	return p
}

// StopAfter is plan p for a step during which a stop was asked (Ctrl-C,
// SIGTERM, Slurm's signal before the time limit): the step ends with a
// checkpoint, warm-up steps too, so that nothing trained is lost and
// --resume goes on from it; then the run ends.
func StopAfter(p StepPlan) StepPlan {
	if p.Done {
		return p
	}
	p.Checkpoint, p.Stop = true, true
	return p
}

// After is the state once plan p has been carried out.
func After(s State, p StepPlan) State {
	if p.Done {
		return s
	}
	if p.Phase == PhaseRL {
		if !p.DrawOwn {
			s.Ahead--
		}
		s.Ahead += len(p.Ahead)
	}
	s.Step, s.Learners = p.Step, p.Phase
	return s
}

// Restarted is the state after the learners restart from a checkpoint
// saved at step: the batches drawn ahead are dropped and the learners'
// algorithm is set again.
func Restarted(step int) State { return State{Step: step} }

// RetryAfterFailure says whether a run whose learners failed at step
// retries it (restarting them from the last checkpoint) or gives up:
// a step is retried once. failed holds the steps retried already; the
// call records step in it.
func RetryAfterFailure(failed map[int]bool, step int) bool {
	if failed[step] {
		return false
	}
	failed[step] = true
	return true
}

// pipelineAhead is how many steps after RL step k (1-based, of steps) an
// asynchronous run with max staleness maxStaleness has drawn while k
// trains.
func pipelineAhead(maxStaleness, k, steps int) int {
	return max(min(maxStaleness, steps-k), 0)
}
