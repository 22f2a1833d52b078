package cluster

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// A cluster binds IPv6 addresses: two nodes on ::1 join, and a call with
// a body over the inline limit (so it travels the bulk path) reaches an
// actor on the other node. (Before, a node bound to an IPv6 address failed
// to start: the actor transport listened on "::1:PORT".)
func TestIPv6Cluster(t *testing.T) {
	if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		l.Close()
	}
	key := testKey(t)
	a, err := Start(context.Background(), Config{NodeID: "v6-a", Bind: "[::1]:0", Key: key, CPUs: 2, GPUs: 0,
		Detection: FastDetection, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if h, _, err := net.SplitHostPort(a.ActorAddress()); err != nil || h != "::1" {
		t.Fatalf("actor address %q, want [::1]:PORT", a.ActorAddress())
	}
	b := startNodeProcess(t, "v6-b", key, a.GossipAddress(), 0, "", "RLNODE_TEST_BIND=[::1]:0")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "remote", Node: b.id})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	if s, err := Call[Sum](ctx, h, Blob{Data: big}); err != nil || s.N != len(big) {
		t.Fatalf("call with a bulk body to the node on ::1: %+v, %v", s, err)
	}
}
