package actor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
)

func TestMemberProof(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server string // secrets; "" speaks no handshake
		ok             bool
	}{
		{"same key", "k1", "k1", true},
		{"another key", "k2", "k1", false},
		{"a server with another key", "k1", "k2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, _ := newMemberProof([]byte(tc.client))
			sp, _ := newMemberProof([]byte(tc.server))
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_ = a.SetDeadline(time.Now().Add(5 * time.Second))
			_ = b.SetDeadline(time.Now().Add(5 * time.Second))
			srv := make(chan error, 1)
			go func() {
				err := sp.server(b)
				if err != nil {
					b.Close() // as a server does: the client sees the close
				}
				srv <- err
			}()
			cerr := cp.client(a)
			if cerr != nil {
				a.Close()
			}
			serr := <-srv
			if got := cerr == nil && serr == nil; got != tc.ok {
				t.Fatalf("client: %v; server: %v; want ok=%v", cerr, serr, tc.ok)
			}
			if !tc.ok && !errors.Is(cerr, ErrNotMember) && !errors.Is(serr, ErrNotMember) {
				t.Fatalf("neither side names ErrNotMember: client %v, server %v", cerr, serr)
			}
		})
	}
	// A client that speaks anything else is refused at its first bytes.
	sp, _ := newMemberProof([]byte("k1"))
	a, b := net.Pipe()
	defer a.Close()
	go func() { _, _ = a.Write([]byte("RLBH\x00\x01x")) }()
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	if err := sp.server(b); !errors.Is(err, ErrNotMember) {
		t.Fatalf("a bulk hello instead of the handshake: %v", err)
	}
}

func TestMemberHandshakeTransport(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir)
	for _, tc := range []struct {
		name string
		peer []string // the peer's environment
		cfgs []Config // clients that must be served, then those that must not
		good int
	}{
		{"key", []string{"RLNODE_ACTOR_SECRET=k1"}, []Config{{Secret: []byte("k1")}, {Secret: []byte("k2")}, {}, {TLS: tlsFilesIn(dir)}}, 1},
		{"key and TLS", []string{"RLNODE_ACTOR_SECRET=k1", "RLNODE_ACTOR_TLS_DIR=" + dir},
			[]Config{{Secret: []byte("k1"), TLS: tlsFilesIn(dir)}, {TLS: tlsFilesIn(dir)}, {Secret: []byte("k1")}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPeer(t, tc.peer...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for i, cfg := range tc.cfgs {
				cfg.Logger = DiscardLogger()
				s, err := Start(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if i < tc.good {
					if got, err := CallAs[Pong](ctx, s, p.ref("peer"), Ping{N: 1}); err != nil || got.N != i+1 {
						t.Errorf("client %d: call: %+v, %v", i, got, err)
					}
					big := bytes.Repeat([]byte("w"), 1<<20) // both ways over the bulk path
					if e, err := CallAs[Echo](ctx, s, p.ref("peer"), Echo{Payload: big}); err != nil || !bytes.Equal(e.Payload, big) {
						t.Errorf("client %d: bulk: %v", i, err)
					}
				} else {
					short, cancel := context.WithTimeout(ctx, 3*time.Second)
					if _, err := s.Call(short, p.ref("peer"), Ping{N: 1000}); err == nil {
						t.Errorf("client %d (%+v) got an answer", i, cfg)
					}
					cancel()
				}
				s.Stop()
			}
		})
	}
}

// A process without the key that names a member as the sender gets nothing
// done: not on the actor port, not on the bulk path.
func TestForgedSenderWithoutTheKey(t *testing.T) {
	members := filepath.Join(t.TempDir(), "members")
	p := startPeer(t, "RLNODE_ACTOR_SECRET=k1", "RLNODE_ACTOR_PEER_MEMBERS="+members)
	member, err := Start(Config{Secret: []byte("k1"), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Stop()
	if err := os.WriteFile(members, []byte(member.Address()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	forger := startTestSystem(t) // no key
	name, body, err := encodeBody(Ping{N: 1000})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := marshalEnvelope(&wireEnvelope{Kind: kindTell, Type: name, From: member.Address(), Body: body})
	forger.as.Root.Send(&pa.PID{Address: p.addr, Id: "a/peer"}, env)
	call, _ := marshalEnvelope(&wireEnvelope{Kind: kindCall, Call: 1, Type: name, From: member.Address(), Body: body})
	if _, err := forger.as.Root.RequestFuture(&pa.PID{Address: p.addr, Id: "a/peer"}, call, 3*time.Second).Result(); err == nil {
		t.Error("a forged call was answered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := CallAs[Pong](ctx, member, p.ref("peer"), Ping{N: 1}); err != nil || got.N != 1 {
		t.Fatalf("the member's call: %+v, %v (want the count untouched by the forger)", got, err)
	}

	// The bulk path: a hello and a fetch naming a member, without the
	// handshake, are closed unanswered.
	member.SetPeerFilter(func(addr string) bool { return addr == "192.0.2.7:4000" })
	ref := member.Bulk().Offer([]byte("secret bytes"), 1, time.Minute)
	from := "192.0.2.7:4000"
	hello := append([]byte(bulkHelloMagic), 0, byte(len(from)))
	hello = append(hello, from...)
	fetch := append([]byte(bulkMagic), ref.ID...)
	fetch = binary.BigEndian.AppendUint64(fetch, 0)
	fetch = binary.BigEndian.AppendUint64(fetch, uint64(ref.Size))
	fetch = binary.BigEndian.AppendUint16(fetch, uint16(len(from)))
	fetch = append(fetch, from...)
	for _, req := range [][]byte{hello, fetch} {
		c, err := net.Dial("tcp", member.Bulk().Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write(req)
		reply, err := io.ReadAll(c) // a close or a reset
		c.Close()
		if ne, ok := err.(net.Error); len(reply) != 0 || ok && ne.Timeout() {
			t.Fatalf("%q: got %q, %v; want the connection closed unanswered", req[:4], reply, err)
		}
	}
	if got, err := member.Bulk().Fetch(ctx, ref); err != nil || string(got) != "secret bytes" {
		t.Fatalf("the offer after the forged requests: %q, %v", got, err)
	}
}
