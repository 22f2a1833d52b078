package cluster

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Placement is pure: it sees a snapshot of the nodes and decides, with no
// network and no locks. The node that is chosen still checks and reserves
// atomically when the spawn or reservation reaches it, so a stale snapshot
// costs a retry, never an overcommit.

// NodeView is what placement knows of one live node.
type NodeView struct {
	ID     string
	Labels map[string]string
	Total  Resources
	Free   Resources
}

// ErrInfeasible means no node (or set of nodes) can satisfy a request.
var ErrInfeasible = errors.New("infeasible placement")

// ErrNoRoom marks a request that does not fit now but that the live
// nodes could hold were all their resources free: actors, tasks or
// groups hold the room, and it may fit once they end (a group created
// with GroupOptions.Wait waits for that). errors.Is(err, ErrInfeasible)
// holds for it too; a request no node could ever hold is ErrInfeasible
// alone. Its text names no holder, as the holders may be the
// requester's own (ErrHeldBySelf): the error says who they are.
var ErrNoRoom = fmt.Errorf("%w (no free room now, though the nodes could hold it)", ErrInfeasible)

// ErrHeldBySelf marks an ErrNoRoom whose missing room is held by the
// requester's own actors or groups (the node that spawns or creates):
// it fits only were they released, which a caller that waits without
// releasing them (a run placing its rollout actors beside its learner)
// never sees. errors.Is(err, ErrNoRoom) holds for it too.
var ErrHeldBySelf = errors.New("the room it lacks is held by its requester's own actors or groups")

// allFree is nodes with every resource free.
func allFree(nodes []NodeView) []NodeView { return freeBut(nodes, nil) }

// freeBut is nodes with every resource free but what held names (node
// id -> resources): room that stays taken however long a request waits,
// such as what the requester holds itself.
func freeBut(nodes []NodeView, held map[string]Resources) []NodeView {
	out := make([]NodeView, len(nodes))
	for i, n := range nodes {
		out[i] = n
		out[i].Free = n.Total
		if h, ok := held[n.ID]; ok {
			out[i].Free = n.Total.Sub(h)
		}
	}
	return out
}

// Request is one actor's placement request.
type Request struct {
	Resources Resources
	Labels    map[string]string // node must carry every label
	Node      string            // pin to this node id when set
}

// PlaceOne picks the node for one actor: among nodes whose labels match and
// whose free resources cover the request, the one left least utilised
// (spreading load), ties by id. The error lists what every node offers.
func PlaceOne(nodes []NodeView, req Request) (string, error) {
	best := placeOne(nodes, req)
	if best != "" {
		return best, nil
	}
	err := infeasibleOne(nodes, req)
	if placeOne(allFree(nodes), req) != "" {
		err = fmt.Errorf("%s: %w", strings.TrimSuffix(err.Error(), ": "+ErrInfeasible.Error()), ErrNoRoom)
	}
	return "", err
}

// placeOne is PlaceOne's choice, "" when none fits.
func placeOne(nodes []NodeView, req Request) string {
	best, bestScore := "", 2.0
	for _, n := range sortedNodes(nodes) {
		if req.Node != "" && n.ID != req.Node {
			continue
		}
		if !matchLabels(n.Labels, req.Labels) || !n.Free.Covers(req.Resources) {
			continue
		}
		if s := utilisation(n.Total, n.Free.Sub(req.Resources)); s < bestScore {
			best, bestScore = n.ID, s
		}
	}
	return best
}

// utilisation is the largest used fraction over the node's resources.
func utilisation(total, free Resources) float64 {
	u := 0.0
	for k, t := range total {
		if t > 0 {
			u = max(u, (t-free[k])/t)
		}
	}
	return u
}

func infeasibleOne(nodes []NodeView, req Request) error {
	var b strings.Builder
	fmt.Fprintf(&b, "no node can host %s", req.Resources)
	if len(req.Labels) > 0 {
		fmt.Fprintf(&b, " with labels %s", fmtLabels(req.Labels))
	}
	if req.Node != "" {
		fmt.Fprintf(&b, " on node %s", req.Node)
		found := false
		for _, n := range nodes {
			found = found || n.ID == req.Node
		}
		if !found {
			b.WriteString(" (no such live node)")
		}
	}
	b.WriteString("; ")
	b.WriteString(describeNodes(nodes, req.Resources, len(req.Labels) > 0))
	return fmt.Errorf("%s: %w", b.String(), ErrInfeasible)
}

// maxNodesNamed bounds how many nodes a placement error describes one
// by one: the error must stay readable on a cluster of hundreds.
const maxNodesNamed = 8

