package train

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/shard"
)

// placeLearners places one policy's learner: a learner actor, or with
// Learner.Shards > 1 that many learner-shard ranks (shard.StartGroup).
func (r *run) placeLearners(ctx context.Context, id string, l learner.Config, resume string) (*shard.PlacedGroup, error) {
	r.warnNoOptimizer(id, resume)
	mem, err := learnerRankMemory(l)
	if err != nil {
		return nil, fmt.Errorf("%s learner: memory: %w", id, err)
	}
	res := withMemory(r.cfg.LearnerResources, mem)
	r.folders.Allow(l.ModelDir, l.RefModelDir)
	gc := shard.GroupConfig{
		Policy:    id,
		Actor:     learner.ActorConfig{Config: l, ResumeDir: resume, Folders: r.learnerFolders()},
		Resources: res,
		Options:   shard.Options{Timeout: r.cfg.LearnerTimeout},
		PullChunk: r.cfg.pullChunk,
		Pulled:    r.pulled(id),
	}
	var g *shard.PlacedGroup
	err = r.withProbe(func() error {
		var err error
		if g, err = shard.StartGroup(ctx, r.node, gc); err != nil {
			return err
		}
		if l.Shards > 1 {
			r.log.Info("learner shards joined", "policy", id, "shards", l.Shards, "gradients", g.Gradients())
		}
		listed, err := r.checkRunFolderShared(ctx, id, l.Shards, g)
		if err != nil {
			g.Stop()
			return err
		}
		r.logLearnerPlacement("learner placed", id, res, g, listed)
		return nil
	})
	return g, err
}

// logLearnerPlacement says where a policy's learner runs: on a cluster,
// each member's node, host and device, so a user sees where the run
// landed (rlnode status shows the actors, not which is which). listed is
// the members' answers to the run folder's check, by rank (nil without a
// run folder).
func (r *run) logLearnerPlacement(msg, id string, res cluster.Resources, g *shard.PlacedGroup, listed []shard.RankListing) {
	members := g.Members()
	where := make([]string, len(members))
	for i, m := range members {
		host, device := "", "cpu"
		if i < len(listed) && listed[i].Err == nil {
			host = listed[i].Listed.Host
			if d := listed[i].Listed.Device; d != "" {
				device = d
			}
		}
		w := "node " + m.Node
		if host != "" {
			w += ", host " + host
		}
		w += ", device " + device
		if len(members) > 1 {
			w = fmt.Sprintf("rank %d: %s (actor %s)", i, w, m.Name)
		} else {
			w += " (actor " + m.Name + ")"
		}
		where[i] = w
	}
	r.log.Info(msg, "policy", id, "shards", len(members), "each", res.String(), "at", strings.Join(where, "; "))
}

// serveFolders starts the folder server that gives learners on hosts
// without the run folder what they load (learner.ServeFolders): the
// policies' models and references (placeLearners), the checkpoint
// resumed from, and this run's checkpoints.
func (r *run) serveFolders() error {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	name := hex.EncodeToString(raw[:])
	r.probe = ".shared-check-" + name
	var err error
	if r.folders, err = learner.ServeFolders(r.node.System(), "learner-folders-"+name); err != nil {
		return fmt.Errorf("learner folders: %w", err)
	}
	r.folders.Allow(r.cfg.Resume)
	r.folders.AllowUnder(r.cfg.Resume, filepath.Join(r.cfg.Out, "checkpoints"))
	if r.cfg.launchesVLLM() {
		r.vllmProbe = ".vllm-shared-check-" + name
		if err := os.WriteFile(filepath.Join(r.cfg.Out, r.vllmProbe), nil, 0o644); err != nil {
			r.folders.Close()
			return fmt.Errorf("run folder: %w", err)
		}
	}
	return nil
}

// closeFolders stops the folder server and removes the vLLM servers'
// probe file.
func (r *run) closeFolders() {
	r.folders.Close()
	if r.vllmProbe != "" {
		_ = os.Remove(filepath.Join(r.cfg.Out, r.vllmProbe))
	}
}

// learnerFolders is what every learner is told of the run folder
// (learner.Folders).
func (r *run) learnerFolders() *learner.Folders {
	dir, err := filepath.Abs(r.cfg.Out)
	if err != nil {
		dir = r.cfg.Out
	}
	return &learner.Folders{Server: r.folders.Ref(), RunDir: dir, Probe: r.probe}
}

// withProbe runs f, which places learners, with the probe file in the run
// folder: a learner built meanwhile that sees it writes its checkpoints
// into the run folder from its own node; one that does not is served
// over the bulk path (learner.Folders).
func (r *run) withProbe(f func() error) error {
	probe := filepath.Join(r.cfg.Out, r.probe)
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	defer os.Remove(probe)
	return f()
}

