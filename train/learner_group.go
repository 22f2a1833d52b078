package train

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/shard"
)

// learners is one policy's learner as the driver sees it: a single
// learner actor (learnerActor) or a data-parallel group of learner-shard
// ranks (learnerShards). Methods are called from the driver's goroutine
// only. Every error they return is a *learnerFailure, which the driver
// answers by restarting the learners from the last checkpoint.
type learners interface {
	train(ctx context.Context, b learner.Batch) (learner.Stats, error)
	setAlgorithm(ctx context.Context, name string, lr float64) error
	weights(ctx context.Context, req learner.WeightsRequest) (learner.WeightsOffer, error)
	save(ctx context.Context, dir string) (learner.Saved, error)
	// restart brings the learners back to the checkpoint in dir ("": to
	// how they were first placed: the initial weights or the --resume
	// checkpoint), respawning whatever was lost.
	restart(ctx context.Context, dir string) error
	stop()
}

// learnerFailure marks an error of a policy's learner (as opposed to the
// engine's, the data's or the context's): the driver may recover from it by
// a restart.
type learnerFailure struct {
	policy, op string
	err        error
}

func (e *learnerFailure) Error() string {
	return fmt.Sprintf("%s learner: %s: %v", e.policy, e.op, e.err)
}

func (e *learnerFailure) Unwrap() error { return e.err }

// placeLearners places one policy's learner: a learner actor, or with
// Learner.Shards > 1 that many learner-shard ranks in one SPREAD placement
// group of LearnerResources per rank (so on a cluster they spread over the
// nodes that have room).
func (r *run) placeLearners(ctx context.Context, id string, l learner.Config, resume string) (learners, error) {
	r.warnNoOptimizer(id, resume)
	args := learner.ActorConfig{Config: l, ResumeDir: resume}
	if l.Shards <= 1 {
		a := &learnerActor{node: r.node, policy: id, args: args, res: r.cfg.LearnerResources}
		if err := a.spawn(ctx); err != nil {
			return nil, err
		}
		return a, nil
	}
	timeout := r.cfg.LearnerTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	s := &learnerShards{node: r.node, policy: id, args: args, res: r.cfg.LearnerResources,
		opt: shard.Options{Timeout: timeout}, base: "learner-" + id + "-" + hex.EncodeToString(raw[:])}
	bundles := make([]cluster.Bundle, l.Shards)
	for i := range bundles {
		bundles[i] = cluster.Bundle{Resources: s.res}
	}
	pg, err := r.node.CreatePlacementGroup(ctx, bundles, cluster.Spread)
	if err != nil {
		return nil, fmt.Errorf("%d %s learner shards of %s each: %w", l.Shards, id, s.res, err)
	}
	s.pgs = append(s.pgs, pg)
	s.ranks = make([]shardRank, l.Shards)
	for i := range s.ranks {
		if s.ranks[i], err = s.spawn(ctx, i, pg, i); err != nil {
			s.stop()
			return nil, err
		}
	}
	if s.g, err = shard.NewGroup(ctx, r.node.System(), s.refs(), s.opt); err != nil {
		s.stop()
		return nil, fmt.Errorf("join the %s learner's %d shards: %w", id, l.Shards, err)
	}
	return s, nil
}

// warnNoOptimizer warns when the checkpoint a policy's learner is about to
// load was saved without optimizer state (checkpoint.optimizer false):
// training goes on from its weights with AdamW's moments at zero, so a
// resumed run does not reproduce the uninterrupted one. A checkpoint that
// cannot be read is left to the learner's Load to report.
func (r *run) warnNoOptimizer(policy, dir string) {
	if dir == "" {
		return
	}
	if omitted, err := learner.OptimizerOmitted(dir); err == nil && omitted {
		r.log.Warn("checkpoint has no optimizer state (checkpoint.optimizer: false): AdamW's moments restart at zero", "policy", policy, "checkpoint", dir)
	}
}

// learnerActor is one learner actor (package learner).
type learnerActor struct {
	node   *cluster.Node
	policy string
	args   learner.ActorConfig
	res    cluster.Resources
	h      *cluster.Handle
}

func (a *learnerActor) fail(op string, err error) error {
	return &learnerFailure{policy: a.policy, op: op, err: err}
}

