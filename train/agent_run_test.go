package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// tinyAgent is agent_game with a tiny model and a few steps: 2 warm-up
// steps on the teacher, 3 GRPO steps of 4 games × 4 episodes, evaluations
// of 8 held-out games at steps 4 and 5.
func tinyAgent(t *testing.T, out string, sets ...string) Config {
	t.Helper()
	t.Setenv("RLNODE_HOME", t.TempDir())
	return tinyAgentRecipe(t, "agent_game", out, []string{
		"sft.steps=2", "sft.batch_size=4", "schedule.steps=3", "schedule.eval_every=2", "schedule.checkpoint_every=5",
		"eval.held_out=8", "algorithm.group_size=4", "algorithm.batch_prompts=4", "algorithm.max_tokens=12", "algorithm.micro_batch=32",
	}, sets)
}

// tinyAgentRecipe is the run of recipe into out with a one-layer model
// and the overrides base, then sets.
func tinyAgentRecipe(t *testing.T, recipe, out string, base, sets []string) Config {
	t.Helper()
	model := "models.policy.init={architecture: qwen2, vocab_size: 768, hidden_size: 32, intermediate_size: 64, layers: 1, heads: 4, kv_heads: 2, max_positions: 128}"
	l, err := recipes.Load(recipe, append(append([]string{model}, base...), sets...))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, out)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Agent episodes generate on rollout actors (two on the embedded cluster;
// the environments step in the driver): a synchronous run ends with the
// same weights as the in-process engine's, cut into chunks of one
// request or of three; an asynchronous one (max staleness 1) runs every
// step with a lag of at most 1, and the agent figures are in
// metrics.jsonl.
func TestAgentOnRolloutActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	final := func(cfg Config) []byte {
		t.Helper()
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(res.LastCheckpointDir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	local := final(tinyAgent(t, t.TempDir()))
	for _, chunk := range []int{1, 3} {
		cfg := tinyAgent(t, t.TempDir(), "engines.policy.replicas=2")
		cfg.Rollout.ChunkSize = chunk
		if !bytes.Equal(final(cfg), local) {
			t.Errorf("agent run on two rollout actors (chunks of %d) ends with other weights than in-process", chunk)
		}
		ms := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
		for _, m := range ms[2:] {
			if live, _ := m["rollout_live"].(float64); live != 2 {
				t.Errorf("step %v: rollout_live %v, want 2", m["step"], m["rollout_live"])
			}
		}
	}

	out := t.TempDir()
	cfg := tinyAgent(t, out, "deterministic=false", "engines.policy.replicas=2", "sync.mode=async", "sync.max_staleness=1")
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(ms) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(ms))
	}
	for i, m := range ms {
		if int(m["step"].(float64)) != i+1 {
			t.Fatalf("line %d is step %v", i+1, m["step"])
		}
		if m["phase"] != "rl" {
			continue
		}
		lag, ok := m["weight_lag"].(float64)
		_, cr := m["completion_rate"].(float64)
		_, inv := m["invalid_action_rate"].(float64)
		if !ok || lag < 0 || lag > 1 || !cr || !inv {
			t.Errorf("step %d: weight_lag %v, completion_rate %v, invalid_action_rate %v", i+1, m["weight_lag"], m["completion_rate"], m["invalid_action_rate"])
		}
		if ret, ok := m["episode_return"].(float64); !ok || math.Abs(ret-m["reward_mean"].(float64)) > 1e-9 {
			t.Errorf("step %d: episode_return %v, want reward_mean %v (both the mean episode total)", i+1, m["episode_return"], m["reward_mean"])
		}
	}
	if _, ok := ms[4]["eval_completion_rate"].(float64); !ok {
		t.Errorf("last step: no eval_completion_rate: %v", ms[4])
	}
	if _, ok := ms[4]["eval_episode_return"].(float64); !ok {
		t.Errorf("last step: no eval_episode_return: %v", ms[4])
	}
}

// Agent episodes generate on vLLM servers (two stand-in servers that
// answer token ids hashed from the prompt): every step runs, both servers
// generate and reload every version up to the last, and the agent
// figures are in metrics.jsonl.
func TestAgentOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyAgent(t, t.TempDir(), "deterministic=false")
	var ss [2]*vllmtest.Server
	for i := range ss {
		ss[i] = vllmtest.New(vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize, ReadFiles: true})
		t.Cleanup(ss[i].Close)
	}
	cfg.VLLM = &VLLM{Servers: []string{ss[0].URL(), ss[1].URL()}, Model: "tiny", ReloadTimeout: 10 * time.Second}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.WeightVersion != 5 {
		t.Fatalf("version %d, want 5", res.WeightVersion)
	}
	for _, s := range ss {
		rl := s.Reloads()
		if s.Generated() == 0 || len(rl) == 0 || rl[len(rl)-1].Version != "5" {
			t.Errorf("%s: %d generation requests answered, reloads %+v: want some, the last of version 5", s.URL(), s.Generated(), rl)
		}
	}
	ms := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if len(ms) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(ms))
	}
	for _, m := range ms[2:] {
		_, cr := m["completion_rate"].(float64)
		ape, _ := m["actions_per_episode"].(float64)
		if !cr || ape < 1 {
			t.Errorf("step %v: completion_rate %v, actions_per_episode %v", m["step"], m["completion_rate"], m["actions_per_episode"])
		}
	}
}

