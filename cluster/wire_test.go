package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/vmihailenco/msgpack/v5"
)

// Nodes of different wire protocols refuse each other. A node joining a
// cluster of an older build fails, naming the member and both builds; an
// older build's node, which checks nothing, is not taken in by a newer
// one, and its directory updates are dropped.
func TestNodesOfAnotherWireProtocolAreRefused(t *testing.T) {
	key := testKey(t)

	// A newer build joining an older one's cluster.
	old := startNodeProcess(t, "wire-old", key, "", 0, "", "RLNODE_TEST_WIRE=0", "RLNODE_TEST_WIRE_CHECK=0")
	_, err := Start(context.Background(), Config{NodeID: "wire-new", Bind: "127.0.0.1:0", Key: key, CPUs: 2,
		Join: []string{old.gossip}, Detection: FastDetection, Logger: actor.DiscardLogger()})
	if err == nil || !strings.Contains(err.Error(), "node wire-old ("+old.gossip+")") ||
		!strings.Contains(err.Error(), "wire protocol 0; this node runs rlnode") || !strings.Contains(err.Error(), "install one rlnode on every host") {
		t.Fatalf("joining a cluster of wire protocol 0: %v; want an error naming wire-old and both protocols", err)
	}

	// An older build joining a newer one's cluster: it checks nothing and
	// believes it joined, but the newer node does not take it in.
	logs := &lockedBuffer{}
	a, err := Start(context.Background(), Config{NodeID: "wire-a", Bind: "127.0.0.1:0", Key: key, CPUs: 2,
		Detection: FastDetection, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	startNodeProcess(t, "wire-b", key, a.GossipAddress(), 0, "", "RLNODE_TEST_WIRE=0", "RLNODE_TEST_WIRE_CHECK=0")
	// Its alive messages, its record sent after the join and a push/pull
	// (every 5 s) all reach a meanwhile.
	time.Sleep(FastDetection.PushPull + 2*time.Second)
	if ids := a.aliveIDs(); len(ids) != 1 {
		t.Errorf("members of wire-a: %v; want wire-a alone", ids)
	}
	if _, ok := a.dir.Node("wire-b"); ok {
		t.Error("wire-a took in wire-b's directory record")
	}
	if l := logs.String(); !strings.Contains(l, "refusing a member of another wire protocol") || !strings.Contains(l, "node wire-b") {
		t.Errorf("wire-a's warnings do not name the refused member:\n%s", l)
	}

	// An update without the field (as builds before it send) is refused.
	b, _ := msgpack.Marshal(map[string]any{"n": []NodeRecord{{ID: "x"}}})
	if _, err := decodeUpdate(b); err == nil || !strings.Contains(err.Error(), "wire protocol 0") {
		t.Errorf("an update of wire protocol 0 decoded: %v", err)
	}
}
