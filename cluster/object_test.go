package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

func init() {
	// test.objlen reads the object its argument names on the node it runs
	// on, and answers its length and first byte.
	RegisterTask("test.objlen", func(ctx context.Context, ref ObjectRef) ([2]int, error) {
		b, err := Get[[]byte](ctx, TaskNode(ctx), ref)
		if err != nil {
			return [2]int{}, err
		}
		return [2]int{len(b), int(b[0])}, nil
	})
	// test.objreader answers an ObjectRef with the length of the bytes it
	// names, read on the actor's node.
	actor.RegisterKind("test.objreader", func(*actor.Context, any) (actor.Actor, error) { return objReader{}, nil })
	// test.objput puts n bytes of value v on the node it runs on.
	RegisterTask("test.objput", func(ctx context.Context, nv [2]int) (ObjectRef, error) {
		return Put(ctx, TaskNode(ctx), bytes.Repeat([]byte{byte(nv[1])}, nv[0]))
	})
}

type objReader struct{}

func (objReader) Receive(ctx *actor.Context, msg any) (any, error) {
	ref, ok := msg.(ObjectRef)
	if !ok {
		return nil, fmt.Errorf("objreader: %T", msg)
	}
	b, err := Get[[]byte](ctx.Context(), ActorNode(ctx), ref)
	return len(b), err
}

// An object put on one node is read on it and, by a task, on another;
// read back with the wrong type, freed, or gone with the node that put
// it, a Get says so.
func TestObjectsPutGetFree(t *testing.T) {
	a, child := twoNodes(t, "obj-a", "obj-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	big := bytes.Repeat([]byte{7}, 300<<10) // over the inline bound: the bulk path carries it
	ref, err := Put(ctx, a, big)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Node != "obj-a" || ref.Size() < int64(len(big)) {
		t.Errorf("ref %+v", ref)
	}
	if got, err := Get[[]byte](ctx, a, ref); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("local Get: %d bytes, %v", len(got), err)
	} else {
		got[0] = 99 // a reader's copy is its own: the object stays as put
		if again, _ := Get[[]byte](ctx, a, ref); again[0] != 7 {
			t.Error("changing what a Get returned changed the object")
		}
	}
	if n, b := a.Objects(); n != 1 || b != ref.Size() {
		t.Errorf("Objects() = %d, %d", n, b)
	}
	statusObjects := func() (int, int64) {
		for _, ns := range a.Status().Nodes {
			if ns.ID == "obj-a" {
				return ns.Objects, ns.ObjectBytes
			}
		}
		return -1, -1
	}
	if n, b := statusObjects(); n != 1 || b != ref.Size() {
		t.Errorf("status says node obj-a holds %d objects of %d bytes", n, b)
	}
	there, err := Submit[[2]int](ctx, a, "test.objlen", ref, TaskOptions{Node: "obj-b"}).Get(ctx)
	if err != nil || there != [2]int{len(big), 7} {
		t.Fatalf("Get on another node: %v, %v", there, err)
	}
	// An actor on the other node reads it through its node (ActorNode).
	h, err := a.Spawn(ctx, "test.objreader", SpawnOptions{Node: "obj-b"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Call[int](ctx, h, ref); err != nil || got != len(big) {
		t.Errorf("an actor's Get: %d, %v", got, err)
	}
	if _, err := Get[string](ctx, a, ref); err == nil || !strings.Contains(err.Error(), "it holds []uint8, not string") {
		t.Errorf("Get with the wrong type: %v", err)
	}

	// Put on the child, read here.
	theirs, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{100 << 10, 9}, TaskOptions{Node: "obj-b"}).Get(ctx)
	if err != nil || theirs.Node != "obj-b" {
		t.Fatalf("put on the child: %+v, %v", theirs, err)
	}
	if got, err := Get[[]byte](ctx, a, theirs); err != nil || len(got) != 100<<10 || got[0] != 9 {
		t.Fatalf("Get of the child's object: %d bytes, %v", len(got), err)
	}

	a.Free(ref)
	if _, err := Get[[]byte](ctx, a, ref); !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "freed on node obj-a") {
		t.Errorf("local Get after Free: %v", err)
	}
	if _, err := Submit[[2]int](ctx, a, "test.objlen", ref, TaskOptions{Node: "obj-b"}).Get(ctx); err == nil || !strings.Contains(err.Error(), ErrObjectLost.Error()) {
		t.Errorf("Get on another node after Free: %v", err)
	}
	if n, b := a.Objects(); n != 0 || b != 0 {
		t.Errorf("after Free: Objects() = %d, %d", n, b)
	}
	if n, b := statusObjects(); n != 0 || b != 0 {
		t.Errorf("after Free, status says node obj-a holds %d objects of %d bytes", n, b)
	}

	// Freed from here, the child's object is gone on the child too.
	a.Free(theirs)
	waitFor(t, "the child's object freed", 10*time.Second, func() bool {
		_, err := Get[[]byte](ctx, a, theirs)
		return errors.Is(err, ErrObjectLost)
	})

	// An object of a node that is gone is lost.
	again, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{10, 1}, TaskOptions{Node: "obj-b"}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = child.Cmd.Process.Kill()
	waitFor(t, "obj-b gone", 20*time.Second, func() bool { return nodeCount(a) == 1 })
	if _, err := Get[[]byte](ctx, a, again); !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "node obj-b, which put it, is gone") {
		t.Errorf("Get of a gone node's object: %v", err)
	}
}

