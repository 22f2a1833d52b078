package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/shard"
)

// shardTol is how far a sharded run's weights may be from one learner's:
// N ranks sum the same float32 gradients in another order and AdamW
// divides by √v, so weights agree to about 1e-6 after a few steps
// (learner/shard's equivalence tolerance); a missed rank or a wrong slice
// gives 1e-3 and more.
const shardTol = 2e-5

// shardRun is tinyRun with the learner as shards ranks of half a CPU each
// and short collective timeouts (a lost rank fails the step in seconds).
func shardRun(out string, shards int) Config {
	c := tinyRun(out)
	c.Learner.Shards = shards
	c.LearnerResources = cluster.Resources{cluster.CPU: 0.5}
	c.LearnerTimeout = 4 * time.Second
	return c
}

func checkpointWeights(t *testing.T, cfg Config, dir string) (map[string][]float32, int) {
	t.Helper()
	l := cfg.Learner
	l.Model, l.Seed, l.Shards = cfg.Model, cfg.Seed, 0
	ln, err := learner.New(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Load(dir); err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return ln.PolicyWeights(), ln.Step()
}

func maxWeightDiff(t *testing.T, a, b map[string][]float32) (float64, string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d tensors against %d", len(a), len(b))
	}
	var d float64
	var at string
	for name, x := range a {
		y, ok := b[name]
		if !ok || len(y) != len(x) {
			t.Fatalf("tensor %s: %d values against %d", name, len(x), len(y))
		}
		for i := range x {
			if e := math.Abs(float64(x[i] - y[i])); e > d || math.IsNaN(e) {
				d, at = e, fmt.Sprintf("%s[%d]", name, i)
			}
		}
	}
	return d, at
}

// metricSteps are the steps of metrics.jsonl, in file order.
func metricSteps(t *testing.T, path string) []int {
	t.Helper()
	var steps []int
	for _, m := range readMetrics(t, path) {
		steps = append(steps, int(m["step"].(float64)))
	}
	return steps
}

func checkStepsOnce(t *testing.T, path string, last int) {
	t.Helper()
	steps := metricSteps(t, path)
	ok := len(steps) == last
	for i, s := range steps {
		ok = ok && s == i+1
	}
	if !ok {
		t.Errorf("%s has steps %v, want 1..%d once each", path, steps, last)
	}
}

// A run with the learner as two shard ranks (ZeRO-1) completes, writes a
// checkpoint with one optimizer file per rank, and ends at the weights of
// the same run with one learner actor. The generation is the same: warm-up
// steps sample nothing, and the RL steps' rewards come out equal (checked),
// so the weights are compared after all 5 steps, within shardTol.
func TestShardedRunMatchesOneLearner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rewards [2][]float64
	var cfgs [2]Config
	for i, n := range []int{1, 2} {
		cfgs[i] = shardRun(filepath.Join(t.TempDir(), "run"), n)
		cfgs[i].Progress = func(m Metrics) {
			if m.RewardMean != nil {
				rewards[i] = append(rewards[i], *m.RewardMean)
			}
		}
		res, err := Run(ctx, cfgs[i])
		if err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		if res.Steps != 5 {
			t.Fatalf("%d shards: %d steps, want 5", n, res.Steps)
		}
		checkStepsOnce(t, filepath.Join(cfgs[i].Out, "metrics.jsonl"), 5)
	}
	last := filepath.Join(cfgs[1].Out, "checkpoints", "step-5")
	for r := range 2 {
		if _, err := os.Stat(filepath.Join(last, learner.ShardOptimizerFile(r, 2))); err != nil {
			t.Errorf("rank %d's optimizer file: %v", r, err)
		}
	}
	if fmt.Sprint(rewards[0]) != fmt.Sprint(rewards[1]) {
		t.Fatalf("RL rewards %v with one learner, %v with two shards: the generation parted", rewards[0], rewards[1])
	}
	one, _ := checkpointWeights(t, cfgs[0], filepath.Join(cfgs[0].Out, "checkpoints", "step-5"))
	two, step := checkpointWeights(t, cfgs[1], last)
	if step != 5 {
		t.Errorf("sharded checkpoint at step %d, want 5", step)
	}
	d, at := maxWeightDiff(t, one, two)
	t.Logf("max |w1 − w2| after 5 steps: %g at %s", d, at)
	if d > shardTol {
		t.Errorf("two shards' weights differ from one learner's by %g at %s (tolerance %g)", d, at, shardTol)
	}
}

