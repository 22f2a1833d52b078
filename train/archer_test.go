package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
)

// The solver's turns of an episode form one chain: every turn but the last
// leads to the next solver turn's prompt with reward 0, the last is done
// with the episode's final reward; rows come in the learner batch's order.
func TestArcherTransitions(t *testing.T) {
	final := []float64{1, 0, 0, 1}
	turns := biLevelTurns(final)
	for i := range turns { // distinct prompts: episode e, turn k → [10e+k+1]
		turns[i].PromptIDs = []int32{int32(10*(i/3) + int(turns[i].Turn) + 1)}
	}
	ts, err := transitions("solver", turns)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := BatchFromTrajectories("solver", turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(sb.Prompts) {
		t.Fatalf("%d transitions for %d batch rows", len(ts), len(sb.Prompts))
	}
	for i, tr := range ts {
		if !slices.Equal(tr.state, sb.Prompts[i]) || !slices.Equal(tr.action, sb.Responses[i]) {
			t.Fatalf("transition %d is not batch row %d", i, i)
		}
		e, k := int(tr.state[0]-1)/10, int(tr.state[0]-1)%10
		switch k {
		case 0:
			if tr.done || tr.reward != 0 || !slices.Equal(tr.next, []int32{int32(10*e + 3)}) {
				t.Errorf("episode %d first turn: %+v, want reward 0 leading to prompt %d", e, tr, 10*e+3)
			}
		case 2:
			if !tr.done || tr.reward != final[e] || tr.next != nil {
				t.Errorf("episode %d last turn: %+v, want done with reward %v", e, tr, final[e])
			}
		default:
			t.Fatalf("transition %d has the feedback turn's prompt", i)
		}
	}

	single := biLevelTurns(final)
	single = slices.DeleteFunc(single, func(t data.Turn) bool { return t.Turn != 0 })
	ts, err = transitions("solver", single)
	if err != nil {
		t.Fatal(err)
	}
	for i, tr := range ts {
		if !tr.done || tr.reward != single[i].FinalReward {
			t.Errorf("single-turn transition %d: %+v, want done with its reward", i, tr)
		}
	}
	failed := biLevelTurns(final)
	failed[0].FinishReason, failed[0].Note = "error", "engine down"
	if _, err := transitions("solver", failed); err == nil || !strings.Contains(err.Error(), "engine down") {
		t.Errorf("a failed turn: %v", err)
	}
}

func TestReplayBufferBounded(t *testing.T) {
	b := replayBuffer{cap: 3}
	for i := range 5 {
		b.add(transition{reward: float64(i)})
	}
	var got []float64
	for _, tr := range b.items {
		got = append(got, tr.reward)
	}
	slices.Sort(got)
	if !slices.Equal(got, []float64{2, 3, 4}) {
		t.Errorf("buffer holds rewards %v, want the newest three", got)
	}
}

func tinyCritic(t *testing.T, a Archer) *critic {
	t.Helper()
	cfg := model.Config{Architecture: "Qwen2ForCausalLM", VocabSize: 16, HiddenSize: 16, IntermediateSize: 32, NumLayers: 1, NumHeads: 2, NumKVHeads: 1, HeadDim: 8, MaxPositions: 16, RMSNormEps: 1e-6, RopeTheta: 10000, TorchDType: "float32"}
	c, err := newCritic(a, cfg, nil, 7)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The critic learns which action pays: on states [1 s] where action [5]
// earns 1 and [6] earns 0, the advantage Q − V of [5] ends positive and
// of [6] negative, and the first turn of a two-turn chain is valued
// through V'(s') of its next state.
func TestArcherCriticLearns(t *testing.T) {
	a := Archer{CriticLR: 3e-3, Tau: 0.1, Gamma: 0.9, BufferSize: 64, CriticUpdates: 300, CriticBatch: 16}
	c := tinyCritic(t, a)
	var ts []transition
	for s := int32(2); s < 6; s++ {
		ts = append(ts, transition{state: []int32{1, s}, action: []int32{5, 3}, reward: 1, done: true},
			transition{state: []int32{1, s}, action: []int32{6, 3}, reward: 0, done: true})
	}
	// A stop before the updates: none is taken.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if _, err := c.update(stopped, ts); !errors.Is(err, context.Canceled) {
		t.Fatalf("update with a stopped context: %v, want context.Canceled", err)
	}
	c = tinyCritic(t, a)
	st, err := c.update(context.Background(), ts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replay != len(ts) {
		t.Errorf("replay holds %d turns, want %d", st.Replay, len(ts))
	}
	adv, err := c.advantages(ts)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range adv {
		if good := i%2 == 0; good && !(x > 0.2) || !good && !(x < -0.2) {
			t.Errorf("transition %d (action %v): advantage %.3f, want %s", i, ts[i].action, x, map[bool]string{true: "> 0.2", false: "< -0.2"}[good])
		}
	}
	if !(st.QLoss < 0.05) {
		t.Errorf("mean Q loss over the updates %.4f, want it fitted below 0.05", st.QLoss)
	}

	// Two turns: [1 2] → [7] leads to state [8 9], whose action [5] pays 1.
	c = tinyCritic(t, a)
	chain := []transition{{state: []int32{1, 2}, action: []int32{7}, next: []int32{8, 9}}, {state: []int32{8, 9}, action: []int32{5}, reward: 1, done: true}}
	if _, err := c.update(context.Background(), chain); err != nil {
		t.Fatal(err)
	}
	bt, _, qAt, err := c.layout(chain[:1], false)
	if err != nil {
		t.Fatal(err)
	}
	q, err := values(c.q, bt, qAt)
	if err != nil {
		t.Fatal(err)
	}
	if !(q[0] > 0.6 && q[0] < 1.1) {
		t.Errorf("Q of the first turn %.3f, want near γ·V(s') = 0.9", q[0])
	}
}

// With tau 1 the targets are the online models after every update; with
// tau 0.1 they trail them.
func TestArcherTargetsFollow(t *testing.T) {
	ts := []transition{{state: []int32{1, 2}, action: []int32{5}, reward: 1, done: true}}
	for _, tau := range []float64{1, 0.1} {
		c := tinyCritic(t, Archer{CriticLR: 1e-2, Tau: tau, Gamma: 0.9, BufferSize: 4, CriticUpdates: 3, CriticBatch: 2})
		if _, err := c.update(context.Background(), ts); err != nil {
			t.Fatal(err)
		}
		for _, pair := range [][2]*model.Model{{c.q, c.qT}, {c.v, c.vT}} {
			on, tg := pair[0].Weights(), pair[1].Weights()
			same := true
			for name, w := range on {
				same = same && slices.Equal(w, tg[name])
			}
			if same != (tau == 1) {
				t.Errorf("tau %v: target equal to online: %v", tau, same)
			}
		}
	}
}

// The archer section's refusals name the recipe's line; the built-ins
// convert to the driver's Archer.
func TestArcherRecipe(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	for _, c := range []struct {
		recipe string
		sets   []string
		want   string
	}{
		{"archer", []string{"algorithm.archer.tau=0"}, "--set algorithm.archer.tau=0: algorithm.archer.tau: 0: want a value in (0, 1]"},
		{"archer", []string{"algorithm.archer.buffer_size=0"}, "--set algorithm.archer.buffer_size=0: algorithm.archer.buffer_size: 0: want 1 to 1000000 turns"},
		{"archer", []string{"algorithm.archer.critic_init=random"}, `--set algorithm.archer.critic_init=random: algorithm.archer.critic_init: "random": want one of policy, scratch`},
		{"archer", []string{"algorithm.archer.warmup_steps=-1"}, "--set algorithm.archer.warmup_steps=-1: algorithm.archer.warmup_steps: -1: must not be negative"},
		{"archer", []string{"episode.type=tools"}, `--set episode.type=tools: episode.type: "tools": archer runs single, score and mlmt episodes`},
		{"archer", []string{"algorithm.epochs=2"}, "--set algorithm.epochs=2: algorithm.epochs: 2 epochs of 1 mini-batches: archer takes one on-policy step"},
		{"archer_multiturn", []string{"algorithm.mlmt.stop_gradient=true"}, "--set algorithm.mlmt.stop_gradient=true: algorithm.mlmt.stop_gradient: true: archer trains every solver turn"},
		{"archer_multiturn", []string{"algorithm.mlmt.feedback_algorithm=archer"}, "--set algorithm.mlmt.feedback_algorithm=archer: algorithm.mlmt.feedback_algorithm: archer: the critic is the solver's"},
		{"archer_multiturn", []string{"algorithm.mlmt.train=[feedback]"}, "--set algorithm.mlmt.train=[feedback]: algorithm.mlmt.train: has no solver: archer's critic and actor are the solver's"},
		{"quickstart", []string{"algorithm.archer={tau: 0.5}"}, `--set algorithm.archer={tau: 0.5}: algorithm.archer: set, but algorithm.name is "grpo"`},
	} {
		_, err := recipes.Load(c.recipe, c.sets)
		if err == nil || !strings.Contains("\n"+err.Error()+"\n", "\n"+c.want) {
			t.Errorf("%s %v: got\n%v\nwant a line starting %q", c.recipe, c.sets, err, c.want)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	src := "name: a\nmodels: {policy: {init: {}}}\ndata: {task: {}}\nalgorithm:\n  name: archer\n  archer:\n    gamma: 1.5\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := recipes.Load(file, nil); err == nil || !strings.Contains(err.Error(), file+":7: algorithm.archer.gamma: 1.5: want a value in [0, 1]") {
		t.Errorf("a file's gamma: %v", err)
	}

	for _, name := range []string{"archer", "archer_multiturn"} {
		l, err := recipes.Load(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		want := Archer{CriticLR: 1e-4, Tau: 0.1, Gamma: 0.95, BufferSize: 100000, CriticUpdates: 10, CriticBatch: 64, WarmupSteps: 10, InitFromPolicy: true}
		if cfg.Archer == nil || *cfg.Archer != want {
			t.Errorf("%s: archer config %+v, want %+v", name, cfg.Archer, want)
		}
	}
	l, err := recipes.Load("archer", []string{"models.policy.lora={rank: 4}"})
	if err == nil {
		t.Errorf("archer with a LoRA policy and critic_init policy loads: %v", l)
	}
}

// archer and archer_multiturn run end to end on tiny models: the critic
// trains every RL step, the solver only after the critic's warm-up, then
// on the critic's advantages, one sequence per solver turn; --resume is
// refused.
func TestArcherRuns(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	tiny := []string{"models.policy.init.hidden_size=32", "models.policy.init.intermediate_size=64", "models.policy.init.layers=1",
		"sft.steps=2", "sft.batch_size=8", "schedule.steps=3", "schedule.eval_every=3", "schedule.checkpoint_every=0",
		"eval.held_out=8", "algorithm.batch_prompts=4", "algorithm.group_size=2",
		"algorithm.archer.warmup_steps=1", "algorithm.archer.critic_updates_per_step=2", "algorithm.archer.critic_batch_size=8"}
	for _, c := range []struct {
		recipe string
		sets   []string
		turns  int // solver turns per episode
	}{
		{"archer", nil, 1},
		{"archer_multiturn", []string{"models.feedback.init.hidden_size=32", "models.feedback.init.intermediate_size=64", "models.feedback.init.layers=1"}, 2},
		{"archer", []string{"algorithm.archer.critic_init=scratch"}, 1},
	} {
		t.Run(c.recipe+strings.Join(c.sets, ","), func(t *testing.T) {
			cfg, out := loadRun(t, c.recipe, append(append([]string{}, tiny...), c.sets...))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if _, err := Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
			if len(lines) != 5 {
				t.Fatalf("%d metrics lines, want 5", len(lines))
			}
			episodes := 4 * 2
			for i, m := range lines[2:] {
				rl := i + 1
				if m["replay_size"] != float64(rl*episodes*c.turns) {
					t.Errorf("RL step %d: replay_size %v, want %d", rl, m["replay_size"], rl*episodes*c.turns)
				}
				q, ok := m["critic_q_loss"].(float64)
				if !ok || !(q >= 0) {
					t.Errorf("RL step %d: critic_q_loss %v", rl, m["critic_q_loss"])
				}
				_, hasAdv := m["critic_advantage_mean"]
				if trained := m["seqs"] != float64(0); trained != (rl > 1) || hasAdv != (rl > 1) {
					t.Errorf("RL step %d: solver trained on %v sequences, advantage mean %v; want training only after the critic's one warm-up step", rl, m["seqs"], m["critic_advantage_mean"])
				}
				if rl > 1 && m["seqs"] != float64(episodes*c.turns) {
					t.Errorf("RL step %d: %v sequences, want the %d solver turns", rl, m["seqs"], episodes*c.turns)
				}
			}
			if _, err := Run(ctx, func() Config { c := cfg; c.Out, c.Resume = t.TempDir(), out; return c }()); err == nil || !strings.Contains(err.Error(), "resuming is not supported") {
				t.Errorf("resume: %v", err)
			}
		})
	}
}
