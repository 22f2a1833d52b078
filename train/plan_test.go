package train

import (
	"fmt"
	"strings"
	"testing"
)

// describe writes a plan as one short line: phase and step, then what the
// loop does for it.
func describe(p StepPlan) string {
	if p.Done {
		return fmt.Sprintf("done@%d", p.Step)
	}
	var b strings.Builder
	if p.Phase == PhaseWarmup {
		fmt.Fprintf(&b, "w%d", p.Step)
	} else {
		fmt.Fprintf(&b, "r%d", p.RLStep)
	}
	if p.SetAlgorithm {
		b.WriteString(" set")
	}
	if p.DrawOwn {
		fmt.Fprintf(&b, " own@%d", p.OnPolicy)
	}
	if len(p.Ahead) > 0 {
		fmt.Fprintf(&b, " ahead%v", p.Ahead)
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{p.Push, "push"}, {p.Probe, "probe"}, {p.Eval, "eval"}, {p.PostWarmup, "post"}, {p.Checkpoint, "ckpt"}} {
		if f.on {
			b.WriteString(" " + f.name)
		}
	}
	return b.String()
}

// replay plans a run from s until it is done, or until the step stop
// (then it returns the state there, as a run killed after that step).
func replay(sc Schedule, s State, stop int) ([]string, State) {
	var lines []string
	for {
		p := Plan(sc, s)
		lines = append(lines, describe(p))
		if p.Done {
			return lines, s
		}
		s = After(s, p)
		if s.Step == stop {
			return lines, s
		}
	}
}

