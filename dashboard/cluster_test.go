package dashboard

import (
	"reflect"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

func TestNodeBook(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := func(id, state string) cluster.NodeStatus { return cluster.NodeStatus{ID: id, State: state, UptimeS: 5} }
	type want struct{ id, state string }
	var b nodeBook
	for _, step := range []struct {
		name string
		at   time.Duration
		live []cluster.NodeStatus
		want []want
	}{
		{"three join", 0, []cluster.NodeStatus{n("c", "ALIVE"), n("a", "ALIVE"), n("b", "LEAVING")},
			[]want{{"a", "ALIVE"}, {"b", "LEAVING"}, {"c", "ALIVE"}}},
		{"c vanishes, b leaves", time.Second, []cluster.NodeStatus{n("a", "ALIVE")},
			[]want{{"a", "ALIVE"}, {"b", "LEFT"}, {"c", "DEAD"}}},
		{"still gone", 2 * time.Second, []cluster.NodeStatus{n("a", "ALIVE")},
			[]want{{"a", "ALIVE"}, {"b", "LEFT"}, {"c", "DEAD"}}},
		{"c comes back", 3 * time.Second, []cluster.NodeStatus{n("a", "ALIVE"), n("c", "ALIVE")},
			[]want{{"a", "ALIVE"}, {"c", "ALIVE"}, {"b", "LEFT"}}},
		{"b forgotten after the TTL", time.Second + goneTTL + time.Second, []cluster.NodeStatus{n("a", "ALIVE"), n("c", "ALIVE")},
			[]want{{"a", "ALIVE"}, {"c", "ALIVE"}}},
	} {
		got := b.merge(t0.Add(step.at), step.live)
		if len(got) != len(step.want) {
			t.Fatalf("%s: %d nodes, want %d: %+v", step.name, len(got), len(step.want), got)
		}
		for i, w := range step.want {
			if got[i].ID != w.id || got[i].State != w.state {
				t.Errorf("%s: node %d is %s %s, want %s %s", step.name, i, got[i].ID, got[i].State, w.id, w.state)
			}
			if gone := got[i].GoneSince != nil; gone != (w.state == "DEAD" || w.state == "LEFT") {
				t.Errorf("%s: %s gone_since %v", step.name, w.id, got[i].GoneSince)
			}
		}
	}
	// The time a node went is the first status without it.
	var b2 nodeBook
	b2.merge(t0, []cluster.NodeStatus{n("x", "ALIVE")})
	b2.merge(t0.Add(time.Second), nil)
	got := b2.merge(t0.Add(5*time.Second), nil)
	if len(got) != 1 || !got[0].GoneSince.Equal(t0.Add(time.Second)) || !got[0].LastSeen.Equal(t0) || got[0].UptimeS != 0 {
		t.Errorf("gone node: %+v", got)
	}
}

// The jobs of rlnode submit are drawn from their actors' records, with
// the status rlnode job list gives.
func TestJobViews(t *testing.T) {
	actors := []cluster.ActorStatus{
		{Name: "learner-1", Kind: "learner", State: cluster.Alive},
		{Name: "a", Kind: "rlnode.job", Node: "n1", State: cluster.Alive},
		{Name: "b", Kind: "rlnode.job", State: cluster.Restarting, Restarts: 1, Cause: "node lost"},
		{Name: "c", Kind: "rlnode.job", Node: "n2", State: cluster.Dead, Cause: "job succeeded"},
		{Name: "d", Kind: "rlnode.job", Node: "n2", State: cluster.Dead, Cause: "job failed: rlnode run exit status 1: boom"},
		{Name: "e", Kind: "rlnode.job", Node: "n2", State: cluster.Dead, Cause: "job stopped: its run was asked to stop and exited (exit status 130)"},
		{Name: "f", Kind: "rlnode.job", Node: "n1", State: cluster.Alive, Note: "waiting for room: no node can host {CPU:4}"},
		{Name: "g", Kind: "rlnode.job", Node: "n1", State: cluster.Alive, Note: "something else"},
	}
	want := []JobView{
		{Name: "a", Status: "RUNNING", Node: "n1"},
		{Name: "b", Status: "RESTARTING", Restarts: 1, Cause: "node lost"},
		{Name: "c", Status: "SUCCEEDED", Node: "n2", Cause: "job succeeded"},
		{Name: "d", Status: "FAILED", Node: "n2", Cause: "job failed: rlnode run exit status 1: boom"},
		{Name: "e", Status: "STOPPED", Node: "n2", Cause: "job stopped: its run was asked to stop and exited (exit status 130)"},
		{Name: "f", Status: "PENDING", Node: "n1", Cause: "waiting for room: no node can host {CPU:4}"},
		{Name: "g", Status: "RUNNING", Node: "n1"},
	}
	if got := jobViews(actors); !reflect.DeepEqual(got, want) {
		t.Errorf("jobViews:\n got %+v\nwant %+v", got, want)
	}
	if got := jobViews(nil); got == nil || len(got) != 0 {
		t.Errorf("no actors: %#v, want an empty list", got)
	}
}
