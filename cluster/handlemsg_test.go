package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/proctest"
	"github.com/vmihailenco/msgpack/v5"
)

// Forward asks a relay to call To with Add{N}: an actor handle inside a
// message, as a Ray program passes a learner's handle to its workers.
type Forward struct {
	To *Handle
	N  int
}

// RelayArgs gives a relay its target at spawn, the handle in its
// constructor's arguments.
type RelayArgs struct{ To *Handle }

// ForwardToArgs asks a relay to call the handle it was spawned with.
type ForwardToArgs struct{ N int }

// Relayed is a relay's answer: what the target said, and where the relay ran.
type Relayed struct {
	Sum   Sum
	Relay string
}

type relayActor struct {
	node string
	to   *Handle
}

func (r *relayActor) Receive(ctx *actor.Context, msg any) (any, error) {
	cctx, cancel := context.WithTimeout(ctx.Context(), 20*time.Second)
	defer cancel()
	var to *Handle
	var n int
	switch m := msg.(type) {
	case Forward:
		to, n = m.To, m.N
	case ForwardToArgs:
		to, n = r.to, m.N
	default:
		return nil, fmt.Errorf("unexpected %T", msg)
	}
	if to == nil {
		return nil, errors.New("no handle to forward to")
	}
	sum, err := Call[Sum](cctx, to, Add{N: n})
	if err != nil {
		return nil, err
	}
	return Relayed{Sum: sum, Relay: r.node}, nil
}

func init() {
	RegisterTask("test.relaytask", func(ctx context.Context, m Forward) (Relayed, error) {
		sum, err := Call[Sum](ctx, m.To, Add{N: m.N})
		return Relayed{Sum: sum, Relay: os.Getenv("RLNODE_TEST_NODE_ID")}, err
	})
	actor.RegisterMessage(Forward{}, RelayArgs{}, ForwardToArgs{}, Relayed{})
	actor.RegisterKind("test.relay", func(ctx *actor.Context, args any) (actor.Actor, error) {
		r := &relayActor{node: os.Getenv("RLNODE_TEST_NODE_ID")}
		if a, ok := args.(RelayArgs); ok {
			r.to = a.To
		}
		return r, nil
	})
}

// TestHandleInMessage: a handle the driver holds reaches actors and a task
// on other nodes inside a message, spawn arguments and task arguments, and
// they call the actor it names (on a third node) through it.
func TestHandleInMessage(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "hm-a", key)
	startNodeProcess(t, "hm-b", key, a.GossipAddress(), 0, "")
	startNodeProcess(t, "hm-c", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ctr, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "hm-counter", Node: "hm-b"})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := a.Spawn(ctx, "test.relay", SpawnOptions{Name: "hm-relay", Node: "hm-c", Args: RelayArgs{To: ctr}})
	if err != nil {
		t.Fatal(err)
	}
	// Spawn arguments are encoded even for an actor of this process.
	local, err := a.Spawn(ctx, "test.relay", SpawnOptions{Name: "hm-relay-local", Node: "hm-a", Args: RelayArgs{To: ctr}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		relay *Handle
		where string // the relay's node as it reports it
		msg   any
		want  int // the counter's sum after the call
	}{
		{"in a message", relay, "hm-c", Forward{To: ctr, N: 5}, 5},
		{"in spawn arguments", relay, "hm-c", ForwardToArgs{N: 7}, 12},
		{"in spawn arguments, in-process", local, "", ForwardToArgs{N: 1}, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Call[Relayed](ctx, tc.relay, tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if got.Relay != tc.where || got.Sum.Node != "hm-b" || got.Sum.N != tc.want {
				t.Fatalf("relay answered %+v, want relay %q, counter hm-b at %d", got, tc.where, tc.want)
			}
		})
	}
	t.Run("in a task's arguments", func(t *testing.T) {
		got, err := Submit[Relayed](ctx, a, "test.relaytask", Forward{To: ctr, N: 2}, TaskOptions{Node: "hm-c"}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Relay != "hm-c" || got.Sum.Node != "hm-b" || got.Sum.N != 15 {
			t.Fatalf("task answered %+v, want it on hm-c, counter hm-b at 15", got)
		}
	})
	// A handle forged to name an actor no node hosts: the receiver's call
	// through it fails, naming it, once every node has said so; the relay
	// answers the next message.
	t.Run("naming no actor", func(t *testing.T) {
		_, err := Call[Relayed](ctx, relay, Forward{To: &Handle{name: "hm-ghost"}, N: 1})
		if err == nil || !strings.Contains(err.Error(), "hm-ghost") || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("a call through a handle naming no actor: %v, want not found naming hm-ghost", err)
		}
		if got, err := Call[Relayed](ctx, relay, Forward{To: ctr, N: 1}); err != nil || got.Sum.N != 16 {
			t.Fatalf("the relay after it: %+v, %v", got, err)
		}
	})
}

