package rollout

// The rollout pool: an engine.Engine over rollout actors on the cluster's
// nodes, so episode runners in the driver's process generate on many
// nodes (see Pool).
//
// Not done yet: a replica the cluster restarts is dropped (and replaced),
// not re-registered; episode jobs (RunEpisodes) are not spread by the pool,
// only plain generation; chunks are not split further when the pool
// shrinks mid-call.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/internal/lossclock"
	"github.com/rlnode/rlnode/internal/lostctx"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/rollout/engine"
)

// PoolConfig says where a Pool's rollout actors run and how it talks to
// them. Exactly one of Nodes, Group and Replicas places them.
type PoolConfig struct {
	// Actor is the spawn argument of every replica. The pool sets
	// WeightSync when Weights is set.
	Actor ActorConfig
	// Nodes pins one replica on each listed node id (a node may repeat).
	Nodes []string
	// Group puts one replica in each bundle of a placement group.
	Group *cluster.PlacementGroup
	// Replicas starts this many replicas wherever the cluster places them
	// (with Resources and Labels).
	Replicas  int
	Resources cluster.Resources
	Labels    map[string]string
	// Name prefixes the replicas' actor names (Name-0, Name-1, ...);
	// default "rollout-pool-" and a random suffix.
	Name string
	// Weights, when set, gets every replica's engine registered, and gates
	// generation: GenerateStep(step) waits until the engines serve version
	// step-k (k = Weights.MaxStaleness(); 0 is synchronous) and refuses
	// results older than that.
	Weights WeightSync
	// ChunkSize is the number of requests per job; 0 splits each Generate
	// evenly over the live replicas. Smaller chunks lose less work when a
	// replica dies; larger ones batch better.
	ChunkSize int
	// CallTimeout bounds one Submit or Collect call (default 30 s); a
	// call is cut off sooner when LossTimeout ends first.
	CallTimeout time.Duration
	// LossTimeout is how long a replica whose calls keep failing or go
	// unanswered, but which the cluster has not reported dead, is retried
	// before its job moves to another replica and it is dropped (default
	// 15 s, more than failure detection plus the cluster's grace for a
	// missing node). It counts from when the first failing call was sent:
	// a replica that stops answering is dropped LossTimeout after, whatever
	// CallTimeout is.
	LossTimeout time.Duration
	// RespawnEvery is how often the replacement of a lost replica is tried
	// again while no node can host it (default 2 s); negative: lost
	// replicas are not replaced and the pool shrinks.
	RespawnEvery time.Duration
	// ReplaceWait is how long generation waits for a replacement when
	// every replica is lost, before it fails with ErrAllLost (default 1
	// min).
	ReplaceWait time.Duration
}

// WeightSync is the weight syncer a Pool registers its replicas' engine
// hosts with and gates generation on; weightsync.Syncer is one. Its
// methods must be safe for concurrent use; Register may wait for a
// publish in progress and then catch the engine up to the published
// version, within ctx.
type WeightSync interface {
	// Register adds an engine host (an EngineHost's Ref).
	Register(ctx context.Context, host actor.Ref) error
	// Remove unregisters the engine host named name, for cause; false
	// when it was not registered.
	Remove(name, cause string) bool
	// VersionFor waits until every registered engine serves step −
	// MaxStaleness() or newer and returns the lowest version served.
	VersionFor(ctx context.Context, step int64) (int64, error)
	MaxStaleness() int
	// Serves is the version the engine host named name serves; false when
	// it is not registered.
	Serves(name string) (int64, bool)
}

