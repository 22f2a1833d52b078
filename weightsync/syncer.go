package weightsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/rollout/weights"
)

// Config configures a Syncer.
type Config struct {
	// MaxStaleness is k: generation for learner step s may use weights of
	// version s-k or newer. 0 is synchronous, on-policy training.
	MaxStaleness int
	// PushTimeout bounds one engine's fetch and swap of one version
	// (default 2 min); an engine that takes longer is removed. A native
	// engine is given a little less for its own fetch and swap
	// (engineLimit), so that one that cannot finish answers in time with
	// what it was waiting on (the bulk address it could not fetch from,
	// say) instead of this side's bare call timeout.
	PushTimeout time.Duration
	// QueryTimeout bounds a version query (default 10 s).
	QueryTimeout time.Duration
	// Name of the weight-sync actor (default "weightsync").
	Name string
	// Logger (default the node's).
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.PushTimeout <= 0 {
		c.PushTimeout = defaultPushTimeout
	}
	if c.QueryTimeout <= 0 {
		c.QueryTimeout = 10 * time.Second
	}
	if c.Name == "" {
		c.Name = "weightsync"
	}
}

const defaultPushTimeout = weights.DefaultPushTimeout

// engineLimit is the limit a native engine gets for its fetch and swap
// under a push timeout of push: a tenth less, at most 5 s less, so that
// its error reaches the syncer before the syncer's call gives up. With
// equal limits the syncer's, started first, always ended first, and a push
// the engine could not fetch was reported as the engine's call timing out.
func engineLimit(push time.Duration) time.Duration {
	return push - min(push/10, 5*time.Second)
}

// Errors callers branch on.
var (
	// ErrNoEngines: no engine is registered (or every one was removed).
	ErrNoEngines = errors.New("weight sync: no engines registered")
	// ErrEngineFailed marks a publish in which some engines failed; they
	// were removed and the others serve the new version.
	ErrEngineFailed = errors.New("engine failed")
	// ErrStaleVersion: a version not newer than the last published one.
	ErrStaleVersion = errors.New("weight sync: version not newer than the published one")
	// ErrEnginesRegistered: Keep with engines registered (Publish to them).
	ErrEnginesRegistered = errors.New("weight sync: engines are registered: publish to them")
)

// EngineStatus is one engine as the Syncer sees it.
type EngineStatus struct {
	Name    string // actor name, or the name a vLLM client was registered under
	Node    string // node id (native engines), or the vLLM servers
	Kind    string // "native" or "vllm"
	Version int64  // the version it serves
	Removed string // why it was removed; empty while registered
}

// Status is the Syncer's view: the last published version and each
// engine's served version.
type Status struct {
	Latest     int64 // last version whose publish finished
	Publishing int64 // the version being pushed now; 0 when idle
	Engines    []EngineStatus
	Removed    []EngineStatus // removed engines, oldest first
}

// EngineError is one engine's failure in a publish.
type EngineError struct {
	Engine string
	Node   string
	Err    error
}

func (e *EngineError) Error() string {
	return fmt.Sprintf("engine %s on node %s: %v", e.Engine, e.Node, e.Err)
}
func (e *EngineError) Unwrap() []error { return []error{ErrEngineFailed, e.Err} }

// Report says what one Publish did.
type Report struct {
	Version int64
	Bytes   int // payload size
	Applied []EngineStatus
	Failed  []*EngineError
	Elapsed time.Duration
}

type target struct {
	name    string
	node    string
	ref     actor.Ref // native engine host
	vllm    *VLLM
	version int64
	stop    context.CancelFunc // ends the watch
}

func (t *target) status() EngineStatus {
	kind := "native"
	if t.vllm != nil {
		kind = "vllm"
	}
	return EngineStatus{Name: t.name, Node: t.node, Kind: kind, Version: t.version}
}

