package cluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// spillFiles lists the spill files under root (every node's folder).
func spillFiles(t *testing.T, root string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "*", "*"))
	return files
}

// TestObjectSpill: a Put past the memory bound writes the least recently
// used objects to the node's spill folder (0700, files 0600), and a Get
// here or on another process reads them back; status counts the bytes
// spilled; Free removes the file; a Put past both bounds fails naming the
// node and both figures; a torn or changed file reads as lost, naming
// the file; the folder goes when the node stops.
func TestObjectSpill(t *testing.T) {
	key := testKey(t)
	root := t.TempDir()
	const obj = 300 << 10
	a, err := Start(context.Background(), Config{NodeID: "spill-a", Bind: "127.0.0.1:0", Key: key, CPUs: 1,
		ObjectStoreBytes: 1 << 20, ObjectSpillBytes: 1 << 20, ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	startNodeProcess(t, "spill-b", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var refs []ObjectRef
	put := func(v byte) error {
		ref, err := Put(ctx, a, bytes.Repeat([]byte{v}, obj))
		if err == nil {
			refs = append(refs, ref)
		}
		return err
	}
	for v := range byte(3) {
		if err := put(v + 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Get[[]byte](ctx, a, refs[0]); err != nil { // refs[1] is now the least recently used
		t.Fatal(err)
	}
	if files := spillFiles(t, root); len(files) != 0 {
		t.Fatalf("spilled before the bound: %v", files)
	}
	if err := put(4); err != nil {
		t.Fatalf("Put past the memory bound: %v", err)
	}
	files := spillFiles(t, root)
	if len(files) != 1 || filepath.Base(files[0]) != refs[1].ID {
		t.Fatalf("spill files %v, want the least recently used object's (%s)", files, refs[1].ID)
	}
	if st, err := os.Stat(filepath.Dir(files[0])); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("spill folder: %v, %v", st.Mode(), err)
	}
	if st, err := os.Stat(files[0]); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("spill file: %v, %v", st.Mode(), err)
	}
	if got := a.SpilledObjectBytes(); got != refs[1].Size() {
		t.Errorf("SpilledObjectBytes %d, want %d", got, refs[1].Size())
	}
	if _, b := a.Objects(); b != 3*refs[1].Size() {
		t.Errorf("bytes in memory %d, want %d", b, 3*refs[1].Size())
	}
	for _, ns := range a.Status().Nodes {
		if ns.ID == "spill-a" && ns.ObjectSpilledBytes != refs[1].Size() {
			t.Errorf("status: %d bytes spilled", ns.ObjectSpilledBytes)
		}
	}
	for i, ref := range refs {
		if got, err := Get[[]byte](ctx, a, ref); err != nil || len(got) != obj || got[0] != byte(i+1) || got[obj-1] != byte(i+1) {
			t.Errorf("Get of object %d here: %d bytes, %v", i, len(got), err)
		}
		there, err := Submit[[2]int](ctx, a, "test.objlen", ref, TaskOptions{Node: "spill-b"}).Get(ctx)
		if err != nil || there != [2]int{obj, i + 1} {
			t.Errorf("Get of object %d on spill-b: %v, %v", i, there, err)
		}
	}
	// Two more fill the spill budget (1 MiB: three objects) ...
	for v := byte(5); v <= 6; v++ {
		if err := put(v); err != nil {
			t.Fatalf("Put %d: %v", v, err)
		}
	}
	// ... and the next finds both bounds used.
	err = put(7)
	if !errors.Is(err, ErrObjectStoreFull) || !strings.Contains(err.Error(), "spill-a") ||
		!strings.Contains(err.Error(), "of its 1048576 and") || !strings.Contains(err.Error(), "spilled of its 1048576") {
		t.Fatalf("Put past both bounds: %v", err)
	}
	// Free of a spilled object removes its file and makes room on disk.
	spilledRef := refs[1]
	a.Free(spilledRef)
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the freed object's spill file: %v", err)
	}
	if _, err := Get[[]byte](ctx, a, spilledRef); !errors.Is(err, ErrObjectLost) {
		t.Errorf("Get of a freed spilled object: %v", err)
	}
	if err := put(9); err != nil {
		t.Errorf("Put after a spilled object was freed: %v", err)
	}

	// A torn file (cut short) and a changed one read as lost, naming the
	// file, here and on the other process.
	files = spillFiles(t, root)
	byID := map[string]string{}
	for _, f := range files {
		byID[filepath.Base(f)] = f
	}
	var torn, changed ObjectRef
	for _, ref := range refs {
		if f := byID[ref.ID]; f != "" && ref != spilledRef {
			if torn.ID == "" {
				torn = ref
				if err := os.Truncate(f, 1000); err != nil {
					t.Fatal(err)
				}
			} else if changed.ID == "" {
				changed = ref
				fh, err := os.OpenFile(f, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = fh.WriteAt([]byte{0xee}, 5000)
				fh.Close()
			}
		}
	}
	if changed.ID == "" {
		t.Fatalf("want two spilled objects, have files %v", files)
	}
	for _, c := range []struct {
		ref  ObjectRef
		want string
	}{{torn, "torn"}, {changed, "checksum"}} {
		_, err := Get[[]byte](ctx, a, c.ref)
		if !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), byID[c.ref.ID]) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Get of a %s spill file: %v", c.want, err)
		}
		_, err = Submit[[2]int](ctx, a, "test.objlen", c.ref, TaskOptions{Node: "spill-b"}).Get(ctx)
		if err == nil || !strings.Contains(err.Error(), ErrObjectLost.Error()) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Get on spill-b of a %s spill file: %v", c.want, err)
		}
	}

	a.Stop()
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("after Stop the spill root holds %v", left)
	}
}

