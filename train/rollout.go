package train

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
	"github.com/rlnode/rlnode/rollout/weights"
	"github.com/rlnode/rlnode/weightsync"
)

// RolloutEngine is the engine the driver's rollout actors host: the
// native engine built from the model files the actor was spawned with
// (rollout.ActorConfig.ModelFiles: config.json, tokenizer.json and
// EngineConfigFile, the decode batch the run asked for), whose weights the
// weight syncer pushes when the actor registers — or, given a directory,
// loading that. Every node registers it (this package's init), as it does
// the rollout actor kind.
const RolloutEngine = "driver-native"

// EngineConfigFile holds the native engine settings of a rollout model:
// {"max_batch": N}.
const EngineConfigFile = "engine.json"

type engineFile struct {
	MaxBatch int `json:"max_batch"`
}

func init() {
	rollout.RegisterEngine(RolloutEngine, func(cfg rollout.ActorConfig, dir string) (engine.Engine, error) {
		var js []byte
		path := EngineConfigFile + " of the model files"
		switch {
		case dir != "":
			path = filepath.Join(dir, EngineConfigFile)
			var err error
			if js, err = os.ReadFile(path); err != nil {
				return nil, fmt.Errorf("%s engine: %w", RolloutEngine, err)
			}
		case cfg.ModelFiles != nil:
			var ok bool
			if js, ok = cfg.ModelFiles[EngineConfigFile]; !ok {
				return nil, fmt.Errorf("%s engine: no %s in the model files", RolloutEngine, EngineConfigFile)
			}
		default:
			return nil, errors.New(RolloutEngine + " engine: no model directory or model files")
		}
		var ef engineFile
		if err := json.Unmarshal(js, &ef); err != nil {
			return nil, fmt.Errorf("%s engine: %s: %w", RolloutEngine, path, err)
		}
		if ef.MaxBatch <= 0 {
			return nil, fmt.Errorf("%s engine: %s: max_batch %d: want > 0", RolloutEngine, path, ef.MaxBatch)
		}
		ncfg := native.Config{MaxBatch: ef.MaxBatch, MaxStepTokens: 4096, WeightVersion: cfg.WeightVersion}
		if dir == "" {
			return rollout.NewNativeFromFiles(cfg.ModelFiles, ncfg)
		}
		// A LoRA learner's model directory is its base plus adapter: served
		// merged, while pushed adapters merge onto the base (CheckpointBase).
		return native.Load(dir, ncfg)
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

// rolloutStartHook, when set (tests), sees the weights each policy's
// rollout actors start from.
var rolloutStartHook func(out, policy string, version int64, w map[string][]float32)

// modelFiles are the files a policy's rollout actors build their engine
// from (rollout.ActorConfig.ModelFiles): the model's config.json, the
// tokenizer and the engine settings — kilobytes to a few MiB, sent with
// the spawn, so no node reads the driver's file system.
func (r *run) modelFiles(l learner.Config, tok *tokenizer.Tokenizer) (map[string][]byte, error) {
	var cfg []byte
	var err error
	if l.ModelDir != "" {
		cfg, err = os.ReadFile(filepath.Join(l.ModelDir, "config.json"))
	} else {
		cfg, err = l.Model.JSON()
	}
	if err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	tj, err := tok.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	ej, err := json.Marshal(engineFile{MaxBatch: r.cfg.EngineBatch})
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"config.json": cfg, "tokenizer.json": tj, EngineConfigFile: ej}, nil
}

// startRollout starts p's rollout actors: a new weight syncer holds the
// learner's current weights as version r.step (Keep), the
// actors start from the model's config and tokenizer alone (modelFiles),
// and registering their engines with the syncer pushes them those weights
// over the bulk path; every later version is published to them. A lost
// actor's replacement registers the same way, at the version then
// published.
func (r *run) startRollout(ctx context.Context, p *policy, l learner.Config, ro *Rollout) error {
	tok, err := policyTokenizer(l)
	if err != nil {
		return fmt.Errorf("driver: %s policy: %w", p.id, err)
	}
	p.tok = tok
	files, err := r.modelFiles(l, tok)
	if err != nil {
		return fmt.Errorf("driver: %s rollout model: %w", p.id, err)
	}
	off, w, err := r.fetchWeights(ctx, p, p.weightsPart())
	if err != nil {
		return err
	}
	version := int64(r.step) // the run's step, as syncWeights versions them
	start, kept := version, w
	if off.Adapter != nil {
		// A LoRA learner with adapters: the actors start from the base,
		// kept one version back, and the adapters follow as this version
		// (the syncer keeps both for replacements).
		if _, kept, err = r.fetchWeights(ctx, p, learner.WeightsBase); err != nil {
			return err
		}
		start--
	}
	suffix := fmt.Sprintf("%s-%d", p.id, time.Now().UnixNano())
	p.syncer, err = weightsync.Start(ctx, r.node, start, weightsync.Config{
		MaxStaleness: r.cfg.MaxStaleness, PushTimeout: rolloutPushTimeout, Name: "weightsync-" + suffix, Logger: r.log})
	if err != nil {
		return fmt.Errorf("driver: %s weight syncer: %w", p.id, err)
	}
	if err := p.syncer.Keep(ctx, start, weights.Update{Tensors: kept}); err != nil {
		return fmt.Errorf("driver: %s rollout actors' starting weights: %w", p.id, err)
	}
	if rolloutStartHook != nil {
		rolloutStartHook(r.cfg.Out, p.id, start, kept)
	}
	res := ro.Resources
	if res == nil {
		res = cluster.Resources{cluster.CPU: 1}
	}
	pc := rollout.PoolConfig{
		Actor:   rollout.ActorConfig{Engine: RolloutEngine, ModelFiles: files, PolicyID: p.id},
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
	pool.SetStep(start)
	p.pool, p.eng = pool, &policyEngine{Engine: pool, tok: tok}
	for _, rs := range pool.Replicas() {
		r.log.Info("rollout actor", "policy", p.id, "actor", rs.Name, "node", rs.Node)
	}
	if off.Adapter != nil {
		return r.publish(ctx, p, version, adapterUpdate(off.Adapter, w))
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
// chunks elsewhere and starts replacements); with none registered the
// version is kept for the replacements to start from (the next
// generation fails if none can start).
func (r *run) publish(ctx context.Context, p *policy, version int64, u weights.Update) error {
	if version <= p.syncer.Versions().Latest {
		p.pool.SetStep(version)
		return nil
	}
	// Publish and Keep race with a replacement registering between them:
	// the loser's answer sends the other way, a bounded number of times.
	var err error
	for range 3 {
		var rep weightsync.Report
		rep, err = p.syncer.Publish(ctx, version, u)
		noneTook := errors.Is(err, weightsync.ErrEngineFailed) && len(rep.Applied) == 0
		if !errors.Is(err, weightsync.ErrNoEngines) && !noneTook {
			break
		}
		kerr := p.syncer.Keep(ctx, version, u)
		if !errors.Is(kerr, weightsync.ErrEnginesRegistered) {
			if err = kerr; err == nil {
				r.log.Warn("no rollout actor took the weights: the version is kept for their replacements", "policy", p.id, "version", version)
			}
			break
		}
	}
	switch {
	case errors.Is(err, weightsync.ErrEngineFailed):
		r.log.Warn("rollout actors dropped in a weight push", "policy", p.id, "version", version, "err", err)
	case err != nil:
		return fmt.Errorf("driver: publish %s version %d: %w (rollout actors: %+v)", p.id, version, err, p.pool.Replicas())
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

// replacedReplicas counts the rollout actors the run's current pools
// started in place of lost ones.
func (r *run) replacedReplicas() int64 {
	var n int64
	for _, p := range []*policy{r.solver, r.feedback} {
		if p != nil && p.pool != nil {
			n += p.pool.Replaced()
		}
	}
	return n
}

// liveReplicas counts the solver's live rollout actors, and says once,
// in the run's log, when they are fewer than the recipe's (the pool keeps
// trying to replace the lost ones) and when they are back.
func (r *run) liveReplicas() int {
	live := len(r.solver.pool.Handles())
	want := r.solver.ro.Replicas
	switch short := live < want; {
	case short && !r.rolloutShort:
		r.log.Warn("rollout actors lost and not replaced yet: generating on fewer", "policy", r.solver.id, "live", live, "want", want)
	case !short && r.rolloutShort:
		r.log.Info("rollout actors replaced", "policy", r.solver.id, "live", live)
	}
	r.rolloutShort = live < want
	return live
}

// The asynchronous pipeline (MaxStaleness k > 0): while RL step t trains,
// the batches of steps t+1..t+k are drawn (in step order, so the data
// cursor and the sampling seeds are a synchronous run's) and generated one
// after another on the weights the engines serve. On-policy for step t+j
// is version t+j−1; at the time it is drawn the engines serve version
// t−1 or newer, which the pools' bound (on-policy − k) admits for j ≤ k,
// so no batch waits for weights, and checkLag checks every step's lag
// against k again. Every batch drawn ahead stays out of a checkpoint's
// data cursor (run.prefetched), so a resumed run draws it again; a learner
// restart drops them with the loop that drew them.

// waitTurn waits for after (nil: no wait) or the end of ctx.
func waitTurn(ctx context.Context, after <-chan struct{}) error {
	if after == nil {
		return nil
	}
	select {
	case <-after:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkLag is a step's weight lag: how many versions its oldest sample
// lags the batch's on-policy version. More than the max staleness stops
// the run (the pools' and vLLM's bounds should make that impossible).
func (r *run) checkLag(onPolicy, lowest int64) (int64, error) {
	lag := onPolicy - lowest
	if lag > int64(r.cfg.MaxStaleness) {
		return lag, fmt.Errorf("driver: step %d: a sample of weight version %d lags the on-policy version %d by %d, more than max staleness %d",
			r.step+1, lowest, onPolicy, lag, r.cfg.MaxStaleness)
	}
	return lag, nil
}

// pipelineHook, when set (tests), runs before each asynchronous RL step
// trains, with the done channels of the batches drawn ahead of it.
var pipelineHook func(ctx context.Context, ahead []<-chan struct{})

// pendingBatch is an RL step's batch generating in the background: an
// rlBatch (single-turn) or an episodeBatch (multi-turn).
type pendingBatch interface {
	ready() <-chan struct{} // closed once generated (or failed)
	failed() error
	problems() int // problems drawn for it (they count in run.prefetched)
}

func (b *rlBatch) ready() <-chan struct{} { return b.done }
func (b *rlBatch) failed() error          { return b.err }
func (b *rlBatch) problems() int          { return len(b.probs) }

// pipeline holds the batches drawn and not trained yet, steps r.step+1,
// r.step+2, ...: the next step's alone in a synchronous run, up to
// MaxStaleness more in an asynchronous one. start draws a batch for the
// given on-policy version and generates it once after is closed.
type pipeline[B pendingBatch] struct {
	r      *run
	gctx   context.Context // generation's: cancelled by close
	cancel context.CancelFunc
	ahead  []B
	start  func(ctx context.Context, onPolicy int64, after <-chan struct{}) (B, error)
}

func newPipeline[B pendingBatch](ctx context.Context, r *run, start func(context.Context, int64, <-chan struct{}) (B, error)) *pipeline[B] {
	gctx, cancel := context.WithCancel(ctx)
	return &pipeline[B]{r: r, gctx: gctx, cancel: cancel, start: start}
}

// close cancels the batches still ahead and waits for them to end.
func (p *pipeline[B]) close() {
	p.cancel()
	for _, b := range p.ahead {
		<-b.ready()
	}
}

// next returns RL step k's batch, generated (started now when none was
// drawn ahead), and in an asynchronous run first draws and starts the
// batches of the steps after it, each generating once the one before it
// has.
func (p *pipeline[B]) next(ctx context.Context, k int) (B, error) {
	r, cfg := p.r, p.r.cfg
	var none B
	if len(p.ahead) == 0 {
		b, err := p.start(p.gctx, int64(r.step), nil)
		if err != nil {
			return none, err
		}
		p.ahead = append(p.ahead, b)
	}
	batch := p.ahead[0]
	select {
	case <-batch.ready():
	case <-ctx.Done():
		return none, fmt.Errorf("driver: generate for step %d: %w", r.step+1, ctx.Err())
	}
	p.ahead = p.ahead[1:]
	r.prefetched -= batch.problems()
	if err := batch.failed(); err != nil {
		return none, fmt.Errorf("driver: generate for step %d: %w", r.step+1, err)
	}
	// On-policy for the batch j steps ahead is the version j − 1 steps
	// after this one's training; the pools let it run up to k versions
	// older, so it may start on today's weights for j ≤ k.
	async := cfg.MaxStaleness > 0
	for j := len(p.ahead) + 1; async && j <= pipelineAhead(cfg.MaxStaleness, k, cfg.Steps); j++ {
		after := batch.ready()
		if len(p.ahead) > 0 {
			after = p.ahead[len(p.ahead)-1].ready()
		}
		b, err := p.start(p.gctx, int64(r.step+j), after)
		if err != nil {
			return none, err
		}
		p.ahead = append(p.ahead, b)
	}
	if async && pipelineHook != nil {
		done := make([]<-chan struct{}, len(p.ahead))
		for i, b := range p.ahead {
			done[i] = b.ready()
		}
		pipelineHook(ctx, done)
	}
	return batch, nil
}
