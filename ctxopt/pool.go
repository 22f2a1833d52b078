package ctxopt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/internal/lossclock"
	"github.com/rlnode/rlnode/internal/lostctx"

	"github.com/rlnode/rlnode/cluster"
)

// PoolOptions tune an ExecutorPool's recovery; zero fields take the
// defaults.
type PoolOptions struct {
	// RespawnEvery is how often a lost executor's replacement is tried
	// while none can start (default 2 s).
	RespawnEvery time.Duration
	// ReplaceWait is how long a batch waits for a live executor when every
	// one is lost (default 2 min) before it fails.
	ReplaceWait time.Duration
	// LossTimeout is how long calls to an executor may keep failing or
	// go unanswered, while the cluster still lists it, before it is
	// dropped as lost and its chunk runs elsewhere; it counts from the
	// sending of the first such call. Executors answer at once while their
	// jobs run, so a slow execution never counts. Default: the recipe's
	// executor.loss_timeout, else DefaultLossTimeout.
	LossTimeout time.Duration
}

// DefaultLossTimeout is PoolOptions.LossTimeout's default: longer than
// the cluster's failure detection plus a loaded node's pauses.
const DefaultLossTimeout = 15 * time.Second

// ExecutorPool runs batches on executor actors: a batch is cut into one
// chunk per live executor, each chunk runs on the least busy one, and the
// outcomes come back in order. Jobs carry their seeds, so the outcomes are
// those a local executor would give, whichever executor runs them.
//
// An executor that is lost (its process killed, its node gone, its calls
// failing or unanswered for LossTimeout) is replaced: a new executor actor is spawned on
// any node that can host it, tried again every RespawnEvery, and the
// chunks the lost one held run again on the others. An error the executor
// itself answers (a bad job, an engine failure) fails the batch. Safe for
// concurrent use.
type ExecutorPool struct {
	node *cluster.Node
	args ExecutorArgs
	name string
	opts PoolOptions
	log  *slog.Logger

	watch context.Context
	stop  context.CancelFunc

	mu        sync.Mutex
	reps      []*execReplica
	replacing int
	changed   chan struct{} // closed and replaced when reps or replacing change
	lastErr   string
	closed    bool

	names    atomic.Int64
	chunks   atomic.Int64 // submitted chunks, for their IDs
	replaced atomic.Int64
	retried  atomic.Int64
}

type execReplica struct {
	name, node string
	h          *cluster.Handle
	lost       chan struct{}
	cause      string // set when lost (under the pool's mu)
	busy       int
}

// StartExecutors spawns one executor actor of recipe r on each of nodes
// (node ids), named prefix-i, and watches them.
func StartExecutors(ctx context.Context, n *cluster.Node, r *Recipe, prefix string, nodes []string) (*ExecutorPool, error) {
	return StartExecutorPool(ctx, n, r, prefix, nodes, PoolOptions{})
}

// StartExecutorPool is StartExecutors with recovery options.
func StartExecutorPool(ctx context.Context, n *cluster.Node, r *Recipe, prefix string, nodes []string, o PoolOptions) (*ExecutorPool, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("start executors: no nodes")
	}
	if o.RespawnEvery <= 0 {
		o.RespawnEvery = 2 * time.Second
	}
	if o.ReplaceWait <= 0 {
		o.ReplaceWait = 2 * time.Minute
	}
	if o.LossTimeout <= 0 {
		o.LossTimeout = r.lossTimeout
	}
	if o.LossTimeout <= 0 {
		o.LossTimeout = DefaultLossTimeout
	}
	p := &ExecutorPool{node: n, args: ExecutorArgs{File: r.file, Recipe: r.source}, name: prefix, opts: o,
		log: n.System().Logger(), changed: make(chan struct{})}
	p.watch, p.stop = context.WithCancel(context.Background())
	for _, node := range nodes {
		rep, err := p.spawn(ctx, node)
		if err != nil {
			p.Close(ctx)
			return nil, err
		}
		p.reps = append(p.reps, rep)
		go p.watchReplica(rep)
	}
	return p, nil
}