// Syncer is the Go API of the weight-sync actor: it owns the policy
// version counter and the registered engines, pushes each version to them
// and tells generation which version it may use. It lives in the driver's
// process; the actor (named Config.Name) answers other nodes' StatusRequest
// and RegisterEngine messages. All methods are safe for concurrent use.
type Syncer struct {
	node *cluster.Node
	cfg  Config
	log  *slog.Logger
	sem  chan struct{} // one publish at a time
	ctx  context.Context
	stop context.CancelFunc
	tok  string

	mu         sync.Mutex
	latest     int64
	publishing int64
	targets    map[string]*target
	removed    []EngineStatus
	changed    chan struct{} // closed and replaced on every change
	// The last full update and the last LoRA update after it, for
	// catching up late engines (up to two payloads held in memory).
	lastFull, lastLoRA *payload
}

// New returns a Syncer on node whose published version starts at
// initial (the version the engines were started with). Start also spawns
// its actor.
func New(node *cluster.Node, initial int64, cfg Config) *Syncer {
	cfg.defaults()
	log := cfg.Logger
	if log == nil {
		log = node.System().Logger()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Syncer{node: node, cfg: cfg, log: log.With("component", "weightsync"), sem: make(chan struct{}, 1),
		ctx: ctx, stop: stop, latest: initial, targets: map[string]*target{}, changed: make(chan struct{})}
}

// Close stops watching engines and stops the weight-sync actor if Start
// spawned one. Waiters return ErrNoEngines or their context's error.
func (s *Syncer) Close() {
	s.stop()
	if s.tok != "" {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.QueryTimeout)
		defer cancel()
		_ = s.node.StopActor(ctx, s.cfg.Name)
		forget(s.tok)
	}
	s.mu.Lock()
	for name, t := range s.targets {
		t.stop()
		delete(s.targets, name)
	}
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Syncer) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// nodeOf names the node at an actor address by its id.
func (s *Syncer) nodeOf(addr string) string {
	for _, v := range s.node.Views() {
		if rec, ok := s.node.Directory().Node(v.ID); ok && rec.Actor == addr {
			return v.ID
		}
	}
	return addr
}

// Register adds a native engine host (a weights.EngineKind actor, or one
// weights.Serve started) and asks it for the version it serves. An engine
// behind the published version is caught up first: it gets the last full
// payload and the last LoRA payload after it (the Syncer keeps both), and
// is not registered if that fails. If the actor is in the cluster
// directory, its death or restart removes it at once. Register waits for
// a publish in progress to end.
func (s *Syncer) Register(ctx context.Context, ref actor.Ref) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("weight sync: register engine %s: waiting for a publish to end: %w", ref.Name, ctx.Err())
	}
	defer func() { <-s.sem }()
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	node := s.nodeOf(ref.Address)
	v, err := s.node.System().Call(qctx, ref, weights.VersionRequest{})
	if err != nil {
		return fmt.Errorf("weight sync: register engine %s on node %s: %w", ref.Name, node, err)
	}
	ev, ok := v.(weights.EngineVersion)
	if !ok {
		return fmt.Errorf("weight sync: register engine %s on node %s: answered %T, want weights.EngineVersion (is it a weight-sync engine host?)", ref.Name, node, v)
	}
	t := &target{name: ref.Name, node: node, ref: ref, version: ev.Version}
	if err := s.catchUp(ctx, t); err != nil {
		return fmt.Errorf("weight sync: register engine %s on node %s: %w", ref.Name, node, err)
	}
	if err := s.add(t); err != nil {
		return err
	}
	if rec, ok := s.node.Directory().Actor(ref.Name); ok && rec.Ref.ID == ref.ID && rec.Ref.Address == ref.Address {
		wctx, _ := s.watchCtx(t)
		go s.watch(wctx, t)
	}
	return nil
}

// payload is a published version's encoded update, kept for catching up
// engines that register later.
type payload struct {
	version int64
	blob    []byte
}

// catchUp pushes the kept payloads newer than t's version to t.
func (s *Syncer) catchUp(ctx context.Context, t *target) error {
	s.mu.Lock()
	var todo []payload
	for _, p := range []*payload{s.lastFull, s.lastLoRA} {
		if p != nil && p.version > t.version {
			todo = append(todo, *p)
		}
	}
	s.mu.Unlock()
	bulk := s.node.System().Bulk()
	for _, p := range todo {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.PushTimeout)
		offer := bulk.Offer(p.blob, 1, s.cfg.PushTimeout+30*time.Second)
		v, err := s.pushNative(pctx, t, weights.Push{Version: p.version, Blob: offer, Timeout: engineLimit(s.cfg.PushTimeout)})
		bulk.Release(offer)
		cancel()
		if err != nil {
			return fmt.Errorf("catch up from version %d to %d: %w", t.version, p.version, err)
		}
		t.version = v // t is not shared yet
	}
	return nil
}

