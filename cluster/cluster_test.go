package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/proctest"
)

// Multi-node tests run every other node as a separate process: this test
// binary re-executed with RLNODE_TEST_NODE set (two protoactor remotes in
// one process share gRPC's global logger, shared/DESIGN.md).

type Add struct{ N int }
type Sum struct {
	N    int
	Node string
}
type WhereAreYou struct{}

// Blob is a message whose body may be too large to travel inline.
type Blob struct{ Data []byte }

type counterActor struct {
	node string
	n    int
}

func (c *counterActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case Add:
		c.n += m.N
		return Sum{N: c.n, Node: c.node}, nil
	case WhereAreYou:
		return Sum{N: c.n, Node: c.node}, nil
	case Blob:
		return Sum{N: len(m.Data), Node: c.node}, nil
	}
	return nil, fmt.Errorf("unexpected %T", msg)
}

func init() {
	actor.RegisterMessage(Add{}, Sum{}, WhereAreYou{}, Blob{})
	actor.RegisterKind("test.counter", func(ctx *actor.Context, args any) (actor.Actor, error) {
		return &counterActor{node: os.Getenv("RLNODE_TEST_NODE_ID")}, nil
	})
}

func TestMain(m *testing.M) {
	if os.Getenv("RLNODE_TEST_NODE") == "1" {
		os.Exit(runTestNode())
	}
	if target := os.Getenv("RLNODE_TEST_ROGUE"); target != "" {
		os.Exit(runRogue(target))
	}
	if spec := os.Getenv("RLNODE_TEST_FORGE"); spec != "" {
		os.Exit(runForger(spec))
	}
	os.Exit(m.Run())
}

func runTestNode() int {
	key, _ := base64.StdEncoding.DecodeString(os.Getenv("RLNODE_TEST_KEY"))
	gpus, _ := strconv.Atoi(os.Getenv("RLNODE_TEST_GPUS"))
	labels := map[string]string{}
	if l := os.Getenv("RLNODE_TEST_LABELS"); l != "" {
		for _, kv := range strings.Split(l, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
	}
	det := FastDetection
	if name := os.Getenv("RLNODE_TEST_DETECTION"); name != "" {
		var err error
		if det, err = ParseDetection(name); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	if g := os.Getenv("RLNODE_TEST_OWNER_GRACE"); g != "" {
		var err error
		if det.OwnerGrace, err = time.ParseDuration(g); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	// An older build: another wire protocol, and maybe no check of it.
	if w, err := strconv.Atoi(os.Getenv("RLNODE_TEST_WIRE")); err == nil {
		spoken = w
	}
	checkWires = os.Getenv("RLNODE_TEST_WIRE_CHECK") != "0"
	if d, err := time.ParseDuration(os.Getenv("RLNODE_TEST_GOSSIP_TO_DEAD")); err == nil {
		gossipToTheDead = d
	}
	bind := os.Getenv("RLNODE_TEST_BIND")
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	memory, _ := strconv.ParseInt(os.Getenv("RLNODE_TEST_MEMORY"), 10, 64)
	objects, _ := strconv.ParseInt(os.Getenv("RLNODE_TEST_OBJECT_STORE"), 10, 64)
	spill, _ := strconv.ParseInt(os.Getenv("RLNODE_TEST_OBJECT_SPILL"), 10, 64)
	n, err := Start(context.Background(), Config{
		NodeID: os.Getenv("RLNODE_TEST_NODE_ID"), Bind: bind, Key: key, CPUs: 2, GPUs: gpus, Memory: memory,
		ObjectStoreBytes: objects, ObjectSpillBytes: spill, ObjectSpillDir: os.Getenv("RLNODE_TEST_SPILL_DIR"),
		Labels: labels, Join: strings.Fields(os.Getenv("RLNODE_TEST_JOIN")), Detection: det, Logger: actor.DiscardLogger(),
	})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("UP", n.GossipAddress())
	if os.Getenv("RLNODE_TEST_MUTE_ACTORS") == "1" {
		// The actor port closes while gossip runs on: a member whose actor
		// transport cannot be reached (a firewall that passes gossip only).
		n.System().Stop()
	}
	if host := os.Getenv("RLNODE_TEST_OWN_ON"); host != "" {
		ownOn(n, host)
	}
	// Stdin closing means stop gracefully; SIGKILL from the test is the crash.
	_, _ = io.Copy(io.Discard, os.Stdin)
	n.Stop()
	return 0
}

// ownOn makes the test node the owner of an actor ("owned", half a CPU)
// and a placement group's bundle on the node host, once it sees it.
func ownOn(n *Node, host string) {
	for deadline := time.Now().Add(10 * time.Second); !n.isAlive(host) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "owned", Node: host, Resources: Resources{CPU: 0.5}}); err != nil {
		fmt.Println("OWN spawn:", err)
	}
	if _, err := n.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}, {Resources: Resources{CPU: 1}}}, StrictSpread); err != nil {
		fmt.Println("OWN group:", err)
	}
}