// spawn starts an executor on node (any node when empty), waiting at most
// the executor's build bound plus LossTimeout for the node's answer: a
// node that is frozen, or stuck, while gossip lists it would otherwise
// hold the start for as long as ctx lasts (rlnode ctxopt's has no end).
func (p *ExecutorPool) spawn(ctx context.Context, node string) (*execReplica, error) {
	name := fmt.Sprintf("%s-%d", p.name, p.names.Add(1)-1)
	wait := executorBuildTime + p.opts.LossTimeout
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	h, err := p.node.Spawn(sctx, ExecutorKind, cluster.SpawnOptions{Name: name, Node: node, Args: p.args})
	if err != nil {
		where := node
		if where == "" {
			where = "any node"
		}
		if ctx.Err() == nil && sctx.Err() != nil {
			return nil, fmt.Errorf("start executor %s on %s: no answer within %v: %w", name, where, wait, err)
		}
		return nil, fmt.Errorf("start executor %s on %s: %w", name, where, err)
	}
	rep := &execReplica{name: name, node: node, h: h, lost: make(chan struct{})}
	if rec, ok := h.Record(); ok {
		rep.node = rec.Node
	}
	return rep, nil
}

// watchReplica drops rep when the cluster reports it dead or restarting.
func (p *ExecutorPool) watchReplica(rep *execReplica) {
	for n := range p.node.Watch(p.watch, rep.name) {
		if n.State != cluster.Alive {
			p.lose(rep, fmt.Sprintf("%s on node %s: %s", n.State, rep.node, n.Cause))
			return
		}
	}
}

func (p *ExecutorPool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// lose drops rep (its chunks run again elsewhere) and starts its
// replacement.
func (p *ExecutorPool) lose(rep *execReplica, cause string) {
	p.mu.Lock()
	if rep.cause != "" || p.closed {
		p.mu.Unlock()
		return
	}
	rep.cause = cause
	p.replacing++
	p.notifyLocked()
	p.mu.Unlock()
	close(rep.lost)
	p.log.Warn("ctxopt executor lost", "executor", rep.name, "node", rep.node, "cause", cause)
	go p.replace(rep)
}

// replace starts an executor in place of old on any node, trying again
// every RespawnEvery until one starts or the pool closes.
func (p *ExecutorPool) replace(old *execReplica) {
	go func() { // it may still run (calls failing): stop it
		ctx, cancel := context.WithTimeout(p.watch, stopWait)
		_ = p.node.StopActor(ctx, old.name)
		cancel()
	}()
	defer func() {
		p.mu.Lock()
		p.replacing--
		p.notifyLocked()
		p.mu.Unlock()
	}()
	for tries := 1; p.watch.Err() == nil; tries++ {
		ctx, cancel := context.WithTimeout(p.watch, 5*time.Minute)
		rep, err := p.spawn(ctx, "")
		cancel()
		if err == nil {
			p.mu.Lock()
			closed := p.closed
			if !closed {
				p.reps = append(p.reps, rep)
				p.notifyLocked()
			}
			p.mu.Unlock()
			if closed {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = rep.h.Stop(sctx)
				cancel()
				return
			}
			p.replaced.Add(1)
			p.log.Info("ctxopt executor replaced", "lost", old.name, "executor", rep.name, "node", rep.node, "tries", tries)
			go p.watchReplica(rep)
			return
		}
		p.mu.Lock()
		p.lastErr = err.Error()
		p.mu.Unlock()
		if tries == 1 {
			p.log.Warn("ctxopt executor not replaced yet: going on with fewer", "lost", old.name, "err", err)
		}
		select {
		case <-p.watch.Done():
		case <-time.After(p.opts.RespawnEvery):
		}
	}
}

// ExecutorStatus is one executor of the pool as it stands.
type ExecutorStatus struct {
	Name, Node string
	Lost       string // why it was dropped; empty while live
}

// Executors lists the pool's executors, live and lost, in start order.
func (p *ExecutorPool) Executors() []ExecutorStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ExecutorStatus, len(p.reps))
	for i, r := range p.reps {
		out[i] = ExecutorStatus{Name: r.name, Node: r.node, Lost: r.cause}
	}
	return out
}

// Replaced is how many lost executors have been replaced.
func (p *ExecutorPool) Replaced() int64 { return p.replaced.Load() }

// Retried is how many chunks ran again after their executor was lost.
func (p *ExecutorPool) Retried() int64 { return p.retried.Load() }

// stopWait bounds the stop of one executor (Close, and that of a lost one).
const stopWait = 10 * time.Second