// --resume with another shard count than the checkpoint's, in the same run
// directory: the optimizer state reshards, the resumed run ends where the
// uninterrupted one did, and metrics.jsonl holds every step once (the
// first run's step 5 is cut and redone).
func TestResumeWithOtherShardCount(t *testing.T) {
	for _, tc := range []struct{ from, to int }{{2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("%d_to_%d", tc.from, tc.to), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			full := shardRun(filepath.Join(t.TempDir(), "full"), tc.from)
			if _, err := Run(ctx, full); err != nil {
				t.Fatal(err)
			}
			a, _ := checkpointWeights(t, full, filepath.Join(full.Out, "checkpoints", "step-5"))
			resumed := shardRun(full.Out, tc.to)
			resumed.Resume = filepath.Join(full.Out, "checkpoints", "step-4")
			res, err := Run(ctx, resumed)
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != 5 {
				t.Fatalf("resumed run ended at step %d, want 5", res.Steps)
			}
			checkStepsOnce(t, filepath.Join(resumed.Out, "metrics.jsonl"), 5)
			b, _ := checkpointWeights(t, resumed, filepath.Join(resumed.Out, "checkpoints", "step-5"))
			if d, at := maxWeightDiff(t, a, b); d > shardTol {
				t.Errorf("resumed with %d shards: weights differ from the %d-shard run by %g at %s (tolerance %g)", tc.to, tc.from, d, at, shardTol)
			}
		})
	}
}

// A rank stopped mid-run fails the next step; the driver respawns it,
// restarts the group from the last checkpoint (the warm-up's end, once it
// is reached: a run once trained its warm-up again; or, before the first,
// from the initial weights), redoes the steps after it and logs every
// step once.
// The same step failing twice ends the run with an error naming it.
func TestRankLostRestartsFromCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		killAfter int  // kill rank 1 once this step is logged
		always    bool // every time, not once
		want      string
	}{
		{name: "before_any_checkpoint", killAfter: 1},
		{name: "after_the_warmups_checkpoint", killAfter: 3},
		{name: "after_checkpoint", killAfter: 5},
		{name: "fails_again", killAfter: 5, always: true, want: "step 6 failed again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			node := testNode(ctx, t)
			cfg := shardRun(filepath.Join(t.TempDir(), "run"), 2)
			cfg.Node = node
			cfg.Steps = 5 // checkpoints at steps 2 (the warm-up's last), 4, 6, 7
			kills := 0
			var seen []int
			var killErr error
			cfg.Progress = func(m Metrics) {
				seen = append(seen, m.Step)
				if m.Step != tc.killAfter || (kills > 0 && !tc.always) {
					return
				}
				kills++
				killErr = stopRank(ctx, node, "solver", 1)
			}
			res, err := Run(ctx, cfg)
			if killErr != nil {
				t.Fatalf("stop a rank: %v", killErr)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rank 1") {
					t.Fatalf("err %v, want %q naming rank 1", err, tc.want)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if kills != 1 || res.Steps != 7 {
				t.Fatalf("%d kills, %d steps; want 1 kill and 7 steps", kills, res.Steps)
			}
			checkStepsOnce(t, filepath.Join(cfg.Out, "metrics.jsonl"), 7)
			// Steps after the checkpoint (or all, before one) ran twice.
			redo := map[int]int{1: 1, 3: 3, 5: 5}[tc.killAfter]
			var want []int
			for s := 1; s <= tc.killAfter; s++ {
				want = append(want, s)
			}
			for s := redo; s <= 7; s++ {
				want = append(want, s)
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("steps done %v, want %v", seen, want)
			}
			if _, step := checkpointWeights(t, cfg, filepath.Join(cfg.Out, "checkpoints", "step-7")); step != 7 {
				t.Errorf("last checkpoint at learner step %d, want 7", step)
			}
		})
	}
}

