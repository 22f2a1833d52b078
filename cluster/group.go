package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// PlacementGroup is a set of bundles reserved atomically across nodes, for
// actors that must be placed together (PACK) or apart (SPREAD), as in Ray.
type PlacementGroup struct {
	ID       string
	Strategy Strategy
	Bundles  []Bundle
	Nodes    []string // node id of each bundle
}

// CreatePlacementGroup reserves every bundle or none. A group the cluster
// cannot hold now fails at once with what is missing; it never waits for
// resources to free up (CreatePlacementGroupWith and GroupOptions.Wait
// do). rlnode's own placements use it: a run whose learner or rollout
// actors do not fit says so at once, as its spawns do. A node that does
// not answer its reservation within reserveTimeout, or cannot be reached
// (a member whose actor port a firewall drops; one frozen and not yet
// taken for lost), is left out and the group placed again without it.
func (n *Node) CreatePlacementGroup(ctx context.Context, bundles []Bundle, st Strategy) (*PlacementGroup, error) {
	return n.CreatePlacementGroupWith(ctx, bundles, st, GroupOptions{})
}

// GroupOptions say how CreatePlacementGroupWith places a group.
type GroupOptions struct {
	// Wait keeps a group that the live nodes could hold, but whose room
	// others hold now (actors, tasks, other groups), PENDING until that
	// room is free, within ctx, as Ray's placement groups wait: the call
	// returns once every bundle is reserved. Meanwhile the group is in the
	// directory as PENDING with what it waits for (`rlnode status`, the
	// dashboard). It wakes when a node's record changes (resources freed,
	// a node joining) or every groupRoomPoll, and never holds a part of
	// the group while it waits: a try that finds room for only some
	// bundles releases them. When ctx ends, nothing of the group is left
	// reserved anywhere and its record is removed. A group the live nodes'
	// total capacity can never hold fails at once still, naming what is
	// missing. Waiters are served in no given order.
	Wait bool
	// Pending, when set with Wait, is told what the group waits for when
	// it starts waiting and each time that changes (what is missing and
	// what holds the room), from the caller's goroutine. The first time,
	// this node's directory already shows the group PENDING.
	Pending func(waitingFor string)
}

// groupRoomPoll is how often a waiting group looks again when no node
// record changed meanwhile (membership may have).
const groupRoomPoll = time.Second

// pendingRewrite is the least time between two rewrites of a waiting
// group's record, so that a busy cluster's churn is not gossiped again
// as what the group waits for.
const pendingRewrite = 2 * time.Second

// CreatePlacementGroupWith is CreatePlacementGroup with options: with
// o.Wait, a group that does not fit the free room now waits for it.
func (n *Node) CreatePlacementGroupWith(ctx context.Context, bundles []Bundle, st Strategy, o GroupOptions) (*PlacementGroup, error) {
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	id := "pg-" + hex.EncodeToString(raw[:])
	if o.Wait {
		return n.waitGroup(ctx, id, bundles, st, o)
	}
	var lastErr error
	left := map[string]bool{}  // nodes left out: they did not answer
	fresh := map[string]bool{} // nodes whose refusal brought their own record
	for attempt := 0; attempt < 3+len(left)+len(fresh); attempt++ {
		var views []NodeView
		for _, v := range n.Views() {
			if !left[v.ID] {
				views = append(views, v)
			}
		}
		nodes, err := PlaceGroup(views, bundles, st)
		if err != nil {
			if errors.Is(err, ErrNoRoom) {
				self := false
				if own, ownWhat := n.heldBy(n.id); ownWhat != "nothing" {
					if _, ferr := placeGroup(freeBut(views, own), bundles, st); errors.Is(ferr, ErrInfeasible) {
						err = fmt.Errorf("%w; %w: node %s (%s)", err, ErrHeldBySelf, n.id, ownWhat)
						self = true
					}
				}
				need := Resources{}
				for _, b := range bundles {
					need = need.Add(b.Resources)
				}
				// Where the creator's own hold the room, ErrHeldBySelf's
				// words above name them: listing them again said no more.
				if holders := n.roomHolders(need); holders != "" && !self {
					err = fmt.Errorf("%w; the room is held by %s", err, holders)
				}
			}
			if held := n.heldForGoneOwners(); held != "" {
				err = fmt.Errorf("%w; %s", err, held)
			}
			if lastErr != nil {
				err = fmt.Errorf("%w (earlier attempt: %v)", err, lastErr)
			}
			return nil, err
		}
		silent, retry, refuser, err := n.reserveAll(ctx, id, bundles, nodes, 1)
		if err == nil {
			n.write(&update{Groups: []GroupRecord{{ID: id, Strategy: st, Bundles: bundles, Nodes: nodes, Version: 1, Writer: n.id, Owner: n.id}}})
			return &PlacementGroup{ID: id, Strategy: st, Bundles: bundles, Nodes: nodes}, nil
		}
		if silent != "" && ctx.Err() == nil {
			n.log.Warn("placement group: a node did not answer its reservation; placing the group without it", "group", id, "left_out", silent, "err", err)
			left[silent] = true
			lastErr = err
			continue
		}
		if !retry {
			return nil, err
		}
		if refuser != "" {
			fresh[refuser] = true
		}
		lastErr = err
	}
	return nil, fmt.Errorf("placement group: nodes kept refusing reservations: %w", lastErr)
}

