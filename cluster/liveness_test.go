package cluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

func init() {
	// test.wedge makes the actors of the node it runs on stuck for good
	// while its gossip runs on: every message that comes in over the
	// transport or the bulk path waits forever on the membership check,
	// as it would behind a deadlocked lock. Its own answer still leaves.
	RegisterTask("test.wedge", func(ctx context.Context, _ int) (int, error) {
		TaskNode(ctx).System().SetPeerFilter(func(string) bool { select {} })
		return 0, nil
	})
}

// stuckPair is a node here, quick to give up on a stuck peer (2 s of
// silence), and a node process to wedge.
func stuckPair(t *testing.T, id, childID string) (*Node, *testNode) {
	t.Helper()
	key := testKey(t)
	det := FastDetection
	det.Unresponsive = 2 * time.Second
	a, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 2, Detection: det,
		BulkStall: 2 * time.Second, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	child := startNodeProcess(t, childID, key, a.GossipAddress(), 0, "")
	// A wedged node cannot stop in order: killed at the end.
	t.Cleanup(func() { _ = child.Cmd.Process.Signal(syscall.SIGKILL) })
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	return a, child
}

// TestStuckNodeFailsGetsAndCalls: a node whose gossip answers while its
// actors are stuck stays a member, so membership never ends what waits on
// it. An object's Get and a plain actor call to it end with
// ErrNodeUnresponsive (or, for a Get whose fetch had begun,
// actor.ErrBulkStalled), naming the node, while it is still a member;
// before, both waited for their context (here a minute; forever under
// context.Background).
func TestStuckNodeFailsGetsAndCalls(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
		// afterAnswer wedges the holder between its answer and the
		// reader's fetch over the bulk path; else before the Get asks.
		afterAnswer bool
		tcp         bool // the bulk path over TCP, not shared memory
		want        error
	}{
		{"stuck before the holder is asked, small object", 100, false, false, ErrNodeUnresponsive},
		{"stuck before the holder is asked, large object", 8 << 20, false, false, ErrNodeUnresponsive},
		{"stuck between the answer and the fetch, same host", 8 << 20, true, false, actor.ErrBulkStalled},
		{"stuck between the answer and the fetch, TCP", 8 << 20, true, true, actor.ErrBulkStalled},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.tcp {
				t.Setenv("RLNODE_BULK_TCP", "1")
			}
			a, _ := stuckPair(t, "stuck-a", "stuck-b")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ref, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{c.size, 4}, TaskOptions{Node: "stuck-b"}).Get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wedge := func() {
				if _, err := Submit[int](ctx, a, "test.wedge", 0, TaskOptions{Node: "stuck-b"}).Get(ctx); err != nil {
					t.Errorf("wedge stuck-b: %v", err)
				}
			}
			if c.afterAnswer {
				beforeObjectFetch = func(ObjectRef) { wedge() }
				defer func() { beforeObjectFetch = nil }()
			} else {
				wedge()
			}
			got, err := Get[[]byte](ctx, a, ref)
			t.Logf("Get: %v", err)
			if err == nil && (len(got) != c.size || !bytes.Equal(got[:1], []byte{4})) {
				t.Error("Get read other bytes")
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "stuck-b") || !strings.Contains(err.Error(), ref.ID) {
				t.Errorf("Get of an object whose node is stuck: %v; want %v naming stuck-b and the object", err, c.want)
			}
			if errors.Is(err, ErrObjectLost) {
				t.Error("a stuck node's object reads as lost; it is not gone")
			}
			if ctx.Err() != nil {
				t.Error("Get did not end before the test's context")
			}
			if !a.isAlive("stuck-b") {
				t.Error("stuck-b left membership: the Get ended for that, not for its actors' silence")
			}
		})
	}

	t.Run("actor call", func(t *testing.T) {
		a, _ := stuckPair(t, "stuck-c", "stuck-d")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "stuck-counter", Node: "stuck-d"})
		if err != nil {
			t.Fatal(err)
		}
		if s, err := Call[Sum](ctx, h, Add{N: 1}); err != nil || s.Node != "stuck-d" {
			t.Fatalf("call before the wedge: %+v, %v", s, err)
		}
		if _, err := Submit[int](ctx, a, "test.wedge", 0, TaskOptions{Node: "stuck-d"}).Get(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = Call[Sum](ctx, h, Add{N: 1})
		t.Logf("Call: %v", err)
		if !errors.Is(err, ErrNodeUnresponsive) || !strings.Contains(err.Error(), "stuck-d") {
			t.Errorf("call to an actor on a stuck node: %v; want ErrNodeUnresponsive naming stuck-d", err)
		}
		if ctx.Err() != nil {
			t.Error("the call did not end before the test's context")
		}
		if !a.isAlive("stuck-d") {
			t.Error("stuck-d left membership: the call ended for that")
		}
	})
}

