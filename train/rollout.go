package train

// Generation on rollout actors (Config.Rollout): a
// weightsync.RolloutServer per policy.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/weights"
	"github.com/rlnode/rlnode/weightsync"
)

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
// the spawn, so no node reads the driver's file system (over
// cluster.InlineArgsMax they stay on the driver's node, fetched by the
// node that builds each actor, not gossiped).
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
	return rollout.PushedNativeFiles(cfg, tj, r.cfg.EngineBatch, r.cfg.EngineDevice)
}

// startRollout starts p's rollout actors behind a weightsync.RolloutServer:
// they start from the model's config and tokenizer alone (modelFiles) and
// get the learner's current weights, as version r.step, pushed when they
// register; every later version is published to them.
func (r *run) startRollout(ctx context.Context, p *policy) error {
	tok, err := policyTokenizer(p.l)
	if err != nil {
		return err
	}
	p.tok = tok
	files, err := r.modelFiles(p.l, tok)
	if err != nil {
		return fmt.Errorf("rollout model: %w", err)
	}
	ro := p.ro
	mem, err := engineMemory(p.l, r.cfg.EngineDevice)
	if err != nil {
		return fmt.Errorf("rollout model: memory: %w", err)
	}
	var src weightsync.Source = r.source(p)
	if rolloutStartHook != nil {
		src = &startRecorder{Source: src, out: r.cfg.Out, policy: p.id, version: int64(r.step)}
	}
	srv, err := weightsync.StartRollout(ctx, r.node, weightsync.RolloutConfig{
		Policy: p.id, Actor: rollout.ActorConfig{Engine: rollout.PushedNative, ModelFiles: files, PolicyID: p.id},
		Replicas: ro.Replicas, Resources: withMemory(ro.Resources, mem), Spread: ro.Spread, ChunkSize: ro.ChunkSize, LossTimeout: ro.LossTimeout,
		MaxStaleness: r.cfg.MaxStaleness, PushTimeout: rolloutPushTimeout, Name: fmt.Sprintf("%s-%d", p.id, time.Now().UnixNano()), Logger: r.log,
	}, int64(r.step), src)
	if err != nil {
		return err
	}
	if rec, ok := src.(*startRecorder); ok {
		rec.report()
	}
	p.server = srv
	r.logRolloutPlacement(p.id, withMemory(ro.Resources, mem), srv.Replicas())
	return nil
}

// logRolloutPlacement says where a policy's rollout actors run: each
// one's node and the address it is reached at, and the device its engine
// opens.
func (r *run) logRolloutPlacement(id string, res cluster.Resources, reps []rollout.ReplicaStatus) {
	device := r.cfg.EngineDevice
	if device == "" {
		device = "cpu"
	}
	where := make([]string, len(reps))
	for i, rep := range reps {
		w := rep.Name + " on node " + rep.Node
		if rec, ok := r.node.Directory().Node(rep.Node); ok {
			if host, _, err := net.SplitHostPort(rec.Actor); err == nil {
				w += " (" + host + ")"
			}
		}
		where[i] = w
	}
	r.log.Info("rollout actors placed", "policy", id, "actors", len(reps), "each", res.String(), "device", device, "at", strings.Join(where, "; "))
}

// startRecorder tells rolloutStartHook the weights rollout actors start
// from: the learner's base one version back once it has adapters, else
// its policy.
type startRecorder struct {
	weightsync.Source
	out, policy string
	version     int64
	w           map[string][]float32
}

func (s *startRecorder) Update(ctx context.Context) (weights.Update, error) {
	u, err := s.Source.Update(ctx)
	if err == nil && u.LoRA == nil {
		s.w = u.Tensors
	}
	return u, err
}

func (s *startRecorder) Base(ctx context.Context) (map[string][]float32, error) {
	w, err := s.Source.Base(ctx)
	s.w, s.version = w, s.version-1
	return w, err
}

func (s *startRecorder) report() { rolloutStartHook(s.out, s.policy, s.version, s.w) }

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

// replicas is p's rollout actors as its server reports them; nil when it
// has none.
func (p *policy) replicas() *weightsync.Replicas {
	if p == nil || p.server == nil {
		return nil
	}
	return p.server.Status().Replicas
}

