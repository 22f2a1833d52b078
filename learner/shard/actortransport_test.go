package shard

import (
	"context"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/actor"
)

func TestMailboxTransportRefusesBadGroups(t *testing.T) {
	sys := driverSystem(t)
	mb := openMailbox(t, sys, "refuses.mailbox")
	other := actor.Ref{Name: "x", Address: "127.0.0.1:1", ID: "a/x"}
	for _, tc := range []struct {
		name  string
		rank  int
		peers []actor.Ref
		want  string
	}{
		{"rank out of range", 2, []actor.Ref{mb.Ref(), other}, "rank 2 of 2"},
		{"not this mailbox", 0, []actor.Ref{other, mb.Ref()}, "rank 0's mailbox is"},
		{"missing peer", 0, []actor.Ref{mb.Ref(), {}}, "rank 1 has no mailbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := mb.Transport(1, tc.rank, tc.peers, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := OpenMailbox(sys, "refuses.mailbox"); err == nil {
		t.Error("a second mailbox under the same name opened")
	}
}

func TestGroupRefusesBadRanks(t *testing.T) {
	sys := driverSystem(t)
	a := actor.Ref{Name: "a", Address: "127.0.0.1:1", ID: "a/a"}
	b := actor.Ref{Name: "b", Address: "127.0.0.1:1", ID: "a/b"}
	for _, tc := range []struct {
		name  string
		ranks []actor.Ref
		want  string
	}{
		{"none", nil, "group of no ranks"},
		{"empty ref", []actor.Ref{a, {}}, "rank 1 has an empty actor ref"},
		{"twice", []actor.Ref{a, b, a}, "rank 2 is rank 0's actor a@127.0.0.1:1 again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewGroup(context.Background(), sys, tc.ranks, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A peer's push receiver is learned once per epoch: after a restart (a
// new epoch) a rank asks again, so a peer respawned on a node that came
// back at the same address (the same Ref) is not pushed to at the bulk
// address of its previous process.
func TestMailboxRelearnsPeersEachEpoch(t *testing.T) {
	sys := driverSystem(t)
	m, p := openMailbox(t, sys, "relearn.a"), openMailbox(t, sys, "relearn.b")
	ctx := context.Background()
	peers := []actor.Ref{m.Ref(), p.Ref()}
	if _, err := m.Transport(1, 0, peers, Options{}); err != nil {
		t.Fatal(err)
	}
	real, err := m.peerAddr(ctx, p.Ref())
	if err != nil {
		t.Fatal(err)
	}
	// What the peer's previous process answered.
	stale := BulkAddr{Addr: "127.0.0.1:1", Name: real.Name}
	m.mu.Lock()
	m.addrs[p.Ref()] = stale
	m.mu.Unlock()
	if _, err := m.Transport(1, 0, peers, Options{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.peerAddr(ctx, p.Ref()); got != stale {
		t.Errorf("within epoch 1 the peer's receiver is %+v, want the one learned (%+v)", got, stale)
	}
	if _, err := m.Transport(2, 0, peers, Options{}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.peerAddr(ctx, p.Ref()); err != nil || got != real {
		t.Errorf("in epoch 2 the peer's receiver is %+v (%v), want it asked again: %+v", got, err, real)
	}
}

// openMailbox opens a mailbox under name, closed when the test ends.
func openMailbox(t *testing.T, sys *actor.System, name string) *Mailbox {
	t.Helper()
	mb, err := OpenMailbox(sys, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Close() })
	return mb
}