// TestStuckNodeFailsItsTasks: a task running on a node whose actors get
// stuck fails with ErrNodeUnresponsive, naming the node, rather than
// waiting for its answer for good.
func TestStuckNodeFailsItsTasks(t *testing.T) {
	a, _ := stuckPair(t, "stuck-e", "stuck-f")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := Submit[int](ctx, a, "test.pid", 120_000, TaskOptions{Node: "stuck-f"})
	waitFor(t, "the task running on stuck-f", 20*time.Second, func() bool {
		rec, ok := a.dir.Node("stuck-f")
		return ok && rec.Tasks > 0
	})
	if _, err := Submit[int](ctx, a, "test.wedge", 0, TaskOptions{Node: "stuck-f"}).Get(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := f.Get(ctx)
	t.Logf("task: %v", err)
	if !errors.Is(err, ErrNodeUnresponsive) || !strings.Contains(err.Error(), "stuck-f") {
		t.Errorf("a task on a stuck node: %v; want ErrNodeUnresponsive naming stuck-f", err)
	}
	if ctx.Err() != nil {
		t.Error("the task's Get did not end before the test's context")
	}
}

// TestBusyNodeIsNotUnresponsive: a call that takes longer than
// Detection.Unresponsive to answer (a task of 6 s, three windows), on a
// node whose actors are otherwise well, is answered: the ping goes to the
// node's own actor, which answers whatever the others are doing.
func TestBusyNodeIsNotUnresponsive(t *testing.T) {
	a, _ := stuckPair(t, "busy-a", "busy-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pid, err := Submit[int](ctx, a, "test.pid", 6000, TaskOptions{Node: "busy-b"}).Get(ctx)
	if err != nil || pid == os.Getpid() {
		t.Fatalf("a 6 s task on a well node (Unresponsive 2 s): pid %d, %v", pid, err)
	}
}

// TestUnresponsiveFromTheEnvironment: RLNODE_UNRESPONSIVE sets
// Detection.Unresponsive where the Config leaves it 0; a value that is no
// duration, or zero, stops the node from starting, naming the variable.
func TestUnresponsiveFromTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		err  string
	}{
		{"", DefaultUnresponsive, ""},
		{"2m", 2 * time.Minute, ""},
		{"-1s", -time.Second, ""},
		{"soon", 0, `RLNODE_UNRESPONSIVE="soon"`},
		{"0s", 0, `RLNODE_UNRESPONSIVE="0s"`},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(UnresponsiveEnv, c.env)
			n, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", Key: testKey(t), CPUs: 1, Memory: NoMemory, Logger: actor.DiscardLogger()})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("Start: %v, want an error naming %s", err, c.err)
				}
				if n != nil {
					n.Stop()
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer n.Stop()
			if got := n.cfg.Detection.Unresponsive; got != c.want {
				t.Errorf("Unresponsive %v, want %v", got, c.want)
			}
		})
	}
}
