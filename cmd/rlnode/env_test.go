package main

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/fsizetest"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/env/envtest"
	"github.com/rlnode/rlnode/rollout/offline"
)

// TestEnvRolloutHTTP collects random play from the Python reference
// environment server over HTTP, then finds the server's port closed.
func TestEnvRolloutHTTP(t *testing.T) {
	url, srv := envtest.GuessServer(t)
	home := t.TempDir()
	file := filepath.Join(home, "guess.jsonl")
	stdout, stderr, code := runRlnode(t, home, "env", "rollout", "http", "--url", url, "--policy", "random", "--task", "heldout", "--episodes", "12", "--out", file)
	if code != 0 || !strings.Contains(stdout, "12 episodes of http (task heldout, policy random)") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	eps, err := offline.ReadJSONL(file)
	if err != nil || len(eps) != 12 {
		t.Fatalf("%d episodes, %v", len(eps), err)
	}
	for i, ep := range eps {
		if ep.Env != "http" || ep.Seed != 1+int64(i) || len(ep.Steps) == 0 || !strings.HasPrefix(ep.Steps[0].Action, "guess(") ||
			!strings.Contains(ep.Messages[0].Content, "- guess(n): guess the hidden number") {
			t.Fatalf("episode %d: %+v", i, ep)
		}
		if ep.Outcome != "solved" && ep.Outcome != "step_limit" && len(ep.Steps) != 8 {
			t.Fatalf("episode %d ended %q after %d steps", i, ep.Outcome, len(ep.Steps))
		}
	}

	srv.Process.Kill()
	srv.Wait()
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second); err == nil {
		c.Close()
		t.Skip("the killed server's port was taken again")
	}
	_, stderr, code = runRlnode(t, home, "env", "rollout", "http", "--url", url, "--policy", "random", "--out", file)
	if code != 1 || !strings.Contains(stderr, "http episode 0") || !strings.Contains(stderr, url+"/reset") || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("a dead server: exit %d: %s", code, stderr)
	}
}

