package cluster

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

func init() {
	// test.fdcount answers how many descriptors the node's process holds.
	RegisterTask("test.fdcount", func(ctx context.Context, _ int) (int, error) {
		fds, err := os.ReadDir("/proc/self/fd")
		return len(fds), err
	})
}

// fdCount is how many descriptors this process holds.
func fdCount(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(fds)
}

// shmCount is how many entries /dev/shm holds (0 where there is none).
func shmCount() int {
	e, _ := os.ReadDir("/dev/shm")
	return len(e)
}

// TestObjectGetsLeakNothing: many Gets over the bulk path between two
// processes on the host, each way, leave the reading and the holding
// process with no more descriptors after many reads than after a few,
// and nothing in /dev/shm.
func TestObjectGetsLeakNothing(t *testing.T) {
	a, _ := twoNodes(t, "leak-a", "leak-b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mine, err := Put(ctx, a, bytes.Repeat([]byte{5}, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := Submit[ObjectRef](ctx, a, "test.objput", [2]int{1 << 20, 8}, TaskOptions{Node: "leak-b"}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shm := shmCount()
	round := func(n int) {
		for range n {
			if got, err := Submit[[2]int](ctx, a, "test.objlen", mine, TaskOptions{Node: "leak-b"}).Get(ctx); err != nil || got != [2]int{1 << 20, 5} {
				t.Fatalf("Get on leak-b: %v, %v", got, err)
			}
			if got, err := Get[[]byte](ctx, a, theirs); err != nil || len(got) != 1<<20 || got[0] != 8 {
				t.Fatalf("Get of leak-b's object: %d bytes, %v", len(got), err)
			}
		}
	}
	childFDs := func() int {
		n, err := Submit[int](ctx, a, "test.fdcount", 0, TaskOptions{Node: "leak-b"}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	round(10)
	few, childFew := fdCount(t), childFDs()
	round(100)
	many, childMany := fdCount(t), childFDs()
	t.Logf("descriptors after 10 rounds %d here, %d on leak-b; after 110 %d, %d; /dev/shm %d -> %d", few, childFew, many, childMany, shm, shmCount())
	if many > few+2 || childMany > childFew+2 {
		t.Errorf("descriptors after 10 rounds of Gets %d here, %d on leak-b; after 110 %d, %d", few, childFew, many, childMany)
	}
	if n := shmCount(); n > shm {
		t.Errorf("/dev/shm holds %d entries, %d before the Gets", n, shm)
	}
}
