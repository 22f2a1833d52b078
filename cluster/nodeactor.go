package cluster

import (
	"errors"
	"fmt"
	"time"

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
	Resources   Resources
	Labels      map[string]string
	PinNode     string
	MaxRestarts int
	Restarts    int
	Group       string
	Bundle      int
	// BaseVersion is the newest version of the actor's record the requester
	// knows; the host writes above it even if gossip has not reached it.
	BaseVersion uint64
}

type spawnReply struct {
	Record ActorRecord // what the host wrote to the directory
	Err    string
	Retry  bool // the node lacked free resources: another node may fit
}

type stopRequest struct {
	Name  string
	Cause string
}

type reserveRequest struct {
	Group     string
	Indices   []int
	Resources []Resources
}

type unreserveRequest struct{ Group string }

type okReply struct {
	Err   string
	Retry bool
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

func (a *nodeActor) Receive(_ *actor.Context, msg any) (any, error) {
	n := a.n
	switch m := msg.(type) {
	case spawnRequest:
		rec, retry, err := n.hostSpawn(m)
		if err != nil {
			return spawnReply{Err: err.Error(), Retry: retry}, nil
		}
		return spawnReply{Record: rec}, nil
	case stopRequest:
		if err := n.sys.StopLocal(m.Name, m.Cause); err != nil {
			return okReply{Err: err.Error()}, nil
		}
		return okReply{}, nil
	case reserveRequest:
		if len(m.Indices) != len(m.Resources) {
			return okReply{Err: "reserve: indices and resources differ in length"}, nil
		}
		if err := n.ledger.reserve(m.Group, m.Indices, m.Resources); err != nil {
			return okReply{Err: fmt.Sprintf("node %s: %v", n.id, err), Retry: errors.Is(err, ErrInfeasible)}, nil
		}
		n.publishNode()
		return okReply{}, nil
	case unreserveRequest:
		n.ledger.unreserve(m.Group)
		n.publishNode()
		return okReply{}, nil
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

// hostSpawn starts an actor here after charging its resources.
func (n *Node) hostSpawn(req spawnRequest) (rec ActorRecord, retry bool, err error) {
	n.stopMu.Lock()
	leaving := n.leaving || n.isDone
	n.stopMu.Unlock()
	if leaving {
		return rec, true, fmt.Errorf("node %s is stopping", n.id)
	}
	if !matchLabels(n.cfg.Labels, req.Labels) {
		return rec, true, fmt.Errorf("node %s has labels %s, not %s", n.id, fmtLabels(n.cfg.Labels), fmtLabels(req.Labels))
	}
	if err := n.ledger.acquire(req.Name, req.Resources, req.Group, req.Bundle); err != nil {
		return rec, errors.Is(err, ErrInfeasible), fmt.Errorf("node %s: %w", n.id, err)
	}
	var ref actor.Ref
	args, err := actor.DecodeMessage(req.ArgsType, req.Args)
	if err == nil {
		ref, err = n.sys.SpawnLocal(actor.LocalSpawn{
			Name: req.Name, Kind: req.Kind, Args: args, MaxRestarts: req.MaxRestarts, Restarts: req.Restarts,
		})
	}
	if err != nil {
		n.ledger.release(req.Name)
		return rec, false, fmt.Errorf("node %s: %w", n.id, err)
	}
	old, _ := n.dir.Actor(req.Name)
	rec = ActorRecord{
		Name: req.Name, Kind: req.Kind, Node: n.id, Ref: ref, State: Alive,
		Restarts: req.Restarts, MaxRestarts: req.MaxRestarts, Resources: req.Resources, Labels: req.Labels,
		PinNode: req.PinNode, Group: req.Group, Bundle: req.Bundle, ArgsType: req.ArgsType, Args: req.Args,
		Version: max(old.Version, req.BaseVersion) + 1, Writer: n.id, UpdatedMs: time.Now().UnixMilli(),
	}
	n.write(&update{Actors: []ActorRecord{rec}})
	n.publishNode()
	return rec, false, nil
}

// onLocalEvent records restarts and deaths of actors hosted here.
func (n *Node) onLocalEvent(ev actor.Event) {
	if ev.Ref.Name == nodeActorName || ev.Type == actor.EventStarted {
		return
	}
	rec, ok := n.dir.Actor(ev.Ref.Name)
	if ev.Type == actor.EventDied && n.ledger.release(ev.Ref.Name) {
		defer n.publishNode()
	}
	if !ok || rec.Ref != ev.Ref || rec.State == Dead {
		return
	}
	rec.Version++
	rec.Writer = n.id
	rec.UpdatedMs = time.Now().UnixMilli()
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

func restartsLeft(r ActorRecord) bool {
	return r.MaxRestarts < 0 || r.Restarts < r.MaxRestarts
}