// A checkpoint the learner cannot write (its storage refuses: a full disk,
// a read-only folder; here a folder where the model file goes) stops the
// run at that step: the learner is whole, so restarting it from the last
// checkpoint would redo the steps since and fail at the same save. The
// partial checkpoint is removed; the one before stays the newest.
func TestCheckpointTheStorageRefusesStopsTheRun(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards_%d", shards), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			node := testNode(ctx, t)
			cfg := shardRun(filepath.Join(t.TempDir(), "run"), shards)
			cfg.Node = node
			cfg.Steps = 5 // checkpoints at steps 2 (the warm-up's last), 4, 6, 7
			blocked := filepath.Join(cfg.Out, "checkpoints", "step-4", "model.safetensors", "in-the-way")
			if err := os.MkdirAll(blocked, 0o755); err != nil {
				t.Fatal(err)
			}
			var seen []int
			cfg.Progress = func(m Metrics) { seen = append(seen, m.Step) }
			_, err := Run(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), "step-4") || !strings.Contains(err.Error(), "not restarted") {
				t.Fatalf("err %v, want the save of step-4 failing without a restart", err)
			}
			if _, ok := errors.AsType[*shard.Failure](err); ok {
				t.Errorf("err %v carries a shard.Failure (what restarts learners)", err)
			}
			t.Log(err)
			if fmt.Sprint(seen) != "[1 2 3]" {
				t.Errorf("steps done %v, want [1 2 3] (none redone)", seen)
			}
			if _, err := os.Stat(filepath.Join(cfg.Out, "checkpoints", "step-4")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("partial step-4: %v, want it removed", err)
			}
			if newest, err := NewestComplete(cfg.Out); err != nil || filepath.Base(newest) != "step-2" {
				t.Errorf("newest complete checkpoint %q (%v), want step-2", newest, err)
			}
		})
	}
}

// testNode starts an embedded cluster node that stops with the test.
func testNode(ctx context.Context, t *testing.T) *cluster.Node {
	t.Helper()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	return node
}

// A train step that every rank fails on its own stops the run at that
// step: the ranks are whole and none is lost, so a restart from the last
// checkpoint would redo the steps since and fail the same way. The error
// names the step, the ranks, the cause and the newest complete checkpoint.
// A learning rate of 1e30 provokes it: in RL (step 3) the weights turn
// non-finite, so step 4's episodes carry NaN log probs, a batch the
// learner refuses; in the warm-up (step 1) step 2's loss is NaN.
func TestTrainErrorEveryRankAnswersStopsTheRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lr, warmLR float64
		step       string
		cause      string
		seen       string
		newest     string // of the checkpoints dir; "" for none
	}{
		{name: "bad_batch", lr: 1e30, step: "step 4", cause: "sample_logprobs[0][0] is NaN", seen: "[1 2 3]", newest: "step-2"},
		{name: "nan_loss", warmLR: 1e30, step: "step 2", cause: "logprobs[0][0] = NaN", seen: "[1]"},
	} {
		for _, shards := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/shards_%d", tc.name, shards), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cfg := shardRun(filepath.Join(t.TempDir(), "run"), shards)
				cfg.Node = testNode(ctx, t)
				cfg.Steps = 5 // checkpoints at steps 2 (the warm-up's last), 4, 6, 7
				if tc.lr > 0 {
					cfg.Learner.LR = tc.lr
				}
				if tc.warmLR > 0 {
					cfg.WarmupLR = tc.warmLR
				}
				var seen []int
				cfg.Progress = func(m Metrics) { seen = append(seen, m.Step) }
				_, err := Run(ctx, cfg)
				if err == nil {
					t.Fatal("the run succeeded, want a step failed on every rank")
				}
				t.Log(err)
				want := []string{tc.step + ":", "not restarted", tc.cause}
				if tc.newest != "" {
					want = append(want, filepath.Join(cfg.Out, "checkpoints", tc.newest))
				} else {
					want = append(want, "no complete checkpoint")
				}
				for r := range shards {
					if shards > 1 {
						want = append(want, fmt.Sprintf("rank %d", r))
					}
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err does not name %q", w)
					}
				}
				if strings.Contains(err.Error(), "failed again") {
					t.Errorf("err %v: the learners were restarted", err)
				}
				if fmt.Sprint(seen) != tc.seen {
					t.Errorf("steps done %v, want %s (none redone)", seen, tc.seen)
				}
				if newest, err := NewestComplete(cfg.Out); err != nil || filepath.Base(newest) != tc.newest && !(tc.newest == "" && newest == "") {
					t.Errorf("newest complete checkpoint %q (%v), want %q", newest, err, tc.newest)
				}
			})
		}
	}
}

