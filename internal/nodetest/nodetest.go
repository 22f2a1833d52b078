// Package nodetest runs extra cluster nodes for multi-node tests, each in a
// process of its own: the test binary re-executed (internal/proctest),
// which Main, called from the package's TestMain, turns into a node. The
// cluster package's own tests cannot import it (it imports cluster) and
// keep their own child node.
package nodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/proctest"
)

// env carries a child node's settings (JSON) to the re-executed binary.
const env = "RLNODE_NODETEST_NODE"

// Options are a child node's settings.
type Options struct {
	// ID is the node id; empty: the cluster picks one.
	ID string
	// CPUs and Resources are what the node offers (cluster.Config's).
	CPUs      float64
	Resources cluster.Resources
	// Labels are the node's labels, GPUs the GPUs it offers (cluster.Config's).
	Labels map[string]string
	GPUs   int
	// Key is the cluster key; default: the joined node's (Node.Key).
	Key []byte
	// PrivateDir, when set, is a folder the node sees as an empty one of
	// its own (a tmpfs mounted over it in a mount namespace of its own,
	// Linux and root only), as a host with its own disk sees a path that
	// is not shared. Where that cannot be had, the child fails to start
	// with a line beginning "ERR private dir" (Start skips the test).
	PrivateDir string
	// OwnMounts runs the node in a mount namespace of its own (Linux and
	// root only; where that cannot be had, Start skips the test), where
	// Node.MountPrivate can later give it a folder of its own.
	OwnMounts bool
	// Detection is the node's failure detection (cluster.Config's; zero:
	// the cluster's default). A test that freezes a node and wants the
	// others to go on listing it gives every node a slow one.
	Detection cluster.Detection
}

type settings struct {
	Options
	Join string
}

// Main runs the package's tests, or, in a process Start re-executed, the
// child node until its stdin closes. It does not return.
func Main(m *testing.M) {
	if js := os.Getenv(env); js != "" {
		os.Exit(runNode(js))
	}
	os.Exit(m.Run())
}

// runNode starts the node js describes, prints "UP <node id>" (or "ERR
// <why>") and runs until stdin closes or the process is killed.
func runNode(js string) int {
	var s settings
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		fmt.Println("ERR", env, err)
		return 1
	}
	if s.PrivateDir != "" || s.OwnMounts {
		if err := mountPrivate(s.PrivateDir); err != nil {
			fmt.Println("ERR private dir", s.PrivateDir+":", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	n, err := cluster.Start(ctx, cluster.Config{NodeID: s.ID, Bind: "127.0.0.1:0", Key: s.Key, CPUs: s.CPUs,
		Resources: s.Resources, Labels: s.Labels, GPUs: s.GPUs, Join: []string{s.Join}, Detection: s.Detection, Logger: actor.DiscardLogger()})
	cancel()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("UP", n.ID())
	_, _ = io.Copy(io.Discard, os.Stdin) // stdin closing means stop
	n.Stop()
	return 0
}

// Node is a child node.
type Node struct {
	*proctest.Child
	ID string
}

// Kill ends the child node's process at once (a crash, not a leave) and
// waits for it to exit.
func (n *Node) Kill() {
	_ = n.Cmd.Process.Kill()
	<-n.Exited
}

// Freeze stops the child node's process (SIGSTOP: its sockets stay open,
// it answers nothing) and returns once it has stopped; it is let go on
// (SIGCONT) at the test's end, before the node is stopped.
func (n *Node) Freeze(t testing.TB) {
	t.Helper()
	pid := n.Cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	FreezeProcess(t, pid)
}

// FreezeProcess sends SIGSTOP to process pid and returns once every
// thread of it has stopped (on Linux; elsewhere once the signal is sent).
func FreezeProcess(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP to process %d: %v", pid, err)
	}
	waitStopped(t, pid)
}

// Start starts a child node with o, joined to join's cluster, with extra
// added to its environment, and returns once join's membership lists it
// (within 30 s). The node stops at the test's end.
func Start(t testing.TB, join *cluster.Node, o Options, extra ...string) *Node {
	t.Helper()
	if o.Key == nil {
		o.Key = join.Key()
	}
	js, err := json.Marshal(settings{Options: o, Join: join.GossipAddress()})
	if err != nil {
		t.Fatal(err)
	}
	var attr *syscall.SysProcAttr
	if o.PrivateDir != "" || o.OwnMounts {
		attr = privateAttr()
	}
	c := proctest.StartWith(t, 30*time.Second, attr, append([]string{env + "=" + string(js)}, extra...)...)
	id, ok := strings.CutPrefix(c.Line, "UP ")
	if strings.HasPrefix(c.Line, "ERR private dir") {
		t.Skipf("child node %q: %s", o.ID, c.Line)
	}
	if !ok {
		t.Fatalf("child node %q: %s", o.ID, c.Line)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(join.Views(), func(v cluster.NodeView) bool { return v.ID == id }) {
		if time.Now().After(deadline) {
			t.Fatalf("child node %s joined but %s does not list it after 30 s", id, join.ID())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &Node{Child: c, ID: id}
}