// reserveTimeout bounds a node's answer to a reservation, which it only
// books in memory.
const reserveTimeout = 10 * time.Second

// reserveAll asks each chosen node to reserve its bundles; on any refusal
// it releases what was reserved. silent names a node that did not answer
// (unreachable, or not within reserveTimeout), which is also asked, in
// the background, to release what it may have reserved after all.
//
// A node that refuses for want of resources sends its own record, which
// is merged here (refuser names it): the placement that chose it read a
// view that gossip had not yet brought up to date.
func (n *Node) reserveAll(ctx context.Context, id string, bundles []Bundle, nodes []string, version uint64) (silent string, retry bool, refuser string, err error) {
	per := map[string]*reserveRequest{}
	for i, node := range nodes {
		r := per[node]
		if r == nil {
			r = &reserveRequest{Group: id, Version: version}
			per[node] = r
		}
		r.Indices = append(r.Indices, i)
		r.Resources = append(r.Resources, bundles[i].Resources)
	}
	ids := make([]string, 0, len(per))
	for node := range per {
		ids = append(ids, node)
	}
	sort.Strings(ids)
	var done []string
	for _, node := range ids {
		actx, cancel := context.WithTimeout(ctx, reserveTimeout)
		err := n.askNode(actx, node, *per[node])
		cancel()
		if err != nil {
			// Released even when ctx has ended (the caller gave up while
			// this node was asked): each within its own bound.
			for _, d := range done {
				n.releaseOn(context.WithoutCancel(ctx), id, d)
			}
			var re *refusal
			if errors.As(err, &re) {
				if re.node != nil && re.node.ID == node {
					n.dir.merge(&update{Nodes: []NodeRecord{*re.node}})
					refuser = node
				}
				return "", re.retry, refuser, fmt.Errorf("placement group: reserve on node %s: %w", node, err)
			}
			go func() {
				uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				n.unreserveOn(uctx, id, node)
			}()
			return node, false, "", fmt.Errorf("placement group: reserve on node %s: no answer: %w", node, err)
		}
		done = append(done, node)
	}
	return "", false, "", nil
}

type refusal struct {
	msg   string
	retry bool
	node  *NodeRecord // the refusing node's record, when it sent one
}

func (r *refusal) Error() string { return r.msg }

func (n *Node) askNode(ctx context.Context, node string, msg any) error {
	ref, err := n.nodeRef(node)
	if err != nil {
		return err
	}
	rep, err := actor.CallAs[okReply](ctx, n.sys, ref, msg)
	if err != nil {
		return err
	}
	if rep.Err != "" {
		return &refusal{msg: rep.Err, retry: rep.Retry, node: rep.Node}
	}
	if rep.Node != nil {
		n.dir.merge(&update{Nodes: []NodeRecord{*rep.Node}})
	}
	return nil
}

