package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/rlnode/rlnode/actor"
)

// Every node hosts one node actor, "$node": the remote end of Spawn, Stop,
// placement-group reservations and Lookup. It runs on the node's own actor
// system, so these requests use the same transport and membership filter as
// every other message.

const (
	nodeActorName = "$node"
	nodeActorKind = "rlnode.node"
)

type spawnRequest struct {
	Name        string
	Kind        string
	ArgsType    string
	Args        []byte
	ArgsAt      *argsRef // instead of Args, when they are large (args.go)
	Resources   Resources
	Labels      map[string]string
	PinNode     string
	MaxRestarts int
	Restarts    int
	// MaxConcurrency is SpawnOptions.MaxConcurrency, kept in the record.
	MaxConcurrency int `msgpack:",omitempty"`
	// MaxCallRetries is SpawnOptions.MaxCallRetries, kept in the record.
	MaxCallRetries int `msgpack:",omitempty"`
	Group          string
	Bundle         int
	Owner          string
	// BaseVersion is the newest version of the actor's record the requester
	// knows; the host writes above it even if gossip has not reached it.
	BaseVersion uint64
	// RestartTimeoutMs is SpawnOptions.RestartTimeout, kept in the record.
	RestartTimeoutMs int64
	// KeepDeadMs is SpawnOptions.KeepDead, kept in the record.
	KeepDeadMs int64 `msgpack:",omitempty"`
}

type spawnReply struct {
	Record ActorRecord // what the host wrote to the directory
	Err    string
	Retry  bool // the node lacked free resources: another node may fit
	// Elsewhere: this node's program does not have the actor's kind or
	// its arguments' type registered (a node of another program, as
	// `rlnode join` is to a user's): another node's may.
	Elsewhere bool `msgpack:",omitempty"`
	// NoRoom: the node lacked free resources (not labels, not stopping):
	// it could hold the actor once they are released.
	NoRoom bool `msgpack:",omitempty"`
	// Free is what the node had free when it refused for want of room
	// (NoRoom): the spawner's view of it was stale, and its error lists
	// the node with this, not with the room the view showed.
	Free Resources `msgpack:",omitempty"`
	// TryElsewhere: the actor's factory refused with ErrTryElsewhere
	// (this node cannot build it; another may).
	TryElsewhere bool `msgpack:",omitempty"`
}

type stopRequest struct {
	Name  string
	Cause string
}

type reserveRequest struct {
	Group     string
	Indices   []int
	Resources []Resources
	// Version is that of the group record that will place these bundles
	// here (onGroupChange releases them only on a record at least as new
	// that places them elsewhere); 0: unknown.
	Version uint64
}

type unreserveRequest struct{ Group string }

type okReply struct {
	Err   string
	Retry bool
	// Node is the refusing node's own record, as it stands after the
	// refusal: the asker's view of it was stale (gossip had not brought
	// the resources taken since), and its next try uses this one. A stop
	// or a release that succeeded carries it too, so that the asker's
	// next placement counts the resources freed (gossip brings them a
	// little later).
	Node *NodeRecord `msgpack:",omitempty"`
	// Actor is, for a stop, the stopped actor's record as its host wrote
	// it (DEAD): the asker may spawn that name again at once.
	Actor *ActorRecord `msgpack:",omitempty"`
}

// withOwnRecord is r carrying this node's record (okReply.Node).
func (n *Node) withOwnRecord(r okReply) okReply {
	if rec, ok := n.dir.Node(n.id); ok {
		r.Node = &rec
	}
	return r
}

type lookupRequest struct{ Name string }

type lookupReply struct {
	Found  bool
	Record ActorRecord
}

func init() {
	actor.RegisterMessage(spawnRequest{}, spawnReply{}, stopRequest{}, reserveRequest{},
		unreserveRequest{}, okReply{}, lookupRequest{}, lookupReply{})
}

type nodeActor struct{ n *Node }