// Sampled evaluation of agent runs: n episodes per held-out game at the
// evaluation's seeds, the n episodes of a game playing the same hidden
// number; eval_accuracy is the completion rate over every episode
// (mean@n), pass@k is computed from each game's solved episodes, and
// there is no maj@n. The policy is a scripted one that guesses a number
// drawn from the request's seed inside the range the observation leaves
// open, so that some episodes find the number and others run out of
// guesses; the figures are checked against the games replayed here.
func TestAgentSampledEval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n, games = 4, 12
	cfg := tinyAgent(t, t.TempDir(), "algorithm.max_tokens=24", "eval.temperature=1", fmt.Sprintf("eval.samples=%d", n), fmt.Sprintf("eval.held_out=%d", games))
	tpl, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	rangeRE := regexp.MustCompile(`The number is from (\d+) to (\d+);`)
	type guessed struct {
		lo, hi, guess int
	}
	var mu sync.Mutex
	played := map[string][]guessed{} // by episode: g<j>
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = func(r engine.Request, _ int) string {
		m := rangeRE.FindStringSubmatch(eng.Tok.Decode(r.Prompt))
		if m == nil || r.Params.Seed == nil {
			t.Errorf("request %s: no open range or no seed", r.ID)
			return ""
		}
		lo, _ := strconv.Atoi(m[1])
		hi, _ := strconv.Atoi(m[2])
		g := lo + int(uint64(*r.Params.Seed)%uint64(hi-lo+1))
		ep, _, _ := strings.Cut(r.ID, "-")
		mu.Lock()
		played[ep] = append(played[ep], guessed{lo, hi, g})
		mu.Unlock()
		return fmt.Sprintf("<action>guess(%d)</action>", g)
	}
	probs, err := envSource{}.heldOut(games)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cfg: cfg, tpl: tpl, src: envSource{}, eval: probs,
		solver: &policy{id: "solver", eng: &policyEngine{Engine: eng, tok: eng.Tok}, tok: eng.Tok}}
	se, err := r.evaluate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Replay: game p hides what the teacher finds with seed Seed + p.
	var solved, pass1, passN float64
	for p := range games {
		e, _ := env.New(env.NameGuess, 0)
		if _, err := e.Reset(ctx, int64(cfg.Seed)+int64(p), env.TaskHeldOut); err != nil {
			t.Fatal(err)
		}
		hidden := 0
		for hidden == 0 {
			a, _ := e.Teach()
			res, err := e.Step(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if res.Done {
				hidden, _ = strconv.Atoi(a.Param)
			}
		}
		c := 0
		for s := range n {
			ep := fmt.Sprintf("g%d", p*n+s)
			steps := played[ep]
			if len(steps) == 0 {
				t.Fatalf("episode %s of game %d: no requests", ep, p)
			}
			for k, st := range steps {
				if hidden < st.lo || hidden > st.hi {
					t.Fatalf("game %d (hidden %d), episode %s step %d: open range %d..%d: the episode plays another game", p, hidden, ep, k, st.lo, st.hi)
				}
			}
			if steps[len(steps)-1].guess == hidden {
				c++
			}
		}
		solved += float64(c)
		pass1 += float64(c) / n
		if c > 0 {
			passN++
		}
	}
	solved /= n * games
	pass1 /= games
	passN /= games
	t.Logf("completion (mean@%d) %.3f, pass@1 %.3f, pass@%d %.3f", n, solved, pass1, n, passN)
	if solved == 0 || solved == 1 || passN == pass1 {
		t.Fatalf("the scripted policy solved %.3f of the episodes, pass@%d %.3f: the check needs a mix", solved, n, passN)
	}
	s := se.Sampled
	if s == nil || se.Agent == nil || math.Abs(se.Accuracy-solved) > 1e-12 || math.Abs(s.PassAt[1]-pass1) > 1e-12 || math.Abs(s.PassAt[n]-passN) > 1e-12 ||
		s.Majority != nil || s.Samples != n || se.Agent.Episodes != n*games {
		t.Fatalf("evaluation %+v, sampled %+v: want accuracy %v, pass@1 %v, pass@%d %v, no maj@n, %d episodes", se, s, solved, pass1, n, passN, n*games)
	}
}