// unreserveOn asks node to release what it reserved for group id, within
// ctx; a failure is logged, naming the node.
func (n *Node) unreserveOn(ctx context.Context, id, node string) {
	if err := n.askNode(ctx, node, unreserveRequest{Group: id}); err != nil {
		n.log.Warn("release placement group reservation", "group", id, "node", node, "err", err)
	}
}

// RemovePlacementGroup stops the group's actors and releases its bundles.
// Each node is asked apart and at once, with its own bound: its actors
// are stopped (each within groupStepTimeout), then its bundles released
// (within reserveTimeout), so a node that does not answer costs only its
// own share and is the only one named in the warnings. A node that did
// not answer stops and releases them when the record reaches it
// (fencing). ctx bounds the whole.
func (n *Node) RemovePlacementGroup(ctx context.Context, id string) error {
	g, ok := n.dir.Group(id)
	if !ok || g.Removed {
		return fmt.Errorf("placement group %s does not exist", id)
	}
	actors := map[string][]string{} // node id ("" while restarting) -> the group's actors there
	for _, rec := range n.dir.Actors() {
		if rec.Group == id && rec.State != Dead {
			actors[rec.Node] = append(actors[rec.Node], rec.Name)
		}
	}
	type placed struct {
		node   string
		bundle int
	}
	held := map[string]bool{} // node id -> it holds bundles
	was := map[placed]bool{}  // which, as the removal began
	for i, node := range g.Nodes {
		held[node], was[placed{node, i}] = true, true
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	released := map[string]bool{}
	for node := range unionKeys(actors, g.Nodes) {
		wg.Go(func() {
			var stops sync.WaitGroup
			for _, name := range actors[node] {
				stops.Go(func() {
					sctx, cancel := context.WithTimeout(ctx, groupStepTimeout)
					defer cancel()
					if err := n.StopActor(sctx, name); err != nil && !errors.Is(err, actor.ErrActorNotFound) {
						n.log.Warn("stop placement group actor", "group", id, "actor", name, "node", node, "err", err)
					}
				})
			}
			stops.Wait()
			if node != "" && held[node] && n.isAlive(node) {
				n.releaseOn(ctx, id, node)
				mu.Lock()
				released[node] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A bundle may have moved while the actors stopped (a replacement
	// for one lost with its node): read the record again, and let no
	// move write it between this read and the write below, or one of the
	// two records would drop the other (equal versions, one writer) and
	// leave a reservation or a group behind.
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	if g, ok = n.dir.Group(id); !ok || g.Removed {
		return nil
	}
	again := map[string]bool{}
	for i, node := range g.Nodes {
		if (!released[node] || !was[placed{node, i}]) && n.isAlive(node) {
			again[node] = true
		}
	}
	for node := range again {
		wg.Go(func() { n.releaseOn(ctx, id, node) })
	}
	wg.Wait()
	g.Removed, g.UpdatedMs = true, time.Now().UnixMilli()
	g.Version++
	g.Writer = n.id
	n.write(&update{Groups: []GroupRecord{g}})
	return nil
}

// groupStepTimeout bounds each stop a placement group's removal asks of a
// node.
const groupStepTimeout = 10 * time.Second

// releaseOn is unreserveOn within reserveTimeout, for a group's removal.
func (n *Node) releaseOn(ctx context.Context, id, node string) {
	ctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	defer cancel()
	n.unreserveOn(ctx, id, node)
}

// unionKeys is the set of m's keys and of nodes.
func unionKeys(m map[string][]string, nodes []string) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	for _, node := range nodes {
		out[node] = true
	}
	return out
}

// onGroupChange fences this node's reservations: a group removed, or a
// bundle held here that the group's record places elsewhere (moved by
// replaceBundle, by a node that took this one for lost while it was
// paused or cut off), holds nothing here any more. The request that would
// have released it could not reach this node then, and without this the
// node would keep the resources set aside until it stops. This node may
// never have seen the record that placed the bundle here (paused right
// after reserving it); a bundle reserved here for a move is kept until a
// record as new as the move's says otherwise (reserveRequest.Version).
func (n *Node) onGroupChange(_, cur GroupRecord) {
	if cur.Removed {
		if n.ledger.unreserve(cur.ID) {
			n.log.Info("placement group removed while this node was out of reach: its bundles here are released", "group", cur.ID)
			n.publishNode()
		}
		return
	}
	released := n.ledger.unplaced(cur, n.id)
	for _, i := range released {
		to := "nowhere"
		if i < len(cur.Nodes) {
			to = cur.Nodes[i]
		}
		n.log.Info("placement group bundle moved off this node while it was out of reach: released here", "group", cur.ID, "bundle", i, "now_on", to)
	}
	if len(released) > 0 {
		n.publishNode()
	}
}

// MoveBundle makes sure bundle i of a placement group is on a live node,
// for an actor to be started in it: when the bundle's node is lost, the
// bundle is reserved on another node that keeps the group's strategy and
// its record says so (the lost node, should it come back, releases its
// reservation: onGroupChange). It returns the bundle's node.
func (n *Node) MoveBundle(groupID string, i int) (string, error) {
	g, ok := n.dir.Group(groupID)
	switch {
	case !ok || g.Removed:
		return "", fmt.Errorf("placement group %s does not exist", groupID)
	case i < 0 || i >= len(g.Nodes):
		return "", fmt.Errorf("placement group %s has %d bundles, not %d", groupID, len(g.Nodes), i+1)
	case n.isAlive(g.Nodes[i]):
		return g.Nodes[i], nil
	}
	node, err := n.replaceBundle(groupID, i, g.Nodes[i])
	if err != nil {
		return "", fmt.Errorf("placement group %s bundle %d: move off lost node %s: %w", groupID, i, g.Nodes[i], err)
	}
	return node, nil
}

// replaceBundle moves a group's bundle off a lost node: it picks a node
// that keeps the group's strategy (STRICT_SPREAD: one no other bundle
// uses), reserves the bundle there and records the move.
func (n *Node) replaceBundle(groupID string, bundle int, lost string) (string, error) {
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	g, ok := n.dir.Group(groupID)
	if !ok || g.Removed || bundle >= len(g.Nodes) {
		return "", fmt.Errorf("placement group %s is gone", groupID)
	}
	if g.Nodes[bundle] != lost && n.isAlive(g.Nodes[bundle]) {
		return g.Nodes[bundle], nil // another actor of this bundle already moved it
	}
	if g.Strategy == StrictPack {
		return "", fmt.Errorf("STRICT_PACK group %s lost its node %s", groupID, lost)
	}
	taken := map[string]bool{}
	for i, node := range g.Nodes {
		if i != bundle {
			taken[node] = true
		}
	}
	var views []NodeView
	for _, v := range n.Views() {
		if v.ID == lost || (g.Strategy == StrictSpread && taken[v.ID]) {
			continue
		}
		views = append(views, v)
	}
	b := g.Bundles[bundle]
	node, err := PlaceOne(views, Request{Resources: b.Resources, Labels: b.Labels})
	if err != nil && g.Strategy == StrictSpread && len(taken) > 0 {
		// The nodes left out are not in the offers listed: say why.
		others := make([]string, 0, len(taken))
		for id := range taken {
			others = append(others, id)
		}
		sort.Strings(others)
		return "", fmt.Errorf("%w (STRICT_SPREAD: not on %s, which hold%s its other bundles)", err, strings.Join(others, ", "), map[bool]string{true: "s"}[len(others) == 1])
	}
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.askNode(ctx, node, reserveRequest{Group: groupID, Indices: []int{bundle}, Resources: []Resources{b.Resources}, Version: g.Version + 1}); err != nil {
		return "", err
	}
	g.Nodes = append([]string(nil), g.Nodes...)
	g.Nodes[bundle] = node
	g.Version++
	g.Writer = n.id
	n.write(&update{Groups: []GroupRecord{g}})
	return node, nil
}