// describeNodes says what each node has free of the resources need asks
// for, as "free/total per node: b CPU 2/8, GPU 2/2; a CPU 0/8", the
// nodes with the most free first, and names apart the nodes that offer
// none of them (a driver that offers nothing). Labels are shown only
// where the request names some (withLabels): every node of a cluster
// started by rlnode carries rlnode.jobs=yes, which said nothing there.
func describeNodes(nodes []NodeView, need Resources, withLabels bool) string {
	if len(nodes) == 0 {
		return "no live nodes"
	}
	var kinds []string
	for _, k := range sortedKeys(need) {
		if need[k] > 0 {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		// A request for nothing (pinned to a node that is gone): every
		// kind any node offers.
		all := Resources{}
		for _, n := range nodes {
			all = all.Add(n.Total)
		}
		for _, k := range sortedKeys(all) {
			if all[k] > 0 {
				kinds = append(kinds, k)
			}
		}
	}
	type entry struct {
		n    NodeView
		free float64
	}
	var offer []entry
	var none []string
	for _, n := range sortedNodes(nodes) {
		free, total := Resources{}, Resources{}
		for _, k := range kinds {
			free[k], total[k] = n.Free[k], n.Total[k]
		}
		if size(total) == 0 {
			none = append(none, n.ID)
			continue
		}
		offer = append(offer, entry{n, size(free)})
	}
	sort.SliceStable(offer, func(i, j int) bool { return offer[i].free > offer[j].free })
	var parts []string
	for i, e := range offer {
		if i == maxNodesNamed {
			parts = append(parts, fmt.Sprintf("%d more", len(offer)-maxNodesNamed))
			break
		}
		var amounts []string
		for _, k := range kinds {
			amounts = append(amounts, fmt.Sprintf("%s %s/%s", k, fmtAmount(k, e.n.Free[k]), fmtAmount(k, e.n.Total[k])))
		}
		s := e.n.ID + " " + strings.Join(amounts, ", ")
		switch {
		case withLabels && len(e.n.Labels) > 0:
			s += " labels " + fmtLabels(e.n.Labels)
		case withLabels:
			s += " no labels"
		}
		parts = append(parts, s)
	}
	var b strings.Builder
	if len(parts) > 0 {
		b.WriteString("free/total per node: ")
		b.WriteString(strings.Join(parts, "; "))
	}
	if len(none) > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if len(none) > maxNodesNamed {
			none = append(none[:maxNodesNamed], fmt.Sprintf("%d more", len(none)-maxNodesNamed))
		}
		if len(kinds) == 0 {
			fmt.Fprintf(&b, "offering nothing: %s", strings.Join(none, ", "))
		} else {
			fmt.Fprintf(&b, "without %s: %s", strings.Join(kinds, " or "), strings.Join(none, ", "))
		}
	}
	return b.String()
}

func sortedNodes(nodes []NodeView) []NodeView {
	out := append([]NodeView(nil), nodes...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Strategy is a placement group's strategy, with Ray's meanings.
type Strategy string

const (
	Pack         Strategy = "PACK"          // as few nodes as possible, best effort
	Spread       Strategy = "SPREAD"        // as many nodes as possible, best effort
	StrictPack   Strategy = "STRICT_PACK"   // all bundles on one node
	StrictSpread Strategy = "STRICT_SPREAD" // every bundle on a different node
)

// ParseStrategy accepts the four strategy names (any case).
func ParseStrategy(s string) (Strategy, error) {
	switch st := Strategy(strings.ToUpper(s)); st {
	case Pack, Spread, StrictPack, StrictSpread:
		return st, nil
	}
	return "", fmt.Errorf("placement strategy %q: want PACK, SPREAD, STRICT_PACK or STRICT_SPREAD", s)
}

// Bundle is one slot of a placement group.
type Bundle struct {
	Resources Resources         `json:"resources" msgpack:"r"`
	Labels    map[string]string `json:"labels,omitempty" msgpack:"l,omitempty"`
}

// maxSearchSteps bounds the backtracking search: groups are small (a few
// learner shards and rollout engines), so this is never reached in practice,
// and when it is the answer is "infeasible" rather than a long stall.
const maxSearchSteps = 200000

// PlaceGroup assigns every bundle a node under the strategy, all or nothing.
// It returns node ids in bundle order. A group that does not fit now but
// would were the nodes' resources all free fails with ErrNoRoom.
func PlaceGroup(nodes []NodeView, bundles []Bundle, st Strategy) ([]string, error) {
	out, err := placeGroup(nodes, bundles, st)
	if errors.Is(err, ErrInfeasible) {
		if _, ferr := placeGroup(allFree(nodes), bundles, st); ferr == nil {
			err = fmt.Errorf("%s: %w", strings.TrimSuffix(err.Error(), ": "+ErrInfeasible.Error()), ErrNoRoom)
		}
	}
	return out, err
}

func placeGroup(nodes []NodeView, bundles []Bundle, st Strategy) ([]string, error) {
	if len(bundles) == 0 {
		return nil, errors.New("placement group has no bundles")
	}
	if _, err := ParseStrategy(string(st)); err != nil {
		return nil, err
	}
	for i, b := range bundles {
		if err := b.Resources.Check(); err != nil {
			return nil, fmt.Errorf("placement group bundle %d: %w", i, err)
		}
	}
	ns := sortedNodes(nodes)
	free := make([]Resources, len(ns))
	for i, n := range ns {
		free[i] = n.Free.Clone()
	}
	// Place the largest bundles first: they have the fewest candidates.
	order := make([]int, len(bundles))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return size(bundles[order[a]].Resources) > size(bundles[order[b]].Resources) })

	assign := make([]int, len(bundles))
	used := make([]int, len(ns)) // bundles per node so far
	steps := 0
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(order) {
			return true
		}
		steps++
		if steps > maxSearchSteps {
			return false
		}
		b := bundles[order[k]]
		for _, i := range candidates(ns, free, used, b, st, assign, order[:k]) {
			free[i] = free[i].Sub(b.Resources)
			used[i]++
			assign[order[k]] = i
			if place(k + 1) {
				return true
			}
			free[i] = free[i].Add(b.Resources)
			used[i]--
		}
		return false
	}
	if st == Pack {
		// PACK is best effort of STRICT_PACK: one node when any can take all.
		if out, err := placeGroup(nodes, bundles, StrictPack); err == nil {
			return out, nil
		}
	}
	if !place(0) {
		return nil, infeasibleGroup(ns, bundles, st)
	}
	out := make([]string, len(bundles))
	for i, a := range assign {
		out[i] = ns[a].ID
	}
	return out, nil
}