// runRogue is a bare actor system outside the cluster that tells and calls
// an actor of it (target is "address id").
func runRogue(target string) int {
	addr, id, _ := strings.Cut(target, " ")
	s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		fmt.Println("RESULT start:", err)
		return 1
	}
	defer s.Stop()
	ref := actor.Ref{Name: "victim", Address: addr, ID: id}
	_ = s.Tell(ref, Add{N: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.Call(ctx, ref, Add{N: 1000}); err != nil {
		fmt.Println("RESULT", err)
		return 0
	}
	fmt.Println("RESULT answered")
	return 0
}

func TestNonMemberMessagesDropped(t *testing.T) {
	a := startLocalNode(t, "guarded", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := h.Record()
	exe, _ := os.Executable()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "RLNODE_TEST_ROGUE="+rec.Ref.Address+" "+rec.Ref.ID)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rogue: %v", err)
	}
	if !strings.Contains(string(out), "RESULT") || strings.Contains(string(out), "answered") {
		t.Fatalf("rogue got: %s", out)
	}
	if s, err := Call[Sum](ctx, h, WhereAreYou{}); err != nil || s.N != 0 {
		t.Fatalf("a non-member's messages reached the actor: %+v, %v", s, err)
	}
}

type testNode struct {
	*proctest.Child
	id     string
	gossip string
}

func testKey(t testing.TB) []byte {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return key
}

func startNodeProcess(t testing.TB, id string, key []byte, join string, gpus int, labels string, env ...string) *testNode {
	t.Helper()
	c := proctest.Start(t, 20*time.Second, append([]string{"RLNODE_TEST_NODE=1", "RLNODE_TEST_NODE_ID=" + id,
		"RLNODE_TEST_KEY=" + base64.StdEncoding.EncodeToString(key), "RLNODE_TEST_JOIN=" + join,
		"RLNODE_TEST_GPUS=" + strconv.Itoa(gpus), "RLNODE_TEST_LABELS=" + labels}, env...)...)
	if !strings.HasPrefix(c.Line, "UP ") {
		t.Fatalf("node %s: %q", id, c.Line)
	}
	return &testNode{Child: c, id: id, gossip: strings.TrimPrefix(c.Line, "UP ")}
}

func startLocalNode(t testing.TB, id string, key []byte) *Node {
	t.Helper()
	return startLocalNodeWith(t, id, key, FastDetection)
}