// Pool is an engine.Engine over rollout actors on the cluster's nodes: a
// Generate call is cut into chunks, each chunk runs as one generation job
// on the least busy live replica, and the results come back in request
// order. When a replica is lost (its node killed, the actor dead, or its
// calls failing for LossTimeout), the chunks it held run again on the
// others: with the requests' seeds, a deterministic engine gives the same
// samples. A chunk's result is taken from one job only, so no request is
// answered twice; when every replica is lost, Generate waits up to
// ReplaceWait for a replacement, and then fails naming them all.
//
// A lost replica is replaced: the pool spawns a new rollout actor where
// its placement allows (the same resources and labels on any node; a
// pinned replica on its node once that node is back), registers its
// engine with Weights, which catches it up to the published version, and
// gives it later chunks. While no node can host it the pool goes on with
// fewer, logs that once, and tries again every RespawnEvery.
//
// Each engine.Result carries the policy version that generated it; with
// Weights set the pool keeps the staleness bound of its WeightSync (see
// GenerateStep). All methods are safe for concurrent use.
type Pool struct {
	node *cluster.Node
	cfg  PoolConfig
	reps []*replica
	step atomic.Int64

	watch context.Context
	stop  context.CancelFunc

	mu      sync.Mutex
	closed  bool
	version int64 // lowest version of the last Generate's results
	// replacing counts lost replicas whose replacement is being tried;
	// replaceErr is the last try's failure. changed is closed and
	// replaced when a replica is lost or added or a replacement ends.
	replacing  int
	replaceErr string
	changed    chan struct{}
	next       int // where pick's search starts: ties are taken in turn

	moved    atomic.Int64
	replaced atomic.Int64
	names    atomic.Int64 // replicas named so far: the next is Name-<names>
}

type replica struct {
	name     string
	h        *cluster.Handle
	node     string
	host     actor.Ref            // engine host, when Weights is set
	respawn  cluster.SpawnOptions // where a replacement may go
	replaces string               // the lost replica this one replaced
	lost     chan struct{}        // closed once the replica is lost
	// Under Pool.mu:
	cause string
	busy  int // chunks outstanding
}

// poolPollMax caps the pool's wait between Collect calls, lower than
// Await's: a job is seen done at most this late (a Collect costs the
// replica a few hundred µs, so a 10 s job takes about a thousand).
const poolPollMax = 10 * time.Millisecond

// ReplicaStatus is one replica as the pool sees it.
type ReplicaStatus struct {
	Name string
	Node string
	Busy int    // chunks it runs now
	Lost string // why it was dropped; empty while live
	// Replaces names the lost replica this one replaced; empty for the
	// replicas StartPool started.
	Replaces string
}

// ErrAllLost: every replica of the pool is lost.
var ErrAllLost = errors.New("every rollout actor is lost")

// StartPool spawns the replicas, registers their engines with
// cfg.Weights, and watches them. A replica that cannot be started or
// registered stops the others and fails the call, naming it.
func StartPool(ctx context.Context, node *cluster.Node, cfg PoolConfig) (*Pool, error) {
	placements := 0
	var spawn []cluster.SpawnOptions
	if len(cfg.Nodes) > 0 {
		placements++
		for _, id := range cfg.Nodes {
			spawn = append(spawn, cluster.SpawnOptions{Node: id})
		}
	}
	if cfg.Group != nil {
		placements++
		for b := range cfg.Group.Nodes {
			// The replica holds its bundle's resources.
			spawn = append(spawn, cluster.SpawnOptions{Group: cfg.Group, Bundle: b, Resources: cfg.Group.Bundles[b].Resources})
		}
	}
	if cfg.Replicas > 0 {
		placements++
		for range cfg.Replicas {
			spawn = append(spawn, cluster.SpawnOptions{Resources: cfg.Resources, Labels: cfg.Labels})
		}
	}
	if placements != 1 || len(spawn) == 0 {
		return nil, fmt.Errorf("rollout actors: set exactly one of PoolConfig.Nodes, Group and Replicas (got %d nodes, group %v, %d replicas)",
			len(cfg.Nodes), cfg.Group != nil, cfg.Replicas)
	}
	if cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("rollout actors: ChunkSize %d: want ≥ 0", cfg.ChunkSize)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.LossTimeout <= 0 {
		cfg.LossTimeout = 15 * time.Second
	}
	if cfg.RespawnEvery == 0 {
		cfg.RespawnEvery = 2 * time.Second
	}
	if cfg.ReplaceWait <= 0 {
		cfg.ReplaceWait = time.Minute
	}
	if cfg.Name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.Name = "rollout-pool-" + hex.EncodeToString(b[:])
	}
	cfg.Actor.WeightSync = cfg.Actor.WeightSync || cfg.Weights != nil

	wctx, stop := context.WithCancel(context.Background())
	p := &Pool{node: node, cfg: cfg, watch: wctx, stop: stop, version: cfg.Actor.WeightVersion, changed: make(chan struct{})}
	for _, opts := range spawn {
		r, err := p.startReplica(ctx, opts)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.reps = append(p.reps, r)
	}
	for _, r := range p.reps {
		go p.watchReplica(r)
	}
	return p, nil
}

