package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A member that stops in order (a run's driver at its end) is logged as
// left, at INFO; one killed is lost, at WARN. Both were WARN "node left or
// lost", so every run's end put a warning in every node's log.
func TestLeaveLoggedApartFromLoss(t *testing.T) {
	key := testKey(t)
	logs := &lockedBuffer{}
	a, err := Start(context.Background(), Config{NodeID: "a-watches", Bind: "127.0.0.1:0", Key: key, CPUs: 1,
		Detection: FastDetection, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	leaves := startNodeProcess(t, "b-leaves", key, a.GossipAddress(), 0, "")
	killed := startNodeProcess(t, "c-killed", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes", 20*time.Second, func() bool { return nodeCount(a) == 3 })

	leaves.Stdin.Close() // a graceful Stop
	waitFor(t, "b-leaves to leave", 30*time.Second, func() bool { return !a.isAlive("b-leaves") })
	_ = killed.Cmd.Process.Kill()
	waitFor(t, "c-killed to be lost", 30*time.Second, func() bool { return !a.isAlive("c-killed") })

	lines := map[string]string{}
	for _, l := range strings.Split(logs.String(), "\n") {
		for _, id := range []string{"b-leaves", "c-killed"} {
			if strings.Contains(l, "member="+id) && !strings.Contains(l, `msg="node joined"`) {
				lines[id] += l + "\n"
			}
		}
	}
	for id, want := range map[string]string{"b-leaves": `level=INFO msg="node left"`, "c-killed": `level=WARN msg="node lost"`} {
		if !strings.Contains(lines[id], want) {
			t.Errorf("%s: the log lacks %s; its lines:\n%s", id, want, lines[id])
		}
	}
	if strings.Contains(lines["b-leaves"], "WARN") {
		t.Errorf("b-leaves stopped in order, yet a warning names it:\n%s", lines["b-leaves"])
	}
}
