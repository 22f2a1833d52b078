package weightsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/weights"
)

// RolloutConfig places a RolloutServer's rollout actors and sizes its
// Syncer.
type RolloutConfig struct {
	// Policy names the policy in logs.
	Policy string
	// Actor is the replicas' spawn argument: an engine that starts from
	// model files (rollout.PushedNative) gets every weight by push.
	Actor rollout.ActorConfig
	// Replicas actors, each holding Resources (default 1 CPU); Spread
	// reserves them up front in a placement group that puts them on as
	// many nodes as it can.
	Replicas  int
	Resources cluster.Resources
	Spread    bool
	// ChunkSize and LossTimeout are the pool's (rollout.PoolConfig).
	ChunkSize   int
	LossTimeout time.Duration
	// MaxStaleness and PushTimeout are the Syncer's (Config).
	MaxStaleness int
	PushTimeout  time.Duration
	// Name makes the actors' names unique: the Syncer's is
	// "weightsync-<Name>", the replicas' "rollout-<Name>-<i>".
	Name   string
	Logger *slog.Logger // default the node's
}

// RolloutServer is a PolicyServer over rollout actors on the cluster (a
// rollout.Pool) whose engines a Syncer of its own feeds: actors started
// from model files alone get the kept weights when they register, and
// every later version is published to them; a lost actor's replacement
// registers the same way at the version published by then.
type RolloutServer struct {
	cfg    RolloutConfig
	node   *cluster.Node
	log    *slog.Logger
	syncer *Syncer
	pool   *rollout.Pool
	group  *cluster.PlacementGroup
}

// StartRollout starts the Syncer and the rollout actors, which start
// from src's weights as version. A LoRA learner with adapters gives them
// its base as version-1 (kept for replacements too) and the adapters as
// version.
func StartRollout(ctx context.Context, node *cluster.Node, cfg RolloutConfig, version int64, src Source) (*RolloutServer, error) {
	s := &RolloutServer{cfg: cfg, node: node, log: cfg.Logger}
	if s.log == nil {
		s.log = node.System().Logger()
	}
	if err := s.start(ctx, version, src); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *RolloutServer) start(ctx context.Context, version int64, src Source) error {
	cfg := s.cfg
	u, err := src.Update(ctx)
	if err != nil {
		return err
	}
	start, kept := version, u.Tensors
	if u.LoRA != nil {
		if kept, err = src.Base(ctx); err != nil {
			return err
		}
		start--
	}
	s.syncer, err = Start(ctx, s.node, start, Config{
		MaxStaleness: cfg.MaxStaleness, PushTimeout: cfg.PushTimeout, Name: "weightsync-" + cfg.Name, Logger: s.log})
	if err != nil {
		return fmt.Errorf("weight syncer: %w", err)
	}
	if err := s.syncer.Keep(ctx, start, weights.Update{Tensors: kept}); err != nil {
		return fmt.Errorf("rollout actors' starting weights: %w", err)
	}
	res := cfg.Resources
	if res == nil {
		res = cluster.Resources{cluster.CPU: 1}
	}
	pc := rollout.PoolConfig{Actor: cfg.Actor, Weights: s.syncer, Name: "rollout-" + cfg.Name, ChunkSize: cfg.ChunkSize, LossTimeout: cfg.LossTimeout}
	if cfg.Spread {
		bundles := make([]cluster.Bundle, cfg.Replicas)
		for i := range bundles {
			bundles[i] = cluster.Bundle{Resources: res}
		}
		if s.group, err = s.node.CreatePlacementGroup(ctx, bundles, cluster.Spread); err != nil {
			return fmt.Errorf("rollout placement group (%d × %v): %w", cfg.Replicas, res, err)
		}
		pc.Group = s.group
	} else {
		pc.Replicas, pc.Resources = cfg.Replicas, res
	}
	if s.pool, err = rollout.StartPool(ctx, s.node, pc); err != nil {
		return err // it says "rollout actors: ..."
	}
	s.pool.SetStep(start)
	// rlnode run logs where they landed in the user's words
	// ("rollout actors placed"); this line is for programs of their own.
	s.log.Debug("rollout actors", "policy", cfg.Policy, "replicas", len(s.pool.Replicas()), "nodes", replicaNodes(s.pool.Replicas()))
	if u.LoRA != nil {
		return s.publish(ctx, version, u)
	}
	return nil
}

