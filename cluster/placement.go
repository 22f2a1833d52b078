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
// groups hold the room, and it may fit once they end. errors.Is(err,
// ErrInfeasible) holds for it too; a request no node could ever hold is
// ErrInfeasible alone.
var ErrNoRoom = fmt.Errorf("%w (no room now: others hold it)", ErrInfeasible)

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
	b.WriteString("; cluster offers: ")
	b.WriteString(describeNodes(nodes))
	return fmt.Errorf("%s: %w", b.String(), ErrInfeasible)
}

func describeNodes(nodes []NodeView) string {
	if len(nodes) == 0 {
		return "no live nodes"
	}
	var parts []string
	for _, n := range sortedNodes(nodes) {
		s := fmt.Sprintf("%s free %s of %s", n.ID, n.Free, n.Total)
		if len(n.Labels) > 0 {
			s += " labels " + fmtLabels(n.Labels)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
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
	var bs []string
	for _, b := range bundles {
		need = need.Add(b.Resources)
		s := b.Resources.String()
		if len(b.Labels) > 0 {
			s += " labels " + fmtLabels(b.Labels)
		}
		bs = append(bs, s)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "placement group %s of %d bundles [%s] does not fit", st, len(bundles), strings.Join(bs, ", "))
	total, free := Resources{}, Resources{}
	for _, n := range ns {
		total = total.Add(n.Total)
		free = free.Add(n.Free)
	}
	switch {
	case !total.Covers(need):
		fmt.Fprintf(&b, ": the cluster has in all %s, missing %s", total, strings.Join(total.Missing(need), ", "))
	case !free.Covers(need):
		fmt.Fprintf(&b, ": the cluster has free %s, missing %s", free, strings.Join(free.Missing(need), ", "))
	case st == StrictPack:
		fmt.Fprintf(&b, ": no single node has %s free", need)
	case st == StrictSpread && len(ns) < len(bundles):
		fmt.Fprintf(&b, ": needs %d distinct nodes, the cluster has %d", len(bundles), len(ns))
	default:
		b.WriteString(": no assignment of bundles to nodes fits")
	}
	b.WriteString("; cluster offers: ")
	b.WriteString(describeNodes(ns))
	return fmt.Errorf("%s: %w", b.String(), ErrInfeasible)
}
