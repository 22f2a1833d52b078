package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/learner"
)

// Multi-process tests: every rank lives in a process of its own (the test
// binary re-executed by internal/proctest) with its own actor system, and
// the ranks talk over loopback TCP exactly as on separate hosts. The test
// process is the driver.

func TestMain(m *testing.M) {
	if os.Getenv("RLNODE_SHARD_NODE") == "1" {
		os.Exit(runRankNode())
	}
	nodetest.Main(m)
}

// runRankNode hosts one rank actor and prints its ref as JSON.
func runRankNode() int {
	stage, _ := strconv.Atoi(os.Getenv("RLNODE_SHARD_STAGE"))
	shards, _ := strconv.Atoi(os.Getenv("RLNODE_SHARD_SHARDS"))
	if op, err := strconv.ParseUint(os.Getenv("RLNODE_SHARD_DIE_AT_OP"), 10, 64); err == nil {
		testAfterSend = func(t Tag) {
			if t.Op == op {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	sys, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer sys.Stop()
	spawn := actor.LocalSpawn{Name: "rank", Kind: ActorKind,
		Args: learner.ActorConfig{Config: tinyConfig(os.Getenv("RLNODE_SHARD_ALG"), shards, stage)}}
	switch os.Getenv("RLNODE_SHARD_MODEL") {
	case "quickstart":
		spawn.Args = learner.ActorConfig{Config: quickstartConfig(shards)}
	case "bench9m":
		spawn.Args = learner.ActorConfig{Config: bench9MConfig(shards)}
	case "quickstart-ppo":
		spawn.Args = learner.ActorConfig{Config: quickstartPPOConfig(shards)}
	case "bench":
		spawn.Kind = benchKind
	}
	ref, err := sys.SpawnLocal(spawn)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	js, _ := json.Marshal(ref)
	fmt.Println(string(js))
	_, _ = io.Copy(io.Discard, os.Stdin) // stdin closing means stop
	return 0
}

// startRanks starts n rank processes; env is added to rank i's when
// extra(i) returns it.
func startRanks(t testing.TB, n, stage int, extra func(i int) []string) ([]actor.Ref, []*proctest.Child) {
	t.Helper()
	refs := make([]actor.Ref, n)
	kids := make([]*proctest.Child, n)
	for i := range n {
		env := []string{"RLNODE_SHARD_NODE=1", "RLNODE_SHARD_ALG=" + learner.GRPO,
			"RLNODE_SHARD_STAGE=" + strconv.Itoa(stage), "RLNODE_SHARD_SHARDS=" + strconv.Itoa(n)}
		if extra != nil {
			env = append(env, extra(i)...)
		}
		kids[i] = proctest.Start(t, 30*time.Second, env...)
		if err := json.Unmarshal([]byte(kids[i].Line), &refs[i]); err != nil {
			t.Fatalf("rank %d: %q: %v", i, kids[i].Line, err)
		}
	}
	return refs, kids
}

// startRanksTB starts n rank processes with env added.
func startRanksTB(tb testing.TB, n int, env ...string) ([]actor.Ref, []*proctest.Child) {
	tb.Helper()
	return startRanks(tb, n, 1, func(int) []string { return env })
}

var shared struct {
	once sync.Once
	sys  *actor.System
	err  error
}

// driverSystem is the test process's one actor system, shared by every
// test and benchmark: a second protoactor remote in one process races on
// gRPC's global logger (shared/DESIGN.md).
func driverSystem(tb testing.TB) *actor.System {
	tb.Helper()
	shared.once.Do(func() { shared.sys, shared.err = actor.Start(actor.Config{Logger: actor.DiscardLogger()}) })
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.sys
}

// groupWeights fetches every rank's weights over the bulk path.
func groupWeights(t *testing.T, ctx context.Context, sys *actor.System, refs []actor.Ref) []map[string][]float32 {
	t.Helper()
	var out []map[string][]float32
	for i, r := range refs {
		off, err := actor.CallAs[learner.WeightsOffer](ctx, sys, r, learner.WeightsRequest{})
		if err != nil {
			t.Fatalf("weights of rank %d: %v", i, err)
		}
		data, err := sys.Bulk().Fetch(ctx, off.Ref)
		if err != nil {
			t.Fatal(err)
		}
		w, err := learner.DecodeWeights(fmt.Sprintf("rank %d", i), data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// 1, 2 and 4 ranks in separate processes, global batch 8, reach the
// weights of one learner on the same batches (tolerance equivTol).
func TestEquivalenceProcesses(t *testing.T) {
	sys := driverSystem(t)
	for _, tc := range []struct{ n, stage int }{{1, 1}, {2, 0}, {2, 1}, {4, 1}} {
		t.Run(fmt.Sprintf("ranks%d_stage%d", tc.n, tc.stage), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			refs, kids := startRanks(t, tc.n, tc.stage, nil)
			g, err := NewGroup(ctx, sys, refs, Options{Timeout: 20 * time.Second, BucketElems: 1000})
			if err != nil {
				t.Fatal(err)
			}
			wantGradients(t, g, tc.n)
			ref := newLearner(t, tinyConfig(learner.GRPO, 0, 0))
			for step := range 3 {
				want, err := ref.Train(groupBatch(step))
				if err != nil {
					t.Fatal(err)
				}
				got, err := g.Train(ctx, groupBatch(step))
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if got.Step != want.Step || got.Tokens != want.Tokens || got.Loss-want.Loss > 1e-5 || want.Loss-got.Loss > 1e-5 {
					t.Fatalf("step %d: stats %+v, want %+v", step, got, want)
				}
			}
			for i, k := range kids {
				sharedSegmentsOf(t, k.Cmd.Process.Pid, tc.n, fmt.Sprintf("rank %d", i))
			}
			w := ref.Model().Weights()
			for r, gw := range groupWeights(t, ctx, sys, refs) {
				d, at := maxDiff(gw, w)
				t.Logf("rank %d: max weight difference %g", r, d)
				if d > equivTol {
					t.Errorf("rank %d: weights differ by %g at %s (tolerance %g)", r, d, at, equivTol)
				}
			}
		})
	}
}

// A rank SIGKILLed in the middle of a step's gradient reduce-scatter fails
// the step on the others with an error naming it, within the collective
// timeout; the group restarts from the last checkpoint with a respawned
// rank and continues where training straight through would be.
func TestRankKilledMidStep(t *testing.T) {
	sys := driverSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Collectives of a ZeRO-1 rank: join's check is 0; each step does a
	// reduce-scatter, a norm sum, an all-gather and a statistics sum; so
	// op 5 is step 2's gradient reduce-scatter.
	refs, kids := startRanks(t, 3, 1, func(i int) []string {
		if i == 1 {
			return []string{"RLNODE_SHARD_DIE_AT_OP=5"}
		}
		return nil
	})
	const timeout = 3 * time.Second
	g, err := NewGroup(ctx, sys, refs, Options{Timeout: timeout, BucketElems: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Train(ctx, groupBatch(0)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := g.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	sock := socketOf(t, kids[1].Cmd.Process.Pid)
	if sock == "" && actor.HostID() != "" && os.Getenv("RLNODE_BULK_TCP") != "1" {
		t.Error("rank 1 has no same-host socket: the ranks talk over TCP")
	}
	start := time.Now()
	_, err = g.Train(ctx, groupBatch(1))
	t.Logf("failed step returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("the step succeeded with rank 1 dead")
	}
	select {
	case <-kids[1].Exited:
	case <-time.After(10 * time.Second):
		t.Fatal("rank 1 did not die")
	}
	msg := err.Error()
	// The driver's call to the dead rank fails at once; Group aborts the
	// others' collectives then, rather than letting them wait out the
	// timeout. A rank pushing a chunk to the dead one may see it first (the
	// connection is reset), or one waiting on its shared buffer (its
	// process has exited), and abort the others itself; either way the
	// others' errors name rank 1.
	if !strings.HasPrefix(msg, "learner shards: train (epoch 1): rank 1 ("+refs[1].Address+")") ||
		!(strings.Contains(msg, "rank 1 ("+refs[1].Address+") is lost") || strings.Contains(msg, " to rank 1 (node "+refs[1].Address+"): ") ||
			strings.Contains(msg, "rank 1 (node "+refs[1].Address+") died")) {
		t.Errorf("error does not lead with the dead rank 1 at %s, nor say the others were aborted for it: %v", refs[1].Address, err)
	}
	if lost := g.Lost(); len(lost) != 1 || lost[0] != 1 {
		t.Errorf("lost ranks %v, want [1]", lost)
	}
	if _, err := g.Train(ctx, groupBatch(1)); err == nil || !strings.Contains(err.Error(), ErrGroupFailed.Error()) {
		t.Errorf("train after a failure: %v; want ErrGroupFailed", err)
	}

	// Respawn rank 1 and restart everyone from the checkpoint.
	fresh, freshKids := startRanks(t, 1, 1, nil)
	refs[1] = fresh[0]
	if sock != "" {
		// The killed rank's socket is gone once another node has started.
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed rank's socket %s outlived the next start: %v", sock, err)
		}
	}
	if err := g.Restart(ctx, refs, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Train(ctx, groupBatch(1)); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	ref := newLearner(t, tinyConfig(learner.GRPO, 0, 0))
	for step := range 2 {
		if _, err := ref.Train(groupBatch(step)); err != nil {
			t.Fatal(err)
		}
	}
	w := ref.Model().Weights()
	for r, gw := range groupWeights(t, ctx, sys, refs) {
		if d, at := maxDiff(gw, w); d > equivTol {
			t.Errorf("rank %d after restart: weights differ by %g at %s", r, d, at)
		}
	}
	// No shared segment is left as a descriptor or a name, in any process,
	// and the ranks map only the restarted group's gradient segments (the
	// killed rank's and the first epoch's are gone with their mappings).
	noSegmentDescriptors(t, os.Getpid())
	for i, k := range []*proctest.Child{kids[0], kids[2], freshKids[0]} {
		noSegmentDescriptors(t, k.Cmd.Process.Pid)
		sharedSegmentsOf(t, k.Cmd.Process.Pid, 3, fmt.Sprintf("rank %d", []int{0, 2, 1}[i]))
	}
}

// A rank that stops answering without dying (SIGSTOP: its sockets stay
// open) fails the step too: the others time out waiting for it (to send,
// or to take what they push), and the
// group stops waiting for its reply a grace period later.
func TestRankStoppedMidStep(t *testing.T) {
	sys := driverSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refs, kids := startRanks(t, 2, 1, nil)
	g, err := NewGroup(ctx, sys, refs, Options{Timeout: 2 * time.Second, BucketElems: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kids[1].Cmd.Process.Signal(syscall.SIGCONT) })
	nodetest.FreezeProcess(t, kids[1].Cmd.Process.Pid)
	start := time.Now()
	_, err = g.Train(ctx, groupBatch(0))
	t.Logf("returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("the step succeeded with rank 1 stopped")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "learner shards: train (epoch 1): rank 1 ("+refs[1].Address+"): no reply within") || !(strings.Contains(msg, "rank 1 (node "+refs[1].Address+") sent nothing") || strings.Contains(msg, "rank 1 (node "+refs[1].Address+") took nothing")) {
		t.Errorf("error does not say rank 0 waited on rank 1 and rank 1 never replied: %v", err)
	}
}