// Generate implements engine.Engine: GenerateFor the last version
// published.
func (s *RolloutServer) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	return s.pool.Generate(ctx, reqs)
}

// GenerateFor waits until the engines serve onPolicy minus the max
// staleness or newer and refuses older results (rollout.Pool.GenerateStep).
func (s *RolloutServer) GenerateFor(ctx context.Context, onPolicy int64, reqs []engine.Request) ([]engine.Result, error) {
	return s.pool.GenerateStep(ctx, onPolicy, reqs)
}

// WeightVersion implements engine.Engine: the lowest version the live
// actors serve.
func (s *RolloutServer) WeightVersion() int64 { return s.pool.WeightVersion() }

// Replicas reports each rollout actor (rollout.Pool.Replicas): its name
// and node, in start order.
func (s *RolloutServer) Replicas() []rollout.ReplicaStatus { return s.pool.Replicas() }

// Status implements PolicyServer.
func (s *RolloutServer) Status() ServerStatus {
	return ServerStatus{PushOnDemand: true, Replicas: &Replicas{Live: len(s.pool.Handles()), Want: s.cfg.Replicas,
		Replaced: s.pool.Replaced(), Regenerated: s.pool.Redispatched()}}
}

// Publish pushes src's update to the actors as version. Actors that fail
// the push are dropped (the pool regenerates their chunks elsewhere and
// starts replacements); with none registered the version is kept for the
// replacements to start from (the next generation fails if none can
// start).
func (s *RolloutServer) Publish(ctx context.Context, version int64, src Source) error {
	if version <= s.syncer.Versions().Latest {
		s.pool.SetStep(version)
		return nil
	}
	u, err := src.Update(ctx)
	if err != nil {
		return err
	}
	return s.publish(ctx, version, u)
}

func (s *RolloutServer) publish(ctx context.Context, version int64, u weights.Update) error {
	if version <= s.syncer.Versions().Latest {
		s.pool.SetStep(version)
		return nil
	}
	// Publish and Keep race with a replacement registering between them:
	// the loser's answer sends the other way, a bounded number of times.
	var err error
	for range 3 {
		var rep Report
		rep, err = s.syncer.Publish(ctx, version, u)
		noneTook := errors.Is(err, ErrEngineFailed) && len(rep.Applied) == 0
		if !errors.Is(err, ErrNoEngines) && !noneTook {
			break
		}
		kerr := s.syncer.Keep(ctx, version, u)
		if !errors.Is(kerr, ErrEnginesRegistered) {
			if err = kerr; err == nil {
				s.log.Warn("no rollout actor took the weights: the version is kept for their replacements", "policy", s.cfg.Policy, "version", version)
			}
			break
		}
	}
	switch {
	case errors.Is(err, ErrEngineFailed):
		s.log.Warn("rollout actors dropped in a weight push", "policy", s.cfg.Policy, "version", version, "err", err)
	case err != nil:
		return fmt.Errorf("publish version %d: %w (rollout actors: %+v)", version, err, s.pool.Replicas())
	}
	s.pool.SetStep(version)
	return nil
}

// Close stops the actors, the Syncer and the placement group (within
// 10 s).
func (s *RolloutServer) Close() error {
	var err error
	if s.pool != nil {
		err = s.pool.Close()
	}
	if s.syncer != nil {
		s.syncer.Close()
	}
	if s.group != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.node.RemovePlacementGroup(ctx, s.group.ID)
	}
	return err
}

var _ PolicyServer = (*RolloutServer)(nil)

// replicaNodes says where replicas run, one "node×count" per node in
// first-seen order, e.g. "a×2,b×1".
func replicaNodes(rs []rollout.ReplicaStatus) string {
	var order []string
	count := map[string]int{}
	for _, r := range rs {
		if count[r.Node] == 0 {
			order = append(order, r.Node)
		}
		count[r.Node]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%s×%d", n, count[n])
	}
	return strings.Join(parts, ",")
}
