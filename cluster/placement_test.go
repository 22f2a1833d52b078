package cluster

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func node(id string, cpu, gpu, freeCPU, freeGPU float64, labels ...string) NodeView {
	l := map[string]string{}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		l[k] = v
	}
	return NodeView{ID: id, Labels: l,
		Total: Resources{CPU: cpu, GPU: gpu}, Free: Resources{CPU: freeCPU, GPU: freeGPU}}
}

func TestPlaceOne(t *testing.T) {
	nodes := []NodeView{
		node("a", 8, 0, 8, 0, "zone=x"),
		node("b", 8, 2, 2, 2, "zone=y"),
		node("c", 8, 0, 6, 0, "zone=y"),
	}
	cases := []struct {
		name    string
		req     Request
		want    string
		wantErr []string
	}{
		{"spreads to the least utilised node", Request{Resources: Resources{CPU: 1}}, "a", nil},
		{"gpu goes where gpus are", Request{Resources: Resources{GPU: 1}}, "b", nil},
		{"label selector", Request{Resources: Resources{CPU: 1}, Labels: map[string]string{"zone": "y"}}, "c", nil},
		{"pinned node", Request{Resources: Resources{CPU: 1}, Node: "b"}, "b", nil},
		{"zero request fits anywhere", Request{}, "a", nil},
		{"too many gpus", Request{Resources: Resources{GPU: 3}}, "",
			[]string{"no node can host {GPU:3}; free/total per node: b GPU 2/2; without GPU: a, c"}},
		{"pinned node lacks room", Request{Resources: Resources{CPU: 4}, Node: "b"}, "", []string{"on node b"}},
		{"pinned node unknown", Request{Node: "zz"}, "", []string{"no such live node"}},
		{"custom resource", Request{Resources: Resources{"tpu": 1}}, "", []string{"{tpu:1}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlaceOne(nodes, tc.req)
			if tc.wantErr != nil {
				checkInfeasible(t, err, tc.wantErr)
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PlaceOne = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// What each node offers, after a refusal, is read by a person: one
// entry per node of the resources asked for, as free/total (the way
// rlnode status shows them), the nodes with most free first, and apart
// the nodes that offer none of them. It was "cluster offers: a free
// {memory:23.5 GiB} of {CPU:2 memory:23.5 GiB} labels rlnode.jobs=yes;
// d free {} of {}; ..." for every node: a free CPU count of 0 was left
// out, every node repeated its labels, and a driver that offers nothing
// took a place like the others.
func TestDescribeNodes(t *testing.T) {
	const gib = 1 << 30
	jobs := map[string]string{"rlnode.jobs": "yes"}
	cluster3 := []NodeView{
		{ID: "a", Labels: jobs, Total: Resources{CPU: 2, Memory: 8 * gib}, Free: Resources{Memory: 8 * gib}},
		{ID: "b", Labels: jobs, Total: Resources{CPU: 2, Memory: 8 * gib}, Free: Resources{CPU: 1, Memory: 8 * gib}},
		{ID: "d", Total: Resources{}, Free: Resources{}},
	}
	var many []NodeView
	for i := range 12 {
		many = append(many, NodeView{ID: fmt.Sprintf("n%02d", i), Total: Resources{CPU: 4}, Free: Resources{CPU: float64(i % 5)}})
	}
	for _, c := range []struct {
		name   string
		nodes  []NodeView
		need   Resources
		labels bool
		want   string
	}{
		{"the kinds asked for, most free first; a node offering none apart", cluster3, Resources{CPU: 2, Memory: gib}, false,
			"free/total per node: b CPU 1/2, memory 8.0 GiB/8.0 GiB; a CPU 0/2, memory 8.0 GiB/8.0 GiB; without CPU or memory: d"},
		{"labels where the request names some", cluster3[:1], Resources{CPU: 1}, true,
			"free/total per node: a CPU 0/2 labels rlnode.jobs=yes"},
		{"a node without labels where the request names some", []NodeView{{ID: "e", Total: Resources{CPU: 1}, Free: Resources{CPU: 1}}}, Resources{CPU: 2}, true,
			"free/total per node: e CPU 1/1 no labels"},
		{"a request for nothing: every kind offered", cluster3[1:], Resources{}, false,
			"free/total per node: b CPU 1/2, memory 8.0 GiB/8.0 GiB; without CPU or memory: d"},
		{"no nodes", nil, Resources{CPU: 1}, false, "no live nodes"},
		{"a request for nothing where no node offers anything", cluster3[2:], Resources{}, false, "offering nothing: d"},
		{"a large cluster: the eight with most free", many, Resources{CPU: 8}, false,
			"free/total per node: n04 CPU 4/4; n09 CPU 4/4; n03 CPU 3/4; n08 CPU 3/4; n02 CPU 2/4; n07 CPU 2/4; n01 CPU 1/4; n06 CPU 1/4; 4 more"},
	} {
		if got := describeNodes(c.nodes, c.need, c.labels); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestPlaceGroup(t *testing.T) {
	three := []NodeView{
		node("n1", 4, 1, 4, 1),
		node("n2", 4, 1, 4, 1),
		node("n3", 8, 2, 8, 2),
	}
	gpu := Bundle{Resources: Resources{GPU: 1, CPU: 1}}
	cpu2 := Bundle{Resources: Resources{CPU: 2}}
	cases := []struct {
		name    string
		nodes   []NodeView
		bundles []Bundle
		st      Strategy
		want    []string
		wantErr []string
	}{
		{"strict pack on the one node that fits", three, []Bundle{gpu, gpu}, StrictPack, []string{"n3", "n3"}, nil},
		{"pack fills one node first", three, []Bundle{cpu2, cpu2, cpu2}, Pack, []string{"n3", "n3", "n3"}, nil},
		{"pack spills over when no node takes all", three, []Bundle{gpu, gpu, gpu}, Pack, []string{"n3", "n3", "n1"}, nil},
		{"strict spread uses distinct nodes", three, []Bundle{gpu, gpu, gpu}, StrictSpread, []string{"n3", "n1", "n2"}, nil},
		{"spread prefers distinct nodes", three, []Bundle{cpu2, cpu2}, Spread, []string{"n3", "n1"}, nil},
		{"spread reuses when it must", three, []Bundle{gpu, gpu, gpu, gpu}, Spread, []string{"n3", "n1", "n2", "n3"}, nil},
		{"strict spread needs more nodes", three, []Bundle{gpu, gpu, gpu, gpu}, StrictSpread, nil,
			[]string{"STRICT_SPREAD", "needs 4 distinct nodes, the cluster has 3"}},
		{"strict pack too big for any node", three, []Bundle{gpu, gpu, gpu}, StrictPack, nil,
			[]string{"no single node has {CPU:3 GPU:3} free"}},
		{"more gpus than the cluster has", three, []Bundle{{Resources: Resources{GPU: 8}}}, Pack, nil,
			[]string{"the cluster has in all", "GPU 8 (has 4)"}},
		{"busy cluster", []NodeView{node("n1", 4, 0, 1, 0)}, []Bundle{cpu2}, Pack, nil,
			[]string{"the cluster has free {CPU:1}", "CPU 2 (has 1)"}},
		{"labels respected", []NodeView{node("a", 4, 0, 4, 0, "role=learner"), node("b", 4, 0, 4, 0)},
			[]Bundle{{Resources: Resources{CPU: 1}, Labels: map[string]string{"role": "learner"}}, cpu2}, StrictSpread,
			[]string{"a", "b"}, nil},
		{"needs backtracking", []NodeView{node("a", 3, 0, 3, 0), node("b", 2, 0, 2, 0)},
			[]Bundle{{Resources: Resources{CPU: 2}}, {Resources: Resources{CPU: 3}}}, StrictSpread, []string{"b", "a"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlaceGroup(tc.nodes, tc.bundles, tc.st)
			if tc.wantErr != nil {
				checkInfeasible(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PlaceGroup = %v, want %v", got, tc.want)
			}
			checkFits(t, tc.nodes, tc.bundles, got)
		})
	}
	if _, err := PlaceGroup(three, []Bundle{gpu}, "DIAGONAL"); err == nil {
		t.Fatal("unknown strategy accepted")
	}
	if _, err := PlaceGroup(three, nil, Pack); err == nil {
		t.Fatal("empty group accepted")
	}
}

// checkInfeasible verifies err is ErrInfeasible and says every wanted thing.
func checkInfeasible(t *testing.T, err error, want []string) {
	t.Helper()
	if !errors.Is(err, ErrInfeasible) {
		t.Fatalf("err = %v, want ErrInfeasible", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// checkFits verifies an assignment never overcommits a node.
func checkFits(t *testing.T, nodes []NodeView, bundles []Bundle, assign []string) {
	t.Helper()
	use := map[string]Resources{}
	for i, id := range assign {
		use[id] = use[id].Add(bundles[i].Resources)
	}
	for _, n := range nodes {
		if u, ok := use[n.ID]; ok && !n.Free.Covers(u) {
			t.Fatalf("node %s overcommitted: uses %s, free %s", n.ID, u, n.Free)
		}
	}
}

func TestParseResources(t *testing.T) {
	r, err := ParseResources("CPU=2, GPU=1,tpu=0.5")
	if err != nil || !reflect.DeepEqual(r, Resources{CPU: 2, GPU: 1, "tpu": 0.5}) {
		t.Fatalf("got %v, %v", r, err)
	}
	for _, bad := range []string{"CPU", "CPU=x", "=1", "GPU=-1", "GPU=NaN", "CPU=Inf", "tpu=+Inf"} {
		if _, err := ParseResources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A request the nodes could hold were their resources free is ErrNoRoom
// (and ErrInfeasible); one they never could is ErrInfeasible alone.
func TestPlacementNoRoomNow(t *testing.T) {
	busy := []NodeView{node("a", 4, 1, 0.5, 0), node("b", 2, 0, 1, 0)}
	for _, c := range []struct {
		name   string
		err    error
		noRoom bool
	}{
		{"one, fits a's total", func() error { _, err := PlaceOne(busy, Request{Resources: Resources{CPU: 3, GPU: 1}}); return err }(), true},
		{"one, over every total", func() error { _, err := PlaceOne(busy, Request{Resources: Resources{CPU: 5}}); return err }(), false},
		{"one, pinned to b, over b's total", func() error {
			_, err := PlaceOne(busy, Request{Resources: Resources{CPU: 3}, Node: "b"})
			return err
		}(), false},
		{"one, label no node has", func() error {
			_, err := PlaceOne(busy, Request{Resources: Resources{CPU: 1}, Labels: map[string]string{"zone": "x"}})
			return err
		}(), false},
		{"group spread, fits the totals", func() error {
			_, err := PlaceGroup(busy, []Bundle{{Resources: Resources{CPU: 2}}, {Resources: Resources{CPU: 2}}}, StrictSpread)
			return err
		}(), true},
		{"group strict spread, three nodes wanted", func() error {
			_, err := PlaceGroup(busy, []Bundle{{Resources: Resources{CPU: 1}}, {Resources: Resources{CPU: 1}}, {Resources: Resources{CPU: 1}}}, StrictSpread)
			return err
		}(), false},
		{"group strict pack, over any node", func() error {
			_, err := PlaceGroup(busy, []Bundle{{Resources: Resources{CPU: 3}}, {Resources: Resources{CPU: 2}}}, StrictPack)
			return err
		}(), false},
	} {
		if !errors.Is(c.err, ErrInfeasible) {
			t.Errorf("%s: %v, want ErrInfeasible", c.name, c.err)
			continue
		}
		if errors.Is(c.err, ErrNoRoom) != c.noRoom {
			t.Errorf("%s: %v: ErrNoRoom %v, want %v", c.name, c.err, !c.noRoom, c.noRoom)
		}
		if strings.Count(c.err.Error(), "infeasible placement") != 1 {
			t.Errorf("%s: %q names the sentinel more than once", c.name, c.err)
		}
	}
}