// pulled logs each file of a checkpoint part pulled from a learner member
// that does not see the run folder.
func (r *run) pulled(id string) func(int, string, learner.FolderFile, int64) {
	return func(rank int, node string, f learner.FolderFile, got int64) {
		if r.cfg.pulled != nil {
			r.cfg.pulled(id, rank, node, f, got)
		}
		if got == f.Size {
			r.pulledBytes += f.Size
			r.log.Debug("checkpoint file pulled from a learner without the run folder", "policy", id, "rank", rank, "node", node, "file", f.Name, "bytes", f.Size)
		}
	}
}

// checkRunFolderShared checks, while the probe file is in the run folder
// (withProbe), that every member of a policy's learner that saw it when
// it was built sees it still: those write their part of each checkpoint
// into the run folder from their own nodes, so a folder that stopped
// being shared meanwhile would leave each checkpoint split between hosts,
// each part unusable, and the run would not know. Members that did not
// see it (learner.Listed.Staged) are served over the bulk path.
func (r *run) checkRunFolderShared(ctx context.Context, id string, shards int, g *shard.PlacedGroup) ([]shard.RankListing, error) {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	listed := g.List(lctx, r.cfg.Out)
	for _, rl := range listed {
		who := learnerMember(id, shards, rl.Rank)
		if rl.Err != nil {
			return nil, fmt.Errorf("run folder %s: %s cannot list it: %w; %s", r.cfg.Out, who, rl.Err, whyShared)
		}
		if rl.Listed.Staged {
			r.log.Info("learner does not see the run folder: its model and checkpoints travel over the network", "policy", id, "member", who, "host", rl.Listed.Host, "addr", rl.Listed.Addr)
			continue
		}
		if _, ok := slices.BinarySearch(rl.Listed.Names, r.probe); !ok && !rl.Listed.Truncated {
			return nil, fmt.Errorf("run folder %s is not shared with %s on host %s (actor address %s) any more: it saw the file %s this host wrote there when it started, and does not now; %s",
				r.cfg.Out, who, rl.Listed.Host, rl.Listed.Addr, r.probe, whyShared)
		}
	}
	return listed, nil
}

// whyShared is why a run folder a learner saw must stay shared.
const whyShared = "a learner that sees the run folder when it starts writes its part of each checkpoint there from its own node, so the folder must stay shared with it for the whole run (a learner started on a host that does not see the run folder at all gets its model and sends its checkpoints over the network instead)"

// learnerMember names member rank of a policy's learner.
func learnerMember(id string, shards, rank int) string {
	if shards > 1 {
		return fmt.Sprintf("rank %d of the %s learner", rank, id)
	}
	return fmt.Sprintf("the %s learner", id)
}

