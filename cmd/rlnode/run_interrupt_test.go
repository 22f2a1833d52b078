package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/slowfile"
	"github.com/rlnode/rlnode/train"
)

// bigModel makes quickstart's policy large enough (16 layers of 512,
// about 61 M parameters) that building its learner takes a while: long
// enough for a signal sent when the build begins to land inside it.
var bigModel = []string{"--set", "models.policy.init.hidden_size=512", "--set", "models.policy.init.intermediate_size=2048",
	"--set", "models.policy.init.layers=16", "--set", "models.policy.init.heads=16", "--set", "models.policy.init.kv_heads=8",
	"--set", "sft.steps=1", "--set", "sft.batch_size=1", "--set", "schedule.steps=1", "--set", "schedule.eval_every=0",
	"--set", "algorithm.batch_prompts=1", "--set", "algorithm.group_size=2", "--set", "algorithm.micro_batch=2"}

// TestRunSIGTERMWhileStarting: SIGTERM while the run builds its learner
// stops it there, at once, with exit status 130 and a line that says it
// stopped before its first step; what it wrote before (the resolved
// recipe) stays. It once went on building, then trained a step before
// it looked at the signal.
func TestRunSIGTERMWhileStarting(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	run := startRun(t, home, append([]string{"run", "quickstart", "--out", dir}, bigModel...)...)
	run.waitFor(t, `a "starting the learner" line`, func() bool { return strings.Contains(run.stderr.String(), `msg="starting the learner"`) })
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t)
	stderr := run.stderr
	if code != 130 ||
		!strings.Contains(stderr.String(), "rlnode run: stopped before its first step, before any checkpoint: nothing to resume") {
		t.Errorf("exit %d, want 130 and the stop named\nstderr:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "step 1/") {
		t.Errorf("a step ran after SIGTERM\nstderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "recipe.yaml")); err != nil {
		t.Errorf("the run's recipe: %v", err)
	}
	if cks, err := train.Checkpoints(dir); err != nil || len(cks) != 0 {
		t.Errorf("checkpoints %v, %v: want none", cks, err)
	}
}

// TestRunSIGTERMWhileLoadingACheckpoint: SIGTERM while the learner reads
// its checkpoint (the policy's path, or --resume's step-N) stops the run
// there: exit status 130 and the line that says it stopped before its
// first step. The checkpoint's weights come from a pipe that never ends,
// as a very slow disk would: the load once read on until the file ended
// (minutes for a 7B model), deaf to the signal.
func TestRunSIGTERMWhileLoadingACheckpoint(t *testing.T) {
	home := t.TempDir()
	cfg := smallQwen2Config(t)
	short := []string{"--set", "sft.steps=1", "--set", "sft.batch_size=1", "--set", "schedule.steps=1", "--set", "schedule.eval_every=0",
		"--set", "algorithm.batch_prompts=1", "--set", "algorithm.group_size=2", "--set", "algorithm.micro_batch=2"}
	for _, c := range []struct {
		name   string
		resume bool
	}{{"policy path", false}, {"resume", true}} {
		t.Run(c.name, func(t *testing.T) {
			model := filepath.Join(t.TempDir(), "model")
			if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", model); code != 0 {
				t.Fatalf("model init: exit %d: %s", code, stderr)
			}
			dir := filepath.Join(t.TempDir(), "run")
			args := append([]string{"run", "quickstart", "--out", dir, "--set", "models.policy.init=null", "--set", "models.policy.path=" + model}, short...)
			weights := filepath.Join(model, "model.safetensors")
			if c.resume {
				if _, stderr, code := runRlnode(t, home, args...); code != 0 {
					t.Fatalf("first run: exit %d: %s", code, stderr)
				}
				cks, err := train.Checkpoints(dir)
				if err != nil || len(cks) == 0 {
					t.Fatalf("checkpoints %v, %v", cks, err)
				}
				ck := cks[len(cks)-1]
				// Without its manifest the checkpoint is taken unverified:
				// the learner is the first to read its weights.
				if err := os.Remove(filepath.Join(ck, train.ManifestFile)); err != nil {
					t.Fatal(err)
				}
				weights = filepath.Join(ck, "model.safetensors")
				args = append(args, "--resume")
			}
			half := slowfile.Replace(t, weights)
			run := startRun(t, home, args...)
			code := run.signalMidway(t, half, syscall.SIGTERM, "the checkpoint")
			if out := run.stderr.String(); code != 130 ||
				!strings.Contains(out, "rlnode run: stopped before its first step") {
				t.Errorf("exit %d, want 130 and the stop named\nstderr:\n%s", code, out)
			}
		})
	}
}

