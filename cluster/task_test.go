package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// taskRunning counts the test.hold tasks running in this process, and
// taskCancelled those whose context was cancelled.
var taskRunning, taskPeak, taskCancelled atomic.Int64

// taskCounted counts the test.count tasks run in this process.
var taskCounted atomic.Int64

func init() {
	RegisterTask("test.square", func(_ context.Context, x int) (int, error) { return x * x, nil })
	RegisterTask("test.count", func(_ context.Context, x int) (int64, error) { return taskCounted.Add(int64(x)), nil })
	RegisterTask("test.fail", func(context.Context, int) (int, error) { return 0, errors.New("no good") })
	RegisterTask("test.panic", func(context.Context, int) (int, error) { panic("boom") })
	// test.twice answers its bytes twice over.
	RegisterTask("test.twice", func(_ context.Context, b []byte) ([]byte, error) { return append(b, b...), nil })
	// test.pid holds its resources for ms milliseconds (or until its
	// context ends) and answers with its process id.
	RegisterTask("test.pid", func(ctx context.Context, ms int) (int, error) {
		k := taskRunning.Add(1)
		defer taskRunning.Add(-1)
		for p := taskPeak.Load(); k > p && !taskPeak.CompareAndSwap(p, k); p = taskPeak.Load() {
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return os.Getpid(), nil
		case <-ctx.Done():
			taskCancelled.Add(1)
			return 0, ctx.Err()
		}
	})
}

// twoNodes starts a node in this process and a child node process,
// id and childID, with env added to the child's environment, and
// waits until the first sees both.
func twoNodes(t testing.TB, id, childID string, env ...string) (*Node, *testNode) {
	t.Helper()
	key := testKey(t)
	a := startLocalNode(t, id, key)
	child := startNodeProcess(t, childID, key, a.GossipAddress(), 0, "", env...)
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	return a, child
}

// Tasks run where they fit, results come back in order, and the task's
// own failures come back as the callee's errors, not retried.
func TestTasksRunWhereTheyFit(t *testing.T) {
	a, child := twoNodes(t, "task-a", "task-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var fs []*Future[int]
	for i := range 10 {
		fs = append(fs, Submit[int](ctx, a, "test.square", i, TaskOptions{}))
	}
	got, err := Gather(ctx, fs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i*i {
			t.Fatalf("squares: %v", got)
		}
	}

	// Two tasks that each take a whole node's CPUs run one on each node,
	// once this node sees both free (the squares' ends reach it by gossip).
	waitFor(t, "both nodes' CPUs free", 10*time.Second, func() bool {
		for _, v := range a.Views() {
			if v.Free[CPU] != v.Total[CPU] {
				return false
			}
		}
		return true
	})
	pids, err := Gather(ctx, []*Future[int]{
		Submit[int](ctx, a, "test.pid", 300, TaskOptions{Resources: Resources{CPU: 2}}),
		Submit[int](ctx, a, "test.pid", 300, TaskOptions{Resources: Resources{CPU: 2}}),
	})
	if err != nil || !(pids[0] == child.Cmd.Process.Pid) == !(pids[1] == child.Cmd.Process.Pid) {
		t.Errorf("two whole-node tasks ran in processes %v (%v); want one here (%d) and one on the child (%d)", pids, err, os.Getpid(), child.Cmd.Process.Pid)
	}

	for _, c := range []struct {
		name string
		o    TaskOptions
		want string
	}{
		{"test.fail", TaskOptions{}, "no good"},
		{"test.panic", TaskOptions{}, "panic: boom"},
		{"test.none", TaskOptions{}, `no task "test.none" is registered here`},
		{"test.square", TaskOptions{Resources: Resources{CPU: 100}}, "no node can host {CPU:100}"},
		{"test.square", TaskOptions{Node: "task-z"}, "(no such live node)"},
		{"test.square", TaskOptions{MaxRetries: -1}, "MaxRetries -1 is negative"},
	} {
		_, err := Submit[int](ctx, a, c.name, 3, c.o).Get(ctx)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("task %s %+v: %v; want an error containing %q", c.name, c.o, err, c.want)
		}
		if c.want == "no good" {
			if _, ok := errors.AsType[*actor.ActorError](err); !ok {
				t.Errorf("a task's own error is %T, not *actor.ActorError", err)
			}
		}
	}
	if _, err := Submit[string](ctx, a, "test.square", 3, TaskOptions{}).Get(ctx); err == nil || !strings.Contains(err.Error(), "task test.square returns int, not string") {
		t.Errorf("a result of another type: %v", err)
	}
}