// TestHandleDecodedWithoutNode: a handle decoded in a process that runs no
// node (or several) cannot know which node to call through: its methods
// say so and name the actor, rather than panic; its name survives. It
// runs in a fresh process, where no other test's node may linger.
func TestHandleDecodedWithoutNode(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	b, err := msgpack.Marshal(Forward{To: &Handle{name: "learner"}, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	var f Forward
	if err := msgpack.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.To == nil || f.To.Name() != "learner" {
		t.Fatalf("decoded handle %+v, want one named learner", f.To)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	checks := map[string]error{}
	_, checks["Call"] = f.To.Call(ctx, Add{N: 1})
	checks["Tell"] = f.To.Tell(Add{N: 1})
	checks["Stop"] = f.To.Stop(ctx)
	for op, err := range checks {
		if !errors.Is(err, ErrUnboundHandle) || !strings.Contains(err.Error(), "learner") {
			t.Errorf("%s on an unbound handle: %v, want ErrUnboundHandle naming learner", op, err)
		}
	}
	if _, ok := f.To.Record(); ok {
		t.Error("Record on an unbound handle reported a record")
	}
}

// TestHandleFieldsRoundTrip: handles as pointers, values and in lists
// keep their names through the codec; unset ones stay unset.
func TestHandleFieldsRoundTrip(t *testing.T) {
	type fields struct {
		Ptr, NilPtr *Handle
		Val, Unset  Handle
		List        []*Handle
	}
	in := fields{Ptr: &Handle{name: "learner"}, Val: Handle{name: "sync"}, List: []*Handle{{name: "r0"}, nil, {name: "r1"}}}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out fields
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	names := func(f fields) string {
		s := []string{}
		for _, h := range append([]*Handle{f.Ptr, f.NilPtr, &f.Val, &f.Unset}, f.List...) {
			if h == nil {
				s = append(s, "nil")
			} else {
				s = append(s, fmt.Sprintf("%q", h.Name()))
			}
		}
		return strings.Join(s, " ")
	}
	if got, want := names(out), names(in); got != want {
		t.Errorf("decoded %s, want %s", got, want)
	}
}

// TestHandleDecodeRefusesBadNames: a handle from the wire names an actor
// as Spawn would allow, or the message does not decode.
func TestHandleDecodeRefusesBadNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire any
	}{
		{"empty name", map[string]any{"Name": ""}},
		{"reserved name", map[string]any{"Name": "$node"}},
		{"too long", map[string]any{"Name": strings.Repeat("x", MaxActorName+1)}},
		{"not a map", 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := msgpack.Marshal(map[string]any{"To": tc.wire, "N": 1})
			if err != nil {
				t.Fatal(err)
			}
			var f Forward
			if err := msgpack.Unmarshal(b, &f); err == nil {
				t.Fatalf("decoded %+v, want an error", f.To)
			}
		})
	}
}