// Receive answers at once what is quick (checks, the ledger, lookups) and
// hands what may be slow to a goroutine that replies later: an actor's
// factory may load a model for tens of seconds, and a stop waits for the
// actor's Receive to return. Requests behind them are not held up.
func (a *nodeActor) Receive(ctx *actor.Context, msg any) (any, error) {
	n := a.n
	switch m := msg.(type) {
	case spawnRequest:
		nb, retry, err := n.beginSpawn(m)
		if err != nil {
			elsewhere := errors.Is(err, actor.ErrUnknownKind) || errors.Is(err, actor.ErrUnregistered)
			rep := spawnReply{Err: err.Error(), Retry: retry, Elsewhere: elsewhere, NoRoom: retry && errors.Is(err, ErrInfeasible)}
			if rep.NoRoom {
				total, used := n.ledger.snapshot()
				rep.Free = total.Sub(used)
			}
			return rep, nil
		}
		reply := ctx.ReplyLater()
		go func() { reply.Send(n.finishSpawn(m, nb), nil) }()
		return nil, nil
	case objectFree:
		n.freeLocal(m.IDs...)
		return nil, nil
	case objectGet:
		return n.serveObject(ctx, m)
	case stopRequest:
		n.bmu.Lock()
		nb := n.building[m.Name]
		if nb != nil && nb.stopCause == "" {
			nb.stopCause = m.Cause
		}
		n.bmu.Unlock()
		reply := ctx.ReplyLater()
		go func() { reply.Send(n.hostStop(m, nb), nil) }()
		return nil, nil
	case reserveRequest:
		if len(m.Indices) != len(m.Resources) {
			return okReply{Err: "reserve: indices and resources differ in length"}, nil
		}
		if err := n.ledger.reserve(m.Group, m.Indices, m.Resources, m.Version); err != nil {
			rep := okReply{Err: fmt.Sprintf("node %s: %v", n.id, err), Retry: errors.Is(err, ErrInfeasible)}
			if rep.Retry {
				n.publishNode()
				if rec, ok := n.dir.Node(n.id); ok {
					rep.Node = &rec
				}
			}
			return rep, nil
		}
		n.publishNode()
		return okReply{}, nil
	case unreserveRequest:
		n.ledger.unreserve(m.Group)
		n.publishNode()
		return n.withOwnRecord(okReply{}), nil
	case taskRequest:
		return n.hostTask(ctx, m)
	case taskCancel:
		n.cancelTask(m.ID)
		return nil, nil
	case lookupRequest:
		for _, ref := range n.sys.Local() {
			if ref.Name == m.Name {
				rec, ok := n.dir.Actor(m.Name)
				return lookupReply{Found: ok, Record: rec}, nil
			}
		}
		return lookupReply{}, nil
	}
	return nil, fmt.Errorf("node actor: unexpected message %T", msg)
}

func (n *Node) nodeActorFactory(*actor.Context, any) (actor.Actor, error) {
	return &nodeActor{n: n}, nil
}

func (n *Node) nodeRef(id string) (actor.Ref, error) {
	n.mmu.RLock()
	m, ok := n.members[id]
	n.mmu.RUnlock()
	if !ok {
		return actor.Ref{}, fmt.Errorf("node %s is not a live member", id)
	}
	return actor.Ref{Name: nodeActorName, Kind: nodeActorKind, Address: m.actor, ID: "a/" + nodeActorName}, nil
}

// nodeBuild is an actor this node is building: its name is reserved and
// its resources charged until finishSpawn ends.
type nodeBuild struct {
	b    *actor.Build
	done chan struct{} // closed once its record is written or its build failed
	// stopCause is set (under Node.bmu) when a stop request came for it
	// while it was being built.
	stopCause string
}

// beginSpawn does the quick part of hosting an actor here, in the node
// actor's loop: it checks the request, charges the resources and reserves
// the name, so two spawns of one name cannot both pass.
func (n *Node) beginSpawn(req spawnRequest) (nb *nodeBuild, retry bool, err error) {
	n.stopMu.Lock()
	leaving := n.leaving || n.isDone
	n.stopMu.Unlock()
	if leaving {
		return nil, true, fmt.Errorf("node %s is stopping", n.id)
	}
	if !matchLabels(n.cfg.Labels, req.Labels) {
		return nil, true, fmt.Errorf("node %s has labels %s, not %s", n.id, fmtLabels(n.cfg.Labels), fmtLabels(req.Labels))
	}
	n.bmu.Lock()
	_, building := n.building[req.Name]
	n.bmu.Unlock()
	if building {
		return nil, false, fmt.Errorf("node %s: actor %q is being built here: %w", n.id, req.Name, actor.ErrNameTaken)
	}
	// The ledger refuses a name it already charges, so the release below
	// only ever drops this request's own charge.
	if err := n.ledger.acquire(req.Name, req.Resources, req.Group, req.Bundle); err != nil {
		return nil, errors.Is(err, ErrInfeasible), fmt.Errorf("node %s: %w", n.id, err)
	}
	var b *actor.Build
	spec := actor.LocalSpawn{Name: req.Name, Kind: req.Kind, MaxRestarts: req.MaxRestarts, Restarts: req.Restarts, MaxConcurrency: req.MaxConcurrency}
	if at := req.ArgsAt; at != nil {
		// Fetched when the build runs, off this node's loop.
		spec.LoadArgs = func(ctx context.Context) (any, error) {
			raw, err := n.fetchArgs(ctx, *at)
			if err != nil {
				return nil, err
			}
			return actor.DecodeMessage(req.ArgsType, raw)
		}
	} else {
		spec.Args, err = actor.DecodeMessage(req.ArgsType, req.Args)
	}
	if err == nil {
		b, err = n.sys.ReserveLocal(spec)
	}
	if err != nil {
		n.ledger.release(req.Name)
		return nil, false, fmt.Errorf("node %s: %w", n.id, err)
	}
	nb = &nodeBuild{b: b, done: make(chan struct{})}
	n.bmu.Lock()
	n.building[req.Name] = nb
	n.bmu.Unlock()
	return nb, false, nil
}

