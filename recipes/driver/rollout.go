package driver

// Generation on rollout actors (Config.Rollout): a rollout.Pool per
// policy, fed by a weightsync.Syncer.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/weightsync"
)

// RolloutEngine is the engine the driver's rollout actors host: the
// native engine loading the checkpoint directory the driver wrote, with
// the decode batch the run asked for (EngineConfigFile in that directory;
// rollout.ActorConfig carries no engine settings). Every node registers it
// (this package's init), as it does the rollout actor kind.
const RolloutEngine = "driver-native"

// EngineConfigFile holds the native engine settings of a rollout model
// directory: {"max_batch": N}.
const EngineConfigFile = "engine.json"

type engineFile struct {
	MaxBatch int `json:"max_batch"`
}

func init() {
	rollout.RegisterEngine(RolloutEngine, func(cfg rollout.ActorConfig, dir string) (engine.Engine, error) {
		if dir == "" {
			return nil, errors.New(RolloutEngine + " engine: no model directory")
		}
		path := filepath.Join(dir, EngineConfigFile)
		js, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s engine: %w", RolloutEngine, err)
		}
		var ef engineFile
		if err := json.Unmarshal(js, &ef); err != nil {
			return nil, fmt.Errorf("%s engine: %s: %w", RolloutEngine, path, err)
		}
		if ef.MaxBatch <= 0 {
			return nil, fmt.Errorf("%s engine: %s: max_batch %d: want > 0", RolloutEngine, path, ef.MaxBatch)
		}
		// A LoRA learner's model directory is its base plus adapter: served
		// merged, while pushed adapters merge onto the base (CheckpointBase).
		return weightsync.LoadNative(dir, native.Config{MaxBatch: ef.MaxBatch, MaxStepTokens: 4096, WeightVersion: cfg.WeightVersion})
	})
}

// rolloutPushTimeout bounds one engine's fetch and swap of a version: a
// lost actor's push fails within it and the actor is dropped.
const rolloutPushTimeout = 30 * time.Second

// embeddedCPUs is what the embedded node offers: its cores, or more when
// the run's learners (each policy's Learner.Shards ranks) and rollout
// actors reserve more (they share the machine and take turns; CPUs here
// are a reservation, not a limit).
func embeddedCPUs(cfg Config) float64 {
	cpus := func(res cluster.Resources) float64 {
		if res == nil {
			return 1
		}
		return res[cluster.CPU]
	}
	need := float64(max(cfg.Learner.Shards, 1)) * cpus(cfg.LearnerResources)
	if cfg.Feedback != nil {
		need *= 2
	}
	for _, ro := range []*Rollout{cfg.Rollout, cfg.FeedbackRollout} {
		if ro != nil {
			need += float64(ro.Replicas) * cpus(ro.Resources)
		}
	}
	return max(need, float64(runtime.NumCPU()))
}

// rolloutModelDir is where the learner writes the checkpoint a policy's
// rollout actors load at start.
func (r *run) rolloutModelDir(id string) string { return filepath.Join(r.cfg.Out, "rollout", id) }