// startReplica spawns a replica placed per opts under the pool's next
// name and registers its engine with Weights.
func (p *Pool) startReplica(ctx context.Context, opts cluster.SpawnOptions) (*replica, error) {
	opts.Name = fmt.Sprintf("%s-%d", p.cfg.Name, p.names.Add(1)-1)
	opts.Args = p.cfg.Actor
	where := opts.Node
	if where == "" {
		where = "any node"
	}
	h, err := p.node.Spawn(ctx, ActorKind, opts)
	if err != nil {
		return nil, fmt.Errorf("rollout actors: start one on %s: %w", where, err)
	}
	// A replacement goes back into this replica's placement-group bundle
	// (startReplacement).
	again := opts
	again.Name, again.Args = "", nil
	r := &replica{name: opts.Name, h: h, respawn: again, lost: make(chan struct{})}
	if rec, ok := h.Record(); ok {
		r.node = rec.Node
	}
	if p.cfg.Weights == nil {
		return r, nil
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	eh, err := cluster.Call[EngineHost](cctx, h, EngineHostRequest{})
	if err == nil {
		r.host = eh.Ref
		err = p.cfg.Weights.Register(ctx, eh.Ref)
	}
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.node.StopActor(sctx, r.name)
		return nil, fmt.Errorf("rollout actors: register the engine of %s on node %s with the weight syncer: %w", r.name, r.node, err)
	}
	return r, nil
}

// startReplacement starts a replica placed per opts. A replica of a
// placement group goes back into its bundle, moved off its node when
// that node is lost (cluster.Node.MoveBundle), so the group keeps its
// spread and the lost node's share is not held twice. When the bundle
// cannot take it (no node can hold the moved bundle, or the lost replica
// still holds the bundle's share: an actor that failed its calls and has
// not stopped yet), it goes where the cluster can place the bundle's
// resources, outside the group.
func (p *Pool) startReplacement(ctx context.Context, opts cluster.SpawnOptions) (*replica, error) {
	if opts.Group == nil {
		return p.startReplica(ctx, opts)
	}
	_, err := p.node.MoveBundle(opts.Group.ID, opts.Bundle)
	if err == nil {
		var r *replica
		if r, err = p.startReplica(ctx, opts); err == nil {
			return r, nil
		}
	}
	b := opts.Group.Bundles[opts.Bundle]
	outside := opts
	outside.Group, outside.Bundle, outside.Resources, outside.Labels = nil, 0, b.Resources, b.Labels
	r, err2 := p.startReplica(ctx, outside)
	if err2 != nil {
		return nil, fmt.Errorf("in its placement group: %w; outside it: %w", err, err2)
	}
	p.node.System().Logger().Info("rollout replica placed outside its placement group", "replica", r.name, "replica_node", r.node, "group", opts.Group.ID, "why", err.Error())
	return r, nil
}

// watchReplica drops r when the cluster reports it dead or restarting (a
// restarted rollout actor has forgotten its jobs and serves its checkpoint
// again, not the published weights).
func (p *Pool) watchReplica(r *replica) {
	for n := range p.node.Watch(p.watch, r.name) {
		if n.State == cluster.Alive {
			continue
		}
		node := n.Node
		if node == "" {
			node = r.node
		}
		p.lose(r, fmt.Sprintf("%s on node %s: %s", n.State, node, n.Cause))
		return
	}
}