// A node's objects are bounded: with no spilling, a Put past
// Config.ObjectStoreBytes is refused naming the node and both figures,
// and Free makes room.
func TestObjectStoreBound(t *testing.T) {
	n, err := Start(context.Background(), Config{ObjectStoreBytes: 4096, ObjectSpillBytes: NoObjectSpill, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx := context.Background()
	first, err := Put(ctx, n, make([]byte, 3000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Put(ctx, n, make([]byte, 2000)); !errors.Is(err, ErrObjectStoreFull) || !strings.Contains(err.Error(), "of its 4096") {
		t.Errorf("Put past the bound: %v", err)
	}
	n.Free(first)
	if _, err := Put(ctx, n, make([]byte, 2000)); err != nil {
		t.Errorf("Put after Free: %v", err)
	}
	// An object larger than the whole store (spilling others cannot help).
	if _, err := Put(ctx, n, make([]byte, 5000)); !errors.Is(err, ErrObjectStoreFull) || !strings.Contains(err.Error(), "over its whole store of 4096 bytes") {
		t.Errorf("Put of an object over the whole store: %v", err)
	}
	if _, err := Start(context.Background(), Config{ObjectStoreBytes: -1, Logger: actor.DiscardLogger()}); err == nil {
		t.Error("a negative ObjectStoreBytes started a node")
	}
	if _, err := Start(context.Background(), Config{ObjectSpillBytes: -2, Logger: actor.DiscardLogger()}); err == nil || !strings.Contains(err.Error(), "ObjectSpillBytes -2") {
		t.Errorf("ObjectSpillBytes -2: %v", err)
	}
}

// TestFreeOfAnotherNodesObject: Free of an object another node holds has
// dropped it there when it returns, as README says ("a Get after that
// fails with ErrObjectLost"). It told the holder without waiting, so a Get
// right after the Free still read the object.
func TestFreeOfAnotherNodesObject(t *testing.T) {
	key := testKey(t)
	a, err := Start(context.Background(), Config{NodeID: "free-a", Bind: "127.0.0.1:0", Key: key, CPUs: 1, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := Start(context.Background(), Config{NodeID: "free-b", Bind: "127.0.0.1:0", Key: key, CPUs: 1, Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	waitFor(t, "2 nodes with directory records", 10*time.Second, func() bool { return nodeCount(b) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref, err := Put(ctx, a, []byte("kept on free-a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Get[[]byte](ctx, b, ref); err != nil || string(got) != "kept on free-a" {
		t.Fatalf("Get on free-b: %q, %v", got, err)
	}
	b.Free(ref)
	if got, err := Get[[]byte](ctx, a, ref); !errors.Is(err, ErrObjectLost) {
		t.Errorf("Get on the holder after another node freed it: %q, %v", got, err)
	}
	if n, _ := a.Objects(); n != 0 {
		t.Errorf("the holder keeps %d objects after Free", n)
	}
}

// TestGetOfAnEmptyRef: Get of the zero ObjectRef (a message field that did
// not travel, say) says the ref is empty; it said "node , which put it, is
// gone", naming no node.
func TestGetOfAnEmptyRef(t *testing.T) {
	n := startLocalNode(t, "emptyref-a", testKey(t))
	_, err := Get[[]byte](context.Background(), n, ObjectRef{})
	if err == nil || !strings.Contains(err.Error(), "empty ObjectRef") {
		t.Errorf("Get of the zero ref: %v", err)
	}
}

// TestPutOnAStoppedNode: Put on a node that has stopped fails naming it;
// it took the object into a store nobody could read any more and
// returned a ref as if kept.
func TestPutOnAStoppedNode(t *testing.T) {
	n, err := Start(context.Background(), Config{NodeID: "stopped-a", Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()
	if ref, err := Put(context.Background(), n, []byte("late")); err == nil || !strings.Contains(err.Error(), "node stopped-a has stopped") {
		t.Errorf("Put on a stopped node: %+v, %v", ref, err)
	}
}

// TestObjectsOnANilNode: Put and Get given no node (TaskNode(ctx) outside
// a task, ActorNode in an actor system no node started) fail saying so;
// they panicked on the nil pointer.
func TestObjectsOnANilNode(t *testing.T) {
	ctx := context.Background()
	if _, err := Put(ctx, TaskNode(ctx), []byte("x")); err == nil || !strings.Contains(err.Error(), "no node") {
		t.Errorf("Put on no node: %v", err)
	}
	ref := ObjectRef{ID: strings.Repeat("ab", 12), Node: "somewhere", Type: "x", Bytes: 1}
	if _, err := Get[[]byte](ctx, TaskNode(ctx), ref); err == nil || !strings.Contains(err.Error(), "no node") {
		t.Errorf("Get on no node: %v", err)
	}
}