// TestObjectSpillOfAKilledNode: the spill folder of a node killed with
// objects spilled is removed by the next node to start on the host; a
// live node's is left alone.
func TestObjectSpillOfAKilledNode(t *testing.T) {
	key := testKey(t)
	root := t.TempDir()
	a, err := Start(context.Background(), Config{NodeID: "spillk-a", Bind: "127.0.0.1:0", Key: key, CPUs: 1, ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	child := startNodeProcess(t, "spillk-b", key, a.GossipAddress(), 0, "",
		"RLNODE_TEST_OBJECT_STORE=500000", "RLNODE_TEST_SPILL_DIR="+root)
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for v := range 3 {
		if _, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{200 << 10, v}, TaskOptions{Node: "spillk-b"}).Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if files := spillFiles(t, root); len(files) != 1 {
		t.Fatalf("the child's spill files: %v", files)
	}
	// A live node's folder survives another node's start.
	live, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	live.Stop()
	if files := spillFiles(t, root); len(files) != 1 {
		t.Fatalf("a live node's spill files after another node started: %v", files)
	}
	_ = child.Cmd.Process.Kill()
	<-child.Exited
	n, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("a killed node's spill folder stayed: %v", left)
	}
}

// TestObjectStoreFullOnSeveralNodesAtOnce: Puts from many goroutines at
// once on two nodes with small bounds (no spilling) take exactly what
// fits on each, and each refusal names its node.
func TestObjectStoreFullOnSeveralNodesAtOnce(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "full-a", key)
	for _, id := range []string{"full-b", "full-c"} {
		startNodeProcess(t, id, key, a.GossipAddress(), 0, "", "RLNODE_TEST_OBJECT_STORE=1000000",
			"RLNODE_TEST_OBJECT_SPILL="+strconv.Itoa(NoObjectSpill))
	}
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	ok := map[string]int{}
	var wg sync.WaitGroup
	for _, id := range []string{"full-b", "full-c"} {
		for i := range 6 {
			wg.Go(func() {
				ref, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{300 << 10, i}, TaskOptions{Node: id}).Get(ctx)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && ref.Node == id:
					ok[id]++
				case err != nil && strings.Contains(err.Error(), ErrObjectStoreFull.Error()) && strings.Contains(err.Error(), "node "+id):
				default:
					t.Errorf("Put on %s: %+v, %v", id, ref, err)
				}
			})
		}
	}
	wg.Wait()
	if ok["full-b"] != 3 || ok["full-c"] != 3 {
		t.Errorf("Puts taken: %v, want 3 on each node (1,000,000 bytes of 300 KiB objects)", ok)
	}
}