func startLocalNodeWith(t testing.TB, id string, key []byte, det Detection) *Node {
	t.Helper()
	n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 2, GPUs: 0, Detection: det, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodeCount(n *Node) int { return len(n.Views()) }

func TestThreeNodesSpawnKillRespawn(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "a-local", key)
	b := startNodeProcess(t, "b-gpu", key, a.GossipAddress(), 1, "role=gpu")
	c := startNodeProcess(t, "c-cpu", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Placement by resources and labels.
	gpuActor, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "gpu-worker", Resources: Resources{GPU: 1}, MaxRestarts: 3})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Call[Sum](ctx, gpuActor, Add{N: 2})
	if err != nil || s.Node != "b-gpu" || s.N != 2 {
		t.Fatalf("gpu actor: %+v, %v (want on b-gpu)", s, err)
	}
	movable, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "movable", Node: "b-gpu", Resources: Resources{CPU: 1}, MaxRestarts: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Call[Sum](ctx, movable, Add{N: 5}); err != nil || s.Node != "b-gpu" {
		t.Fatalf("pinned actor: %+v, %v", s, err)
	}
	onC, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "on-c", Node: "c-cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := onC.Call(ctx, Add{N: 1}); err != nil {
		t.Fatal(err)
	}
	relocatable, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "relocatable", Node: "c-cpu", MaxRestarts: 1})
	if err != nil {
		t.Fatal(err)
	}

	// Bad requests fail at once with what the cluster offers (b-gpu's free
	// GPU is 1 or 0 as the view has the gpu-worker's yet or not).
	_, err = a.Spawn(ctx, "test.counter", SpawnOptions{Resources: Resources{GPU: 4}})
	if !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "b-gpu GPU ") || !strings.Contains(err.Error(), "{GPU:4}") {
		t.Fatalf("infeasible spawn: %v", err)
	}
	_, err = a.Spawn(ctx, "no.such.kind", SpawnOptions{Node: "c-cpu"})
	if err == nil || !strings.Contains(err.Error(), `"no.such.kind"`) || !strings.Contains(err.Error(), "c-cpu") {
		t.Fatalf("unknown kind: %v", err)
	}
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "on-c"}); !errors.Is(err, actor.ErrNameTaken) {
		t.Fatalf("duplicate name: %v", err)
	}

	// Placement groups: infeasible at once, feasible reserves resources.
	_, err = a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{GPU: 1}}, {Resources: Resources{GPU: 1}}}, StrictSpread)
	if !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "GPU 2 (has 1)") {
		t.Fatalf("infeasible group: %v", err)
	}
	pg, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}, {Resources: Resources{CPU: 1}}}, StrictSpread)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Nodes[0] == pg.Nodes[1] {
		t.Fatalf("STRICT_SPREAD put both bundles on %s", pg.Nodes[0])
	}
	inPG, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "in-pg", Group: pg, Bundle: 1, Resources: Resources{CPU: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Call[Sum](ctx, inPG, WhereAreYou{}); err != nil || nodeIDOf(a, s.Node) != pg.Nodes[1] {
		t.Fatalf("actor in bundle 1 runs on %q (%v), want %s", s.Node, err, pg.Nodes[1])
	}
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Group: pg, Bundle: 1, Resources: Resources{CPU: 1}}); err == nil {
		t.Fatal("bundle overcommitted")
	}

	// Lookup from the directory.
	if h, err := a.Lookup(ctx, "movable"); err != nil || h.Name() != "movable" {
		t.Fatalf("lookup: %v", err)
	}
	if _, err := a.Lookup(ctx, "nobody"); !errors.Is(err, actor.ErrActorNotFound) {
		t.Fatalf("lookup of a missing actor: %v", err)
	}

	// SIGKILL the GPU node.
	wGPU := a.Watch(ctx, "gpu-worker")
	wMov := a.Watch(ctx, "movable")
	killed := time.Now()
	if err := b.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "membership to drop the killed node", 10*time.Second, func() bool { return !a.isAlive("b-gpu") })
	t.Logf("killed node noticed after %s", time.Since(killed).Round(time.Millisecond))

	// The GPU actor has nowhere to go: DEAD, cause names the loss.
	n := nextNotice(t, wGPU)
	if n.State == Restarting {
		n = nextNotice(t, wGPU)
	}
	if n.State != Dead || !strings.Contains(n.Cause, "node lost") || !strings.Contains(n.Cause, "{GPU:1}") {
		t.Fatalf("gpu actor notice: %+v", n)
	}
	// The movable actor restarts on a node that fits, and its handle follows.
	if n := nextNotice(t, wMov); n.State != Restarting || n.Cause != "node lost" || n.Restarts != 1 {
		t.Fatalf("movable notice: %+v", n)
	}
	// And the watcher hears when it is back (before, RESTARTING was the
	// last it heard of a restart that succeeded).
	if n := nextNotice(t, wMov); n.State != Alive || n.Node == "b-gpu" || n.Node == "" || n.Restarts != 1 {
		t.Fatalf("movable notice after its restart: %+v; want ALIVE on its new node", n)
	}
	s, err = Call[Sum](ctx, movable, WhereAreYou{})
	if err != nil || s.Node == "b-gpu" {
		t.Fatalf("movable after respawn: %+v, %v", s, err)
	}
	if s.N != 0 {
		t.Fatalf("a respawned actor starts fresh; got state %d", s.N)
	}
	rec, _ := movable.Record()
	if rec.State != Alive || rec.Restarts != 1 || rec.Node == "b-gpu" {
		t.Fatalf("movable record after respawn: %+v", rec)
	}
	st := a.Status()
	if len(st.Nodes) != 2 {
		t.Fatalf("status lists %d nodes after the kill, want 2", len(st.Nodes))
	}
	for _, ns := range st.Nodes {
		// Every node here runs on this host: all report its identity.
		if ns.Host != actor.HostID() {
			t.Errorf("node %s reports host %q, this host is %q", ns.ID, ns.Host, actor.HostID())
		}
	}
	var sawDead bool
	for _, ar := range st.Actors {
		if ar.Name == "gpu-worker" {
			sawDead = ar.State == Dead && strings.Contains(ar.Cause, "node lost")
		}
	}
	if !sawDead {
		t.Fatalf("status does not show gpu-worker DEAD with node lost: %+v", st.Actors)
	}

	// A graceful stop is seen at once and its actors are told "node stopped".
	wC := a.Watch(ctx, "on-c")
	wR := a.Watch(ctx, "relocatable")
	c.Stdin.Close()
	if n := nextNotice(t, wC); n.State != Dead || n.Cause != "node stopped" {
		t.Fatalf("on-c notice after graceful stop: %+v", n)
	}
	if n := nextNotice(t, wR); n.State != Restarting || n.Cause != "node stopped" || n.Restarts != 1 {
		t.Fatalf("relocatable notice after graceful stop: %+v", n)
	}
	waitFor(t, "graceful leave", 30*time.Second, func() bool { return !a.isAlive("c-cpu") })
	if s, err := Call[Sum](ctx, relocatable, WhereAreYou{}); err != nil || s.Node == "c-cpu" {
		t.Fatalf("relocatable after its node stopped: %+v, %v", s, err)
	}
}