// Tasks wait for room instead of overcommitting a node, and one whose
// caller gives up is cancelled on its node, its resources freed.
func TestTasksQueueAndCancel(t *testing.T) {
	a := startLocalNode(t, "task-q", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	taskPeak.Store(0)
	var fs []*Future[int]
	for range 4 {
		fs = append(fs, Submit[int](ctx, a, "test.pid", 100, TaskOptions{Resources: Resources{CPU: 2}}))
	}
	if _, err := Gather(ctx, fs); err != nil {
		t.Fatal(err)
	}
	if p := taskPeak.Load(); p != 1 {
		t.Errorf("%d tasks of 2 CPUs ran at once on a node of 2", p)
	}

	// Many short tasks queue, none is refused for good.
	taskPeak.Store(0)
	fs = fs[:0]
	start := time.Now()
	for range 200 {
		fs = append(fs, Submit[int](ctx, a, "test.pid", 1, TaskOptions{}))
	}
	if _, err := Gather(ctx, fs); err != nil {
		t.Fatal(err)
	}
	t.Logf("200 tasks of 1 CPU and 1 ms on 2 CPUs: %v", time.Since(start))
	if p := taskPeak.Load(); p > 2 {
		t.Errorf("%d tasks of 1 CPU ran at once on a node of 2", p)
	}

	before := taskCancelled.Load()
	tctx, tcancel := context.WithCancel(ctx)
	f := Submit[int](tctx, a, "test.pid", 60_000, TaskOptions{})
	waitFor(t, "the task to start", 10*time.Second, func() bool { return taskRunning.Load() == 1 })
	if st := a.Status(); st.Nodes[0].Tasks != 1 {
		t.Errorf("status says %d tasks run on %s; want 1", st.Nodes[0].Tasks, st.Nodes[0].ID)
	}
	tcancel()
	if _, err := f.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled task's result: %v; want context.Canceled", err)
	}
	waitFor(t, "the task's context cancelled on its node", 10*time.Second, func() bool { return taskCancelled.Load() == before+1 })
	waitFor(t, "the task's CPU freed", 10*time.Second, func() bool {
		rec, _ := a.dir.Node(a.ID())
		return rec.Used[CPU] == 0 && rec.Tasks == 0
	})
}

// A task whose node is lost runs again elsewhere when it has retries
// left, and fails naming the loss when it has none.
func TestTaskRetriesAfterItsNodeIsLost(t *testing.T) {
	for _, retries := range []int{1, 0} {
		a, child := twoNodes(t, fmt.Sprintf("task-r%d", retries), "task-lost")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// Keep this node full, so the task goes to the child.
		hctx, release := context.WithCancel(ctx)
		hold := Submit[int](hctx, a, "test.pid", 60_000, TaskOptions{Resources: Resources{CPU: 2}, Node: a.ID()})
		waitFor(t, "this node full", 10*time.Second, func() bool { return taskRunning.Load() == 1 })
		// Long enough to be killed with its node; run again, it ends.
		f := Submit[int](ctx, a, "test.pid", 5_000, TaskOptions{Resources: Resources{CPU: 1}, MaxRetries: retries})
		waitFor(t, "the task running on the child", 10*time.Second, func() bool {
			rec, _ := a.dir.Node("task-lost")
			return rec.Used[CPU] == 1
		})
		_ = child.Cmd.Process.Kill()
		<-child.Exited
		if retries == 0 {
			_, err := f.Get(ctx)
			if !errors.Is(err, actor.ErrNodeLost) && !errors.Is(err, actor.ErrConnLost) || !strings.Contains(err.Error(), "node task-lost (after 0 retries)") {
				t.Errorf("task lost with its node, no retries: %v; want the loss named", err)
			}
		} else {
			// Once it waits for room here, make some.
			time.Sleep(500 * time.Millisecond)
			release()
			pid, err := f.Get(ctx)
			if err != nil || pid != os.Getpid() {
				t.Errorf("task lost with its node, 1 retry: pid %d, %v; want it run again here (%d)", pid, err, os.Getpid())
			}
		}
		release()
		_, _ = hold.Get(ctx)
		cancel()
	}
}