// finishSpawn runs the actor's factory (outside the node actor's loop),
// then writes its record; a failed build gives its resources back.
func (n *Node) finishSpawn(req spawnRequest, nb *nodeBuild) spawnReply {
	defer func() {
		n.bmu.Lock()
		if n.building[req.Name] == nb {
			delete(n.building, req.Name)
		}
		n.bmu.Unlock()
		close(nb.done)
	}()
	ref, err := nb.b.Run()
	old, _ := n.dir.Actor(req.Name)
	rec := ActorRecord{
		Name: req.Name, Kind: req.Kind, Node: n.id, Ref: ref, State: Alive,
		Restarts: req.Restarts, MaxRestarts: req.MaxRestarts, MaxConcurrency: req.MaxConcurrency, MaxCallRetries: req.MaxCallRetries, Resources: req.Resources, Labels: req.Labels,
		PinNode: req.PinNode, Group: req.Group, Bundle: req.Bundle, ArgsType: req.ArgsType, Args: req.Args, ArgsAt: req.ArgsAt, Owner: req.Owner,
		RestartTimeoutMs: req.RestartTimeoutMs, KeepDeadMs: req.KeepDeadMs, Version: max(old.Version, req.BaseVersion) + 1, Writer: n.id, UpdatedMs: time.Now().UnixMilli(),
	}
	if err != nil {
		n.ledger.release(req.Name)
		n.bmu.Lock()
		stopCause := nb.stopCause
		n.bmu.Unlock()
		if stopCause != "" {
			// Stopped while being built (its caller gave up): the record
			// says so, as it would had the actor started and stopped.
			rec.Ref, rec.State, rec.Cause = actor.Ref{}, Dead, stopCause+" (before it started)"
			n.write(&update{Actors: []ActorRecord{rec}})
		}
		// A node that began to stop meanwhile leaves room to try another.
		retry := stopCause == "" && (errors.Is(err, actor.ErrSystemStopped) || n.isLeaving())
		return spawnReply{Err: fmt.Sprintf("node %s: %v", n.id, err), Retry: retry,
			TryElsewhere: stopCause == "" && errors.Is(err, ErrTryElsewhere)}
	}
	n.write(&update{Actors: []ActorRecord{rec}})
	n.publishNode()
	return spawnReply{Record: rec}
}

// hostStop stops an actor hosted here. One still being built (nb) is
// cancelled; if it had started already, it is stopped once its record is
// written, so the record ends DEAD rather than ALIVE over a stopped actor.
func (n *Node) hostStop(req stopRequest, nb *nodeBuild) okReply {
	stopped := func() okReply {
		// The actor's death wrote its record and released its resources,
		// publishing this node's record (onLocalEvent, finishSpawn), before
		// StopLocal or the build returned.
		rep := n.withOwnRecord(okReply{})
		if rec, ok := n.dir.Actor(req.Name); ok && rec.State == Dead {
			rep.Actor = &rec
		}
		return rep
	}
	if nb != nil {
		nb.b.Cancel(req.Cause)
		<-nb.done
		if !n.hosts(req.Name) {
			return stopped() // it never started: nothing left to stop
		}
	}
	if err := n.sys.StopLocal(req.Name, req.Cause); err != nil {
		return okReply{Err: err.Error()}
	}
	return stopped()
}

func (n *Node) hosts(name string) bool {
	for _, ref := range n.sys.Local() {
		if ref.Name == name {
			return true
		}
	}
	return false
}

func (n *Node) isLeaving() bool {
	n.stopMu.Lock()
	defer n.stopMu.Unlock()
	return n.leaving || n.isDone
}

