package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// A waiting placement group (GroupOptions.Wait) lives in the directory as
// a record with Pending set and no nodes until its bundles are reserved;
// each record it writes, and each try at reserving it, takes the next
// version, so a record written while it waits fences (onGroupChange) any
// reservation an earlier try left behind, and the record that places it
// is as new as its reservations.

// waitGroup places group id, waiting for room while the live nodes'
// total capacity could hold it.
func (n *Node) waitGroup(ctx context.Context, id string, bundles []Bundle, st Strategy, o GroupOptions) (*PlacementGroup, error) {
	var (
		ver       uint64 // the newest version of the group's record or reservations
		shown     string // what the record written last says the group waits for
		told      string // what o.Pending was told last
		written   time.Time
		left      = map[string]bool{} // nodes that did not answer, until the group next waits
		refused   = map[string]bool{} // nodes that refused for want of room, likewise
		lastErr   error
		wroteSome bool
	)
	// give up removes what the group wrote: a record that says Removed
	// also releases, on any node, a reservation a try left behind.
	giveUp := func(err error) (*PlacementGroup, error) {
		if wroteSome || ver > 0 {
			ver++
			n.write(&update{Groups: []GroupRecord{{ID: id, Strategy: st, Bundles: bundles, Removed: true,
				Version: ver, Writer: n.id, Owner: n.id, UpdatedMs: time.Now().UnixMilli()}}})
		}
		return nil, err
	}
	for {
		// Taken before placing, so a change in between is not missed.
		changes := n.dir.nodeChanges()
		if g, ok := n.dir.Group(id); ok && g.Removed && g.Writer != n.id {
			return nil, fmt.Errorf("placement group %s was removed while it waited for room", id)
		}
		all := n.Views()
		if err := groupFeasible(all, bundles, st); err != nil {
			return giveUp(err)
		}
		var views []NodeView
		for _, v := range all {
			if !left[v.ID] && !refused[v.ID] {
				views = append(views, v)
			}
		}
		nodes, err := PlaceGroup(views, bundles, st)
		if err == nil {
			ver++
			silent, retry, refuser, err := n.reserveAll(ctx, id, bundles, nodes, ver)
			if err == nil {
				n.write(&update{Groups: []GroupRecord{{ID: id, Strategy: st, Bundles: bundles, Nodes: nodes, Version: ver, Writer: n.id, Owner: n.id}}})
				return &PlacementGroup{ID: id, Strategy: st, Bundles: bundles, Nodes: nodes}, nil
			}
			lastErr = err
			switch {
			case ctx.Err() != nil:
				return giveUp(fmt.Errorf("placement group %s: %w", id, err))
			case silent != "":
				n.log.Warn("placement group: a node did not answer its reservation; placing the group without it", "group", id, "left_out", silent, "err", err)
				left[silent] = true
				continue
			case !retry:
				return giveUp(err)
			}
			// Refused for want of room: the refuser's record came with
			// it. Try the other nodes before waiting; one refusal per
			// node per wait, so a node whose view and ledger disagree
			// (room split across devices) cannot make this spin. A
			// refusal that names no node waits.
			if refuser != "" {
				refused[refuser] = true
				continue
			}
		}
		why := n.pendingReason(all, bundles, st)
		if why != shown && time.Since(written) >= pendingRewrite {
			ver++
			n.write(&update{Groups: []GroupRecord{{ID: id, Strategy: st, Bundles: bundles, Pending: why, Version: ver, Writer: n.id, Owner: n.id}}})
			shown, written, wroteSome = why, time.Now(), true
		}
		if why != told {
			told = why
			if o.Pending != nil {
				o.Pending(why)
			}
		}
		select {
		case <-ctx.Done():
			err := fmt.Errorf("placement group %s: waiting for room (%s): %w", id, why, ctx.Err())
			if lastErr != nil {
				err = fmt.Errorf("%w (last try: %v)", err, lastErr)
			}
			return giveUp(err)
		case <-n.Done():
			return giveUp(fmt.Errorf("placement group %s: node %s stopped while the group waited for room (%s)", id, n.id, why))
		case <-changes:
		case <-time.After(groupRoomPoll):
		}
		clear(left)
		clear(refused)
	}
}