// checkSavedVisible checks, once p's learner has saved into dir, that
// every member's node sees there what this host sees, no more and no
// less: a folder that stopped being shared after the learners were
// placed (an unmounted share on one host) would otherwise leave each
// checkpoint split between hosts, with a manifest over this host's part
// only. A member that does not answer is left to the next step to find
// lost.
func (r *run) checkSavedVisible(ctx context.Context, p *policy, dir string) error {
	mine, err := learner.ListDir(dir, "", "")
	if errors.Is(err, fs.ErrNotExist) {
		// Only learners on other hosts wrote into it.
		mine, err = learner.Listed{}, nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, rl := range p.learner.List(lctx, dir) {
		if rl.Err == nil && rl.Listed.Staged {
			continue // its part was pulled into dir (PlacedGroup.Save)
		}
		who := learnerMember(p.id, p.l.Shards, rl.Rank)
		if rl.Err != nil {
			if _, answered := errors.AsType[*actor.ActorError](rl.Err); !answered {
				r.log.Warn("checkpoint: a learner did not answer the check that it sees the checkpoint", "policy", p.id, "rank", rl.Rank, "checkpoint", dir, "err", rl.Err)
				continue
			}
			return fmt.Errorf("checkpoint %s: %s (host %s) cannot list it: %w; %s", dir, who, rl.Listed.Host, rl.Err, whyShared)
		}
		if rl.Listed.Truncated || mine.Truncated {
			continue
		}
		if missing := missingFrom(mine.Names, rl.Listed.Names); len(missing) > 0 {
			return fmt.Errorf("checkpoint %s: %s on host %s (actor address %s) sees %s there, which this host does not: the run folder is no longer shared; %s",
				dir, who, rl.Listed.Host, rl.Listed.Addr, strings.Join(missing, ", "), whyShared)
		}
		if missing := missingFrom(rl.Listed.Names, mine.Names); len(missing) > 0 {
			return fmt.Errorf("checkpoint %s: %s on host %s (actor address %s) does not see %s, which this host sees there: the run folder is no longer shared; %s",
				dir, who, rl.Listed.Host, rl.Listed.Addr, strings.Join(missing, ", "), whyShared)
		}
	}
	return nil
}

// missingFrom lists the names of want (sorted) that have (sorted) lacks,
// at most five of them.
func missingFrom(have, want []string) []string {
	var out []string
	for _, n := range want {
		if _, ok := slices.BinarySearch(have, n); !ok {
			if out = append(out, n); len(out) == 5 {
				break
			}
		}
	}
	return out
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

// trainLoop runs the warm-up and the RL loop; when a learner fails it
// restarts every policy's learners from the last checkpoint (that of this
// run, else the --resume one, else the initial weights), rewinds the
// driver's step, data cursor and metrics.jsonl to it, and goes on. Steps
// after the checkpoint are redone and logged once: their earlier lines
// are cut from metrics.jsonl. A step failing a second time ends the run,
// so a run restarts at most once per step.
//
// A failure that every rank answered on its own, none lost
// (shard.Failure.Answered: a batch the learner refuses, a non-finite
// loss), is the learner's verdict on this step, which a restart would
// meet again after redoing the steps since the checkpoint: the run stops
// at once, naming the newest complete checkpoint to resume from once the
// cause is fixed.
func (r *run) trainLoop(ctx context.Context) error {
	failed := map[int]bool{}
	r.logged = r.step
	s := State{Step: r.step}
	for {
		err := r.steps(ctx, s)
		var lf *shard.Failure
		if err == nil || ctx.Err() != nil || !errors.As(err, &lf) {
			return err
		}
		step := r.logged + 1
		if lf.Answered {
			return fmt.Errorf("step %d: the %s learner failed on its own, none of its ranks lost; not restarted (it would fail the same way; %s): %w",
				step, lf.Policy, r.newestCheckpoint(), err)
		}
		if !RetryAfterFailure(failed, step) {
			return fmt.Errorf("step %d failed again after a restart of the learners, giving up: %w", step, err)
		}
		if rerr := r.restartLearners(ctx, err); rerr != nil {
			return fmt.Errorf("step %d: %w; restarting the learners: %w", step, err, rerr)
		}
		s = Restarted(r.step)
	}
}

// schedule is the planner's view of the run.
func (r *run) schedule() Schedule {
	cfg := r.cfg
	return Schedule{
		WarmupSteps: cfg.WarmupSteps, Steps: cfg.Steps, ProbeEvery: cfg.probeEvery(),
		EvalEvery: cfg.EvalEvery, CheckpointEvery: cfg.CheckpointEvery, Evaluates: cfg.EvalEvery > 0,
		MaxStaleness:  cfg.MaxStaleness,
		RolloutActors: r.solver.server.Status().PushOnDemand,
		MultiTurn:     cfg.multiTurn(),
		Stage1Steps:   cfg.ScoreStage1Steps,
		UpdateRatio:   cfg.UpdateRatio,
	}
}

// steps carries out the planner's steps from state s until the run is
// done, a stop is asked (Config.Stop: the step in progress finishes and
// is checkpointed), or a step fails. The batches it draws ahead end with
// it.
func (r *run) steps(ctx context.Context, s State) error {
	sc := r.schedule()
	start := r.startEpisodes
	if r.traces != nil && r.traces.groups != nil {
		// Offline batch j is RL step j's, whatever was drawn before a
		// restart of the learners (or a resume).
		start, r.traceDrawn = r.startTraceGroups, max(r.step-r.cfg.WarmupSteps, 0)
	}
	pipe := newPipeline(ctx, r, start)
	defer pipe.close()
	var traj *trajectorySamples // the warm-up's, once loaded
	for {
		p := Plan(sc, s)
		if p.Done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			if p.Phase == PhaseWarmup {
				return fmt.Errorf("warm-up step %d: %w", p.Step, err)
			}
			return fmt.Errorf("step %d: %w", p.Step, err)
		}
		if r.cfg.stepBegins != nil {
			r.cfg.stepBegins(p.Step)
		}
		if p.SetAlgorithm {
			var err error
			if p.Phase == PhaseWarmup {
				err = r.setAlgorithm(ctx, learner.SFT, r.cfg.WarmupLR)
			} else {
				err = r.setRLAlgorithms(ctx)
			}
			if err != nil {
				return err
			}
		}
		var m Metrics
		var err error
		switch {
		case p.Phase == PhaseRL:
			m, err = r.rlStep(ctx, pipe, p)
		case r.cfg.WarmupTrajectories != nil:
			if traj == nil {
				if traj, err = r.loadTrajectories(ctx, r.cfg.WarmupTrajectories); err != nil {
					return err
				}
			}
			m, err = r.warmupStepTrajectories(ctx, traj)
		case r.cfg.Episode == EpisodeAgent:
			m, err = r.warmupStepAgent(ctx)
		case r.cfg.multiTurn():
			m, err = r.warmupStepMultiTurn(ctx)
		default:
			m, err = r.warmupStep(ctx)
		}
		if err != nil {
			return err
		}
		if r.step != p.Step {
			return fmt.Errorf("step %d was carried out as step %d", p.Step, r.step)
		}
		last := Plan(sc, After(s, p)).Done // the last step ends the run anyway
		if !last && r.stopAsked() {
			p = StopAfter(p)
		}
		if err := r.finishStep(ctx, &m, &p, !last); err != nil {
			return err
		}
		if !p.Stop && !last && p.Checkpoint && r.stopAsked() {
			p.Stop = true // asked while this step's checkpoint was written
		}
		sc.WarmupSteps = r.cfg.WarmupSteps // a probe may have ended the warm-up
		if p.Stop {
			r.res.Stopped = true
			return nil
		}
		s = After(s, p)
	}
}

// stopAsked reports whether Config.Stop is closed.
func (r *run) stopAsked() bool {
	select {
	case <-r.cfg.Stop:
		return true
	default:
		return false
	}
}

// newestCheckpoint says which complete checkpoint the run would go on
// from: this run's last, else the one it resumed from.
func (r *run) newestCheckpoint() string {
	switch {
	case r.res.LastCheckpointDir != "":
		return "the newest complete checkpoint is " + r.res.LastCheckpointDir
	case r.cfg.Resume != "":
		return "this run has written no checkpoint yet; it resumed from " + r.cfg.Resume
	}
	return "this run has no complete checkpoint yet"
}

// restartLearners is trainLoop's recovery.
func (r *run) restartLearners(ctx context.Context, cause error) error {
	dir := r.res.LastCheckpointDir
	if dir == "" {
		dir = r.cfg.Resume
	}
	if dir == "" {
		r.log.Warn("learner failed; restarting the run from its first step (no checkpoint yet)", "step", r.logged+1, "err", cause)
	} else {
		r.log.Warn("learner failed; restarting from the last checkpoint", "step", r.logged+1, "checkpoint", dir, "err", cause)
	}
	ds := driverState{}
	if dir != "" {
		if err := r.verifyCheckpoint(ctx, dir); err != nil {
			return err
		}
		var err error
		if ds, err = readDriverState(dir, r.cfg.Seed); err != nil {
			return err
		}
	}
	// The asynchronous run's prefetched batches are gone with steps
	// (which cancels and waits for their generation before returning); the
	// checkpoint's cursor already leaves it out. The step is the
	// checkpoint's before the engines restart: new rollout actors start at
	// its version (startRollout).
	r.prefetched = 0
	r.step, r.cursor, r.version = ds.Step, ds.TrainCursor, ds.WeightVersion
	if err := r.resumeWarmupEnd(ds, dir); err != nil {
		return err
	}
	if err := r.resumeEntropyControl(ds, dir); err != nil {
		return err
	}
	for _, p := range []*policy{r.solver, r.feedback} {
		if p == nil {
			continue
		}
		pdir := dir
		if pdir != "" && p == r.feedback {
			pdir = filepath.Join(dir, FeedbackDir)
		}
		r.warnNoOptimizer(p.id, pdir)
		err := r.withProbe(func() error {
			if err := p.learner.Restart(ctx, pdir); err != nil {
				return err
			}
			// Replaced ranks may be on other hosts now.
			listed, err := r.checkRunFolderShared(ctx, p.id, p.l.Shards, p.learner)
			if err != nil {
				return err
			}
			r.logLearnerPlacement("learner placed again", p.id, p.learner.Resources(), p.learner, listed)
			return nil
		})
		if err != nil {
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
		return ds, fmt.Errorf("read the run's state: %w", err)
	}
	if err := json.Unmarshal(js, &ds); err != nil {
		return ds, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case ds.Seed != seed:
		return ds, fmt.Errorf("%s: seed %d, the config's %d", path, ds.Seed, seed)
	case ds.Step < 0 || ds.TrainCursor < 0:
		return ds, fmt.Errorf("%s: step %d, cursor %d: want ≥ 0", path, ds.Step, ds.TrainCursor)
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
