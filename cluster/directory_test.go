package cluster

import (
	"testing"
	"time"
)

func TestDirectoryMergeConverges(t *testing.T) {
	rec := func(v uint64, w string, st ActorState) ActorRecord {
		return ActorRecord{Name: "x", Version: v, Writer: w, State: st}
	}
	cases := []struct {
		name string
		in   []ActorRecord
		want ActorRecord
	}{
		{"higher version wins", []ActorRecord{rec(1, "a", Alive), rec(2, "a", Dead)}, rec(2, "a", Dead)},
		{"older arrives late", []ActorRecord{rec(3, "b", Restarting), rec(2, "a", Alive)}, rec(3, "b", Restarting)},
		{"tie broken by writer", []ActorRecord{rec(2, "b", Alive), rec(2, "a", Dead)}, rec(2, "b", Alive)},
		{"tie either order", []ActorRecord{rec(2, "a", Dead), rec(2, "b", Alive)}, rec(2, "b", Alive)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirectory()
			var seen []ActorState
			d.onActor = func(old, cur ActorRecord) { seen = append(seen, cur.State) }
			for _, r := range tc.in {
				d.merge(&update{Actors: []ActorRecord{r}})
			}
			got, _ := d.Actor("x")
			if got.Version != tc.want.Version || got.Writer != tc.want.Writer || got.State != tc.want.State {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if len(seen) == 0 || seen[len(seen)-1] != tc.want.State {
				t.Fatalf("change callbacks %v", seen)
			}
			// A full snapshot merged into a fresh directory reproduces it.
			d2 := newDirectory()
			b, err := encodeUpdate(d.snapshot())
			if err != nil {
				t.Fatal(err)
			}
			u, err := decodeUpdate(b)
			if err != nil {
				t.Fatal(err)
			}
			d2.merge(u)
			if got2, _ := d2.Actor("x"); got2.Version != got.Version || got2.Writer != got.Writer {
				t.Fatalf("snapshot round trip: %+v", got2)
			}
		})
	}
	if _, err := decodeUpdate([]byte{0xc1, 0x00}); err == nil {
		t.Fatal("garbage decoded")
	}
}

func TestDirectoryCollect(t *testing.T) {
	d := newDirectory()
	old := time.Now().Add(-time.Hour).UnixMilli()
	now := time.Now().UnixMilli()
	d.merge(&update{
		Actors: []ActorRecord{
			{Name: "old-dead", State: Dead, UpdatedMs: old, Version: 1},
			{Name: "new-dead", State: Dead, UpdatedMs: now, Version: 1},
			{Name: "old-alive", State: Alive, UpdatedMs: old, Version: 1},
			{Name: "old-dead-kept", State: Dead, UpdatedMs: old, Version: 1, KeepDeadMs: (2 * time.Hour).Milliseconds()},
			{Name: "old-dead-short", State: Dead, UpdatedMs: old, Version: 1, KeepDeadMs: time.Minute.Milliseconds()},
		},
		Nodes: []NodeRecord{{ID: "gone", StartedMs: old, Version: 1}, {ID: "here", StartedMs: old, Version: 1}},
		Groups: []GroupRecord{{ID: "pg-1", Removed: true, Version: 2, UpdatedMs: old}, {ID: "pg-2", Version: 1},
			{ID: "pg-3", Removed: true, Version: 2, UpdatedMs: now}},
	})
	d.collect(time.Now().Add(-deadRecordTTL), func(id string) bool { return id == "here" })
	for name, want := range map[string]bool{"old-dead": false, "new-dead": true, "old-alive": true, "old-dead-kept": true, "old-dead-short": false} {
		if _, ok := d.Actor(name); ok != want {
			t.Errorf("actor %s kept = %v, want %v", name, ok, want)
		}
	}
	if _, ok := d.Node("gone"); ok {
		t.Error("departed node kept")
	}
	if _, ok := d.Node("here"); !ok {
		t.Error("live node dropped")
	}
	if _, ok := d.Group("pg-1"); ok {
		t.Error("removed group kept")
	}
	if _, ok := d.Group("pg-2"); !ok {
		t.Error("live group dropped")
	}
	// A group removed lately stays removed: the record from before the
	// removal, from a node that missed it, does not bring it back.
	d.merge(&update{Groups: []GroupRecord{{ID: "pg-3", Version: 1}}})
	if g, ok := d.Group("pg-3"); !ok || !g.Removed {
		t.Errorf("group removed lately: %+v (kept %v), want it kept as removed", g, ok)
	}
}

// leavingAt, the actor system's check before it drops protoactor's "lost
// connection" line for a peer, is true only of a node whose newest record
// says it is leaving in order.
func TestDirectoryLeavingAt(t *testing.T) {
	d := newDirectory()
	d.merge(&update{Nodes: []NodeRecord{
		{ID: "up", Actor: "127.0.0.1:1", Version: 1},
		{ID: "going", Actor: "127.0.0.1:2", Version: 1},
	}})
	d.merge(&update{Nodes: []NodeRecord{{ID: "going", Actor: "127.0.0.1:2", Leaving: true, Version: 2}}})
	for addr, want := range map[string]bool{"127.0.0.1:1": false, "127.0.0.1:2": true, "127.0.0.1:3": false} {
		if got := d.leavingAt(addr); got != want {
			t.Errorf("leavingAt(%s) = %v, want %v", addr, got, want)
		}
	}
}