func (s *Syncer) watchCtx(t *target) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	t.stop = cancel
	s.mu.Unlock()
	return ctx, cancel
}

func (s *Syncer) add(t *target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return errors.New("weight sync: register: syncer closed")
	}
	if _, dup := s.targets[t.name]; dup {
		return fmt.Errorf("weight sync: register engine %s: already registered", t.name)
	}
	t.stop = func() {}
	s.targets[t.name] = t
	s.notifyLocked()
	return nil
}

// watch removes t when its actor dies or restarts (a restarted host serves
// its checkpoint again, not the published weights).
func (s *Syncer) watch(ctx context.Context, t *target) {
	for n := range s.node.Watch(ctx, t.name) {
		if n.State == cluster.Alive {
			continue
		}
		s.remove(t, fmt.Sprintf("actor %s on node %s: %s (%s)", t.name, n.Node, n.State, n.Cause), true)
		return
	}
}

// Remove unregisters an engine; its status lists cause. The caller owns
// the engine and says why it goes, so the log line is information, not a
// warning (an engine the syncer itself drops, dead or failing its push, is
// a warning).
func (s *Syncer) Remove(name, cause string) bool {
	s.mu.Lock()
	t := s.targets[name]
	s.mu.Unlock()
	if t == nil {
		return false
	}
	return s.remove(t, cause, false)
}

func (s *Syncer) remove(t *target, cause string, warn bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targets[t.name] != t {
		return false
	}
	delete(s.targets, t.name)
	t.stop()
	st := t.status()
	st.Removed = cause
	s.removed = append(s.removed, st)
	s.notifyLocked()
	if warn {
		s.log.Warn("engine removed", "engine", t.name, "node", t.node, "cause", cause)
	} else { // the caller's own doing (a pool closing or replacing a replica): it says so itself
		s.log.Debug("engine removed", "engine", t.name, "node", t.node, "cause", cause)
	}
	return true
}

// Serves is the version the engine registered under name serves; false
// when none is.
func (s *Syncer) Serves(name string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[name]
	if !ok {
		return 0, false
	}
	return t.version, true
}

// MaxStaleness is the k of Config.MaxStaleness: results for learner step
// s may come from version s-k or newer.
func (s *Syncer) MaxStaleness() int { return s.cfg.MaxStaleness }

// Versions is the Syncer's current view.
func (s *Syncer) Versions() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Latest: s.latest, Publishing: s.publishing, Removed: append([]EngineStatus(nil), s.removed...)}
	for _, t := range s.targets {
		st.Engines = append(st.Engines, t.status())
	}
	sort.Slice(st.Engines, func(i, j int) bool { return st.Engines[i].Name < st.Engines[j].Name })
	return st
}

// WaitVersion waits until every registered engine serves minVersion or
// newer, and returns the lowest version served (what generation started
// now may be tagged with at the oldest). It fails at once with
// ErrNoEngines when none is registered, and with the lagging engines
// named when ctx ends first.
func (s *Syncer) WaitVersion(ctx context.Context, minVersion int64) (int64, error) {
	for {
		s.mu.Lock()
		if len(s.targets) == 0 {
			s.mu.Unlock()
			return 0, fmt.Errorf("wait for version %d: %w", minVersion, ErrNoEngines)
		}
		low := int64(-1 << 63)
		var lag []string
		first := true
		for _, t := range s.targets {
			if first || t.version < low {
				low, first = t.version, false
			}
			if t.version < minVersion {
				lag = append(lag, fmt.Sprintf("%s on %s serves %d", t.name, t.node, t.version))
			}
		}
		ch := s.changed
		latest := s.latest
		s.mu.Unlock()
		if len(lag) == 0 {
			return low, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			sort.Strings(lag)
			return 0, fmt.Errorf("wait for version %d (published %d): %s: %w", minVersion, latest, strings.Join(lag, "; "), ctx.Err())
		}
	}
}