func (a *learnerActor) spawn(ctx context.Context) error {
	h, err := a.node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Args: a.args, Resources: a.res})
	if err != nil {
		return fmt.Errorf("place the %s learner: %w", a.policy, err)
	}
	a.h = h
	return nil
}

func (a *learnerActor) train(ctx context.Context, b learner.Batch) (learner.Stats, error) {
	st, err := cluster.Call[learner.Stats](ctx, a.h, learner.TrainRequest{Batch: b})
	if err != nil {
		return st, a.fail("train", err)
	}
	return st, nil
}

func (a *learnerActor) setAlgorithm(ctx context.Context, name string, lr float64) error {
	if _, err := cluster.Call[learner.AlgorithmSet](ctx, a.h, learner.SetAlgorithmRequest{Algorithm: name, LR: lr}); err != nil {
		return a.fail("set algorithm "+name, err)
	}
	return nil
}

func (a *learnerActor) weights(ctx context.Context, req learner.WeightsRequest) (learner.WeightsOffer, error) {
	off, err := cluster.Call[learner.WeightsOffer](ctx, a.h, req)
	if err != nil {
		return off, a.fail("weights", err)
	}
	return off, nil
}

func (a *learnerActor) save(ctx context.Context, dir string) (learner.Saved, error) {
	s, err := cluster.Call[learner.Saved](ctx, a.h, learner.SaveRequest{Dir: dir})
	if err != nil {
		return s, a.fail("save "+dir, err)
	}
	return s, nil
}

// restart replaces the actor by a fresh one that loads dir: cheaper to
// reason about than asking a possibly wedged actor to load.
func (a *learnerActor) restart(ctx context.Context, dir string) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = a.h.Stop(sctx) // it may be gone already
	cancel()
	args := a.args
	if dir != "" {
		args.ResumeDir = dir
	}
	h, err := a.node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Args: args, Resources: a.res})
	if err != nil {
		return fmt.Errorf("restart the %s learner from %q: %w", a.policy, dir, err)
	}
	a.h = h
	return nil
}

func (a *learnerActor) stop() {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.h.Stop(sctx)
}

// learnerShards is a data-parallel learner: shard.Group over learner-shard
// rank actors placed in placement-group bundles.
type learnerShards struct {
	node   *cluster.Node
	policy string
	args   learner.ActorConfig
	res    cluster.Resources
	opt    shard.Options
	base   string // rank actors are base-r<rank>.<spawn>
	spawns int
	pgs    []*cluster.PlacementGroup // the first holds the ranks as placed; later ones replacements
	ranks  []shardRank
	g      *shard.Group
}

// shardRank is one rank actor and the bundle it holds.
type shardRank struct {
	h      *cluster.Handle
	ref    actor.Ref
	pg     *cluster.PlacementGroup
	bundle int
}

func (s *learnerShards) fail(op string, err error) error {
	return &learnerFailure{policy: s.policy, op: op, err: err}
}

func (s *learnerShards) refs() []actor.Ref {
	out := make([]actor.Ref, len(s.ranks))
	for i, r := range s.ranks {
		out[i] = r.ref
	}
	return out
}