// cancelBuilds cancels the builds under way and waits for them to end, at
// most max: a factory that ignores its Context may run on, but its actor
// never starts (actor.Build.Run).
func (n *Node) cancelBuilds(cause string, max time.Duration) {
	n.bmu.Lock()
	var waits []*nodeBuild
	for _, nb := range n.building {
		nb.b.Cancel(cause)
		waits = append(waits, nb)
	}
	n.bmu.Unlock()
	deadline := time.After(max)
	for _, nb := range waits {
		select {
		case <-nb.done:
		case <-deadline:
			n.log.Warn("an actor's factory did not return after its node began to stop; it will not start", "waited", max)
			return
		}
	}
}

// onLocalEvent records restarts and deaths of actors hosted here.
func (n *Node) onLocalEvent(ev actor.Event) {
	if ev.Ref.Name == nodeActorName || ev.Type == actor.EventStarted {
		return
	}
	n.hostedMu.Lock()
	defer n.hostedMu.Unlock()
	rec, ok := n.dir.Actor(ev.Ref.Name)
	if ev.Type == actor.EventDied && n.ledger.release(ev.Ref.Name) {
		defer n.publishNode()
	}
	if !ok || rec.Ref != ev.Ref || rec.State == Dead {
		return
	}
	rec = n.rewrite(rec)
	rec.Restarts = ev.Restarts
	rec.Cause = ev.Cause
	switch ev.Type {
	case actor.EventRestarted:
		rec.State = Alive
	case actor.EventDied:
		rec.State = Dead
		if ev.Cause == "node stopped" && restartsLeft(rec) {
			// The leader respawns it on another node; moving counts as a
			// restart.
			rec.State = Restarting
			rec.Restarts++
		}
	}
	n.write(&update{Actors: []ActorRecord{rec}})
}

// MaxNoteBytes bounds an actor's note (SetNote).
const MaxNoteBytes = 512

// SetNote sets what the ALIVE actor name, hosted on this node, says it is
// doing or waiting for: a line its record carries to every node (`rlnode
// status --json`'s "note"; a job's PENDING cause), cut to MaxNoteBytes;
// "" clears it. Its next restart or death clears it too.
func (n *Node) SetNote(name, note string) error {
	if len(note) > MaxNoteBytes {
		// Cut at a character's start: half of one is no text for JSON.
		i := MaxNoteBytes
		for i > 0 && !utf8.RuneStart(note[i]) {
			i--
		}
		note = note[:i]
	}
	n.hostedMu.Lock()
	defer n.hostedMu.Unlock()
	rec, ok := n.dir.Actor(name)
	switch {
	case !ok:
		return fmt.Errorf("actor %s: %w", name, actor.ErrActorNotFound)
	case rec.Node != n.id || rec.State != Alive || !n.hosts(name):
		return fmt.Errorf("actor %s is %s on node %s: a note is set by the node that hosts it while ALIVE", name, rec.State, rec.Node)
	case rec.Note == note:
		return nil
	}
	rec = n.rewrite(rec)
	rec.Note = note
	n.write(&update{Actors: []ActorRecord{rec}})
	return nil
}

func restartsLeft(r ActorRecord) bool {
	return r.MaxRestarts < 0 || r.Restarts < r.MaxRestarts
}

// forgetPreviousLife writes what a node loss would for each actor that the
// directory says runs here, ALIVE, as an earlier process under this
// node's id last wrote it, no later than this process started (no actor
// of this process is written in the millisecond it starts), and that this
// process neither hosts nor builds: RESTARTING, off this node, while it
// has restarts left (the leader restarts it), else DEAD. A node killed and
// started again under its id before the others noticed the loss (a
// supervisor restarting it at once) left those actors ALIVE on it for
// ever: the leader saw the node alive throughout, and calls went to the
// gone process's address.
func (n *Node) forgetPreviousLife() {
	if n.isLeaving() {
		return
	}
	var lost []ActorRecord
	for _, rec := range n.dir.Actors() {
		if rec.Node != n.id || rec.State != Alive || rec.Writer != n.id || rec.UpdatedMs > n.bornMs {
			continue
		}
		n.bmu.Lock()
		_, building := n.building[rec.Name]
		n.bmu.Unlock()
		if building || n.hosts(rec.Name) {
			continue
		}
		rec = n.rewrite(rec)
		rec.Cause = "node " + n.id + " restarted: its earlier process, which ran the actor, is gone"
		if restartsLeft(rec) {
			rec.State, rec.Restarts, rec.Node = Restarting, rec.Restarts+1, ""
		} else {
			rec.State = Dead
		}
		n.log.Warn("an actor this node's earlier process ran is lost with it", "actor", rec.Name, "state", rec.State)
		lost = append(lost, rec)
	}
	if len(lost) > 0 {
		n.write(&update{Actors: lost})
	}
}
