package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/internal/ratelog"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"
)

// A process without the cluster key speaks the wire protocol by hand, as an
// attacker on the same host would: protoactor's remote with an envelope of
// ours that names a member as its sender, and a bulk hello naming it too.

// forgedEnvelope is the actor envelope's wire form (actor/codec.go) built
// by hand: kind, flags, call id, type name, sender address, msgpack body.
func forgedEnvelope(kind byte, call uint64, typ, from string, body []byte) []byte {
	b := []byte{kind, 0}
	b = binary.AppendUvarint(b, call)
	b = binary.AppendUvarint(b, uint64(len(typ)))
	b = append(b, typ...)
	b = binary.AppendUvarint(b, uint64(len(from)))
	b = append(b, from...)
	return append(b, body...)
}

// runForger is a bare protoactor remote with no key. spec is "victim actor
// address, member actor address, victim bulk address": it asks the
// victim's node actor to reserve 2 CPUs claiming to be the member, then
// sends a bulk hello claiming the same, and prints what it got.
func runForger(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Println("ERR spec", spec)
		return 1
	}
	victim, member, bulk := f[0], f[1], f[2]
	as := pa.NewActorSystem()
	rem := remote.NewRemote(as, remote.Configure("127.0.0.1", 0))
	rem.Start()
	defer rem.Shutdown(false)

	body, _ := msgpack.Marshal(reserveRequest{Group: "forged", Indices: []int{0}, Resources: []Resources{{CPU: 2}}})
	env := forgedEnvelope(2, 1, "github.com/rlnode/rlnode/cluster.reserveRequest", member, body)
	res, err := as.Root.RequestFuture(&pa.PID{Address: victim, Id: "a/" + nodeActorName},
		&anypb.Any{TypeUrl: "rlnode/envelope", Value: env}, 5*time.Second).Result()
	if err != nil {
		fmt.Println("CALL", err)
	} else {
		fmt.Printf("CALL answered %T\n", res)
	}

	c, err := net.DialTimeout("tcp", bulk, 3*time.Second)
	if err != nil {
		fmt.Println("BULK dial:", err)
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	hello := append([]byte("RLBH"), byte(len(member)>>8), byte(len(member)))
	_, _ = c.Write(append(hello, member...))
	var st [1]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		fmt.Println("BULK closed:", err)
	} else {
		fmt.Println("BULK status", st[0])
	}
	return 0
}

func TestKeylessForgerGetsNothingDone(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "victim", key)
	b := startNodeProcess(t, "member", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	rec, ok := a.Directory().Node(b.id)
	if !ok || rec.Actor == "" {
		t.Fatalf("no record of the member: %+v", rec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exe, _ := os.Executable()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "RLNODE_TEST_FORGE="+a.ActorAddress()+" "+rec.Actor+" "+a.System().Bulk().Addr())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("forger: %v\n%s", err, out)
	}
	t.Logf("forger:\n%s", out)
	if !strings.Contains(string(out), "CALL ") || !strings.Contains(string(out), "BULK ") {
		t.Fatalf("forger did not finish: %s", out)
	}
	if strings.Contains(string(out), "CALL answered") {
		t.Errorf("the node actor answered a keyless process")
	}
	if strings.Contains(string(out), "BULK status 0") {
		t.Errorf("a bulk hello from a keyless process was accepted")
	}
	if _, used := a.ledger.snapshot(); used[CPU] != 0 {
		t.Errorf("a keyless process reserved %v CPU", used[CPU])
	}
}