// spawn starts rank i's actor in bundle b of pg, with the policy's initial
// spawn arguments. The bundle of a rank that was just stopped is released
// when its node sees the actor end, so a refusal is retried for a while,
// as long as that node is a member.
func (s *learnerShards) spawn(ctx context.Context, i int, pg *cluster.PlacementGroup, b int) (shardRank, error) {
	s.spawns++
	name := fmt.Sprintf("%s-r%d.%d", s.base, i, s.spawns)
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := s.node.Spawn(ctx, shard.ActorKind, cluster.SpawnOptions{Name: name, Args: s.args, Resources: s.res, Group: pg, Bundle: b})
		if err == nil {
			rec, ok := h.Record()
			if !ok || rec.Ref.IsZero() {
				return shardRank{}, fmt.Errorf("place %s learner shard %d: no directory record for %s", s.policy, i, name)
			}
			return shardRank{h: h, ref: rec.Ref, pg: pg, bundle: b}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil || !s.member(pg.Nodes[b]) {
			return shardRank{}, fmt.Errorf("place %s learner shard %d (placement group %s bundle %d on node %s): %w", s.policy, i, pg.ID, b, pg.Nodes[b], err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// member says whether node is an alive member of the cluster.
func (s *learnerShards) member(node string) bool {
	for _, v := range s.node.Views() {
		if v.ID == node {
			return true
		}
	}
	return false
}

func (s *learnerShards) train(ctx context.Context, b learner.Batch) (learner.Stats, error) {
	st, err := s.g.Train(ctx, b)
	if err != nil {
		return st, s.fail("train", err)
	}
	return st, nil
}

func (s *learnerShards) setAlgorithm(ctx context.Context, name string, lr float64) error {
	if err := s.g.SetAlgorithm(ctx, name, lr); err != nil {
		return s.fail("set algorithm "+name, err)
	}
	return nil
}

func (s *learnerShards) weights(ctx context.Context, req learner.WeightsRequest) (learner.WeightsOffer, error) {
	off, err := s.g.Weights(ctx, req)
	if err != nil {
		return off, s.fail("weights", err)
	}
	return off, nil
}

func (s *learnerShards) save(ctx context.Context, dir string) (learner.Saved, error) {
	sv, err := s.g.Save(ctx, dir)
	if err != nil {
		return sv, s.fail("save "+dir, err)
	}
	return sv, nil
}

// probeTimeout bounds the question "are you there?" to a rank after a
// failed step; a rank that cannot answer it is replaced.
const probeTimeout = 5 * time.Second

// restart respawns the ranks that are gone (those the failed step found
// lost, and any that do not answer a probe now), then joins
// survivors and new ranks as the group's next epoch from the checkpoint in
// dir (shard.Group.Restart: any shard count wrote it). Without a
// checkpoint every rank is replaced and a new group starts from the
// initial spawn arguments.
func (s *learnerShards) restart(ctx context.Context, dir string) error {
	var lost []int
	known := map[int]bool{}
	for _, i := range s.g.Lost() {
		known[i] = true
	}
	for i, rk := range s.ranks {
		if dir == "" || known[i] {
			lost = append(lost, i)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err := actor.CallAs[shard.MailboxRef](pctx, s.node.System(), rk.ref, shard.MailboxRequest{})
		cancel()
		if err != nil {
			lost = append(lost, i)
		}
	}
	for _, i := range lost {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = s.ranks[i].h.Stop(sctx) // may be gone, or on a lost node
		cancel()
	}
	var extra *cluster.PlacementGroup
	for _, i := range lost {
		old := s.ranks[i]
		rk, err := s.spawn(ctx, i, old.pg, old.bundle)
		if err != nil {
			// The bundle's node is gone: place the rank anew.
			if extra == nil {
				bundles := make([]cluster.Bundle, len(lost))
				for k := range bundles {
					bundles[k] = cluster.Bundle{Resources: s.res}
				}
				var perr error
				if extra, perr = s.node.CreatePlacementGroup(ctx, bundles, cluster.Spread); perr != nil {
					return fmt.Errorf("respawn %s learner shard %d: %v; a new placement group: %w", s.policy, i, err, perr)
				}
				s.pgs = append(s.pgs, extra)
			}
			b := 0
			for b < len(lost) && lost[b] != i {
				b++
			}
			if rk, err = s.spawn(ctx, i, extra, b); err != nil {
				return err
			}
		}
		s.ranks[i] = rk
	}
	if dir == "" {
		g, err := shard.NewGroup(ctx, s.node.System(), s.refs(), s.opt)
		if err != nil {
			return fmt.Errorf("rejoin the %s learner's %d shards: %w", s.policy, len(s.ranks), err)
		}
		s.g = g
		return nil
	}
	if err := s.g.Restart(ctx, s.refs(), dir); err != nil {
		return fmt.Errorf("restart the %s learner's %d shards from %s: %w", s.policy, len(s.ranks), dir, err)
	}
	return nil
}

func (s *learnerShards) stop() {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, rk := range s.ranks {
		if rk.h != nil {
			_ = rk.h.Stop(sctx)
		}
	}
	for _, pg := range s.pgs {
		_ = s.node.RemovePlacementGroup(sctx, pg.ID)
	}
}

// trainLoop runs the warm-up and the RL loop; when a learner fails it
// restarts every policy's learners from the last checkpoint (that of this
// run, else the --resume one, else the initial weights), rewinds the
// driver's step, data cursor and metrics.jsonl to it, and goes on. Steps
// after the checkpoint are redone and logged once: their earlier lines
// are cut from metrics.jsonl. A step failing a second time ends the run,
// so a run restarts at most once per step.
func (r *run) trainLoop(ctx context.Context) error {
	failed := map[int]bool{}
	r.logged = r.step
	for {
		err := r.warmup(ctx)
		if err == nil {
			err = r.reinforce(ctx)
		}
		var lf *learnerFailure
		if err == nil || ctx.Err() != nil || !errors.As(err, &lf) {
			return err
		}
		step := r.logged + 1
		if !RetryAfterFailure(failed, step) {
			return fmt.Errorf("driver: step %d failed again after a restart of the learners, giving up: %w", step, err)
		}
		if rerr := r.restartLearners(ctx, err); rerr != nil {
			return fmt.Errorf("driver: step %d: %w; restarting the learners: %w", step, err, rerr)
		}
	}
}

// restartLearners is trainLoop's recovery.
func (r *run) restartLearners(ctx context.Context, cause error) error {
	dir := r.res.LastCheckpointDir
	if dir == "" {
		dir = r.cfg.Resume
	}
	r.log.Warn("learner failed; restarting from the last checkpoint", "step", r.logged+1, "checkpoint", dir, "err", cause)
	ds := driverState{}
	if dir != "" {
		var err error
		if ds, err = readDriverState(dir, r.cfg.Seed); err != nil {
			return err
		}
	}
	// The asynchronous run's prefetched batch is gone with reinforce
	// (which cancels and waits for its generation before returning); the
	// checkpoint's cursor already leaves it out. The step is the
	// checkpoint's before the engines restart: new rollout actors start at
	// its version (startRollout).
	r.prefetched = 0
	r.step, r.cursor, r.version = ds.Step, ds.TrainCursor, ds.WeightVersion
	for _, p := range []*policy{r.solver, r.feedback} {
		if p == nil {
			continue
		}
		pdir := dir
		if pdir != "" && p == r.feedback {
			pdir = filepath.Join(dir, FeedbackDir)
		}
		r.warnNoOptimizer(p.id, pdir)
		if err := p.learner.restart(ctx, pdir); err != nil {
			return err
		}
		// Engines and rollout actors' weight syncers refuse a version
		// older than they serve: replace them. A new local engine takes
		// the restored weights in syncAll below; new rollout actors get
		// them pushed from the restored learner (startRollout) and start
		// at its version.
		p.stopEngine()
		if err := r.startEngine(ctx, p); err != nil {
			return err
		}
	}
	if err := r.cutMetrics(ds.Step); err != nil {
		return err
	}
	return r.syncAll(ctx)
}

// readDriverState reads a checkpoint's driver_state.json.
func readDriverState(dir string, seed uint64) (driverState, error) {
	path := filepath.Join(dir, DriverStateFile)
	var ds driverState
	js, err := os.ReadFile(path)
	if err != nil {
		return ds, fmt.Errorf("driver state: %w", err)
	}
	if err := json.Unmarshal(js, &ds); err != nil {
		return ds, fmt.Errorf("driver state: %s: %w", path, err)
	}
	switch {
	case ds.Seed != seed:
		return ds, fmt.Errorf("driver state: %s: seed %d, the config's %d", path, ds.Seed, seed)
	case ds.Step < 0 || ds.TrainCursor < 0:
		return ds, fmt.Errorf("driver state: %s: step %d, cursor %d: want ≥ 0", path, ds.Step, ds.TrainCursor)
	}
	return ds, nil
}

// cutMetrics rewrites metrics.jsonl without the lines of steps after
// step (the steps about to be redone) and reopens it for appending. A last
// line that does not parse (a run killed mid-write) is dropped; any other
// is an error naming it.
func (r *run) cutMetrics(step int) error {
	path := filepath.Join(r.cfg.Out, "metrics.jsonl")
	if err := r.metrics.Close(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	var kept bytes.Buffer
	lines := bytes.SplitAfter(data, []byte("\n"))
	for n, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m struct {
			Step *int `json:"step"`
		}
		if err := json.Unmarshal(line, &m); err != nil || m.Step == nil {
			if n == len(lines)-1 && !bytes.HasSuffix(line, []byte("\n")) {
				break // cut off mid-write
			}
			return fmt.Errorf("metrics: %s:%d: not a metrics line (%v)", path, n+1, err)
		}
		if *m.Step <= step {
			kept.Write(bytes.TrimRight(line, "\n"))
			kept.WriteByte('\n')
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, kept.Bytes(), 0o644); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if r.metrics, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	r.logged = step
	return nil
}