// Close stops the executor actors and their replacement, waiting at most
// stopWait (or until ctx ends) for any one executor's node to answer.
func (p *ExecutorPool) Close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	reps := slices.Clone(p.reps)
	p.mu.Unlock()
	p.stop()
	names := make([]string, len(reps))
	for i, r := range reps {
		names[i] = r.h.Name()
	}
	// All at once, each within stopWait: an executor whose node does not
	// answer (frozen, its port cut while gossip passes) must neither use
	// up the others' time nor hold Close; its record is marked stopped and
	// the node stops it when it hears of that.
	_ = p.node.StopActors(ctx, stopWait, names...)
}

// live returns the live executors.
func (p *ExecutorPool) liveLocked() []*execReplica {
	var out []*execReplica
	for _, r := range p.reps {
		if r.cause == "" {
			out = append(out, r)
		}
	}
	return out
}

// lostLocked names the lost executors, their nodes and causes.
func (p *ExecutorPool) lostLocked() string {
	var out []string
	for _, r := range p.reps {
		if r.cause != "" {
			out = append(out, fmt.Sprintf("%s on node %s: %s", r.name, r.node, r.cause))
		}
	}
	return strings.Join(out, "; ")
}

// acquire picks the least busy live executor, waiting up to ReplaceWait
// for one while every executor is lost and a replacement is under way.
func (p *ExecutorPool) acquire(ctx context.Context) (*execReplica, error) {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		live := p.liveLocked()
		if len(live) > 0 {
			best := live[0]
			for _, r := range live[1:] {
				if r.busy < best.busy {
					best = r
				}
			}
			best.busy++
			p.mu.Unlock()
			return best, nil
		}
		replacing, ch, why := p.replacing, p.changed, p.lastErr
		closed := p.closed
		lost := p.lostLocked()
		p.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("executor pool %s is closed", p.name)
		}
		if replacing == 0 {
			return nil, fmt.Errorf("executor pool %s: every executor lost, none being replaced: %s", p.name, lost)
		}
		if deadline == nil {
			deadline = time.After(p.opts.ReplaceWait)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("executor pool %s: every executor lost (%s), waiting for a replacement: %w", p.name, lost, ctx.Err())
		case <-deadline:
			if why == "" {
				why = "none has finished yet"
			}
			return nil, fmt.Errorf("executor pool %s: every executor lost (%s) and none replaced within %v (last try: %s)", p.name, lost, p.opts.ReplaceWait, why)
		}
	}
}

func (p *ExecutorPool) release(r *execReplica) {
	p.mu.Lock()
	r.busy--
	p.mu.Unlock()
}

// runChunk runs jobs on some executor until one answers: a chunk whose
// executor is lost runs again on another.
func (p *ExecutorPool) runChunk(ctx context.Context, jobs []Job) ([]Outcome, error) {
	for attempt := 0; ; attempt++ {
		r, err := p.acquire(ctx)
		if err != nil {
			return nil, err
		}
		if attempt > 0 {
			p.retried.Add(1)
		}
		outs, lost, err := p.callReplica(ctx, r, jobs)
		p.release(r)
		if !lost {
			return outs, err
		}
	}
}

// The pool's wait between CollectJobs calls: from pollFirst, doubling up
// to pollMax (an answered poll costs the executor a map lookup).
const (
	pollFirst = 5 * time.Millisecond
	pollMax   = 100 * time.Millisecond
)