// groupFeasible is nil when the nodes, every one empty, could hold the
// group: a group they never could is refused rather than left waiting.
func groupFeasible(nodes []NodeView, bundles []Bundle, st Strategy) error {
	if _, err := PlaceGroup(allFree(nodes), bundles, st); err != nil {
		if !errors.Is(err, ErrInfeasible) {
			return err
		}
		return fmt.Errorf("the live nodes could not hold it even with nothing else on them: %w", err)
	}
	return nil
}

// pendingReason says what a group that does not fit the free room now
// waits for, and what holds that room.
func (n *Node) pendingReason(nodes []NodeView, bundles []Bundle, st Strategy) string {
	need, free := Resources{}, Resources{}
	for _, b := range bundles {
		need = need.Add(b.Resources)
	}
	for _, v := range nodes {
		free = free.Add(v.Free)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %d bundle%s: ", need, len(bundles), map[bool]string{true: "s"}[len(bundles) != 1])
	switch missing := free.Missing(need); {
	case len(missing) > 0:
		fmt.Fprintf(&b, "missing %s free", strings.Join(missing, ", "))
	case st == StrictPack || len(bundles) == 1:
		fmt.Fprintf(&b, "no single node has it free")
	default:
		b.WriteString("no assignment of its bundles fits the free room")
	}
	if held := n.roomHolders(need); held != "" {
		b.WriteString("; held by ")
		b.WriteString(held)
	}
	return b.String()
}

// maxHolders bounds how many holders pendingReason names.
const maxHolders = 4

// roomHolders names what holds, on live nodes, the kinds of resource in
// need: placement groups, actors outside groups, and the tasks of each
// node (what its record charges beyond the two), largest first.
func (n *Node) roomHolders(need Resources) string {
	type holder struct {
		what string
		res  Resources
	}
	relevant := func(r Resources) Resources {
		out := Resources{}
		for k, v := range r {
			if need[k] > 0 && v > 0 {
				out[k] = v
			}
		}
		return out
	}
	var hs []holder
	charged := map[string]Resources{} // node -> what groups and actors hold there
	for _, g := range n.dir.Groups() {
		if g.Removed || g.Pending != "" {
			continue
		}
		on := map[string]Resources{}
		for i, bd := range g.Bundles {
			if i < len(g.Nodes) && n.isAlive(g.Nodes[i]) {
				on[g.Nodes[i]] = on[g.Nodes[i]].Add(bd.Resources)
			}
		}
		for _, node := range sortedKeys(on) {
			charged[node] = charged[node].Add(on[node])
			hs = append(hs, holder{fmt.Sprintf("placement group %s (%s on %s)", g.ID, relevant(on[node]), node), relevant(on[node])})
		}
	}
	for _, a := range n.dir.Actors() {
		if a.State == Dead || a.Group != "" || a.Node == "" || !n.isAlive(a.Node) {
			continue
		}
		charged[a.Node] = charged[a.Node].Add(a.Resources)
		hs = append(hs, holder{fmt.Sprintf("actor %s (%s on %s)", a.Name, relevant(a.Resources), a.Node), relevant(a.Resources)})
	}
	for _, id := range n.aliveIDs() {
		rec, ok := n.dir.Node(id)
		if !ok || rec.Tasks == 0 {
			continue
		}
		tasks := Resources{}
		for k, v := range rec.Used.Sub(charged[id]) {
			if v > 1e-9 {
				tasks[k] = v
			}
		}
		hs = append(hs, holder{fmt.Sprintf("%d task%s (%s on %s)", rec.Tasks, map[bool]string{true: "s"}[rec.Tasks != 1], relevant(tasks), id), relevant(tasks)})
	}
	kept := hs[:0]
	for _, h := range hs {
		if len(h.res) > 0 {
			kept = append(kept, h)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return size(kept[i].res) > size(kept[j].res) })
	var parts []string
	for i, h := range kept {
		if i == maxHolders {
			parts = append(parts, fmt.Sprintf("%d more", len(kept)-maxHolders))
			break
		}
		parts = append(parts, h.what)
	}
	return strings.Join(parts, ", ")
}
