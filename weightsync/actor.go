package weightsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
)

// Kind is the weight-sync actor's kind. It is spawned by Start on the
// driver's node and holds that process's Syncer, so it cannot move: if its
// node is lost the run is lost with it (no restarts). Other nodes reach it
// by name for StatusRequest and RegisterEngine; waiting (WaitVersion,
// VersionFor) and publishing are Go calls in the driver's process, since
// an actor's mailbox must not block on them.
const Kind = "weightsync"

// syncerArgs names the process-local Syncer an actor of Kind serves.
type syncerArgs struct {
	Token string
}

// StatusRequest asks the weight-sync actor for its Status.
type StatusRequest struct{}

// RegisterEngine asks the weight-sync actor to register a native engine
// host (a weights.EngineKind actor); it answers with the engine's
// EngineStatus.
type RegisterEngine struct {
	Engine actor.Ref
}

var local = struct {
	sync.Mutex
	m map[string]*Syncer
}{m: map[string]*Syncer{}}

func forget(tok string) {
	local.Lock()
	delete(local.m, tok)
	local.Unlock()
}

func init() {
	actor.RegisterMessage(syncerArgs{}, StatusRequest{}, Status{}, EngineStatus{}, RegisterEngine{})
	actor.RegisterKind(Kind, func(ctx *actor.Context, args any) (actor.Actor, error) {
		a, ok := args.(syncerArgs)
		if !ok {
			return nil, fmt.Errorf("%s: spawn args are %T; start it with weightsync.Start", Kind, args)
		}
		local.Lock()
		s := local.m[a.Token]
		local.Unlock()
		if s == nil {
			return nil, fmt.Errorf("%s: no Syncer in this process (node %s): the weight-sync actor lives in the driver's process only", Kind, ctx.System().Address())
		}
		return &syncActor{s: s}, nil
	})
}

type syncActor struct{ s *Syncer }

func (a *syncActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case StatusRequest:
		return a.s.Versions(), nil
	case RegisterEngine:
		// Register may wait for a publish and then catch the engine up.
		ctx, cancel := context.WithTimeout(context.Background(), 3*a.s.cfg.PushTimeout)
		defer cancel()
		if err := a.s.Register(ctx, m.Engine); err != nil {
			return nil, err
		}
		for _, e := range a.s.Versions().Engines {
			if e.Name == m.Engine.Name {
				return e, nil
			}
		}
		return nil, fmt.Errorf("%s: engine %s was removed right after registering", Kind, m.Engine.Name)
	}
	return nil, fmt.Errorf("%s: unexpected message %T", Kind, msg)
}

// Start returns a Syncer (see New) and spawns its actor, named cfg.Name,
// on node.
func Start(ctx context.Context, node *cluster.Node, initial int64, cfg Config) (*Syncer, error) {
	s := New(node, initial, cfg)
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	s.tok = hex.EncodeToString(raw[:])
	local.Lock()
	local.m[s.tok] = s
	local.Unlock()
	if _, err := node.Spawn(ctx, Kind, cluster.SpawnOptions{Name: s.cfg.Name, Node: node.ID(), Args: syncerArgs{Token: s.tok}}); err != nil {
		forget(s.tok)
		s.tok = ""
		s.Close()
		return nil, fmt.Errorf("weight sync: start: %w", err)
	}
	return s, nil
}
