package weightsync

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/proctest"
)

// The multi-process test: this test binary re-executed as a second node
// (two protoactor remotes in one process share gRPC's global logger,
// shared/DESIGN.md). An engine host lives there and pulls each version
// over the bulk path from the driver's node.

func TestMain(m *testing.M) {
	if os.Getenv("RLNODE_WEIGHTSYNC_NODE") == "1" {
		os.Exit(runChildNode())
	}
	os.Exit(m.Run())
}

func runChildNode() int {
	key, _ := base64.StdEncoding.DecodeString(os.Getenv("RLNODE_WEIGHTSYNC_KEY"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "child", Bind: "127.0.0.1:0", Key: key, CPUs: 2,
		Join: []string{os.Getenv("RLNODE_WEIGHTSYNC_JOIN")}, Logger: actor.DiscardLogger()})
	cancel()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("UP")
	_, _ = io.Copy(io.Discard, os.Stdin) // stdin closing means stop
	n.Stop()
	return 0
}

// startChild starts the child node joined to n and returns its process.
func startChild(t *testing.T, n *cluster.Node, key []byte) *exec.Cmd {
	t.Helper()
	c := proctest.Start(t, 30*time.Second, "RLNODE_WEIGHTSYNC_NODE=1", "RLNODE_WEIGHTSYNC_KEY="+base64.StdEncoding.EncodeToString(key),
		"RLNODE_WEIGHTSYNC_JOIN="+n.GossipAddress())
	if c.Line != "UP" {
		t.Fatalf("child node: %s", c.Line)
	}
	return c.Cmd
}

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
	child := startChild(t, n, key)

	base := randomModel(t, tinyConfig(), 1)
	dir := saveModel(t, base) // the child reads the same directory
	local := spawnEngines(t, n, "here-", dir, "driver", 1)
	remote := spawnEngines(t, n, "there-", dir, "child", 1)
	s := startSyncer(t, n, Config{PushTimeout: 30 * time.Second})
	register(t, s, local[0], remote[0])
	if st := s.Versions(); st.Engines[1].Name != "there-a" || st.Engines[1].Node != "child" {
		t.Fatalf("status %+v", st)
	}

	served := n.System().Stats().BulkBytesServed
	learner := randomModel(t, tinyConfig(), 2)
	rep, err := s.Publish(ctx, 1, FullUpdate(learner))
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

	// The child node dies: the next publish completes for the local engine
	// and names the lost one (removed by its failed push or its watch).
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	learner2 := randomModel(t, tinyConfig(), 3)
	rep, err = s.Publish(ctx, 2, FullUpdate(learner2))
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
}