// Connections from one remote address are capped on every port, and those
// that never prove membership are closed by their deadline; a member at
// another address is served meanwhile.
func TestConnectionCapPerAddress(t *testing.T) {
	// Its control endpoint's run file goes to a home of its own: in the
	// user's, a run of this package beside it (another checkout) holds
	// the same node id, and ServeControl refused.
	t.Setenv("RLNODE_HOME", t.TempDir())
	key := testKey(t)
	a := startLocalNode(t, "capped", key)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
	ports := []struct {
		name, addr string
		cap        int
	}{
		{"actor", a.ActorAddress(), actor.DefaultMaxUnprovenPerAddr},
		{"bulk", a.System().Bulk().Addr(), actor.DefaultMaxUnprovenPerAddr},
		{"gossip", a.GossipAddress(), DefaultGossipConnsPerAddr},
	}
	const extra = 8
	held := map[string][]net.Conn{}
	for _, p := range ports {
		for range p.cap + extra {
			c, err := d.Dial("tcp", p.addr)
			if err != nil {
				t.Fatalf("%s port: dial: %v", p.name, err)
			}
			t.Cleanup(func() { c.Close() })
			held[p.name] = append(held[p.name], c)
		}
	}
	for _, p := range ports {
		if open := countOpen(held[p.name], time.Second); open != p.cap {
			t.Errorf("%s port: %d of %d idle connections from one address left open, want the cap %d", p.name, open, p.cap+extra, p.cap)
		}
	}

	// A member on another address joins and is served on every port.
	b := startNodeProcess(t, "member", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "remote", Node: b.id})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20) // over the inline limit: the member pulls it from our bulk port
	if s, err := Call[Sum](ctx, h, Blob{Data: big}); err != nil || s.N != len(big) {
		t.Fatalf("call with a bulk body to the member: %+v, %v", s, err)
	}
	ctrl, stop, err := a.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := FetchStatus(ctx, ctrl); err != nil {
		t.Fatalf("control port: %v", err)
	}

	// The idle connections that never proved membership are closed by the
	// handshake deadline.
	for _, p := range ports[:2] {
		if open := countOpen(held[p.name], 15*time.Second); open != 0 {
			t.Errorf("%s port: %d idle connections that never proved membership still open after 15 s", p.name, open)
		}
	}
}

// countOpen reports how many of cs the server kept open for wait (it
// sends nothing to a client that says nothing), checking all at once.
func countOpen(cs []net.Conn, wait time.Duration) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := 0
	deadline := time.Now().Add(wait)
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, c) // what a server says first (gRPC's settings) is not a close
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return open
}

func TestGossipJunkWarningsAreRateLimited(t *testing.T) {
	var logs logbuf.Buffer
	n, err := Start(context.Background(), Config{NodeID: "junked", Bind: "127.0.0.1:0", Key: testKey(t), CPUs: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	c, err := net.Dial("udp", n.GossipAddress())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	junk := bytes.Repeat([]byte{0xA5}, 64)
	send := func(k int) {
		for i := range k {
			junk[0] = byte(i)
			_, _ = c.Write(junk)
			if i%100 == 99 {
				time.Sleep(time.Millisecond) // let the node's UDP reader keep up
			}
		}
	}
	send(5000)
	time.Sleep(11 * time.Second) // past one window
	send(100)
	var junkLines, withCount int
	count := func() {
		junkLines, withCount = 0, 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "Decrypt packet failed") {
				junkLines++
				if strings.Contains(l, "suppressed=") {
					withCount++
				}
			}
		}
	}
	// The node reads the datagrams when it gets the CPU: wait for the
	// line of the new window (bounded), then count every line.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if count(); withCount > 0 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // lines a flood past the bound would add
	count()
	t.Logf("%d warning lines about junk, %d with a count of suppressed ones", junkLines, withCount)
	if junkLines == 0 || junkLines > 20 {
		t.Errorf("5,100 junk datagrams gave %d warning lines, want 1..20", junkLines)
	}
	if withCount == 0 {
		t.Errorf("no warning line counts the suppressed ones")
	}
}

func TestMemberlistKind(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:4000", "Decrypt packet failed"},
		{"UDP packet too short (3 bytes) from=127.0.0.1:4000", "UDP packet too short"},
		{"Push/Pull with node-a failed: EOF", "Push/Pull with node-a failed"},
		{"Push/Pull with 10.0.0.1:7946 failed: EOF", "Push/Pull with"},
		{"failed to receive: EOF from=127.0.0.1:1", "failed to receive"},
		{"", ""},
	} {
		if got := memberlistKind(tc.line); got != tc.want {
			t.Errorf("memberlistKind(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// A memberlist probe that races the node's stop writes on the socket the
// stop closed: that is stopping, not a fault to warn about. The same line
// from a running node is a warning.
func TestMemberlistClosedSocketWhileStopping(t *testing.T) {
	line := "[ERR] memberlist: Failed to send UDP ping: write udp 127.0.0.1:42505->127.0.0.1:39531: use of closed network connection\n"
	for _, stopping := range []bool{false, true} {
		var buf bytes.Buffer
		w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
			warn: &ratelog.Limiter{}, stopping: func() bool { return stopping }}
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(buf.String(), "level=WARN")
		if warned == stopping {
			t.Errorf("stopping=%v: logged %q, want a warning only while running", stopping, buf.String())
		}
	}
}