// lose drops r; its running chunks move to the others, and a replacement
// is started (replace).
func (p *Pool) lose(r *replica, cause string) {
	p.mu.Lock()
	if r.cause != "" {
		p.mu.Unlock()
		return
	}
	r.cause = cause // no new chunk goes to r from here on
	closed := p.closed
	replace := !closed && p.cfg.RespawnEvery > 0
	if replace {
		p.replacing++
	}
	p.notifyLocked()
	p.mu.Unlock()
	// Unregister before its chunks move, so the next publish does not
	// wait for (and fail on) a lost engine.
	if p.cfg.Weights != nil && !r.host.IsZero() {
		p.cfg.Weights.Remove(r.host.Name, "rollout actor "+r.name+" lost: "+cause)
	}
	close(r.lost)
	p.node.System().Logger().Warn("rollout replica lost", "replica", r.name, "replica_node", r.node, "cause", cause)
	if replace {
		go p.replace(r)
	}
}

func (p *Pool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// awaitLive returns nil once a replica is live. While none is but
// replacements are being tried it waits for one, within ctx and
// ReplaceWait; then, or when none is tried, it fails with ErrAllLost
// naming every replica.
func (p *Pool) awaitLive(ctx context.Context) error {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		live := slices.ContainsFunc(p.reps, func(r *replica) bool { return r.cause == "" })
		replacing, ch, why := p.replacing, p.changed, p.replaceErr
		p.mu.Unlock()
		switch {
		case live:
			return nil
		case replacing == 0:
			return p.allLost()
		}
		if deadline == nil {
			deadline = time.After(p.cfg.ReplaceWait)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("rollout actors: every one lost, waiting for a replacement: %w", ctx.Err())
		case <-deadline:
			// The last try's failure as it is now: a try that failed
			// since the loop read it does not signal changed.
			p.mu.Lock()
			why = p.replaceErr
			p.mu.Unlock()
			return fmt.Errorf("%w (no replacement started within %v; the last try: %s)", p.allLost(), p.cfg.ReplaceWait, why)
		}
	}
}

// respawnTimeout bounds one try at starting a replacement: the spawn, the
// engine host query and the registration, which may wait for a publish
// and then catch the engine up with a full push.
const respawnTimeout = 5 * time.Minute

// replace starts a replacement for the lost replica old, trying again
// every RespawnEvery until one starts or the pool closes. The first
// failure is logged once: the pool goes on with fewer meanwhile.
func (p *Pool) replace(old *replica) {
	log := p.node.System().Logger()
	// A replica dropped for failing calls may still run: stop it, so it
	// does not hold its node's resources (a dead node's call fails fast;
	// a partitioned one's would hold the first try up, hence apart).
	go func() {
		sctx, cancel := context.WithTimeout(p.watch, 10*time.Second)
		_ = p.node.StopActor(sctx, old.name)
		cancel()
	}()
	defer func() {
		p.mu.Lock()
		p.replacing--
		p.notifyLocked()
		p.mu.Unlock()
	}()
	for tries := 1; ; tries++ {
		if p.watch.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(p.watch, respawnTimeout)
		r, err := p.startReplacement(ctx, old.respawn)
		cancel()
		if err == nil {
			r.replaces = old.name
			p.mu.Lock()
			closed := p.closed
			if !closed {
				p.reps = append(p.reps, r)
				p.notifyLocked()
			}
			p.mu.Unlock()
			if closed {
				p.stopReplica(r, "rollout pool closed")
				return
			}
			p.replaced.Add(1)
			log.Info("rollout replica replaced", "lost", old.name, "replica", r.name, "replica_node", r.node, "tries", tries, "live", len(p.live()))
			go p.watchReplica(r)
			return
		}
		p.mu.Lock()
		p.replaceErr = err.Error()
		p.mu.Unlock()
		if tries == 1 {
			log.Warn("rollout replica not replaced: going on with fewer, trying again periodically",
				"lost", old.name, "live", len(p.live()), "every", p.cfg.RespawnEvery, "err", err)
		}
		select {
		case <-p.watch.Done():
			return
		case <-time.After(p.cfg.RespawnEvery):
		}
	}
}

