package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// TestObjectRefFromAnEarlierLife: a ref to an object its node put before
// it was started again under the same id reads as lost, naming the node;
// it failed with the dial error of the earlier process's bulk address
// (connection refused), not ErrObjectLost.
func TestObjectRefFromAnEarlierLife(t *testing.T) {
	key := testKey(t)
	a := startLocalNodeWith(t, "life-a", key, LANDetection) // slow to notice the loss
	start := func(bind string) *Node {
		n, err := Start(context.Background(), Config{NodeID: "life-b", Bind: bind, Key: key, CPUs: 1,
			Join: []string{a.GossipAddress()}, Detection: LANDetection, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	b := start("127.0.0.1:0")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref, err := Put(ctx, b, bytes.Repeat([]byte{3}, 300<<10))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Get[[]byte](ctx, a, ref); err != nil || len(got) != 300<<10 {
		t.Fatalf("Get before the restart: %d bytes, %v", len(got), err)
	}
	gossip := b.GossipAddress()
	b.shutdown() // a crash
	b2 := start(gossip)
	if _, err := Put(ctx, b2, []byte("the new life's")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "life-b's new life known", 30*time.Second, func() bool {
		a.mmu.RLock()
		defer a.mmu.RUnlock()
		return a.members["life-b"].actor == b2.ActorAddress()
	})
	_, err = Get[[]byte](ctx, a, ref)
	if !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "life-b") {
		t.Errorf("Get of an object of the node's earlier life: %v", err)
	}
}

// TestForgedObjectRefs: a ref whose fields were changed on the wire never
// reads another object's bytes or decodes them as another type: an id
// the node does not hold is lost, a type other than the object's is
// refused naming both, and an id or node name of absurd size is refused
// before anything is asked of the network.
func TestForgedObjectRefs(t *testing.T) {
	a, _ := twoNodes(t, "forge-a", "forge-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{100 << 10, 9}, TaskOptions{Node: "forge-b"}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	strType, _, _ := actor.EncodeMessage("x")
	other := ref
	other.ID = strings.Repeat("ab", len(ref.ID)/2)
	if got, err := Get[[]byte](ctx, a, other); !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "forge-b") {
		t.Errorf("a ref with an id node forge-b does not hold: %d bytes, %v", len(got), err)
	}
	here := ref
	here.Node = "forge-a"
	if got, err := Get[[]byte](ctx, a, here); !errors.Is(err, ErrObjectLost) {
		t.Errorf("a ref naming the reader's node: %d bytes, %v", len(got), err)
	}
	retyped := ref
	retyped.Type = strType
	if got, err := Get[string](ctx, a, retyped); err == nil || !strings.Contains(err.Error(), strType) {
		t.Errorf("a ref with another type: %d bytes, %v", len(got), err)
	}
	huge := ref
	huge.ID = strings.Repeat("a", 1<<20)
	if _, err := Get[[]byte](ctx, a, huge); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a ref with a 1 MiB id: %v", err)
	}
	far := ref
	far.Node = strings.Repeat("n", 1<<20)
	if _, err := Get[[]byte](ctx, a, far); !errors.Is(err, ErrObjectLost) && (err == nil || !strings.Contains(err.Error(), "malformed")) {
		t.Errorf("a ref with a 1 MiB node name: %v", err)
	}
	// The real ref still reads, whole.
	if got, err := Get[[]byte](ctx, a, ref); err != nil || len(got) != 100<<10 || got[0] != 9 {
		t.Errorf("the ref as put: %d bytes, %v", len(got), err)
	}
}

// offerSegments counts this process's descriptors of bulk offer segments
// (memfd "rlnode-offer").
func offerSegments(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	n := 0
	for _, fd := range fds {
		if dst, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.Contains(dst, "rlnode-offer") {
			n++
		}
	}
	return n
}

// TestObjectReadOnOneHostKeepsNoSecondCopy: an object read by another
// process on the host is not copied into a shared segment that stays
// with it (uncounted by the store's bound) until Free: after the reads,
// the holder has no more offer segments than before them.
func TestObjectReadOnOneHostKeepsNoSecondCopy(t *testing.T) {
	if actor.HostID() == "" {
		t.Skip("no same-host path here")
	}
	a, _ := twoNodes(t, "copy-a", "copy-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := offerSegments(t)
	ref, err := Put(ctx, a, bytes.Repeat([]byte{4}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := Submit[[2]int](ctx, a, "test.objlen", ref, TaskOptions{Node: "copy-b"}).Get(ctx)
		if err != nil || got != [2]int{1 << 20, 4} {
			t.Fatalf("Get on copy-b: %v, %v", got, err)
		}
	}
	if after := offerSegments(t); after > before {
		t.Errorf("after the reads the holder keeps %d offer segments (it had %d): a second copy of the object, outside the store's bound", after, before)
	}
}

// TestObjectsUnderConcurrentPutGetFree: many goroutines put, read (here
// and on another process) and free objects at once; every read gives the
// object whole or ErrObjectLost, and the store ends empty (go test -race).
func TestObjectsUnderConcurrentPutGetFree(t *testing.T) {
	a, _ := twoNodes(t, "conc-a", "conc-b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 6 {
		wg.Go(func() {
			for i := range 8 {
				size := 1000 + (g*8+i)*37<<10%(400<<10)
				v := byte(g*8 + i + 1)
				ref, err := Put(ctx, a, bytes.Repeat([]byte{v}, size))
				if err != nil {
					errs <- err
					return
				}
				// Freed by another goroutine while it is read.
				var fg sync.WaitGroup
				fg.Go(func() {
					if i%2 == 0 {
						a.Free(ref)
					}
				})
				got, err := Get[[]byte](ctx, a, ref)
				if err == nil && (len(got) != size || got[0] != v || got[size-1] != v) {
					errs <- errors.New("a local Get read other bytes")
				} else if err != nil && !errors.Is(err, ErrObjectLost) {
					errs <- err
				}
				there, err := Submit[[2]int](ctx, a, "test.objlen", ref, TaskOptions{Node: "conc-b"}).Get(ctx)
				if err == nil && there != [2]int{size, int(v)} {
					errs <- errors.New("a Get on conc-b read other bytes")
				} else if err != nil && !strings.Contains(err.Error(), ErrObjectLost.Error()) {
					errs <- err
				}
				fg.Wait()
				a.Free(ref)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, b := a.Objects(); n != 0 || b != 0 {
		t.Errorf("after every Free: %d objects of %d bytes", n, b)
	}
}

// TestObjectOwnerKilledMidGet: the node holding an object is killed
// (SIGKILL) during a Get, before membership has noticed: the Get ends
// with ErrObjectLost naming the node, never other bytes, never a hang.
// It ended with the transport's error (connection refused, the bulk
// fetch's dial), which a caller cannot tell from a node still up.
func TestObjectOwnerKilledMidGet(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
		// afterAnswer kills the holder between its answer and the
		// reader's fetch over the bulk path; else it is killed before
		// the Get.
		afterAnswer bool
	}{
		{"killed between the answer and the fetch", 48 << 20, true},
		{"killed before the holder is asked, a large object", 1 << 20, false},
		{"killed before the holder is asked, a small object", 100, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, child := twoNodes(t, "kill-a", "kill-b")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ref, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{c.size, 6}, TaskOptions{Node: "kill-b"}).Get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kill := func() {
				_ = child.Cmd.Process.Signal(syscall.SIGKILL)
				<-child.Exited
			}
			if c.afterAnswer {
				beforeObjectFetch = func(ObjectRef) { kill() }
				defer func() { beforeObjectFetch = nil }()
			} else {
				kill()
			}
			if !a.isAlive("kill-b") {
				t.Log("membership noticed the kill before the Get began: the case is not what it means to be")
			}
			got, err := Get[[]byte](ctx, a, ref)
			t.Logf("Get: %v", err)
			if err == nil && (len(got) != c.size || got[0] != 6 || got[c.size-1] != 6) {
				t.Error("Get read other bytes")
			}
			if !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "kill-b") {
				t.Errorf("Get of an object whose node was killed: %v; want ErrObjectLost naming kill-b", err)
			}
			if ctx.Err() != nil {
				t.Error("Get did not end before the test's context")
			}
		})
	}
}

// TestObjectOwnerFrozenMidGet: the node holding an object is frozen
// (SIGSTOP): its sockets stay open and its kernel takes every byte, so no
// dial or read fails. Membership notices it as it notices a killed node;
// the Get then ends with ErrObjectLost naming the node, not at its
// context's end.
func TestObjectOwnerFrozenMidGet(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
		// afterAnswer freezes the holder between its answer and the
		// reader's fetch over the bulk path; else before the Get asks.
		afterAnswer bool
		// warm fetches an object first, so that the reader holds a bulk
		// connection to the holder (no dial, no handshake to time out).
		warm bool
	}{
		{"frozen between the answer and the fetch", 48 << 20, true, false},
		{"frozen between the answer and the fetch, on a bulk connection in use", 48 << 20, true, true},
		{"frozen before the holder is asked", 100, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, child := twoNodes(t, "freeze-a", "freeze-b")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ref, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{c.size, 6}, TaskOptions{Node: "freeze-b"}).Get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c.warm {
				if _, err := Get[[]byte](ctx, a, ref); err != nil {
					t.Fatal(err)
				}
			}
			freeze := func() {
				_ = child.Cmd.Process.Signal(syscall.SIGSTOP)
				// The signal is delivered on its own time: wait until the
				// process is stopped ("T" in /proc/PID/stat).
				stat := fmt.Sprintf("/proc/%d/stat", child.Cmd.Process.Pid)
				waitFor(t, "freeze-b stopped", 10*time.Second, func() bool {
					b, err := os.ReadFile(stat)
					i := bytes.LastIndexByte(b, ')')
					return err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T'
				})
			}
			// Thawed and killed at the end, so the process does not
			// outlive the test stopped.
			defer func() {
				_ = child.Cmd.Process.Signal(syscall.SIGKILL)
				_ = child.Cmd.Process.Signal(syscall.SIGCONT)
			}()
			if c.afterAnswer {
				beforeObjectFetch = func(ObjectRef) { freeze() }
				defer func() { beforeObjectFetch = nil }()
			} else {
				freeze()
			}
			got, err := Get[[]byte](ctx, a, ref)
			t.Logf("Get: %v", err)
			if err == nil && (len(got) != c.size || got[0] != 6 || got[c.size-1] != 6) {
				t.Error("Get read other bytes")
			}
			if !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "freeze-b") {
				t.Errorf("Get of an object whose node is frozen: %v; want ErrObjectLost naming freeze-b", err)
			}
			if ctx.Err() != nil {
				t.Error("Get did not end before the test's context")
			}
		})
	}
}