// nodeIDOf maps the test actor's reported node (its process's
// RLNODE_TEST_NODE_ID, empty in the test process itself) to a node id.
func nodeIDOf(a *Node, reported string) string {
	if reported == "" {
		return a.ID()
	}
	return reported
}

func nextNotice(t *testing.T, ch <-chan Notice) Notice {
	t.Helper()
	select {
	case n, ok := <-ch:
		if !ok {
			t.Fatal("watch closed without a notice")
		}
		return n
	case <-time.After(20 * time.Second):
		t.Fatal("no notice within 20s")
	}
	return Notice{}
}

func TestWrongKeyCannotJoin(t *testing.T) {
	a := startLocalNode(t, "keyed", testKey(t))
	start := time.Now()
	_, err := Start(context.Background(), Config{NodeID: "intruder", Bind: "127.0.0.1:0", Key: testKey(t),
		Join: []string{a.GossipAddress()}, JoinTimeout: 3 * time.Second, Logger: actor.DiscardLogger()})
	if err == nil || !strings.Contains(err.Error(), "no member answered") {
		t.Fatalf("join with the wrong key: %v", err)
	}
	// One line, naming the address once and memberlist's reason (which
	// comes as a bulleted list, each item naming its address again).
	if msg := err.Error(); strings.ContainsAny(msg, "\n\t") || !strings.HasPrefix(msg, "join "+a.GossipAddress()+": no member answered (") ||
		strings.Count(msg, a.GossipAddress()) != 1 || strings.HasSuffix(msg, "): ") || strings.Contains(msg, "failed to join") {
		t.Fatalf("join with the wrong key: %q, want one line naming %s once and the reason", msg, a.GossipAddress())
	}
	t.Logf("join with the wrong key: %v", err)
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("refusal took %s", d)
	}
	if len(a.aliveIDs()) != 1 {
		t.Fatalf("intruder became a member: %v", a.aliveIDs())
	}
	_, err = Start(context.Background(), Config{Bind: "127.0.0.1:0", Join: []string{"127.0.0.1:1"}, Key: testKey(t),
		JoinTimeout: 2 * time.Second, Logger: actor.DiscardLogger()})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("join of a bad address: %v", err)
	}
	_, err = Start(context.Background(), Config{Bind: "127.0.0.1:0", Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err == nil || !strings.Contains(err.Error(), "no cluster key") {
		t.Fatalf("join without a key: %v", err)
	}
}

// A node that joins under the id of a live member is refused, naming the
// id and where its holder runs; the holder's record is left as it was
// (memberlist keeps the holder and would ignore the newcomer, which would
// run on unseen, its record replacing the holder's).
func TestJoinRefusesATakenNodeID(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "holder-a", key)
	x, err := Start(context.Background(), Config{NodeID: "taken-x", Bind: "127.0.0.1:0", Key: key, CPUs: 2,
		Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Stop)
	dup, err := Start(context.Background(), Config{NodeID: "taken-x", Bind: "127.0.0.1:0", Key: key, CPUs: 8,
		Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err == nil {
		dup.Stop()
		t.Fatal("a second node joined under the id of a live member")
	}
	if !strings.Contains(err.Error(), `node id "taken-x" is taken`) || !strings.Contains(err.Error(), x.GossipAddress()) {
		t.Errorf("error does not name the id and its holder's address %s: %v", x.GossipAddress(), err)
	}
	if rec, ok := a.dir.Node("taken-x"); !ok || rec.Actor != x.ActorAddress() || rec.Total[CPU] != 2 {
		t.Errorf("the holder's record as another member sees it: %+v (ok %v), want actor %s and 2 CPUs", rec, ok, x.ActorAddress())
	}
	// The id is still usable by the holder: another node joins beside it.
	y := startLocalNodeJoin(t, "other-y", key, a.GossipAddress())
	waitFor(t, "three members", 10*time.Second, func() bool { return len(y.aliveIDs()) == 3 })
}

func startLocalNodeJoin(t testing.TB, id string, key []byte, join string) *Node {
	t.Helper()
	n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 2, GPUs: 0,
		Join: []string{join}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// A join address without a port, or with a port that is not one, is
// refused naming it: memberlist dials such an address on this node's own
// gossip port, so `rlnode join 127.0.0.1` answered itself and the node
// said it was up in a cluster of one.
func TestJoinWantsHostAndPort(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:", "127.0.0.1:gossip", "127.0.0.1:70000", "[::1]"} {
		n, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", Join: []string{addr}, Key: testKey(t),
			JoinTimeout: 2 * time.Second, Logger: actor.DiscardLogger()})
		if err == nil {
			n.Stop()
			t.Errorf("join %q: started, want it refused", addr)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("join address %q", addr)) || !strings.Contains(err.Error(), "HOST:PORT") {
			t.Errorf("join %q: %v, want the address named and HOST:PORT asked for", addr, err)
		}
	}
}