// startRollout starts p's rollout actors: the learner writes its current
// weights as a checkpoint (with the tokenizer) under Out/rollout/<id>/,
// the actors load it as version r.step and register their engines with a
// new weight syncer; every later version is published to them.
func (r *run) startRollout(ctx context.Context, p *policy, l learner.Config, ro *Rollout) error {
	tok, err := policyTokenizer(l)
	if err != nil {
		return fmt.Errorf("driver: %s policy: %w", p.id, err)
	}
	p.tok = tok
	dir := r.rolloutModelDir(p.id)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("driver: %s rollout model: %w", p.id, err)
	}
	if _, err := p.learner.save(ctx, dir); err != nil {
		return fmt.Errorf("driver: write the %s rollout model to %s: %w", p.id, dir, err)
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		return fmt.Errorf("driver: write the %s rollout model: %w", p.id, err)
	}
	js, _ := json.Marshal(engineFile{MaxBatch: r.cfg.EngineBatch})
	if err := os.WriteFile(filepath.Join(dir, EngineConfigFile), js, 0o644); err != nil {
		return fmt.Errorf("driver: write the %s rollout model: %w", p.id, err)
	}
	version := int64(r.step) // the run's step, as syncWeights versions them
	suffix := fmt.Sprintf("%s-%d", p.id, time.Now().UnixNano())
	p.syncer, err = weightsync.Start(ctx, r.node, version, weightsync.Config{
		MaxStaleness: r.cfg.MaxStaleness, PushTimeout: rolloutPushTimeout, Name: "weightsync-" + suffix, Logger: r.log})
	if err != nil {
		return fmt.Errorf("driver: %s weight syncer: %w", p.id, err)
	}
	res := ro.Resources
	if res == nil {
		res = cluster.Resources{cluster.CPU: 1}
	}
	pc := rollout.PoolConfig{
		Actor:   rollout.ActorConfig{Engine: RolloutEngine, Model: dir, PolicyID: p.id, WeightVersion: version},
		Weights: p.syncer, Name: "rollout-" + suffix, ChunkSize: ro.ChunkSize, LossTimeout: ro.LossTimeout,
	}
	if ro.Spread {
		bundles := make([]cluster.Bundle, ro.Replicas)
		for i := range bundles {
			bundles[i] = cluster.Bundle{Resources: res}
		}
		if p.group, err = r.node.CreatePlacementGroup(ctx, bundles, cluster.Spread); err != nil {
			return fmt.Errorf("driver: %s rollout placement group (%d × %v): %w", p.id, ro.Replicas, res, err)
		}
		pc.Group = p.group
	} else {
		pc.Replicas, pc.Resources = ro.Replicas, res
	}
	pool, err := rollout.StartPool(ctx, r.node, pc)
	if err != nil {
		return fmt.Errorf("driver: %s rollout actors: %w", p.id, err)
	}
	pool.SetStep(version)
	p.pool, p.eng = pool, &policyEngine{Engine: pool, tok: tok}
	for _, rs := range pool.Replicas() {
		r.log.Info("rollout actor", "policy", p.id, "actor", rs.Name, "node", rs.Node)
	}
	return nil
}

// policyTokenizer is the tokenizer of a policy's model: the checkpoint's,
// or the built-in one sized to a from-scratch model.
func policyTokenizer(l learner.Config) (*tokenizer.Tokenizer, error) {
	if l.ModelDir != "" {
		return tokenizer.Load(filepath.Join(l.ModelDir, "tokenizer.json"))
	}
	tok, err := tokenizer.BuiltinSized(l.Model.VocabSize)
	if err != nil {
		return nil, fmt.Errorf("model.vocab_size: %w", err)
	}
	return tok, nil
}

// publish pushes version's weights (full, or LoRA adapters) to p's
// rollout actors. A version the
// actors already serve (the one they started from) is not pushed again.
// Actors that fail the push are dropped (the pool regenerates their
// chunks elsewhere); the run goes on while one is left.
func (r *run) publish(ctx context.Context, p *policy, version int64, u weightsync.Update) error {
	if version <= p.syncer.Versions().Latest {
		p.pool.SetStep(version)
		return nil
	}
	_, err := p.syncer.Publish(ctx, version, u)
	switch {
	case errors.Is(err, weightsync.ErrEngineFailed) && len(p.pool.Handles()) > 0:
		r.log.Warn("rollout actors dropped in a weight push", "policy", p.id, "version", version, "err", err)
	case errors.Is(err, weightsync.ErrNoEngines):
		return fmt.Errorf("driver: publish %s version %d: %w (rollout actors: %+v)", p.id, version, err, p.pool.Replicas())
	case err != nil:
		return fmt.Errorf("driver: publish %s version %d: %w", p.id, version, err)
	}
	p.pool.SetStep(version)
	return nil
}

// regenerated counts the chunks the run's pools (those a learner restart
// replaced too) ran again after a lost actor.
func (r *run) regenerated() int64 {
	var n int64
	for _, p := range []*policy{r.solver, r.feedback} {
		if p == nil {
			continue
		}
		n += p.regenerated
		if p.pool != nil {
			n += p.pool.Redispatched()
		}
	}
	return n
}

// liveReplicas counts the solver's live rollout actors.
func (r *run) liveReplicas() int { return len(r.solver.pool.Handles()) }