// TestRunWarmupTrajectories collects teacher and random episodes with
// rlnode env rollout and warms a run up on them (success filtering),
// then shows the refusals of a cut that keeps nothing and of a bad file.
func TestRunWarmupTrajectories(t *testing.T) {
	home := t.TempDir()
	for _, args := range [][]string{
		{"env", "rollout", "equations", "--policy", "scripted", "--episodes", "6", "--out", filepath.Join(home, "teach.jsonl")},
		{"env", "rollout", "equations", "--policy", "random", "--episodes", "6", "--max-steps", "3", "--out", filepath.Join(home, "random.jsonl")},
	} {
		if stdout, stderr, code := runRlnode(t, home, args...); code != 0 {
			t.Fatalf("rlnode %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	var mix []byte
	for _, f := range []string{"teach.jsonl", "random.jsonl"} {
		b, err := os.ReadFile(filepath.Join(home, f))
		if err != nil {
			t.Fatal(err)
		}
		mix = append(mix, b...)
	}
	os.WriteFile(filepath.Join(home, "mix.jsonl"), mix, 0o644)
	run := func(dir string, sets ...string) (string, string, int) {
		args := []string{"run", "quickstart", "--out", filepath.Join(home, dir), "--set", "models.policy.init.max_positions=1024",
			"--set", "sft.steps=3", "--set", "sft.batch_size=4", "--set", "schedule.steps=1", "--set", "schedule.eval_every=0",
			"--set", "schedule.checkpoint_every=0", "--set", "eval.held_out=4", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		return runRlnode(t, home, args...)
	}
	stdout, stderr, code := run("run", "sft.trajectories="+filepath.Join(home, "mix.jsonl"), "sft.weighting=filter", "sft.threshold=8")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(filepath.Join(home, "run", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"phase":"warmup"`); n != 3 || !strings.Contains(string(b), `"seqs":4`) {
		t.Fatalf("%d warm-up steps in metrics.jsonl:\n%s", n, b)
	}

	eps, err := offline.ReadJSONL(filepath.Join(home, "mix.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	samples := 0
	for _, ep := range eps {
		samples += len(ep.Steps)
	}
	_, stderr, code = run("none", "sft.trajectories="+filepath.Join(home, "mix.jsonl"), "sft.weighting=filter", "sft.threshold=9")
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("none of its %d samples has a return of at least 9 (sft.threshold)", samples)) {
		t.Fatalf("a cut above every return: exit %d: %s", code, stderr)
	}
	os.WriteFile(filepath.Join(home, "bad.jsonl"), append(mix[:strings.IndexByte(string(mix), '\n')+1], "{\"env\": 1}\n"...), 0o644)
	_, stderr, code = run("bad", "sft.trajectories="+filepath.Join(home, "bad.jsonl"))
	if code != 1 || !strings.Contains(stderr, "sft.trajectories: "+filepath.Join(home, "bad.jsonl")+":2: not an episode") {
		t.Fatalf("a bad trajectory file: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(home, "bad")); !os.IsNotExist(err) {
		t.Fatalf("the run directory of a refused recipe exists (%v)", err)
	}
}

// TestEnvRolloutModel plays a checkpoint (random weights) through the
// agent episode and reads its Arrow trajectory file back as SFT samples.
func TestEnvRolloutModel(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":1024,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(home, "model")
	if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", model); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	out := filepath.Join(home, "model.arrow")
	stdout, stderr, code := runRlnode(t, home, "env", "rollout", "equations", "--policy", model, "--episodes", "3", "--max-steps", "3",
		"--max-tokens", "8", "--out", out)
	if code != 0 || !strings.Contains(stdout, "3 episodes of equations (task train, policy "+model+")") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	turns, err := data.ReadTrajectoryFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, tr := range turns {
		sums[tr.EpisodeID] += tr.Reward
	}
	if len(sums) != 3 || len(turns) < 3 || len(turns) > 9 {
		t.Fatalf("%d turns of %d episodes", len(turns), len(sums))
	}
	for _, tr := range turns {
		if tr.FinalReward != sums[tr.EpisodeID] || len(tr.ResponseIDs) == 0 || len(tr.PromptIDs) == 0 {
			t.Fatalf("turn %+v: final reward %v, the episode's rewards sum to %v", tr, tr.FinalReward, sums[tr.EpisodeID])
		}
	}
	samples, err := offline.ReadSamples(out, nil, 0)
	if err != nil || len(samples) != len(turns) {
		t.Fatalf("%d samples of %d turns: %v", len(samples), len(turns), err)
	}

	// The same episodes (same seeds) as JSONL: each assistant turn's
	// sample, read back as sft.trajectories reads it, has the prompt the
	// model was given and the episode's total as its reward.
	jsonl := filepath.Join(home, "model.jsonl")
	stdout, stderr, code = runRlnode(t, home, "env", "rollout", "equations", "--policy", model, "--episodes", "3", "--max-steps", "3",
		"--max-tokens", "8", "--out", jsonl)
	if code != 0 || !strings.Contains(stdout, "written to "+jsonl) {
		t.Fatalf("to JSONL: exit %d\n%s%s", code, stdout, stderr)
	}
	eps, err := offline.ReadJSONL(jsonl)
	if err != nil || len(eps) != 3 {
		t.Fatalf("%d episodes: %v", len(eps), err)
	}
	tok, err := tokenizer.Load(filepath.Join(model, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	back, err := offline.ReadSamples(jsonl, tok, 0)
	if err != nil || len(back) != len(turns) {
		t.Fatalf("%d samples from JSONL, %d turns in the Arrow file: %v", len(back), len(turns), err)
	}
	for i, tr := range turns {
		if !slices.Equal(back[i].Prompt, tr.PromptIDs) || back[i].Reward != tr.FinalReward {
			t.Fatalf("turn %d (%s): JSONL prompt %v reward %v, Arrow prompt %v reward %v", i, tr.EpisodeID, back[i].Prompt, back[i].Reward, tr.PromptIDs, tr.FinalReward)
		}
	}
	for k, ep := range eps {
		if ep.Seed != 1+int64(k) || ep.Policy != model || ep.Env != "equations" || len(ep.Messages) != 2*len(ep.Steps)+1 {
			t.Fatalf("episode %d: %+v", k, ep)
		}
	}
	if _, stderr, code := runRlnode(t, home, "env", "rollout", "equations", "--policy", model, "--out", filepath.Join(home, "m.txt")); code != 1 ||
		!strings.Contains(stderr, "a model's episodes go to a JSONL file (.jsonl) or an Arrow trajectory file (.arrow)") {
		t.Fatalf("a model to a .txt file: exit %d: %s", code, stderr)
	}
}

// TestEnvRolloutScriptedRefusesArrow: scripted and random episodes have
// no token ids, so an .arrow name is refused rather than written as JSONL
// under it (which sft.trajectories would then fail to read as Arrow).
func TestEnvRolloutScriptedRefusesArrow(t *testing.T) {
	home := t.TempDir()
	for _, policy := range []string{"scripted", "random"} {
		out := filepath.Join(home, policy+".arrow")
		_, stderr, code := runRlnode(t, home, "env", "rollout", "equations", "--policy", policy, "--episodes", "2", "--out", out)
		if code != 1 || !strings.Contains(stderr, "--out "+out+": "+policy+" episodes have no token ids") {
			t.Fatalf("%s to .arrow: exit %d: %s", policy, code, stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("%s: %s was written (%v)", policy, out, err)
		}
	}
}

// TestEnvRolloutModelFailedTurnsFail: a model whose context cannot hold
// the environment's prompt fails every turn; both files are refused with
// the engine's reason. Before, the Arrow file was written from the failed
// turns and the command said it wrote the episodes (mean return 0, no
// outcomes), exit 0.
func TestEnvRolloutModelFailedTurnsFail(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":64,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(home, "model")
	if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", model); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	for _, name := range []string{"model.arrow", "model.jsonl"} {
		out := filepath.Join(home, name)
		stdout, stderr, code := runRlnode(t, home, "env", "rollout", "equations", "--policy", model, "--episodes", "2", "--max-steps", "2",
			"--max-tokens", "8", "--out", out)
		if code != 1 || !strings.Contains(stderr, "turn 0 failed") || !strings.Contains(stderr, "context") {
			t.Errorf("%s: exit %d, want 1 naming the failed turn and its reason\nstdout: %s\nstderr: %s", name, code, stdout, stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s was written (%v)", out, err)
		}
	}
}

// An episode JSON cannot hold (an environment's finite rewards that sum
// to +Inf) fails the write, and the file is not left holding the episodes
// before it, which sft.trajectories would read as a whole collection.
func TestWriteEpisodesLeavesNoPartialFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eps.jsonl")
	msgs := []tokenizer.Message{{Role: "user", Content: "o"}, {Role: "assistant", Content: "<action>go</action>"}}
	eps := []offline.Episode{
		{Env: "http", Task: "train", Seed: 1, Messages: msgs, Steps: []offline.Step{{Action: "go", Reward: 1}}, Total: 1},
		{Env: "http", Task: "train", Seed: 2, Messages: msgs, Steps: []offline.Step{{Action: "go", Reward: 1e308}}, Total: math.Inf(1)},
	}
	err := writeEpisodes(path, eps)
	if err == nil || !strings.Contains(err.Error(), "write "+path+": episode 1") {
		t.Fatalf("write: %v, want an error naming the file and episode 1", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (%v)", path, err)
	}
}

// TestEnvRolloutRunCheckpoint plays the checkpoint of a short run of an
// agent recipe (agent_equations: a 128-token context) on that recipe's
// prompts: its episode.agent.template, found in the run folder, or given
// by --recipe for a checkpoint elsewhere. Before, env rollout always built
// chat prompts, which overflowed the model's context at the first step.
func TestEnvRolloutRunCheckpoint(t *testing.T) {
	home := t.TempDir()
	run := filepath.Join(home, "run")
	if stdout, stderr, code := runRlnode(t, home, "run", "agent_equations", "--out", run, "--set", "sft.steps=2", "--set", "sft.batch_size=4",
		"--set", "schedule.steps=1", "--set", "schedule.eval_every=0", "--set", "eval.held_out=2",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2"); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	ck := filepath.Join(run, "checkpoints", "step-3")
	tok, err := tokenizer.Load(filepath.Join(ck, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	// play plays 2 episodes of the model into an Arrow file and checks
	// that every step's prompt is the template's (the observation last,
	// after "Done: " and the actions taken) and stays in the context.
	play := func(name string, args ...string) string {
		t.Helper()
		out := filepath.Join(home, name+".arrow")
		args = append(append([]string{"env", "rollout"}, args...), "--episodes", "2", "--out", out)
		stdout, stderr, code := runRlnode(t, home, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", name, code, stdout, stderr)
		}
		turns, err := data.ReadTrajectoryFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(turns) < 2 {
			t.Fatalf("%s: %d turns", name, len(turns))
		}
		for _, tr := range turns {
			prompt := tok.Decode(toInts(tr.PromptIDs))
			if !strings.HasPrefix(prompt, "Done: ") || len(tr.PromptIDs)+len(tr.ResponseIDs) > 128 {
				t.Fatalf("%s: turn %d of %s: prompt %q (%d tokens, %d more in the response), want the template's within 128", name, tr.Turn, tr.EpisodeID, prompt, len(tr.PromptIDs), len(tr.ResponseIDs))
			}
		}
		return stderr
	}
	// A checkpoint of the run folder: its recipe.yaml, ENV left to it.
	if stderr := play("checkpoint", "--policy", ck); !strings.Contains(stderr, "prompts of "+filepath.Join(run, "recipe.yaml")) {
		t.Errorf("the rollout does not say whose prompts it uses:\n%s", stderr)
	}
	// The run folder: its newest checkpoint, ENV given.
	play("run", "equations", "--policy", run)
	// The checkpoint moved out of its run: chat prompts overflow the
	// context as before, unless --recipe names the recipe.
	moved := filepath.Join(home, "moved")
	if err := os.CopyFS(moved, os.DirFS(ck)); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runRlnode(t, home, "env", "rollout", "equations", "--policy", moved, "--episodes", "2", "--out", filepath.Join(home, "chat.arrow"))
	if code != 1 || !strings.Contains(stderr, "exceeds the model's context of 128 tokens") {
		t.Fatalf("a checkpoint with no recipe: exit %d: %s; want the context overflow of chat prompts", code, stderr)
	}
	play("recipe", "equations", "--policy", moved, "--recipe", "agent_equations")
	// --recipe must be an agent recipe.
	_, stderr, code = runRlnode(t, home, "env", "rollout", "equations", "--policy", ck, "--recipe", "quickstart", "--out", filepath.Join(home, "q.arrow"))
	if code != 1 || !strings.Contains(stderr, "--recipe quickstart: episode.type single, not agent") {
		t.Fatalf("--recipe quickstart: exit %d: %s", code, stderr)
	}
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = int(v)
	}
	return out
}

// TestTrajectoryFilesFullDisk: the files sft.trajectories reads, as env
// rollout and traces export write them (JSONL episodes, JSONL traces,
// Arrow trajectories), are replaced whole or not at all. A write that
// failed midway (here a file size limit in a child process, as a full
// disk) left a cut file, or removed the previous one: a JSONL file cut at
// a line reads as a smaller whole collection.
func TestTrajectoryFilesFullDisk(t *testing.T) {
	cmds := func(dir string) [][]string {
		store := filepath.Join(dir, "traces")
		return [][]string{
			{"env", "rollout", "equations", "--policy", "scripted", "--episodes", "20", "--out", filepath.Join(dir, "teach.jsonl")},
			{"traces", "export", "--store", store, "--format", "jsonl", "--out", filepath.Join(dir, "traces.jsonl")},
			{"traces", "export", "--store", store, "--format", "trajectories", "--reward", "final", "--out", filepath.Join(dir, "turns.arrow")},
		}
	}
	files := []string{"teach.jsonl", "traces.jsonl", "turns.arrow"}
	if dir, ok := fsizetest.Child(t); ok {
		for i, args := range cmds(dir) {
			var out, errb bytes.Buffer
			if code := runMain(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), "write "+filepath.Join(dir, files[i])+": ") ||
				!strings.Contains(errb.String(), "file too large") {
				t.Errorf("rlnode %s with files limited: exit %d, want 1 and the error naming the file:\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
			}
		}
		return
	}
	dir := t.TempDir()
	writeRunTraces(t, filepath.Join(dir, "traces"), 40)
	old := make([][]byte, len(files))
	smallest := 0
	for i, args := range cmds(dir) {
		var out, errb bytes.Buffer
		if code := runMain(args, &out, &errb); code != 0 {
			t.Fatalf("rlnode %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		b, err := os.ReadFile(filepath.Join(dir, files[i]))
		if err != nil {
			t.Fatal(err)
		}
		old[i] = b
		if i == 0 || len(b) < smallest {
			smallest = len(b)
		}
	}
	fsizetest.Run(t, dir, uint64(smallest/2))
	for i, f := range files {
		if b, _ := os.ReadFile(filepath.Join(dir, f)); !bytes.Equal(b, old[i]) {
			t.Errorf("%s holds %d bytes after the failed write, want the previous %d", f, len(b), len(old[i]))
		}
	}
}

// TestOutcomeCounts: env rollout's summary names each way episodes ended
// in words; it printed Go's map syntax ("outcomes map[solved:20]").
func TestOutcomeCounts(t *testing.T) {
	for _, c := range []struct {
		in   map[string]int
		want string
	}{
		{nil, "none recorded"},
		{map[string]int{"solved": 20}, "solved 20"},
		{map[string]int{"wrong_answer": 2, "solved": 1, "step_limit": 2}, "solved 1, step_limit 2, wrong_answer 2"},
	} {
		if got := outcomeCounts(c.in); got != c.want {
			t.Errorf("outcomeCounts(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	out := filepath.Join(t.TempDir(), "teacher.jsonl")
	stdout, stderr, code := runRlnode(t, t.TempDir(), "env", "rollout", "equations", "--policy", "scripted", "--episodes", "4", "--out", out)
	if code != 0 || !strings.Contains(stdout, "outcomes: solved 4\n") {
		t.Errorf("env rollout equations --policy scripted: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A checkpoint's episodes that run out of steps are counted as such:
// every episode of a policy that never finished was summed up as
// "outcomes: none recorded", as if nothing had been counted.
func TestTurnOutcomes(t *testing.T) {
	turns := []data.Turn{
		{Turn: 0, Note: "no action; invalid action: no action given"},
		{Turn: 1, Note: "invalid action: no action given; stopped after 2 steps"},
		{Turn: 0, Note: "outcome: solved"},
		{Turn: 0, Note: "invalid action: no action given; outcome: step_limit"},
	}
	if got, want := outcomeCounts(turnOutcomes(turns)), "max_steps 1, solved 1, step_limit 1"; got != want {
		t.Errorf("outcomes %q, want %q", got, want)
	}
}