// stopRank stops the live learner-shard actor of a policy's rank.
func stopRank(ctx context.Context, node *cluster.Node, policy string, rank int) error {
	tag := fmt.Sprintf("-r%d.", rank)
	for _, rec := range node.Directory().Actors() {
		if rec.Kind == shard.ActorKind && rec.State == cluster.Alive && strings.HasPrefix(rec.Name, "learner-"+policy+"-") && strings.Contains(rec.Name, tag) {
			return node.StopActor(ctx, rec.Name)
		}
	}
	return fmt.Errorf("no live %s rank %d", policy, rank)
}

// MLMT with both policies sharded: a feedback rank lost after step 5
// fails step 6 and restarts both policies from step 4's checkpoint (the
// feedback policy from its feedback/ part), step 5 is redone, and the run
// ends at the weights of an uninterrupted
// one, both policies' checkpoints with per-rank optimizer files.
func TestMLMTShardedFeedbackRankLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(name string, kill bool) Config {
		node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Stop()
		cfg := tinyMLMT(filepath.Join(t.TempDir(), name))
		cfg.Learner.Shards = 2
		cfg.LearnerResources = cluster.Resources{cluster.CPU: 0.5}
		cfg.LearnerTimeout = 4 * time.Second
		cfg.Node = node
		cfg.Steps, cfg.CheckpointEvery = 4, 2 // checkpoints at steps 2 (the warm-up's last), 4 and 6
		var killErr error
		steps := 0
		wantSteps := 6
		if kill {
			wantSteps = 7 // step 5 again
		}
		cfg.Progress = func(m Metrics) {
			steps++
			if kill && m.Step == 5 {
				kill = false
				killErr = stopRank(ctx, node, "feedback", 1)

			}
		}
		res, err := Run(ctx, cfg)
		if err != nil || killErr != nil {
			t.Fatalf("%s: %v (stop a rank: %v)", name, err, killErr)
		}
		if res.Steps != 6 || kill || steps != wantSteps {
			t.Fatalf("%s: %d steps, %d done (kill pending %v), want 6 and %d done", name, res.Steps, steps, kill, wantSteps)
		}
		checkStepsOnce(t, filepath.Join(cfg.Out, "metrics.jsonl"), 6)
		return cfg
	}
	straight, restarted := run("straight", false), run("restarted", true)
	for _, sub := range []string{"", FeedbackDir} {
		last := filepath.Join(restarted.Out, "checkpoints", "step-6", sub)
		for r := range 2 {
			if _, err := os.Stat(filepath.Join(last, learner.ShardOptimizerFile(r, 2))); err != nil {
				t.Errorf("%s rank %d's optimizer file: %v", last, r, err)
			}
		}
		a := weightsOf(t, filepath.Join(straight.Out, "checkpoints", "step-6", sub))
		b := weightsOf(t, last)
		if d, at := maxWeightDiff(t, a, b); d > shardTol {
			t.Errorf("%s: restarted run's weights differ from the uninterrupted run's by %g at %s", last, d, at)
		}
	}
}

// cutMetrics keeps the lines up to a step, drops a last line cut off
// mid-write, and refuses any other line that is not a metrics line.
func TestCutMetrics(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		step     int
		want     string // kept content, or the error's text
		bad      bool
	}{
		{"cut", "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n", 2, "{\"step\":1}\n{\"step\":2}\n", false},
		{"keep all", "{\"step\":1}\n{\"step\":2}\n", 2, "{\"step\":1}\n{\"step\":2}\n", false},
		{"empty", "", 3, "", false},
		{"torn last line", "{\"step\":1}\n{\"step\":2}\n{\"st", 5, "{\"step\":1}\n{\"step\":2}\n", false},
		{"no trailing newline", "{\"step\":1}\n{\"step\":2}", 5, "{\"step\":1}\n{\"step\":2}\n", false},
		{"garbage inside", "{\"step\":1}\nnope\n{\"step\":3}\n", 5, "metrics.jsonl:2: not a metrics line", true},
		{"no step", "{\"step\":1}\n{\"loss\":2}\n", 5, "metrics.jsonl:2: not a metrics line", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			path := filepath.Join(out, "metrics.jsonl")
			if err := os.WriteFile(path, []byte(tc.in), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			r := &run{cfg: Config{Out: out}, metrics: f}
			err = r.cutMetrics(tc.step)
			if tc.bad {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.metrics.Close()
			got, _ := os.ReadFile(path)
			if string(got) != tc.want || r.logged != tc.step {
				t.Errorf("kept %q (logged %d), want %q (%d)", got, r.logged, tc.want, tc.step)
			}
			if _, err := r.metrics.Write([]byte("{\"step\":9}\n")); err != nil {
				t.Errorf("append after the cut: %v", err)
			}
		})
	}
}