// candidates orders the nodes a bundle may go to under the strategy.
func candidates(ns []NodeView, free []Resources, used []int, b Bundle, st Strategy, assign, placed []int) []int {
	var out []int
	for i, n := range ns {
		if !matchLabels(n.Labels, b.Labels) || !free[i].Covers(b.Resources) {
			continue
		}
		switch st {
		case StrictSpread:
			if used[i] > 0 {
				continue
			}
		case StrictPack:
			if len(placed) > 0 && assign[placed[0]] != i {
				continue
			}
		}
		out = append(out, i)
	}
	pack := st == Pack || st == StrictPack
	util := func(i int) float64 { return utilisation(ns[i].Total, free[i].Sub(b.Resources)) }
	sort.SliceStable(out, func(x, y int) bool {
		ux, uy := used[out[x]], used[out[y]]
		if ux != uy {
			if pack {
				return ux > uy // join nodes already holding bundles
			}
			return ux < uy // prefer empty nodes
		}
		// Least loaded next: for PACK that is the node with the most room
		// for the bundles still to come.
		return util(out[x]) < util(out[y])
	})
	return out
}

func size(r Resources) float64 {
	s := 0.0
	for k, v := range r {
		switch k {
		case GPU:
			v *= 1000 // a GPU is the scarce thing
		case Memory:
			v /= 1 << 30 // bytes: a GiB weighs as a CPU
		}
		s += v
	}
	return s
}

func infeasibleGroup(ns []NodeView, bundles []Bundle, st Strategy) error {
	need := Resources{}
	labels := false
	var bs []string
	for _, b := range bundles {
		labels = labels || len(b.Labels) > 0
		need = need.Add(b.Resources)
		s := b.Resources.String()
		if len(b.Labels) > 0 {
			s += " labels " + fmtLabels(b.Labels)
		}
		bs = append(bs, s)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "placement group %s of %d bundle%s [%s] does not fit", st, len(bundles), plural(len(bundles)), strings.Join(bs, ", "))
	total, free := Resources{}, Resources{}
	for _, n := range ns {
		total = total.Add(n.Total)
		free = free.Add(n.Free)
	}
	switch {
	case !total.Covers(need):
		fmt.Fprintf(&b, ": the cluster has in all %s; the group needs %s", total, strings.Join(total.Missing(need), ", "))
	case !free.Covers(need):
		fmt.Fprintf(&b, ": the cluster has free %s; the group needs %s", free, strings.Join(free.Missing(need), ", "))
	case st == StrictPack:
		fmt.Fprintf(&b, ": no single node has %s free", need)
	case st == StrictSpread && len(ns) < len(bundles):
		fmt.Fprintf(&b, ": needs %d distinct nodes, the cluster has %d", len(bundles), len(ns))
	default:
		b.WriteString(": no assignment of bundles to nodes fits")
	}
	b.WriteString("; ")
	b.WriteString(describeNodes(ns, need, labels))
	return fmt.Errorf("%s: %w", b.String(), ErrInfeasible)
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
