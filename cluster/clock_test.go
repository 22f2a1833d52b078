package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/logbuf"
)

// Two nodes whose wall clocks are five minutes apart measure it on their
// gossip probes, both warn naming the other node and which way, and
// status reads the other node's uptime on that node's clock (not five
// minutes off). A node within ClockSkewWarn does not warn.
func TestClockSkewIsMeasuredAndWarned(t *testing.T) {
	key := testKey(t)
	const skew = 5 * time.Minute
	var logA, logB logbuf.Buffer
	start := func(id string, log *logbuf.Buffer, clock func() time.Time, join []string) *Node {
		n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 1, Join: join,
			Logger: slog.New(slog.NewTextHandler(log, nil)), clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	a := start("clock-a", &logA, nil, nil)
	b := start("clock-b", &logB, func() time.Time { return time.Now().Add(skew) }, []string{a.GossipAddress()})
	waitFor(t, "both nodes to measure the other's clock", 20*time.Second, func() bool {
		_, okA := a.ClockOffset("clock-b")
		_, okB := b.ClockOffset("clock-a")
		return okA && okB
	})
	offA, _ := a.ClockOffset("clock-b")
	offB, _ := b.ClockOffset("clock-a")
	if (offA-skew).Abs() > 2*time.Second || (offB+skew).Abs() > 2*time.Second {
		t.Errorf("offsets: a sees b %v, b sees a %v; want about +%v and -%v", offA, offB, skew, skew)
	}
	waitFor(t, "both warnings", 10*time.Second, func() bool {
		return strings.Contains(logA.String(), "node clocks apart") && strings.Contains(logB.String(), "node clocks apart")
	})
	for _, c := range []struct {
		log        string
		node, side string
	}{{logA.String(), "node=clock-b", "ahead"}, {logB.String(), "node=clock-a", "behind"}} {
		line := ""
		for l := range strings.Lines(c.log) {
			if strings.Contains(l, "node clocks apart") {
				line = l
			}
		}
		if !strings.Contains(line, c.node) || !strings.Contains(line, "5m0s "+c.side) {
			t.Errorf("warning %q: want it to name %s and say 5m0s %s", line, c.node, c.side)
		}
	}
	for _, ns := range a.Status().Nodes {
		if ns.ID == "clock-b" && (ns.UptimeS < 0 || ns.UptimeS > 60 || ns.ClockOffsetS < 298 || ns.ClockOffsetS > 302) {
			t.Errorf("status of clock-b from clock-a: uptime %gs, clock offset %gs; want under a minute and about 300", ns.UptimeS, ns.ClockOffsetS)
		}
	}

	// A third node whose clock agrees with a's: measured, not warned about.
	var logC logbuf.Buffer
	start("clock-c", &logC, nil, []string{a.GossipAddress()})
	waitFor(t, "a to measure c's clock", 20*time.Second, func() bool { _, ok := a.ClockOffset("clock-c"); return ok })
	if off, _ := a.ClockOffset("clock-c"); off.Abs() > 2*time.Second {
		t.Errorf("a sees c's clock %v off, want about 0", off)
	}
	for l := range strings.Lines(logA.String()) {
		if strings.Contains(l, "clocks apart") && strings.Contains(l, "node=clock-c") {
			t.Errorf("a warned about c, whose clock agrees: %s", l)
		}
	}
}