// regenerated counts the chunks the run's rollout actors (those a learner
// restart replaced too) ran again after a lost actor.
func (r *run) regenerated() int64 {
	var n int64
	for _, p := range []*policy{r.solver, r.feedback} {
		if p == nil {
			continue
		}
		n += p.regenerated
		if rs := p.replicas(); rs != nil {
			n += rs.Regenerated
		}
	}
	return n
}

// replacedReplicas counts the rollout actors the run's current servers
// started in place of lost ones.
func (r *run) replacedReplicas() int64 {
	var n int64
	for _, p := range []*policy{r.solver, r.feedback} {
		if rs := p.replicas(); rs != nil {
			n += rs.Replaced
		}
	}
	return n
}

// liveReplicas counts the solver's live rollout actors, and says once,
// in the run's log, when they are fewer than the recipe's (the pool keeps
// trying to replace the lost ones) and when they are back.
func (r *run) liveReplicas() int {
	rs := r.solver.replicas()
	live, want := rs.Live, rs.Want
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
		return lag, fmt.Errorf("step %d: a sample of weight version %d lags the on-policy version %d by %d, more than max staleness %d",
			r.step+1, lowest, onPolicy, lag, r.cfg.MaxStaleness)
	}
	return lag, nil
}

// pipelineHook, when set (tests), runs before each asynchronous RL step
// trains, with the done channels of the batches drawn ahead of it.
var pipelineHook func(ctx context.Context, ahead []<-chan struct{})

// pipeline holds the batches drawn and not trained yet, steps r.step+1,
// r.step+2, ...: the next step's alone in a synchronous run, up to
// MaxStaleness more in an asynchronous one. start draws a batch for the
// given on-policy version and generates it once after is closed
// (run.startEpisodes).
type pipeline struct {
	r      *run
	gctx   context.Context // generation's: cancelled by close
	cancel context.CancelFunc
	ahead  []*episodeBatch
	start  func(ctx context.Context, onPolicy int64, after <-chan struct{}) (*episodeBatch, error)
}

func newPipeline(ctx context.Context, r *run, start func(context.Context, int64, <-chan struct{}) (*episodeBatch, error)) *pipeline {
	gctx, cancel := context.WithCancel(ctx)
	return &pipeline{r: r, gctx: gctx, cancel: cancel, start: start}
}

// close cancels the batches still ahead and waits for them to end.
func (p *pipeline) close() {
	p.cancel()
	for _, b := range p.ahead {
		<-b.ready()
	}
}

// next carries out the drawing of RL plan p: it returns the step's batch,
// generated (drawn now when p.DrawOwn), then draws and starts the batches
// of p.Ahead, each generating once the one before it has.
func (p *pipeline) next(ctx context.Context, plan StepPlan) (*episodeBatch, error) {
	r := p.r
	if plan.DrawOwn != (len(p.ahead) == 0) {
		return nil, fmt.Errorf("step %d: the plan draws its batch %v with %d drawn ahead", plan.Step, plan.DrawOwn, len(p.ahead))
	}
	if plan.DrawOwn {
		b, err := p.start(p.gctx, plan.OnPolicy, nil)
		if err != nil {
			return nil, err
		}
		p.ahead = append(p.ahead, b)
	}
	batch := p.ahead[0]
	select {
	case <-batch.ready():
	case <-ctx.Done():
		return nil, fmt.Errorf("generate for step %d: %w", plan.Step, ctx.Err())
	}
	p.ahead = p.ahead[1:]
	r.prefetched -= batch.problems()
	if err := batch.failed(); err != nil {
		return nil, fmt.Errorf("generate for step %d: %w", plan.Step, err)
	}
	for _, onPolicy := range plan.Ahead {
		after := batch.ready()
		if len(p.ahead) > 0 {
			after = p.ahead[len(p.ahead)-1].ready()
		}
		b, err := p.start(p.gctx, onPolicy, after)
		if err != nil {
			return nil, err
		}
		p.ahead = append(p.ahead, b)
	}
	if r.cfg.MaxStaleness > 0 && pipelineHook != nil {
		done := make([]<-chan struct{}, len(p.ahead))
		for i, b := range p.ahead {
			done[i] = b.ready()
		}
		pipelineHook(ctx, done)
	}
	return batch, nil
}