// SetStep sets the learner step that Generate generates for (the step
// whose training consumes the samples).
func (p *Pool) SetStep(step int64) { p.step.Store(step) }

// Generate implements engine.Engine: GenerateStep at the step SetStep set.
func (p *Pool) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	return p.GenerateStep(ctx, p.step.Load(), reqs)
}

type chunk struct{ lo, hi int }

// chunks cuts reqs into chunks of at most size requests whose results
// should take at most budget bytes encoded (resultBytes), so that a
// replica's answer stays within the actor message limit however large the
// step; a request over budget on its own is a chunk of its own.
func chunks(reqs []engine.Request, size, budget int) []chunk {
	var out []chunk
	lo, bytes := 0, 0
	for i, r := range reqs {
		b := resultBytes(r)
		if i > lo && (i-lo == size || bytes+b > budget) {
			out = append(out, chunk{lo, i})
			lo, bytes = i, 0
		}
		bytes += b
	}
	if lo < len(reqs) {
		out = append(out, chunk{lo, len(reqs)})
	}
	return out
}

// resultTokenBytes bounds what one generated token takes in encoded
// results: its id, logprob and text (14.3 bytes measured in msgpack; 32
// leaves room for long tokens).
const resultTokenBytes = 32

// resultBytes bounds what one request's results take encoded: the prompt
// echoed, and resultTokenBytes for each token of each sample.
func resultBytes(r engine.Request) int {
	return 256 + 8*len(r.Prompt) + max(r.Params.N, 1)*(64+resultTokenBytes*max(r.Params.MaxTokens, 0))
}

type outcome struct {
	c       chunk
	r       *replica
	results []engine.Result
	lost    bool
	err     error
}

// GenerateStep generates for learner step step. With Weights set it first
// waits (within ctx) until every engine serves version step-k or newer,
// and every result must come from such a version; each Result's
// WeightVersion says which, for the learner's importance-sampling
// correction.
func (p *Pool) GenerateStep(ctx context.Context, step int64, reqs []engine.Request) ([]engine.Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, errors.New("rollout actors: closed")
	}
	if err := p.awaitLive(ctx); err != nil {
		return nil, err
	}
	bound := int64(-1 << 63)
	if w := p.cfg.Weights; w != nil {
		for {
			// The syncer drops an engine whose weight push failed (its node
			// lost, or its port unreachable past the push timeout) before,
			// or without, any death notice from the cluster: the replica
			// keeps old weights and would fail the step with them. It is
			// lost too, and is replaced.
			dropped := p.dropUnsynced()
			if err := p.awaitLive(ctx); err != nil {
				return nil, err
			}
			_, err := w.VersionFor(ctx, step)
			if err == nil {
				break
			}
			if !dropped && !p.dropUnsynced() && len(p.live()) > 0 {
				return nil, fmt.Errorf("rollout actors: generate for step %d: %w", step, err)
			}
		}
		bound = step - int64(w.MaxStaleness())
	}

	size := p.cfg.ChunkSize
	if size == 0 {
		live := max(len(p.live()), 1)
		size = (len(reqs) + live - 1) / live
	}
	pending := chunks(reqs, size, p.node.System().MaxMessageSize()/2)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Before gctx's end reaches the chunks: a step that returns early
	// tells each replica of all its jobs at once.
	book := &jobBook{}
	defer book.cancelAll()
	done := make(chan outcome, len(pending))
	results := make([]engine.Result, len(reqs))
	running := 0
	for len(pending) > 0 || running > 0 {
		for len(pending) > 0 {
			r := p.pick()
			if r == nil {
				break
			}
			c := pending[0]
			pending = pending[1:]
			running++
			go func() {
				res, lost, err := p.runChunk(gctx, r, reqs[c.lo:c.hi], book)
				p.mu.Lock()
				r.busy--
				p.mu.Unlock()
				select { // after an early return nobody reads: gctx ends then
				case done <- outcome{c: c, r: r, results: res, lost: lost, err: err}:
				case <-gctx.Done():
				}
			}()
		}
		if running == 0 {
			// Every replica is lost: wait for a replacement being started.
			if err := p.awaitLive(ctx); err != nil {
				return nil, err
			}
			continue
		}
		var o outcome
		select {
		case o = <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("rollout actors: generate for step %d: %w", step, ctx.Err())
		}
		running--
		switch {
		case o.lost:
			pending = append(pending, o.c)
			p.moved.Add(1)
		case o.err != nil:
			return nil, o.err
		case stale(o.results, bound) && p.loseUnsynced(o.r):
			// Its engine left the syncer while it generated (after the
			// check above): the chunk runs again elsewhere.
			pending = append(pending, o.c)
			p.moved.Add(1)
		default:
			for i, res := range o.results {
				if res.WeightVersion < bound {
					return nil, fmt.Errorf("rollout actors: request %s on %s (node %s): weight version %d, older than step %d allows (%d with max staleness %d)",
						res.RequestID, o.r.name, o.r.node, res.WeightVersion, step, bound, step-bound)
				}
				results[o.c.lo+i] = res
			}
		}
	}
	low := results[0].WeightVersion
	for _, r := range results {
		low = min(low, r.WeightVersion)
	}
	p.mu.Lock()
	p.version = low
	p.mu.Unlock()
	return results, nil
}