// VersionFor is the staleness gate of generation for learner step step:
// it waits until every engine serves step-MaxStaleness or newer (with
// MaxStaleness 0, exactly the on-policy barrier) and returns the lowest
// version served, which results of generation started now carry at the
// oldest.
func (s *Syncer) VersionFor(ctx context.Context, step int64) (int64, error) {
	return s.WaitVersion(ctx, step-int64(s.cfg.MaxStaleness))
}

// Publish makes version the newest policy and pushes u to every
// registered engine at once: native engines pull one bulk offer of the
// encoded weights (N engines, one payload), vLLM targets load it from
// their shared directory. It returns when every engine has applied it or
// failed; failed engines are removed and named in the error (which wraps
// ErrEngineFailed), the others serve version. Publishes run one at a time.
func (s *Syncer) Publish(ctx context.Context, version int64, u weights.Update) (Report, error) {
	start := time.Now()
	if err := weights.CheckFinite(u.Tensors); err != nil {
		// Before any engine is asked: they keep the version they serve.
		return Report{}, fmt.Errorf("publish version %d: %w", version, err)
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return Report{}, fmt.Errorf("publish version %d: waiting for the previous publish: %w", version, ctx.Err())
	}
	defer func() { <-s.sem }()

	s.mu.Lock()
	if version <= s.latest {
		latest := s.latest
		s.mu.Unlock()
		return Report{}, fmt.Errorf("publish version %d: last published %d: %w", version, latest, ErrStaleVersion)
	}
	if len(s.targets) == 0 {
		s.mu.Unlock()
		return Report{}, fmt.Errorf("publish version %d: %w", version, ErrNoEngines)
	}
	targets := make([]*target, 0, len(s.targets))
	natives := 0
	for _, t := range s.targets {
		targets = append(targets, t)
		if t.vllm == nil {
			natives++
		}
	}
	s.publishing = version
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.publishing = 0
		s.mu.Unlock()
	}()

	blob, err := weights.Encode(version, u)
	if err != nil {
		return Report{}, fmt.Errorf("publish version %d: %w", version, err)
	}
	rep := Report{Version: version, Bytes: len(blob)}
	var offer actor.BulkRef
	if natives > 0 {
		offer = s.node.System().Bulk().Offer(blob, natives, s.cfg.PushTimeout+30*time.Second)
		defer s.node.System().Bulk().Release(offer)
	}

	type outcome struct {
		t       *target
		version int64
		err     error
	}
	results := make(chan outcome, len(targets))
	for _, t := range targets {
		go func() {
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PushTimeout)
			defer cancel()
			var v int64
			var err error
			if t.vllm != nil {
				v, err = t.vllm.push(pctx, version, u)
			} else {
				v, err = s.pushNative(pctx, t, weights.Push{Version: version, Blob: offer, Timeout: engineLimit(s.cfg.PushTimeout)})
			}
			results <- outcome{t, v, err}
		}()
	}
	for range targets {
		o := <-results
		s.mu.Lock()
		if o.err == nil && s.targets[o.t.name] == o.t {
			o.t.version = o.version
			rep.Applied = append(rep.Applied, o.t.status())
			s.notifyLocked()
		}
		s.mu.Unlock()
		if o.err == nil {
			continue
		}
		if ctx.Err() != nil {
			// The caller gave up: the engine may or may not have swapped;
			// ask it rather than remove it.
			s.refresh(o.t)
			rep.Failed = append(rep.Failed, &EngineError{Engine: o.t.name, Node: o.t.node, Err: ctx.Err()})
			continue
		}
		e := &EngineError{Engine: o.t.name, Node: o.t.node, Err: o.err}
		rep.Failed = append(rep.Failed, e)
		s.remove(o.t, fmt.Sprintf("push version %d: %v", version, o.err), true)
	}
	sort.Slice(rep.Applied, func(i, j int) bool { return rep.Applied[i].Name < rep.Applied[j].Name })
	sort.Slice(rep.Failed, func(i, j int) bool { return rep.Failed[i].Engine < rep.Failed[j].Engine })
	rep.Elapsed = time.Since(start)
	if ctx.Err() != nil {
		return rep, fmt.Errorf("publish version %d: %w", version, ctx.Err())
	}
	if len(rep.Applied) > 0 {
		// A version no engine took is not published: the next publish may
		// reuse its number.
		s.mu.Lock()
		s.latest = version
		if u.LoRA == nil {
			s.lastFull, s.lastLoRA = &payload{version, blob}, nil
		} else {
			s.lastLoRA = &payload{version, blob}
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
	if len(rep.Failed) > 0 {
		errs := make([]error, len(rep.Failed))
		for i, e := range rep.Failed {
			errs[i] = e
		}
		return rep, fmt.Errorf("publish version %d: %d of %d engines failed and were removed: %w", version, len(rep.Failed), len(targets), errors.Join(errs...))
	}
	return rep, nil
}

// Keep makes u, full weights, the published version without pushing it
// anywhere, for a Syncer with no engine registered: engines registered
// from now on are caught up from it (Register pushes it over the bulk
// path). That is how engines that start with no weights — rollout actors
// given only their model's config and tokenizer
// (rollout.ActorConfig.ModelFiles) — get their starting weights, so no
// node reads them from the driver's file system; and how a version
// published while every engine is lost reaches their replacements. With
// an engine registered it fails with ErrEnginesRegistered (use Publish).
// version must be newer than the published one, or equal to it when
// nothing was kept or published yet (the Syncer's initial version). A
// LoRA update is refused.
func (s *Syncer) Keep(ctx context.Context, version int64, u weights.Update) error {
	if u.LoRA != nil {
		return fmt.Errorf("keep version %d: a LoRA update: kept weights must be full", version)
	}
	if err := weights.CheckFinite(u.Tensors); err != nil {
		return fmt.Errorf("keep version %d: %w", version, err)
	}
	blob, err := weights.Encode(version, u)
	if err != nil {
		return fmt.Errorf("keep version %d: %w", version, err)
	}
	select { // Register holds it too: no engine registers meanwhile
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("keep version %d: waiting for a registration or publish to end: %w", version, ctx.Err())
	}
	defer func() { <-s.sem }()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ctx.Err() != nil:
		return fmt.Errorf("keep version %d: syncer closed", version)
	case len(s.targets) > 0:
		return fmt.Errorf("keep version %d: %w", version, ErrEnginesRegistered)
	case version < s.latest || version == s.latest && s.lastFull != nil:
		return fmt.Errorf("keep version %d: last published %d: %w", version, s.latest, ErrStaleVersion)
	}
	s.latest = version
	s.lastFull, s.lastLoRA = &payload{version, blob}, nil
	s.notifyLocked()
	return nil
}