// callReplica submits jobs to r and collects their outcomes, until they
// come, r is lost (lost true), the executor answers an error, or ctx ends.
// A call that fails in transport or goes unanswered is tried again; once
// calls have failed or gone unanswered for LossTimeout, counted from the
// sending of the first of them, r is dropped here. A busy executor answers
// every call at once (its jobs run in the background), so the bound never
// depends on how long an execution takes.
func (p *ExecutorPool) callReplica(ctx context.Context, r *execReplica, jobs []Job) (outs []Outcome, lost bool, err error) {
	cctx, cancel, isLost := lostctx.WithLost(ctx, r.lost)
	defer cancel()
	lc := &lossclock.Caller{Clock: lossclock.Clock{Timeout: p.opts.LossTimeout}, PollFirst: pollFirst, PollMax: pollMax, IsLost: isLost}
	pause := func() (lost bool, err error) { return lc.Pause(cctx) }
	call := func(msg any) (any, bool, error) {
		v, lost, expired, err := lc.Call(cctx, func(mctx context.Context) (any, error) { return r.h.Call(mctx, msg) })
		if expired {
			p.lose(r, fmt.Sprintf("calls failing or unanswered for %v: %v", p.opts.LossTimeout, err))
			return nil, true, nil
		}
		return v, lost, err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("executor %s on node %s: %s", r.name, r.node, fmt.Sprintf(format, args...))
	}

	id := fmt.Sprintf("%s/%d", p.name, p.chunks.Add(1))
	// The executor stops the jobs once no poll came for twice the loss
	// bound: by then this pool has dropped it (or is gone).
	v, lost, err := call(SubmitJobs{ID: id, Jobs: jobs, Idle: max(2*p.opts.LossTimeout, 10*time.Second)})
	switch {
	case lost:
		return nil, true, nil
	case err != nil:
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, fail("submit: %v", err)
	}
	if _, ok := v.(JobsAccepted); !ok {
		return nil, false, fail("submit answered %T, want JobsAccepted", v)
	}
	defer func() {
		if outs == nil && err == nil || ctx.Err() != nil {
			// Abandoned (r lost, ctx ended): the jobs need not run on.
			_ = r.h.Tell(CancelJobs{ID: id})
		}
	}()
	for {
		v, lost, err := call(CollectJobs{ID: id})
		switch {
		case lost:
			return nil, true, nil
		case err != nil && ctx.Err() != nil:
			return nil, false, ctx.Err()
		case err != nil && (strings.Contains(err.Error(), msgNoJobs) || strings.Contains(err.Error(), msgExecutorStopped)):
			// The actor forgot the jobs (restarted in place) or was
			// stopped under them: they run again elsewhere, and it is
			// dropped, so that a chunk is never tried on it for ever.
			p.lose(r, fmt.Sprintf("chunk %s: %v", id, err))
			return nil, true, nil
		case err != nil:
			return nil, false, fmt.Errorf("executor %s on node %s: %w", r.name, r.node, err)
		}
		c, ok := v.(JobsCollected)
		switch {
		case !ok:
			return nil, false, fail("collect answered %T, want JobsCollected", v)
		case c.Done && len(c.Outcomes) != len(jobs):
			return nil, false, fail("%d outcomes for %d jobs", len(c.Outcomes), len(jobs))
		case c.Done:
			return c.Outcomes, false, nil
		}
		if lost, err := pause(); lost || err != nil {
			return nil, lost, err
		}
	}
}

// chunkJobs bounds the jobs of one chunk, so that a chunk and its outcomes
// stay below the actor message limit however large the batch: a job takes
// a few hundred bytes, its outcome a few with the answer's text (at most
// a budget's tokens); jobBytes per job leaves room for both.
func chunkJobs(limit int) int { return min(max(limit/jobBytes, 16), maxChunkJobs) }

const (
	jobBytes     = 4 << 10
	maxChunkJobs = 1024 // reached at a 4 MiB limit (the default is 64 MiB)
)

// RunBatch implements Runner: the batch is cut into one chunk per live
// executor (more when a chunk would pass chunkJobs), and as many chunks
// as there are live executors run at once.
func (p *ExecutorPool) RunBatch(ctx context.Context, jobs []Job) ([]Outcome, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	p.mu.Lock()
	k := min(max(len(p.liveLocked()), 1), len(jobs))
	p.mu.Unlock()
	size := min((len(jobs)+k-1)/k, chunkJobs(p.node.System().MaxMessageSize()))
	chunks := (len(jobs) + size - 1) / size
	out := make([]Outcome, len(jobs))
	errs := make([]error, chunks)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(k, chunks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				lo, hi := c*size, min((c+1)*size, len(jobs))
				res, err := p.runChunk(ctx, jobs[lo:hi])
				if err != nil {
					errs[c] = fmt.Errorf("jobs %d..%d: %w", lo, hi-1, err)
					cancel()
					continue
				}
				copy(out[lo:hi], res)
			}
		}()
	}
	for c := range chunks {
		if ctx.Err() != nil {
			break
		}
		next <- c
	}
	close(next)
	wg.Wait()
	// The first failure cancelled the other chunks: report it, not them.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