// Shards the cluster cannot hold fail the run at placement, naming the
// policy, the shard count and what is missing (MLMT: the solver's two
// ranks take the embedded node's 2 CPUs, the feedback policy's find none).
func TestShardsThatDoNotFitFailAtPlacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, err := cluster.Start(ctx, cluster.Config{CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	cfg := tinyMLMT(filepath.Join(t.TempDir(), "run"))
	cfg.Node = node
	cfg.Learner.Shards = 2
	cfg.LearnerResources = cluster.Resources{cluster.CPU: 1}
	_, err = Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "2 feedback learner shards") || !strings.Contains(err.Error(), "the group needs CPU") {
		t.Fatalf("err %v, want the feedback policy's 2 shards refused for want of CPU", err)
	}
}

// folderRun is a run of shards learner ranks (1: one learner) on a
// cluster of this process's node and a child node in a mount namespace
// of its own, which sees an empty folder of its own at the run folder's
// path from the start (private) or once the test mounts one
// (Node.MountPrivate). With 2 shards one rank is on each node; the one
// learner is on the child.
func folderRun(ctx context.Context, t *testing.T, shards int, private bool) (Config, string, *nodetest.Node) {
	t.Helper()
	node, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 1, Resources: cluster.Resources{"lh": 1}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	out := t.TempDir()
	o := nodetest.Options{CPUs: 2, Resources: cluster.Resources{"lh": 1}, OwnMounts: true}
	if private {
		o.PrivateDir = out
	}
	child := nodetest.Start(t, node, o)
	cfg := shardRun(out, shards)
	cfg.Node = node
	// One rank's worth of "lh" on each node; the one learner needs more
	// CPU than the driver's node has.
	cfg.LearnerResources = cluster.Resources{cluster.CPU: 0.5, "lh": 1}
	if shards == 1 {
		cfg.Learner.Shards = 0
		cfg.LearnerResources = cluster.Resources{cluster.CPU: 1.5}
	}
	return cfg, out, child
}

// A run folder that stops being shared after the learners were placed
// (the share unmounted on one host) is found at the next checkpoint:
// the run stops there, naming the learner member and its host, and the
// split checkpoint is removed instead of getting a manifest over this
// host's part only.
func TestRunFolderUnsharedMidRunIsFound(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg, out, child := folderRun(ctx, t, shards, false)
			var mountErr error
			cfg.Progress = func(m Metrics) {
				if m.Step == 1 {
					mountErr = child.MountPrivate(out)
				}
			}
			_, err := Run(ctx, cfg)
			if mountErr != nil {
				t.Skip(mountErr)
			}
			if err == nil || !strings.Contains(err.Error(), "the run folder is no longer shared") || !strings.Contains(err.Error(), "learner on host") {
				t.Fatalf("run whose folder stopped being shared with node %s: %v; want the checkpoint refused", child.ID, err)
			}
			t.Log(err)
			steps, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*"))
			if len(steps) != 0 {
				t.Errorf("checkpoints left: %v; want the split one removed", steps)
			}
		})
	}
}

// Weights offered by a learner whose node then goes away cannot be
// fetched: that is the learner's loss, which the training loop restarts
// from (a shard.Failure, not answered), unless the run itself is stopping.
func TestWeightsFetchFromAGoneLearnerIsALoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &run{node: testNode(ctx, t)}
	src := r.source(&policy{id: "solver"})
	off := learner.WeightsOffer{Step: 3, Ref: actor.BulkRef{Addr: "127.0.0.1:1", ID: strings.Repeat("ab", 16), Size: 8}}
	_, err := src.decode(ctx, off, "solver weights")
	f, ok := errors.AsType[*shard.Failure](err)
	if !ok || f.Answered || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("fetch from a gone learner: %v; want an unanswered shard.Failure naming the address", err)
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	if _, err := src.decode(stopped, off, "solver weights"); err == nil || errors.As(err, new(*shard.Failure)) {
		t.Errorf("fetch while the run stops: %v; want an error that is no learner failure", err)
	}
}