func (s *Syncer) pushNative(ctx context.Context, t *target, p weights.Push) (int64, error) {
	v, err := s.node.System().Call(ctx, t.ref, p)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			// The engine's own limit ends first (engineLimit): no answer
			// by now means the engine, or its node, is out of reach.
			return 0, fmt.Errorf("no answer from the engine within the push timeout %s (its node unreachable, or the engine stuck): %w", s.cfg.PushTimeout, err)
		}
		return 0, err
	}
	ev, ok := v.(weights.EngineVersion)
	if !ok {
		return 0, fmt.Errorf("answered %T, want weights.EngineVersion", v)
	}
	if ev.Version != p.Version {
		return 0, fmt.Errorf("serves version %d after the push of %d", ev.Version, p.Version)
	}
	return ev.Version, nil
}

// refresh asks a native engine for its version after an abandoned push.
func (s *Syncer) refresh(t *target) {
	if t.vllm != nil {
		s.mu.Lock()
		t.version = t.vllm.Client.WeightVersion()
		s.notifyLocked()
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.QueryTimeout)
	defer cancel()
	v, err := s.node.System().Call(ctx, t.ref, weights.VersionRequest{})
	if ev, ok := v.(weights.EngineVersion); err == nil && ok {
		s.mu.Lock()
		t.version = ev.Version
		s.notifyLocked()
		s.mu.Unlock()
	}
}