// jobBook holds the jobs a GenerateStep has submitted to its replicas and
// not collected, so that a step that returns early (ctx's end, a chunk's
// failure) cancels each replica's in one CancelJob: told one by one, a
// job still waiting could take the slot a cancelled running one freed,
// and begin, before its own cancel came.
type jobBook struct {
	mu     sync.Mutex
	closed bool
	jobs   map[*replica][]string
}

// add books job on r; false once the step gave up (cancelAll ran): the
// chunk then cancels its job itself.
func (b *jobBook) add(r *replica, job string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.jobs == nil {
		b.jobs = map[*replica][]string{}
	}
	b.jobs[r] = append(b.jobs[r], job)
	return true
}

func (b *jobBook) remove(r *replica, job string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.jobs[r], job); i >= 0 {
		b.jobs[r] = slices.Delete(b.jobs[r], i, i+1)
	}
}

// cancelAll tells each replica to drop the jobs booked on it.
func (b *jobBook) cancelAll() {
	b.mu.Lock()
	b.closed = true
	jobs := b.jobs
	b.jobs = nil
	b.mu.Unlock()
	for r, ids := range jobs {
		if len(ids) > 0 {
			_ = r.h.Tell(CancelJob{Jobs: ids})
		}
	}
}

// dropUnsynced loses every live replica whose engine is no longer
// registered with Weights (a weight push to it failed); true when it lost any.
func (p *Pool) dropUnsynced() bool {
	dropped := false
	for _, r := range p.live() {
		dropped = p.loseUnsynced(r) || dropped
	}
	return dropped
}

// loseUnsynced loses r when the pool has Weights and r's engine is no
// longer registered there; true when it did.
func (p *Pool) loseUnsynced(r *replica) bool {
	w := p.cfg.Weights
	if w == nil || r.host.IsZero() {
		return false
	}
	if _, ok := w.Serves(r.host.Name); ok {
		return false
	}
	p.lose(r, "its engine left the weight syncer (a weight push to it failed)")
	return true
}

// stale says whether any of results is of a version older than bound.
func stale(results []engine.Result, bound int64) bool {
	return slices.ContainsFunc(results, func(r engine.Result) bool { return r.WeightVersion < bound })
}

// live lists the replicas not lost.
func (p *Pool) live() []*replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*replica
	for _, r := range p.reps {
		if r.cause == "" {
			out = append(out, r)
		}
	}
	return out
}