func TestPlan(t *testing.T) {
	sync := Schedule{WarmupSteps: 2, Steps: 4, EvalEvery: 2, CheckpointEvery: 3, Evaluates: true}
	async := func(k int) Schedule { s := sync; s.MaxStaleness = k; s.RolloutActors = true; return s }
	cases := []struct {
		name  string
		sc    Schedule
		start State
		want  []string
	}{{
		name: "sync, warm-up then RL",
		sc:   sync,
		want: []string{
			"w1 set push", "w2 push eval post ckpt",
			"r1 set own@2 push", "r2 own@3 push eval", "r3 own@4 push ckpt", "r4 own@5 push eval ckpt",
			"done@6",
		},
	}, {
		name: "async k=1: the next step's batch drawn while one trains",
		sc:   async(1),
		want: []string{
			"w1 set", "w2 push eval post ckpt",
			"r1 set own@2 ahead[3] push", "r2 ahead[4] push eval", "r3 ahead[5] push ckpt", "r4 push eval ckpt",
			"done@6",
		},
	}, {
		name: "async k=2",
		sc:   async(2),
		want: []string{
			"w1 set", "w2 push eval post ckpt",
			"r1 set own@2 ahead[3 4] push", "r2 ahead[5] push eval", "r3 push ckpt", "r4 push eval ckpt",
			"done@6",
		},
	}, {
		name: "async k=3: never drawn past the last step",
		sc:   async(3),
		want: []string{
			"w1 set", "w2 push eval post ckpt",
			"r1 set own@2 ahead[3 4 5] push", "r2 push eval", "r3 push ckpt", "r4 push eval ckpt",
			"done@6",
		},
	}, {
		name: "warm-up only: its last step checkpoints",
		sc:   Schedule{WarmupSteps: 3, EvalEvery: 2, Evaluates: true},
		want: []string{"w1 set push", "w2 push eval", "w3 push eval post ckpt", "done@3"},
	}, {
		name: "no evaluation: the idle actors still get the weights after the warm-up",
		sc:   Schedule{WarmupSteps: 2, Steps: 1, RolloutActors: true},
		want: []string{"w1 set", "w2 push ckpt", "r1 set own@2 push ckpt", "done@3"},
	}, {
		name: "multi-turn warm-up samples first attempts: pushes every step",
		sc:   Schedule{WarmupSteps: 2, Steps: 1, RolloutActors: true, MultiTurn: true},
		want: []string{"w1 set push", "w2 push ckpt", "r1 set own@2 push ckpt", "done@3"},
	}, {
		name:  "resume mid-warm-up",
		sc:    sync,
		start: State{Step: 1},
		want:  []string{"w2 set push eval post ckpt", "r1 set own@2 push", "r2 own@3 push eval", "r3 own@4 push ckpt", "r4 own@5 push eval ckpt", "done@6"},
	}, {
		name:  "resume mid-RL, async k=2: the pipeline refills from the checkpoint's step",
		sc:    async(2),
		start: State{Step: 4},
		want:  []string{"r3 set own@4 ahead[5] push ckpt", "r4 push eval ckpt", "done@6"},
	}, {
		name:  "resume after the last step",
		sc:    sync,
		start: State{Step: 6},
		want:  []string{"done@6"},
	}, {
		name: "warm-up probes every 2 steps but the last; rollout actors get the weights to probe with",
		sc:   Schedule{WarmupSteps: 5, Steps: 1, EvalEvery: 4, Evaluates: true, RolloutActors: true, ProbeEvery: 2},
		want: []string{"w1 set", "w2 push probe", "w3", "w4 push probe eval", "w5 push eval post ckpt", "r1 set own@5 push eval ckpt", "done@6"},
	}, {
		name: "a probe on the warm-up's last step is none: the warm-up ends there anyway",
		sc:   Schedule{WarmupSteps: 4, Steps: 1, ProbeEvery: 2},
		want: []string{"w1 set push", "w2 push probe", "w3 push", "w4 push ckpt", "r1 set own@4 push ckpt", "done@5"},
	}, {
		name: "checkpoint_every counts each phase's steps; the warm-up's end is checkpointed",
		sc:   Schedule{WarmupSteps: 5, Steps: 3, CheckpointEvery: 2},
		want: []string{"w1 set push", "w2 push ckpt", "w3 push", "w4 push ckpt", "w5 push ckpt", "r1 set own@5 push", "r2 own@6 push ckpt", "r3 own@7 push ckpt", "done@8"},
	}, {
		name: "no RL and no warm-up",
		sc:   Schedule{},
		want: []string{"done@0"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := replay(c.sc, c.start, -1)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("plans:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// TestPlanLearnerRestart: learners failing at a step restart from the last
// checkpoint; the batches drawn ahead are dropped, the step is redone
// once, and a second failure of the same step ends the run.
func TestPlanLearnerRestart(t *testing.T) {
	sc := Schedule{WarmupSteps: 1, Steps: 5, CheckpointEvery: 2, MaxStaleness: 2, RolloutActors: true}
	// Trained through RL step 3 (step 4); the last checkpoint is at RL
	// step 2 (step 3); then step 5 fails.
	before, s := replay(sc, State{}, 4)
	if s.Ahead != 2 || s.Learners != PhaseRL {
		t.Fatalf("state after step 4: %+v, want 2 batches ahead in RL", s)
	}
	wantBefore := []string{"w1 set push ckpt", "r1 set own@1 ahead[2 3] push", "r2 ahead[4] push ckpt", "r3 ahead[5] push"}
	if strings.Join(before, "|") != strings.Join(wantBefore, "|") {
		t.Errorf("before the failure: %q, want %q", before, wantBefore)
	}
	failed := map[int]bool{}
	if !RetryAfterFailure(failed, 5) {
		t.Fatal("first failure of step 5: no retry")
	}
	after, _ := replay(sc, Restarted(3), -1)
	wantAfter := []string{"r3 set own@3 ahead[4 5] push", "r4 push ckpt", "r5 push ckpt", "done@6"}
	if strings.Join(after, "|") != strings.Join(wantAfter, "|") {
		t.Errorf("after the restart: %q, want %q", after, wantAfter)
	}
	if RetryAfterFailure(failed, 5) {
		t.Error("second failure of step 5: retried again")
	}
	if !RetryAfterFailure(failed, 6) {
		t.Error("first failure of step 6: no retry")
	}
}

// TestPlanAsyncBounds: for every depth and length, each RL step's batch is
// drawn exactly once, in step order, on a version at most k behind the
// step's on-policy version, and nothing is drawn past the last step.
func TestPlanAsyncBounds(t *testing.T) {
	for k := 0; k <= 4; k++ {
		for steps := 1; steps <= 7; steps++ {
			sc := Schedule{WarmupSteps: 1, Steps: steps, MaxStaleness: k}
			var drawn []int64 // on-policy versions, in the order drawn
			s := State{}
			for {
				p := Plan(sc, s)
				if p.Done {
					break
				}
				if p.Phase == PhaseRL {
					if p.DrawOwn {
						drawn = append(drawn, p.OnPolicy)
					}
					drawn = append(drawn, p.Ahead...)
					if len(drawn) < p.RLStep {
						t.Fatalf("k=%d steps=%d: step %d trains a batch never drawn", k, steps, p.RLStep)
					}
					// A batch drawn now starts on the weights of s.Step: its
					// lag behind its on-policy version is at most k.
					for _, v := range p.Ahead {
						if lag := v - int64(s.Step); lag < 1 || lag > int64(k) {
							t.Fatalf("k=%d steps=%d: at step %d a batch for version %d drawn on version %d", k, steps, p.RLStep, v, s.Step)
						}
					}
					if len(drawn)-p.RLStep > k {
						t.Fatalf("k=%d steps=%d: %d batches ahead at step %d", k, steps, len(drawn)-p.RLStep, p.RLStep)
					}
				}
				s = After(s, p)
			}
			if len(drawn) != steps {
				t.Fatalf("k=%d steps=%d: %d batches drawn", k, steps, len(drawn))
			}
			for i, v := range drawn {
				if v != int64(sc.WarmupSteps+i) {
					t.Fatalf("k=%d steps=%d: batch %d drawn for version %d, want %d", k, steps, i+1, v, sc.WarmupSteps+i)
				}
			}
			if s.Ahead != 0 {
				t.Fatalf("k=%d steps=%d: %d batches left over", k, steps, s.Ahead)
			}
		}
	}
}

// TestStopAfter: a stop asked during any step checkpoints that step and
// ends the run; a finished run stays finished.
func TestStopAfter(t *testing.T) {
	sc := Schedule{WarmupSteps: 2, Steps: 3, MaxStaleness: 1, Evaluates: true, EvalEvery: 5}
	for _, c := range []struct {
		s    State
		want string
	}{
		{State{}, "w1 set push ckpt stop"},
		{State{Step: 2, Learners: PhaseWarmup}, "r1 set own@2 ahead[3] push ckpt stop"},
		{State{Step: 3, Ahead: 1, Learners: PhaseRL}, "r2 ahead[4] push ckpt stop"},
		{State{Step: 5, Learners: PhaseRL}, "done@5"},
	} {
		p := StopAfter(Plan(sc, c.s))
		got := describe(p)
		if p.Stop {
			got += " stop"
		}
		if got != c.want {
			t.Errorf("stop after the plan from %+v: %q, want %q", c.s, got, c.want)
		}
	}
}

// TestPlanWarmupEndedByProbe: once a probe ends the warm-up at step e
// (the loop sets the schedule's WarmupSteps to e), the next plan is RL
// step 1 at step e+1 and RL runs all its steps.
func TestPlanWarmupEndedByProbe(t *testing.T) {
	sc := Schedule{WarmupSteps: 10, Steps: 2, EvalEvery: 5, Evaluates: true, ProbeEvery: 3}
	var got []string
	s := State{}
	for {
		p := Plan(sc, s)
		got = append(got, describe(p))
		if p.Done {
			break
		}
		if p.Probe && p.Step == 6 {
			sc.WarmupSteps = p.Step
		}
		s = After(s, p)
	}
	want := []string{"w1 set push", "w2 push", "w3 push probe", "w4 push", "w5 push eval", "w6 push probe",
		"r1 set own@6 push", "r2 own@7 push eval ckpt", "done@8"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("plans:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