// TestSpilledObjectReadersShareOneCopy: readers of a spilled object at
// once share the bytes read back from its file while any holds them;
// each read the file into a copy of its own (N readers of a 1 GiB object,
// their offers held up to objectOfferTTL: N GiB outside every bound).
func TestSpilledObjectReadersShareOneCopy(t *testing.T) {
	n, err := Start(context.Background(), Config{ObjectStoreBytes: 100 << 10, ObjectSpillDir: t.TempDir(), Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx := context.Background()
	first, err := Put(ctx, n, bytes.Repeat([]byte{1}, 80<<10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Put(ctx, n, bytes.Repeat([]byte{2}, 80<<10)); err != nil {
		t.Fatal(err)
	}
	if n.SpilledObjectBytes() != first.Size() {
		t.Fatalf("spilled %d bytes, want the first object's %d", n.SpilledObjectBytes(), first.Size())
	}
	one := n.lookupObject(first.ID, true)
	two := n.lookupObject(first.ID, true)
	if one.Lost != "" || len(one.Body) != int(first.Size()) || &one.Body[0] != &two.Body[0] {
		t.Errorf("two readers at once read the spilled object into two copies (%q)", one.Lost)
	}
	runtime.KeepAlive(one.Body)
}

// TestSpillSweepLeavesOtherHostsFolders: where the spill root is on a
// filesystem hosts share (a home on NFS), a starting node removes only
// the folders of this host's dead processes, not those of another host's
// live node (whose pid means nothing here).
func TestSpillSweepLeavesOtherHostsFolders(t *testing.T) {
	root := t.TempDir()
	n, err := Start(context.Background(), Config{ObjectStoreBytes: 1000, ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := Put(ctx, n, make([]byte, 600)); err != nil {
			t.Fatal(err)
		}
	}
	ours, _ := os.ReadDir(root)
	if len(ours) != 1 {
		t.Fatalf("spill root: %v", ours)
	}
	// The same folder name, as another host's node would make it: the pid
	// and start of a process that does not run here.
	name := strings.Replace(ours[0].Name(), strconv.Itoa(os.Getpid()), "999999999", 1)
	other := filepath.Join(root, strings.Replace(name, spillHost(), "another-host", 1))
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	m, err := Start(context.Background(), Config{ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another host's spill folder: %v", err)
	}
}

// TestObjectSpillUnderConcurrentPutGetFree: many goroutines put past the
// memory bound (spilling each other's objects), read and free at once:
// every read is whole, every refusal is ErrObjectStoreFull, and once all
// is freed the store counts nothing, in memory or on disk, and no file is
// left (go test -race).
func TestObjectSpillUnderConcurrentPutGetFree(t *testing.T) {
	root := t.TempDir()
	n, err := Start(context.Background(), Config{ObjectStoreBytes: 1 << 20, ObjectSpillBytes: 3 << 20, ObjectSpillDir: root, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var kept []ObjectRef
	for g := range 8 {
		wg.Go(func() {
			for i := range 12 {
				v := byte(g*12 + i + 1)
				size := (100 + (g*12+i)%5*40) << 10
				ref, err := Put(ctx, n, bytes.Repeat([]byte{v}, size))
				if err != nil {
					if !errors.Is(err, ErrObjectStoreFull) {
						t.Error(err)
					}
					continue
				}
				got, err := Get[[]byte](ctx, n, ref)
				if err != nil || len(got) != size || got[0] != v || got[size-1] != v {
					t.Errorf("Get: %d bytes, %v", len(got), err)
				}
				if i%2 == 0 {
					n.Free(ref)
				} else {
					mu.Lock()
					kept = append(kept, ref)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, ref := range kept {
		got, err := Get[[]byte](ctx, n, ref)
		if err != nil || int64(len(got)) < ref.Size()-5 {
			t.Errorf("Get of a kept object: %d bytes, %v", len(got), err)
		}
	}
	n.Free(kept...)
	if c, b := n.Objects(); c != 0 || b != 0 || n.SpilledObjectBytes() != 0 {
		t.Errorf("after every Free: %d objects, %d bytes in memory, %d spilled", c, b, n.SpilledObjectBytes())
	}
	if files := spillFiles(t, root); len(files) != 0 {
		t.Errorf("after every Free: spill files %v", files)
	}
}