// A node that stops gracefully hands its running tasks back, and they run
// elsewhere without using a retry.
func TestTaskHandedBackByAStoppingNode(t *testing.T) {
	a, child := twoNodes(t, "task-h", "task-stops")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hctx, release := context.WithCancel(ctx)
	defer release()
	hold := Submit[int](hctx, a, "test.pid", 60_000, TaskOptions{Resources: Resources{CPU: 2}, Node: a.ID()})
	waitFor(t, "this node full", 10*time.Second, func() bool { return taskRunning.Load() == 1 })
	f := Submit[int](ctx, a, "test.pid", 5_000, TaskOptions{Resources: Resources{CPU: 1}})
	waitFor(t, "the task running on the child", 10*time.Second, func() bool {
		rec, _ := a.dir.Node("task-stops")
		return rec.Used[CPU] == 1
	})
	child.Stdin.Close() // the child stops gracefully
	<-child.Exited
	release()
	pid, err := f.Get(ctx)
	if err != nil || pid != os.Getpid() {
		t.Errorf("task of a stopping node: pid %d, %v; want it run again here (%d)", pid, err, os.Getpid())
	}
	_, _ = hold.Get(ctx)
}

// CallAsync's futures gather actors' replies in order, and a failing
// call's error is Gather's.
func TestCallAsyncGathers(t *testing.T) {
	a := startLocalNode(t, "async-a", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hs []*Handle
	for i := range 3 {
		h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: fmt.Sprintf("async-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	var fs []*Future[Sum]
	for i, h := range hs {
		fs = append(fs, CallAsync[Sum](ctx, h, Add{N: i + 1}))
	}
	sums, err := Gather(ctx, fs)
	if err != nil || len(sums) != 3 || sums[0].N != 1 || sums[1].N != 2 || sums[2].N != 3 {
		t.Fatalf("gathered %+v, %v", sums, err)
	}
	if err := hs[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = Gather(ctx, []*Future[Sum]{CallAsync[Sum](ctx, hs[0], Add{N: 1}), CallAsync[Sum](ctx, hs[1], Add{N: 1})})
	if err == nil || !strings.Contains(err.Error(), "future 1 of 2") {
		t.Errorf("a call to a stopped actor, gathered: %v; want future 1's error", err)
	}
}

// Arguments and results over InlineArgsMax travel on the bulk path: a
// task on a child node whose message limit is 64 KiB takes 1 MiB and
// answers 2 MiB.
func TestTaskLargeArgumentsAndResult(t *testing.T) {
	t.Setenv(actor.MaxMessageSizeEnv, "64KiB")
	a, child := twoNodes(t, "task-big", "task-big-b", actor.MaxMessageSizeEnv+"=64KiB")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in := make([]byte, 1<<20)
	for i := range in {
		in[i] = byte(i * 7)
	}
	for _, node := range []string{child.id, a.ID()} {
		out, err := Submit[[]byte](ctx, a, "test.twice", in, TaskOptions{Node: node}).Get(ctx)
		if err != nil || len(out) != 2<<20 || !bytes.Equal(out[:1<<20], in) || !bytes.Equal(out[1<<20:], in) {
			t.Errorf("1 MiB to a task on node %s: %d bytes back, %v; want the 2 MiB", node, len(out), err)
		}
	}
}

// A future whose result is in gives it also to a Get whose ctx has ended
// (select chose at random between the two before: about half of these
// Gets returned context.Canceled over a result that was there).
func TestFutureGetPrefersTheResult(t *testing.T) {
	a := startLocalNode(t, "future-done", testKey(t))
	f := Submit[int](context.Background(), a, "test.square", 3, TaskOptions{})
	<-f.Done()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		if v, err := f.Get(ended); err != nil || v != 9 {
			t.Fatalf("Get with an ended ctx on a done future: %v, %v; want 9", v, err)
		}
	}
	if got, err := Gather(ended, []*Future[int]{f}); err != nil || got[0] != 9 {
		t.Fatalf("Gather with an ended ctx on a done future: %v, %v", got, err)
	}
}

// A task pinned to a node that is lost while it runs has nowhere to run
// again: it fails with the loss (errors.Is ErrNodeLost or ErrConnLost, as
// README says), not only with "no node can host ... (no such live node)".
func TestPinnedTaskLostWithItsNodeSaysSo(t *testing.T) {
	a, child := twoNodes(t, "pinned-a", "pinned-lost")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := Submit[int](ctx, a, "test.pid", 60_000, TaskOptions{Node: "pinned-lost", MaxRetries: 2})
	waitFor(t, "the task running on the child", 10*time.Second, func() bool {
		rec, _ := a.dir.Node("pinned-lost")
		return rec.Used[CPU] == 1
	})
	_ = child.Cmd.Process.Kill()
	<-child.Exited
	_, err := f.Get(ctx)
	if !errors.Is(err, actor.ErrNodeLost) && !errors.Is(err, actor.ErrConnLost) || !strings.Contains(err.Error(), "lost with node pinned-lost") {
		t.Errorf("a pinned task lost with its node: %v; want the loss named and wrapped", err)
	}
}

// A Submit whose result type or arguments do not fit the task as this
// process registered it fails before anything runs (it ran, and failed
// with "result is int, not string" after the work was done).
func TestSubmitChecksTypesFirst(t *testing.T) {
	n, err := Start(context.Background(), Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := taskCounted.Load()
	for _, c := range []struct {
		f    func() error
		want string
	}{
		{func() error { _, err := Submit[string](ctx, n, "test.count", 1, TaskOptions{}).Get(ctx); return err }, "task test.count returns int64, not string"},
		{func() error { _, err := Submit[int64](ctx, n, "test.count", "one", TaskOptions{}).Get(ctx); return err }, "task test.count takes int arguments, not string"},
	} {
		if err := c.f(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	if taskCounted.Load() != ran {
		t.Error("a mistyped task ran")
	}
	if sq, err := Submit[any](ctx, n, "test.square", 3, TaskOptions{}).Get(ctx); err != nil || sq != 9 {
		t.Errorf("Submit[any]: %v, %v", sq, err)
	}
}

// Wait returns as many done futures as asked, in the order given, as
// soon as they are done; the rest stay pending; a ctx that ends first
// returns what is done with its error.
func TestWait(t *testing.T) {
	mk := func() *Future[int] { return &Future[int]{done: make(chan struct{})} }
	finish := func(f *Future[int], v int) { f.res = v; close(f.done) }
	fs := []*Future[int]{mk(), mk(), mk()}
	go finish(fs[2], 2)
	ctx := context.Background()
	ready, pending, err := Wait(ctx, fs, 1)
	if err != nil || len(ready) != 1 || ready[0] != fs[2] || len(pending) != 2 || pending[0] != fs[0] || pending[1] != fs[1] {
		t.Fatalf("first of three: ready %v, pending %v, %v", ready, pending, err)
	}
	finish(fs[0], 0)
	finish(fs[1], 1)
	// Both done: one asked, one given, the other stays pending though done.
	ready, pending, err = Wait(ctx, pending, 1)
	if err != nil || len(ready) != 1 || ready[0] != fs[0] || len(pending) != 1 || pending[0] != fs[1] {
		t.Fatalf("one of two done: ready %v, pending %v, %v", ready, pending, err)
	}
	if v, _ := ready[0].Get(ctx); v != 0 {
		t.Errorf("ready future's result %d", v)
	}
	// More asked than there are: all of them.
	if ready, pending, err = Wait(ctx, fs, 10); err != nil || len(ready) != 3 || len(pending) != 0 {
		t.Errorf("ten of three: ready %d, pending %d, %v", len(ready), len(pending), err)
	}
	// ctx ends before the second is done.
	slow := []*Future[int]{mk(), mk()}
	finish(slow[1], 1)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ready, pending, err = Wait(cctx, slow, 2)
	if !errors.Is(err, context.Canceled) || len(ready) != 1 || ready[0] != slow[1] || len(pending) != 1 {
		t.Errorf("cancelled: ready %v, pending %v, %v", ready, pending, err)
	}
}

// TestWaitAndGatherRefuseNilFutures: a nil future in the list is an error
// naming its place; Wait's watcher goroutine crashed the process on it.
func TestWaitAndGatherRefuseNilFutures(t *testing.T) {
	done := &Future[int]{done: make(chan struct{})}
	close(done.done)
	for _, fs := range [][]*Future[int]{{nil}, {done, nil}, {done, {}}} {
		if _, _, err := Wait(context.Background(), fs, 1); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("future %d of %d is nil", len(fs)-1, len(fs))) {
			t.Errorf("Wait over %d futures, the last nil: %v", len(fs), err)
		}
		if _, err := Gather(context.Background(), fs); err == nil || !strings.Contains(err.Error(), "is nil") {
			t.Errorf("Gather over %d futures, the last nil: %v", len(fs), err)
		}
	}
}