// TestEvalInterruptWhileLoadingTheModel: Ctrl-C while rlnode eval loads
// --model stops it there, naming the interruption. The weights come from
// a pipe that never ends, as from a very slow disk: the load once read on
// until the file ended (minutes for a 7B model), deaf to Ctrl-C.
func TestEvalInterruptWhileLoadingTheModel(t *testing.T) {
	home := t.TempDir()
	cfg := smallQwen2Config(t)
	model := filepath.Join(t.TempDir(), "model")
	if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", model); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	half := slowfile.Replace(t, filepath.Join(model, "model.safetensors"))
	ev := startRun(t, home, "eval", "--model", model, "--recipe", "quickstart", "--set", "eval.held_out=3")
	code := ev.signalMidway(t, half, os.Interrupt, "the model")
	if out := ev.stderr.String(); code != 1 || !strings.Contains(out, "context canceled") {
		t.Errorf("exit %d, want 1 and the interruption named\nstderr:\n%s", code, out)
	}
}

// smallQwen2Config writes the config.json of a Qwen2 small enough to init
// in a moment and returns its path.
func smallQwen2Config(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":128,"intermediate_size":384,
		"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":768,"max_position_embeddings":64,
		"tie_word_embeddings":true,"torch_dtype":"float32"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCtxoptInterruptWhileLoadingTheExecutorModel: Ctrl-C while rlnode
// ctxopt loads its executor model from the cache stops it there, naming
// the model and the interruption. The weights come from a pipe that never
// ends, as from a very slow disk: the load (ctxopt.LoadLM) took no
// context and read on, deaf to Ctrl-C.
func TestCtxoptInterruptWhileLoadingTheExecutorModel(t *testing.T) {
	home := t.TempDir()
	t.Setenv("RLNODE_CACHE", t.TempDir())
	// No python tool: the executor needs no sandbox here.
	rf := smallLMRecipe(t, t.TempDir(), [2]string{"python: true", "python: false"}, [2]string{"tools: [calculator, python]", "tools: [calculator]"})
	stdout, stderr, code := runRlnode(t, home, "ctxopt", "warmup", rf)
	dir, _, ok := strings.Cut(strings.TrimPrefix(stdout, "executor model: "), " (")
	if code != 0 || !ok {
		t.Fatalf("warmup: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	half := slowfile.Replace(t, filepath.Join(dir, "model.safetensors"))
	run := startRun(t, home, "ctxopt", "train", rf, "--iterations", "1", "--out", filepath.Join(t.TempDir(), "out"))
	code = run.signalMidway(t, half, os.Interrupt, "the executor model")
	if out := run.stderr.String(); code != 1 || !strings.Contains(out, "executor model") || !strings.Contains(out, "context canceled") {
		t.Errorf("exit %d, want 1 naming the executor model and the interruption\nstderr:\n%s", code, out)
	} else if testing.Verbose() {
		t.Log(out)
	}
}

// TestRunSecondInterruptStopsATrainingStep: a second Ctrl-C while a long
// training step runs (100 epochs of 2 mini-batches over 256 sequences,
// on two learner shards) stops the run at once: exit status 130, the stop
// named, no checkpoint of the step. The learner's Train took no context:
// the driver gave up on it, then waited on the shards' stop while they
// trained on, and the error the shards' group reported hid the
// cancellation (exit 1, the raw error). The warm-up step before it is
// short (4 sequences), so the signals land in the RL step, most of which
// is training.
func TestRunSecondInterruptStopsATrainingStep(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	run := startRun(t, home, "run", "quickstart", "--out", dir, "--set", "algorithm.epochs=100", "--set", "algorithm.mini_batches=2",
		"--set", "sft.batch_size=4", "--set", "algorithm.batch_prompts=32", "--set", "algorithm.max_tokens=8",
		"--set", "algorithm.micro_batch=1", "--set", "sft.steps=1", "--set", "schedule.steps=1",
		"--set", "schedule.eval_every=0", "--set", "placement.learner_shards=2")
	run.waitFor(t, "the warm-up step's progress line", func() bool { return strings.Contains(run.stderr.String(), "step 1/2") })
	// The RL step generates (0.1 s here), then trains (90 s): let the
	// generation end. Should the signals still find it generating, the
	// run must end at once all the same.
	time.Sleep(time.Second)
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	run.waitFor(t, "the first interruption's line", func() bool {
		return strings.Contains(run.stderr.String(), "rlnode run: interrupted; stopping after the current step")
	})
	if err := run.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t)
	if out := run.stderr.String(); code != 130 || !strings.Contains(out, "rlnode run: stopped after step 1") {
		t.Errorf("exit %d, want 130 and the stop named\nstderr:\n%s", code, out)
	} else if testing.Verbose() {
		t.Log(out)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "step-2")); err == nil {
		t.Error("the step stopped was checkpointed")
	}
}
