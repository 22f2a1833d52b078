package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The run's node logger passes its warnings to the run's logger once it
// is set, with the node's attributes, and drops the rest: records before
// then, below Warn, and protoactor's.
func TestLateNotes(t *testing.T) {
	nodeLog, set := newLateNotes()
	node := nodeLog.With("node", "n1")
	node.Warn("before the run's logger")
	var buf bytes.Buffer
	set(slog.New(slog.NewTextHandler(&buf, nil)))
	node.Info("an info")
	node.Warn("a node did not answer", "left_out", "walled")
	node.With("component", "protoactor").Error("EndpointWriter lost connection")
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `msg="a node did not answer"`) || !strings.Contains(out, "node=n1 left_out=walled") {
		t.Errorf("run's log:\n%s\nwant only the warning, with node=n1 left_out=walled", out)
	}
}