// pick reserves the live replica with the fewest chunks outstanding, ties
// taken in turn (as cluster.Pool takes them): light traffic, which finds
// every replica idle, is spread over all of them rather than all sent to
// the first. nil when none is live.
func (p *Pool) pick() *replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reps) == 0 {
		return nil
	}
	var best *replica
	start := p.next % len(p.reps)
	p.next = start + 1
	for k := range p.reps {
		r := p.reps[(start+k)%len(p.reps)]
		if r.cause == "" && (best == nil || r.busy < best.busy) {
			best = r
		}
	}
	if best != nil {
		best.busy++
	}
	return best
}

func (p *Pool) allLost() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	causes := make([]string, len(p.reps))
	for i, r := range p.reps {
		causes[i] = fmt.Sprintf("%s on node %s (%s)", r.name, r.node, r.cause)
	}
	return fmt.Errorf("%w: %s", ErrAllLost, strings.Join(causes, "; "))
}

// runChunk runs reqs as one generation job on r. lost says the job was
// abandoned because r is lost: the caller runs it elsewhere. err is a
// failure of the job itself (a bad request fails the same anywhere).
func (p *Pool) runChunk(ctx context.Context, r *replica, reqs []engine.Request, book *jobBook) (results []engine.Result, lost bool, err error) {
	step := ctx
	ctx, cancel, isLost := lostctx.WithLost(ctx, r.lost)
	defer cancel()
	// call retries calls that fail in transport until the cluster reports
	// r lost, ctx ends, or the failures last LossTimeout (then r is dropped
	// here). An error the actor itself answered (*actor.ActorError) comes
	// back at once: r is alive. The loss clock counts from the sending of
	// the first call of the current run of failures: a call that gets no
	// answer is cut off once LossTimeout has passed since then (a node
	// that stops answering would otherwise cost a whole CallTimeout before
	// the clock even started). pause waits between tries and polls,
	// doubling up to poolPollMax.
	lc := &lossclock.Caller{Clock: lossclock.Clock{Timeout: p.cfg.LossTimeout}, MaxWait: p.cfg.CallTimeout,
		PollFirst: pollFirst, PollMax: poolPollMax, IsLost: isLost}
	pause := func() (lost bool, err error) { return lc.Pause(ctx) }
	call := func(msg any) (any, bool, error) {
		v, lost, expired, err := lc.Call(ctx, func(cctx context.Context) (any, error) { return r.h.Call(cctx, msg) })
		if expired {
			p.lose(r, fmt.Sprintf("calls failing or unanswered for %s: %v", p.cfg.LossTimeout, err))
			return nil, true, nil
		}
		return v, lost, err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("rollout actors: %s on node %s: %s", r.name, r.node, fmt.Sprintf(format, args...))
	}

	var v any
	for {
		var lost bool
		v, lost, err = call(Submit{Generate: &GenerateRequest{Requests: reqs}})
		if lost {
			return nil, true, nil
		}
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), msgQueueFull) {
			return nil, false, fail("submit: %v", err)
		}
		// Busy, not lost: wait for a slot (bounded by ctx).
		if lost, err := pause(); lost || err != nil {
			return nil, lost, err
		}
	}
	t, ok := v.(Ticket)
	if !ok {
		return nil, false, fail("submit answered %T, want Ticket", v)
	}
	collected := false
	booked := book.add(r, t.Job)
	defer func() {
		if collected {
			book.remove(r, t.Job)
			return
		}
		if booked && step.Err() != nil {
			return // the step gave up: it tells r of all its jobs at once (jobBook.cancelAll)
		}
		// Given up on its own (r lost or dropped, a failed collect): r
		// drops the job, or stops it if it runs, instead of generating
		// for nobody. Told, so it costs no wait; a replica gone or
		// restarting has no job to drop.
		book.remove(r, t.Job)
		_ = r.h.Tell(CancelJob{Jobs: []string{t.Job}})
	}()
	lc.ResetPause()
	for {
		v, lost, err := call(Collect{Job: t.Job})
		if lost {
			return nil, true, nil
		}
		if err != nil {
			if strings.Contains(err.Error(), msgNoJob) {
				// The actor forgot the job (restarted in place): the chunk
				// runs again; the watch decides about the replica.
				return nil, true, nil
			}
			return nil, false, fail("collect job %s: %v", t.Job, err)
		}
		jr, ok := v.(JobResult)
		if !ok {
			return nil, false, fail("collect answered %T, want JobResult", v)
		}
		if jr.Done {
			collected = true // the replica forgot the job when it answered
			switch {
			case jr.Error == msgActorStopped:
				p.lose(r, "actor stopped")
				return nil, true, nil
			case jr.Error != "":
				return nil, false, refusalError(fail("job %s: %s", t.Job, jr.Error), jr.Refusal)
			}
			results, err := FetchResults(ctx, p.node.System(), jr)
			if err != nil {
				if ctx.Err() != nil {
					return nil, false, ctx.Err()
				}
				return nil, true, nil // offered by a replica now gone: the chunk runs again
			}
			if len(results) != len(reqs) {
				return nil, false, fail("job %s: %d results for %d requests", t.Job, len(results), len(reqs))
			}
			for i := range reqs {
				if results[i].RequestID != reqs[i].ID {
					return nil, false, fail("job %s: result %d answers request %q, want %q", t.Job, i, results[i].RequestID, reqs[i].ID)
				}
			}
			return results, false, nil
		}
		if lost, err := pause(); lost || err != nil {
			return nil, lost, err
		}
	}
}

