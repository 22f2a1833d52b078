package shard

import (
	"context"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/actor"
)

func TestMailboxTransportRefusesBadGroups(t *testing.T) {
	sys := driverSystem(t)
	mb, err := OpenMailbox(sys, "refuses.mailbox")
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
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
