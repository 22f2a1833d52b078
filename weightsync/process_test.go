package weightsync

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/weights"
)

// The multi-process test: this test binary re-executed as a second node
// (two protoactor remotes in one process share gRPC's global logger,
// shared/DESIGN.md). An engine host lives there and pulls each version
// over the bulk path from the driver's node.

func TestMain(m *testing.M) { nodetest.Main(m) }

func TestPublishAcrossProcesses(t *testing.T) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 90*time.Second)
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	child := nodetest.Start(t, n, nodetest.Options{ID: "child", CPUs: 2, Key: key})

	base := nativetest.Model(t, nativetest.Config(), 1)
	dir := nativetest.Save(t, base) // the child reads the same directory
	local := spawnEngines(t, n, "here-", dir, "driver", 1)
	remote := spawnEngines(t, n, "there-", dir, "child", 1)
	s := startSyncer(t, n, Config{PushTimeout: 30 * time.Second})
	register(t, s, local[0], remote[0])
	if st := s.Versions(); st.Engines[1].Name != "there-a" || st.Engines[1].Node != "child" {
		t.Fatalf("status %+v", st)
	}

	served := n.System().Stats().BulkBytesServed
	learner := nativetest.Model(t, nativetest.Config(), 2)
	rep, err := s.Publish(ctx, 1, weights.FullUpdate(learner))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Applied) != 2 {
		t.Fatalf("report %+v", rep)
	}
	// Both engines pulled the one offer: the driver served it twice. (The
	// server counts a chunk after writing it, so the count may trail the
	// readers' replies by a moment.)
	want := 2 * uint64(rep.Bytes)
	for deadline := time.Now().Add(10 * time.Second); n.System().Stats().BulkBytesServed-served < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := n.System().Stats().BulkBytesServed - served; got != want {
		t.Errorf("bulk bytes served %d, want 2×%d", got, rep.Bytes)
	}
	checkAgainst(t, "remote", learner, generate(t, n.System(), remote[0]), 1)
	checkAgainst(t, "local", learner, generate(t, n.System(), local[0]), 1)
	// On one host both engines mapped the version's shared copy
	// (weights.Receiver takes it with FetchView).
	if n.System().Bulk().LocalPath() != "" {
		if got := n.System().Stats().BulkBytesLocal; got < want {
			t.Errorf("%d bytes through shared memory, want at least 2×%d", got, rep.Bytes)
		}
	}

	// The child node dies: the next publish completes for the local engine
	// and names the lost one (removed by its failed push or its watch).
	child.Kill()
	learner2 := nativetest.Model(t, nativetest.Config(), 3)
	rep, err = s.Publish(ctx, 2, weights.FullUpdate(learner2))
	st := s.Versions()
	if len(rep.Applied) != 1 || rep.Applied[0].Name != "here-a" || len(st.Engines) != 1 || len(st.Removed) != 1 {
		t.Fatalf("after the kill: report %+v, err %v, status %+v", rep, err, st)
	}
	if r := st.Removed[0]; r.Name != "there-a" || r.Node != "child" {
		t.Fatalf("removed %+v", r)
	}
	if err != nil && (!errors.Is(err, ErrEngineFailed) || !strings.Contains(err.Error(), "engine there-a on node child")) {
		t.Fatalf("publish error does not name the engine and node: %v", err)
	}
	t.Logf("publish after the kill: %v; removed: %s", err, st.Removed[0].Removed)
	checkAgainst(t, "local after kill", learner2, generate(t, n.System(), local[0]), 2)

	// No segment outlives the node: none held or mapped by this process.
	n.Stop()
	if left := memfds(t); len(left) > 0 {
		t.Errorf("segments outlived the node: %v", left)
	}
}

// memfds lists this process's descriptors and mappings of the bulk
// path's shared segments (none where /proc does not exist).
func memfds(t *testing.T) []string {
	t.Helper()
	var out []string
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, f := range fds {
		if l, err := os.Readlink(f); err == nil && strings.Contains(l, "memfd:rlnode") {
			out = append(out, "fd "+l)
		}
	}
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, "memfd:rlnode") {
			out = append(out, "map "+line)
		}
	}
	return out
}