// WeightVersion implements engine.Engine: with Weights, the lowest version
// the pool's registered engines serve; otherwise the lowest version of the
// last Generate's results (at first ActorConfig.WeightVersion).
func (p *Pool) WeightVersion() int64 {
	if w := p.cfg.Weights; w != nil {
		first, low := true, int64(0)
		for _, r := range p.live() {
			if v, ok := w.Serves(r.host.Name); ok && (first || v < low) {
				first, low = false, v
			}
		}
		if !first {
			return low
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// Replicas reports each replica, in start order.
func (p *Pool) Replicas() []ReplicaStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ReplicaStatus, len(p.reps))
	for i, r := range p.reps {
		out[i] = ReplicaStatus{Name: r.name, Node: r.node, Busy: r.busy, Lost: r.cause, Replaces: r.replaces}
	}
	return out
}

// Handles returns the live replicas' handles (for Stats, or episode jobs
// with RunEpisodes).
func (p *Pool) Handles() []*cluster.Handle {
	var out []*cluster.Handle
	for _, r := range p.live() {
		out = append(out, r.h)
	}
	return out
}

// Redispatched counts chunks that ran again because their replica was lost.
func (p *Pool) Redispatched() int64 { return p.moved.Load() }

// Replaced counts replicas started in place of lost ones.
func (p *Pool) Replaced() int64 { return p.replaced.Load() }

// Close implements engine.Engine: it unregisters the engines from Weights
// and stops the live replicas (each within 10 s). Errors name the
// replicas that did not stop.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.stop()
	// All at once, each within its own 10 s: one after another, N frozen
	// replicas cost N×10 s.
	live := p.live()
	errs := make([]string, len(live))
	var wg sync.WaitGroup
	for i, r := range live {
		wg.Go(func() {
			if err := p.stopReplica(r, "rollout pool closed"); err != nil {
				errs[i] = err.Error()
			}
		})
	}
	wg.Wait()
	errs = slices.DeleteFunc(errs, func(e string) bool { return e == "" })
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("rollout actors: close: %s", strings.Join(errs, "; "))
	}
	return nil
}

// stopReplica unregisters r's engine and stops its actor (within 10 s).
func (p *Pool) stopReplica(r *replica, cause string) error {
	if p.cfg.Weights != nil && !r.host.IsZero() {
		p.cfg.Weights.Remove(r.host.Name, cause)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.node.StopActor(ctx, r.name)
}

var _ engine.Engine = (*Pool)(nil)
