package actor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/rlnode/rlnode/internal/proctest"
	"google.golang.org/protobuf/types/known/anypb"
)

// Multi-node tests run the peer node as a second process (this test binary
// re-executed with RLNODE_ACTOR_PEER=1): two protoactor remotes in one
// process share gRPC's global logger (shared/DESIGN.md).
func TestMain(m *testing.M) {
	if os.Getenv("RLNODE_ACTOR_PEER") == "1" {
		runPeer()
		return
	}
	os.Exit(m.Run())
}

// runPeer hosts a counter named "peer", "sleepy" and "gather" (four calls
// at once), prints its address and
// lives until stdin closes.
func runPeer() {
	cfg := Config{Logger: DiscardLogger()}
	if dir := os.Getenv("RLNODE_ACTOR_TLS_DIR"); dir != "" {
		cfg.TLS = tlsFilesIn(dir)
	}
	if k := os.Getenv("RLNODE_ACTOR_SECRET"); k != "" {
		cfg.Secret = []byte(k)
	}
	if g := os.Getenv("RLNODE_ACTOR_PEER_GRACE"); g != "" {
		cfg.PeerGrace, _ = time.ParseDuration(g)
	}
	s, err := Start(cfg)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if members := os.Getenv("RLNODE_ACTOR_PEER_MEMBERS"); members != "" {
		// The peer admits the addresses listed in this file, read at each
		// check: the test "gossips" a join by writing it.
		s.SetPeerFilter(func(addr string) bool {
			b, _ := os.ReadFile(members)
			return strings.Contains(string(b), addr+"\n")
		})
	}
	RegisterKind("test.sleeper", func(*Context, any) (Actor, error) { return sleeper{}, nil })
	if _, err := s.SpawnLocal(LocalSpawn{Name: "peer", Kind: "test.counter", MaxRestarts: -1}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := s.SpawnLocal(LocalSpawn{Name: "fetcher", Kind: "test.fetcher"}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := s.SpawnLocal(LocalSpawn{Name: "bulker", Kind: "test.bulker"}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := s.SpawnLocal(LocalSpawn{Name: "sleepy", Kind: "test.sleeper"}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := s.SpawnLocal(LocalSpawn{Name: "gather", Kind: "test.gather", MaxConcurrency: 4}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := s.SpawnLocal(LocalSpawn{Name: "streamer", Kind: "test.streamer", MaxConcurrency: 2}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	for i, name := range []string{"gate1", "gate2"} {
		if _, err := s.SpawnLocal(LocalSpawn{Name: name, Kind: "test.gate", MaxConcurrency: i + 1}); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
	}
	// A bare protoactor echo actor, for the side-by-side benchmarks.
	if _, err := s.as.Root.SpawnNamed(pa.PropsFromFunc(bareEcho), "bare"); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", s.Address())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
}

type peerProc struct {
	*proctest.Child
	addr string
}

func startPeer(t testing.TB, env ...string) *peerProc {
	t.Helper()
	c := proctest.Start(t, 20*time.Second, append([]string{"RLNODE_ACTOR_PEER=1"}, env...)...)
	if !strings.HasPrefix(c.Line, "ADDR ") {
		t.Fatalf("peer said %q", c.Line)
	}
	return &peerProc{Child: c, addr: strings.TrimPrefix(c.Line, "ADDR ")}
}

func (p *peerProc) ref(name string) Ref {
	return Ref{Name: name, Kind: "test.counter", Address: p.addr, ID: "a/" + name}
}

func TestRemoteCallsAcrossProcesses(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := p.ref("peer")

	got, err := CallAs[Pong](ctx, s, ref, Ping{N: 2})
	if err != nil || got.N != 2 {
		t.Fatalf("remote call: %+v, %v", got, err)
	}
	if err := s.Tell(ref, Ping{N: 3}); err != nil {
		t.Fatal(err)
	}
	got, err = CallAs[Pong](ctx, s, ref, Ping{N: 1})
	if err != nil || got.N != 6 {
		t.Fatalf("tell then call, in order: %+v, %v", got, err)
	}

	_, err = s.Call(ctx, ref, Fail{Text: "nope"})
	var ae *ActorError
	if !errors.As(err, &ae) || ae.Message != "nope" || ae.Actor != "peer" {
		t.Fatalf("remote callee error: %v", err)
	}
	_, err = s.Call(ctx, ref, &Boom{Text: "remote panic"})
	if err == nil || !strings.Contains(err.Error(), "panic: remote panic") {
		t.Fatalf("remote panic: %v", err)
	}

	// Bodies above the inline limit travel over the bulk path, both ways.
	for _, size := range []int{1 << 10, 300 << 10, 20 << 20, 64<<20 - 64} {
		payload := bytes.Repeat([]byte{byte(size)}, size)
		payload[size/2] = 7
		echo, err := CallAs[Echo](ctx, s, ref, Echo{Payload: payload})
		if err != nil {
			t.Fatalf("echo %d bytes: %v", size, err)
		}
		if !bytes.Equal(echo.Payload, payload) {
			t.Fatalf("echo %d bytes: payload differs", size)
		}
	}
	// Over the limit: refused at the sender, naming size and limit; the
	// connection stays up.
	_, err = s.Call(ctx, ref, Echo{Payload: make([]byte, 64<<20+1)})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "67108864-byte") {
		t.Fatalf("oversized message: %v", err)
	}
	// (The panic above restarted the peer's counter from zero.)
	if got, err := CallAs[Pong](ctx, s, ref, Ping{N: 5}); err != nil || got.N != 5 {
		t.Fatalf("after refusal: %+v, %v", got, err)
	}

	// Garbage from the wire is logged and dropped; the peer keeps serving.
	pid := &pa.PID{Address: p.addr, Id: "a/peer"}
	s.as.Root.Send(pid, &anypb.Any{TypeUrl: envelopeTypeURL, Value: []byte{0xc1, 0xff, 0x00}})
	s.as.Root.Send(pid, &anypb.Any{TypeUrl: "evil", Value: []byte("x")})
	bad, _ := marshalEnvelope(&wireEnvelope{Kind: kindTell, Type: "no.such.Type", Body: []byte{1}, From: s.addr})
	s.as.Root.Send(pid, bad)
	if got, err := CallAs[Pong](ctx, s, ref, Ping{N: 1}); err != nil || got.N != 6 {
		t.Fatalf("after garbage: %+v, %v", got, err)
	}
}

func TestNonMemberMessagesDropped(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	ref := p.ref("peer")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Call(ctx, ref, Ping{N: 1}); err != nil {
		t.Fatal(err)
	}
	// This side now refuses replies from the peer: the call must not
	// complete, and it ends by deadline rather than hanging.
	s.SetPeerFilter(func(addr string) bool { return addr != p.addr })
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := s.Call(short, ref, Ping{N: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reply from a non-member was accepted: %v", err)
	}
	s.SetPeerFilter(nil)
	if _, err := s.Call(ctx, ref, Ping{N: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestMessagesFromAJoiningNodeAreHeld: a node's messages that reach a peer
// before the peer's membership lists it (it joined a moment ago; gossip
// has not told the peer yet) are held, and delivered in order once the
// peer admits it; a sender never admitted gets an error naming it after
// the grace, not a call that hangs.
func TestMessagesFromAJoiningNodeAreHeld(t *testing.T) {
	s := startTestSystem(t)
	members := t.TempDir() + "/members"
	if err := os.WriteFile(members, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startPeer(t, "RLNODE_ACTOR_PEER_MEMBERS="+members)
	ref := p.ref("peer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := s.Tell(ref, Ping{N: 2}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		got Pong
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := CallAs[Pong](ctx, s, ref, Ping{N: 1})
		done <- result{got, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("a call from a node the peer does not know was answered: %+v, %v", r.got, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := os.WriteFile(members, []byte(s.Address()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	// 3: the held tell (2) was delivered before the held call (1).
	if r.err != nil || r.got.N != 3 {
		t.Fatalf("held call after the join: %+v, %v (want N=3: tell, then call, in order)", r.got, r.err)
	}
	// Admitted now: no holding.
	if got, err := CallAs[Pong](ctx, s, ref, Ping{N: 1}); err != nil || got.N != 4 {
		t.Fatalf("call after the join: %+v, %v", got, err)
	}

	// A sender never admitted: the call fails after the grace with an
	// error that names the sender.
	q := startPeer(t, "RLNODE_ACTOR_PEER_MEMBERS="+t.TempDir()+"/none", "RLNODE_ACTOR_PEER_GRACE=200ms")
	start := time.Now()
	_, err := s.Call(ctx, q.ref("peer"), Ping{N: 1})
	var ae *ActorError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "does not know the sending node "+s.Address()) {
		t.Fatalf("call from a sender never admitted: %v", err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

func TestKilledPeerFailsPendingCalls(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Call(ctx, p.ref("peer"), Ping{N: 1}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx, p.ref("sleepy"), Ping{})
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = p.Cmd.Process.Kill()
	select {
	case err := <-errc:
		// Only the connection is known lost here: no membership says the
		// node is gone (before, the error said "node lost" all the same).
		if !errors.Is(err, ErrConnLost) || errors.Is(err, ErrNodeLost) || !strings.Contains(err.Error(), p.addr) {
			t.Fatalf("pending call after SIGKILL: %v, want ErrConnLost naming %s", err, p.addr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending call to a killed node did not fail within 10s")
	}
}

// A peer whose actor port takes connections and never answers (a
// firewall, a host gone from the network while gossip still lists it)
// fails the calls waiting for it with ErrConnLost after connectTries
// tries of handshakeTimeout and 2 s between them (36 s), within a
// caller's 75 s; before, protoactor's 5 tries of gRPC's 20 s (110 s) left
// the caller to give up first, with no word of the connection.
func TestSilentPeerFailsCallsWithConnLost(t *testing.T) {
	s := startTestSystem(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	addr := lis.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	_, err = s.Call(ctx, Ref{Name: "x", Kind: "k", Address: addr, ID: "a/x"}, Ping{N: 1})
	if !errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("call to a silent port: %v; want ErrConnLost naming %s before the caller gives up", err, addr)
	}
}
