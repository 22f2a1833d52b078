package train

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// A recipe whose engines say launch has the run start its vLLM servers
// (here fakevllm, through RLNODE_VLLM_COMMAND, on no GPU) and stop them
// when it ends; mlmt_math's feedback policy launches servers of its own.
// The fakes cannot learn: this checks that the run starts, uses and
// stops its servers.
func TestRecipeLaunchesVLLM(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	rec := t.TempDir()
	t.Setenv("FAKEVLLM_RECORD", rec)
	t.Setenv("RLNODE_VLLM_COMMAND", fake+" serve")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	model := t.TempDir()
	mc, _ := loadRun(t, "mlmt_math", nil) // its model, as a checkpoint the servers serve
	if _, err := learner.InitCheckpoint(mc.Model, "mlmt_math", model, 1); err != nil {
		t.Fatal(err)
	}
	sets := []string{"deterministic=false", "engines.policy.kind=vllm",
		"engines.policy.vllm={model: served, launch: {count: 2, gpus: 0, args: [--enforce-eager], start_timeout_seconds: 60}}",
		"engines.feedback.kind=vllm",
		"engines.feedback.vllm={model: served, launch: {count: 2, gpus: 0, args: [--enforce-eager], start_timeout_seconds: 60}}",
		fmt.Sprintf("models.policy={path: %q}", model), fmt.Sprintf("models.feedback={path: %q}", model),
		"sft.steps=1", "sft.batch_size=4", "schedule.steps=2", "schedule.eval_every=2", "eval.held_out=4",
		"algorithm.batch_prompts=2", "algorithm.group_size=2"}
	cfg, out := loadRun(t, "mlmt_math", sets)
	if cfg.VLLM == nil || cfg.VLLM.Launch == nil || cfg.FeedbackVLLM == nil || cfg.FeedbackVLLM.Launch == nil {
		t.Fatalf("the recipe's launch did not reach the driver: %+v, %+v", cfg.VLLM, cfg.FeedbackVLLM)
	}
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	recs := vllmtest.FakeRecords(t, rec)
	if len(recs) != 4 {
		t.Fatalf("%d servers started, want 4 (2 for each policy)", len(recs))
	}
	for _, r := range recs {
		if r.Model != model || r.Served != "served" || !slices.Equal(r.Options, []string{"--enforce-eager"}) || r.DevMode != "1" || !r.KeySet {
			t.Errorf("server started with %+v", r)
		}
		if err := syscall.Kill(r.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server process %d still there after the run (%v)", r.PID, err)
		}
	}
	m := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(m) != 3 {
		t.Errorf("%d metrics lines, want 3 (1 warm-up and 2 RL steps)", len(m))
	}
}

// What a launch section may not say is refused at its field.
func TestRecipeLaunchRefused(t *testing.T) {
	model := t.TempDir()
	if _, err := learner.InitCheckpoint(Quickstart("OUT").Model, "quickstart", model, 1); err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("models.policy={path: %q}", model)
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{path, "engines.policy.vllm={model: m, servers: [http://h:1], launch: {count: 1}}"}, "engines.policy.vllm.launch: set with servers"},
		{[]string{path, "engines.policy.vllm={model: m, launch: {count: 0}}"}, "engines.policy.vllm.launch.count: 0: want 1 to 64"},
		{[]string{path, "engines.policy.vllm={model: m, launch: {gpus: -1}}"}, "engines.policy.vllm.launch.gpus"},
		{[]string{path, "engines.policy.vllm={model: m, launch: {start_timeout_seconds: 9000}}"}, "engines.policy.vllm.launch.start_timeout_seconds"},
		{[]string{path, "engines.policy.vllm={model: m, launch: {args: [--trust-remote-code]}}"}, "engines.policy.vllm.launch.args: argument 0 \"--trust-remote-code\": not an option"},
		{[]string{"engines.policy.vllm={model: m, launch: {count: 1}}"}, "this policy's model has none (init)"},
	} {
		l, err := recipes.Load("quickstart", append([]string{"deterministic=false", "engines.policy.kind=vllm"}, c.sets...))
		if err == nil {
			err = Check(l)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.sets, err, c.want)
		}
	}
}
