package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// SpawnOptions says where and how to run an actor.
type SpawnOptions struct {
	// Name is unique in the cluster; default: kind plus a random suffix.
	Name string
	// Args is passed to the kind's factory (a registered message type).
	Args any
	// Resources the actor holds while alive (none by default).
	Resources Resources
	// Labels a hosting node must carry.
	Labels map[string]string
	// Node pins the actor to a node id.
	Node string
	// MaxRestarts bounds restarts after panics and node loss; -1 means
	// without limit, 0 (the default) never restarts.
	MaxRestarts int
	// MaxCallRetries is how many times a call to the actor is sent again
	// when the incarnation it went to was lost (its node lost or stopped,
	// the actor stopped to be moved) and the cluster restarted it, as
	// Ray's max_task_retries: the call goes to the new incarnation. 0 (the
	// default) never sends a call twice: calls are not assumed idempotent,
	// opt in only for those that are. -1 retries as long as the actor
	// restarts. The call's own error and a panic in its Receive are never
	// retried. Handle.WithRetries sets it for one handle's calls.
	MaxCallRetries int
	// MaxConcurrency is how many messages the actor handles at once, as
	// Ray's max_concurrency: 0 or 1 (the default) one at a time, in the
	// order they came; N up to actor.ConcurrencyLimit runs up to N of its
	// Receives at once, in no given order (its Receive must be safe for
	// concurrent use), the others waiting in its mailbox. For an actor
	// that waits on something slow per call (a model server, an
	// environment) without taking its replies over by hand
	// (actor.Context.ReplyLater).
	MaxConcurrency int
	// Group and Bundle place the actor into a reserved placement-group slot.
	Group  *PlacementGroup
	Bundle int
	// Detached actors outlive the node that spawned them. Others share
	// its fate, as Ray's actors share their owner's: when that node is
	// gone (it left, or has been lost for Detection.OwnerGrace), the cluster stops
	// them, so a driver killed mid-run leaves no actors holding resources.
	Detached bool
	// RestartTimeout bounds one restart after the actor's node is lost:
	// placing it on another node and running its kind's factory there
	// (loading a model, say). An actor whose factory takes longer is
	// marked DEAD ("restart did not finish within ..."). Zero means
	// DefaultRestartTimeout; at most MaxRestartTimeout. The first spawn
	// is bounded by Spawn's ctx instead.
	RestartTimeout time.Duration
	// KeepDead is how long the cluster keeps the actor's record once it
	// is DEAD, for status to show its end (its cause: a job's outcome,
	// say); at most MaxKeepDead. Shorter than the default, 10 minutes,
	// changes nothing.
	KeepDead time.Duration
}

// MaxKeepDead bounds SpawnOptions.KeepDead.
const MaxKeepDead = 7 * 24 * time.Hour

// DefaultRestartTimeout and MaxRestartTimeout: SpawnOptions.RestartTimeout.
const (
	DefaultRestartTimeout = 30 * time.Second
	MaxRestartTimeout     = time.Hour
)

// Handle is a Ray-style handle to a named actor. It follows the actor
// across restarts: each call goes to the node the directory says hosts it.
//
// A handle is a message field like any other: put it in a message, a
// task's arguments or an actor's spawn arguments and the receiver calls
// the same actor through it. On the wire it is the actor's name; where it
// is decoded it calls through the one node its process runs (a process
// running none or several returns ErrUnboundHandle: look the name up on
// the node meant, Node.Lookup). In-process messages pass it as it is.
type Handle struct {
	n    *Node // nil for a handle decoded from a message, until first use
	name string
	// retries overrides the record's MaxCallRetries when retriesSet
	// (WithRetries); it does not travel in messages.
	retries    int
	retriesSet bool
}

// ErrUnboundHandle is returned by a handle decoded from a message in a
// process that does not run exactly one node, so none to call through.
var ErrUnboundHandle = errors.New("handle came in a message to a process that runs no node, or several: look its name up with Node.Lookup")

// MaxActorName bounds an actor's name, in bytes: Spawn refuses longer
// ones, and a handle naming one does not decode.
const MaxActorName = 1024

// handleWire is a handle's form in a message.
type handleWire struct {
	Name string
}

// EncodeMsgpack writes the handle as the actor's name; a zero Handle (a
// field left unset) as nil.
func (h Handle) EncodeMsgpack(enc *msgpack.Encoder) error {
	if h.name == "" {
		return enc.EncodeNil()
	}
	return enc.Encode(handleWire{Name: h.name})
}

// DecodeMsgpack reads a handle from a message, refusing a name Spawn
// would refuse; the handle binds to its process's node when first used.
func (h *Handle) DecodeMsgpack(dec *msgpack.Decoder) error {
	if c, err := dec.PeekCode(); err == nil && c == msgpcode.Nil {
		*h = Handle{}
		return dec.DecodeNil()
	}
	var w handleWire
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("actor handle: %w", err)
	}
	if err := checkActorName(w.Name); err != nil {
		return fmt.Errorf("actor handle: %w", err)
	}
	*h = Handle{name: w.Name}
	return nil
}

// checkActorName says why name cannot name an actor, or nil.
func checkActorName(name string) error {
	switch {
	case name == "":
		return errors.New("empty actor name")
	case strings.HasPrefix(name, "$"):
		return fmt.Errorf("actor name %.64q: names starting with $ are reserved", name)
	case len(name) > MaxActorName:
		return fmt.Errorf("actor name %.64q...: %d bytes, over the %d-byte bound", name, len(name), MaxActorName)
	}
	return nil
}

// node is the node h calls through: its own, or for a handle decoded from
// a message, the one node this process runs.
func (h *Handle) node() (*Node, error) {
	if h == nil {
		return nil, fmt.Errorf("nil actor handle: %w", actor.ErrActorNotFound)
	}
	if h.n != nil {
		return h.n, nil
	}
	var only *Node
	count := 0
	nodesBySystem.Range(func(_, v any) bool {
		only, count = v.(*Node), count+1
		return count < 2
	})
	if count != 1 {
		return nil, fmt.Errorf("actor %s: %w", h.name, ErrUnboundHandle)
	}
	return only, nil
}

// Name is the actor's name.
func (h *Handle) Name() string { return h.name }

// known is h's node, once h's actor is in its directory (looked up from
// the cluster when it is not yet); verb names the operation in the error.
func (h *Handle) known(ctx context.Context, verb string) (*Node, error) {
	n, err := h.node()
	if err != nil {
		return nil, err
	}
	if _, ok := n.dir.Actor(h.name); !ok {
		if _, err := n.Lookup(ctx, h.name); err != nil {
			return nil, fmt.Errorf("%s %s: %w", verb, h.name, err)
		}
	}
	return n, nil
}

// Call sends msg and waits for the reply (see actor.System.Call). While the
// actor is restarting the call waits for it, within ctx. An actor this
// node's directory does not know yet (a handle that came in a message
// before gossip brought its record) is looked up first. ctx's end cancels
// the call at the actor (dropped if still queued; its Context ends if
// running). An actor spawned with MaxCallRetries (or a handle from
// WithRetries) gets a call whose incarnation was lost again, once the
// cluster restarted it; the error is then a *RetryError saying how many
// tries were made.
func (h *Handle) Call(ctx context.Context, msg any) (any, error) {
	n, err := h.known(ctx, "call")
	if err != nil {
		return nil, err
	}
	for tries := 1; ; tries++ {
		rec, err := n.resolveRecord(ctx, h.name)
		if err != nil {
			if tries == 1 {
				return nil, err
			}
			return nil, &RetryError{Actor: h.name, Tries: tries - 1, MaxRetries: h.retriesOf(rec), Err: err}
		}
		v, err := n.sys.Call(ctx, rec.Ref, msg)
		if err == nil {
			return v, nil
		}
		if errors.Is(err, ErrNodeUnresponsive) {
			err = fmt.Errorf("call %s: %w", h.name, err)
		}
		bound := h.retriesOf(rec)
		if bound == 0 {
			return nil, err
		}
		if !incarnationLost(err) || ctx.Err() != nil || (bound > 0 && tries > bound) {
			return nil, &RetryError{Actor: h.name, Tries: tries, MaxRetries: bound, Err: err}
		}
		if why := n.awaitReincarnation(ctx, h.name, rec); why != nil {
			return nil, &RetryError{Actor: h.name, Tries: tries, MaxRetries: bound, Err: fmt.Errorf("%w (not sent again: %v)", err, why)}
		}
	}
}

// Stream sends msg to the actor for a streamed answer (actor.System.Stream:
// replies read with Next as they come, the producer held to
// actor.StreamWindow unread ones; Close, or the end, cancels it). While
// the actor is restarting it waits for it, within ctx, as Call does;
// a stream is not retried.
func (h *Handle) Stream(ctx context.Context, msg any) (*actor.Stream, error) {
	n, err := h.known(ctx, "stream")
	if err != nil {
		return nil, err
	}
	ref, err := n.resolve(ctx, h.name)
	if err != nil {
		return nil, err
	}
	return n.sys.Stream(ctx, ref, msg)
}

// Stream yields the replies of h's actor to msg as they come, in order
// (Ray's num_returns="streaming"): each with a nil error, then it ends.
// A failure (the actor's error after its replies, its death, ctx's end)
// is yielded once, with a zero reply, and ends it. Breaking out of the
// loop cancels the producer (its Send fails).
func Stream[R any](ctx context.Context, h *Handle, msg any) iter.Seq2[R, error] {
	return func(yield func(R, error) bool) {
		var zero R
		st, err := h.Stream(ctx, msg)
		if err != nil {
			yield(zero, err)
			return
		}
		defer st.Close()
		for {
			v, err := st.Next(ctx)
			switch {
			case errors.Is(err, io.EOF):
				return
			case err != nil:
				yield(zero, err)
				return
			}
			r, ok := v.(R)
			if !ok {
				yield(zero, fmt.Errorf("stream %s: reply is %T, want %T", h.name, v, zero))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
	}
}

// WithRetries is a handle to the same actor whose calls are retried up to
// n times after restarts (-1: as long as it restarts; 0: never), whatever
// the actor's MaxCallRetries: for the calls of one caller that are
// idempotent, or that must not be retried. It applies to this handle's
// calls only and does not travel in messages.
func (h *Handle) WithRetries(n int) *Handle {
	c := *h
	c.retries, c.retriesSet = max(n, -1), true
	return &c
}

// retriesOf is the retry bound for h's calls to the actor of rec.
func (h *Handle) retriesOf(rec ActorRecord) int {
	if h.retriesSet {
		return h.retries
	}
	return rec.MaxCallRetries
}

// RetryError is the error of a call that could be retried
// (SpawnOptions.MaxCallRetries, Handle.WithRetries): its last try's
// error, and how many tries were made. errors.Is and errors.As see the
// last error through it.
type RetryError struct {
	Actor      string
	Tries      int // calls sent, the first one included
	MaxRetries int // the bound (-1: as long as the actor restarts)
	Err        error
}

func (e *RetryError) Error() string {
	bound := fmt.Sprintf("at most %d retries", e.MaxRetries)
	if e.MaxRetries < 0 {
		bound = "retries without bound"
	}
	tries := "tries"
	if e.Tries == 1 {
		tries = "try"
	}
	return fmt.Sprintf("actor %s: %d %s (%s after restarts): %v", e.Actor, e.Tries, tries, bound, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// incarnationLost says whether a call's error means the incarnation it
// went to may be gone (its node lost or unreachable, the actor stopped),
// so that a restarted one could take the call; not the actor's own error.
func incarnationLost(err error) bool {
	var ae *actor.ActorError
	if errors.As(err, &ae) {
		return false
	}
	return errors.Is(err, actor.ErrNodeLost) || errors.Is(err, actor.ErrConnLost) ||
		errors.Is(err, actor.ErrActorDied) || errors.Is(err, ErrNodeUnresponsive)
}

// reincarnationWait bounds how long a call whose incarnation seems lost
// waits for the cluster to record the actor restarting or restarted: a
// node lost is noticed within seconds (LANDetection: about 11), and a
// connection that broke to a node that lives on changes nothing.
const reincarnationWait = 30 * time.Second

// awaitReincarnation waits, within ctx and reincarnationWait, until the
// directory records the actor past the incarnation of old (restarting, or
// alive with more restarts or elsewhere); it says why not otherwise.
func (n *Node) awaitReincarnation(ctx context.Context, name string, old ActorRecord) error {
	bound := time.NewTimer(reincarnationWait)
	defer bound.Stop()
	for {
		n.wmu.Lock()
		changed := n.changed
		n.wmu.Unlock()
		rec, ok := n.dir.Actor(name)
		switch {
		case !ok:
			return fmt.Errorf("actor %s is gone from the directory", name)
		case rec.State == Dead:
			return fmt.Errorf("actor %s died (%s)", name, rec.Cause)
		case rec.State == Restarting, rec.Restarts > old.Restarts, rec.Ref != old.Ref:
			return nil
		}
		select {
		case <-changed:
		case <-bound.C:
			return fmt.Errorf("the cluster still records the incarnation it went to (node %s, %d restarts) ALIVE after %v", old.Node, old.Restarts, reincarnationWait)
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopped:
			return actor.ErrSystemStopped
		}
	}
}

// ErrActorRestarting is Tell's error for an actor the cluster is
// restarting: a Tell does not wait (TellContext does).
var ErrActorRestarting = errors.New("actor is restarting")

// Tell sends msg without waiting for a reply. It needs the actor ALIVE in
// this node's directory: to one that is restarting it fails at once with
// ErrActorRestarting, naming the actor (Ray would queue the message; a
// Tell here never blocks its caller). TellContext waits for the restart.
func (h *Handle) Tell(msg any) error {
	n, err := h.node()
	if err != nil {
		return err
	}
	rec, ok := n.dir.Actor(h.name)
	switch {
	case ok && rec.State == Restarting:
		return fmt.Errorf("tell %s: restart %d (after %s) not done: %w", h.name, rec.Restarts, rec.Cause, ErrActorRestarting)
	case !ok || rec.State != Alive:
		return fmt.Errorf("tell %s: %w", h.name, actor.ErrActorNotFound)
	}
	return n.sys.Tell(rec.Ref, msg)
}

// TellContext is Tell that waits, within ctx, for an actor that is
// restarting (as Call does), and looks up one this node's directory does
// not know yet. Delivery is not confirmed.
func (h *Handle) TellContext(ctx context.Context, msg any) error {
	n, err := h.known(ctx, "tell")
	if err != nil {
		return err
	}
	rec, err := n.resolveRecord(ctx, h.name)
	if err != nil {
		return fmt.Errorf("tell: %w", err)
	}
	return n.sys.Tell(rec.Ref, msg)
}

// Record is the directory's current record of the actor.
func (h *Handle) Record() (ActorRecord, bool) {
	n, err := h.node()
	if err != nil {
		return ActorRecord{}, false
	}
	return n.dir.Actor(h.name)
}

// Stop stops the actor for good (it is not restarted).
func (h *Handle) Stop(ctx context.Context) error {
	n, err := h.node()
	if err != nil {
		return err
	}
	return n.StopActor(ctx, h.name)
}

// Call is Handle.Call with the reply's type asserted.
func Call[R any](ctx context.Context, h *Handle, msg any) (R, error) {
	var zero R
	v, err := h.Call(ctx, msg)
	if err != nil {
		return zero, err
	}
	r, ok := v.(R)
	if !ok {
		return zero, fmt.Errorf("call %s: reply is %T, want %T", h.name, v, zero)
	}
	return r, nil
}

// ErrTryElsewhere, wrapped in the error of an actor's factory, says that
// this node cannot build the actor but another may (a node that does not
// see a folder the actor needs): a spawn or a restart that placed it here
// tries each other node that fits, and fails with every refusal when none
// builds it. A pinned actor, or one in a placement group, fails with the
// refusal at once.
var ErrTryElsewhere = errors.New("another node may build it")

// Spawn starts an actor of kind somewhere in the cluster: on the pinned
// node, in its placement-group bundle, or on the least-loaded node that has
// the resources and labels. A request no node can satisfy fails at once
// with what the cluster offers. A Detached actor that may restart
// (MaxRestarts not 0) takes Args of at most InlineArgsMax bytes encoded:
// larger ones stay on the spawning node (args.go), which it outlives.
func (n *Node) Spawn(ctx context.Context, kind string, opts SpawnOptions) (*Handle, error) {
	name := opts.Name
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = kind + "-" + hex.EncodeToString(b[:])
	}
	if err := checkActorName(name); err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	prev, exists := n.dir.Actor(name)
	if exists && prev.State != Dead {
		return nil, fmt.Errorf("spawn %s: %w (on node %s, %s)", name, actor.ErrNameTaken, prev.Node, prev.State)
	}
	if err := opts.Resources.Check(); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", name, err)
	}
	if opts.RestartTimeout < 0 || opts.RestartTimeout > MaxRestartTimeout {
		return nil, fmt.Errorf("spawn %s: RestartTimeout %v: want 0 (the default, %v) to %v", name, opts.RestartTimeout, DefaultRestartTimeout, MaxRestartTimeout)
	}
	if opts.KeepDead < 0 || opts.KeepDead > MaxKeepDead {
		return nil, fmt.Errorf("spawn %s: KeepDead %v: want 0 to %v", name, opts.KeepDead, MaxKeepDead)
	}
	if opts.MaxCallRetries < -1 {
		return nil, fmt.Errorf("spawn %s: MaxCallRetries %d: want -1 (as long as it restarts), 0 (never, the default) or more", name, opts.MaxCallRetries)
	}
	if opts.MaxConcurrency < 0 || opts.MaxConcurrency > actor.ConcurrencyLimit {
		return nil, fmt.Errorf("spawn %s: MaxConcurrency %d: want 0 or 1 (one message at a time, the default) up to %d", name, opts.MaxConcurrency, actor.ConcurrencyLimit)
	}
	argsType, args, err := actor.EncodeMessage(opts.Args)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: args: %w", name, err)
	}
	if len(args) > MaxArgs {
		return nil, fmt.Errorf("spawn %s: args: %s of %d bytes encoded, over the %d-byte bound: pass what the actor can read itself (a path, a bulk reference)",
			name, argsType, len(args), MaxArgs)
	}
	if opts.Detached && opts.MaxRestarts != 0 && len(args) > InlineArgsMax {
		// Such arguments live as long as this node (args.go): once it and
		// the actor's node are gone, a restart elsewhere could not fetch
		// them, and the actor would die at its first node loss instead.
		return nil, fmt.Errorf("spawn %s: args: %s of %d bytes encoded, over the %d bytes (cluster.InlineArgsMax) that a Detached actor which may restart (MaxRestarts %d) can be given: larger ones stay on the spawning node, and a restart after it is gone could not fetch them; pass what the actor can read itself (a path on storage every node sees), or MaxRestarts 0, or leave it attached",
			name, argsType, len(args), InlineArgsMax, opts.MaxRestarts)
	}
	req := spawnRequest{
		Name: name, Kind: kind, ArgsType: argsType, Args: args, Resources: opts.Resources,
		Labels: opts.Labels, PinNode: opts.Node, MaxRestarts: opts.MaxRestarts, MaxConcurrency: opts.MaxConcurrency, MaxCallRetries: opts.MaxCallRetries, BaseVersion: prev.Version,
		RestartTimeoutMs: opts.RestartTimeout.Milliseconds(), KeepDeadMs: opts.KeepDead.Milliseconds(),
	}
	if len(args) > InlineArgsMax {
		at, done := n.offerArgs(args)
		defer done()
		req.Args, req.ArgsAt = nil, &at
	}
	if !opts.Detached {
		req.Owner = n.id
	}
	if opts.Group != nil {
		if opts.Bundle < 0 || opts.Bundle >= len(opts.Group.Nodes) {
			return nil, fmt.Errorf("spawn %s: bundle %d out of range: group %s has %d bundles", name, opts.Bundle, opts.Group.ID, len(opts.Group.Nodes))
		}
		if opts.Bundle < len(opts.Group.Bundles) {
			if b := opts.Group.Bundles[opts.Bundle].Resources; !b.Covers(opts.Resources) {
				return nil, fmt.Errorf("spawn %s: placement group %s bundle %d reserves %s in all, lacks %s: %w",
					name, opts.Group.ID, opts.Bundle, b, strings.Join(b.Missing(opts.Resources), ", "), ErrInfeasible)
			}
		}
		req.Group, req.Bundle = opts.Group.ID, opts.Bundle
	}
	if _, err := n.spawnSomewhere(ctx, req, nil, nil); err != nil {
		return nil, err
	}
	return &Handle{n: n, name: name}, nil
}

// spawnSomewhere places req and asks the chosen node to host it, trying
// other nodes when one turns out to lack free resources (a stale view).
// abandoned, when set, is the cause recorded for an actor whose build is
// abandoned because ctx ended (default: "its spawn was abandoned by the
// caller").
func (n *Node) spawnSomewhere(ctx context.Context, req spawnRequest, exclude map[string]bool, abandoned func() string) (actor.Ref, error) {
	if exclude == nil {
		exclude = map[string]bool{}
	}
	var lastErr error
	var cannot []string                    // nodes whose program lacks the kind (spawnReply.Elsewhere)
	var refused []string                   // nodes whose factory said another may build it (spawnReply.TryElsewhere)
	roomless := map[string]bool{}          // nodes left out because they lacked free room
	roomlessFree := map[string]Resources{} // what each of them said it had free
	lastListed := false                    // lastErr is a roomless node's refusal, which the error's node list gives
	for attempt := 0; attempt < 4; attempt++ {
		target, err := n.placeSpawn(req, exclude)
		listed := false
		if err != nil && len(roomless) > 0 && req.Group == "" && errors.Is(err, ErrInfeasible) {
			listed, err = n.withRoomless(req, exclude, roomlessFree, err)
		}
		if err != nil {
			err = n.noRoomOrNever(req, exclude, roomless, err)
		}
		if err != nil && len(cannot) > 0 {
			why := actor.ErrUnregistered
			if strings.Contains(strings.Join(cannot, ""), actor.ErrUnknownKind.Error()) {
				why = actor.ErrUnknownKind
			}
			if n.othersLeft(exclude) {
				// err keeps its sentinel (ErrNoRoom: room may come).
				return actor.Ref{}, fmt.Errorf("spawn %s: no node that fits can build it (%w): %s; the other nodes do not fit: %w",
					req.Name, why, strings.Join(cannot, "; "), err)
			}
			return actor.Ref{}, fmt.Errorf("spawn %s: no node that fits can build it (%w): %s", req.Name, why, strings.Join(cannot, "; "))
		}
		if err != nil && len(refused) > 0 {
			if n.othersLeft(exclude) {
				return actor.Ref{}, fmt.Errorf("spawn %s: no node that fits would build it: %s; the other nodes do not fit: %w", req.Name, strings.Join(refused, "; "), err)
			}
			return actor.Ref{}, fmt.Errorf("spawn %s: no node that fits would build it: %s", req.Name, strings.Join(refused, "; "))
		}
		if err != nil {
			if held := n.heldForGoneOwners(); held != "" && errors.Is(err, ErrInfeasible) {
				err = fmt.Errorf("%w; %s", err, held)
			}
			if lastErr != nil && !(lastListed && listed) {
				return actor.Ref{}, fmt.Errorf("spawn %s: %w (after: %v)", req.Name, err, lastErr)
			}
			return actor.Ref{}, fmt.Errorf("spawn %s: %w", req.Name, err)
		}
		nref, err := n.nodeRef(target)
		if err != nil {
			exclude[target] = true
			lastErr, lastListed = err, false
			continue
		}
		rep, err := actor.CallAs[spawnReply](ctx, n.sys, nref, req)
		if err != nil {
			lost := errors.Is(err, actor.ErrConnLost) || errors.Is(err, actor.ErrNodeLost)
			if ctx.Err() == nil && lost && req.Group == "" && req.PinNode == "" {
				// Its actor port cannot be reached (a firewall that passes
				// gossip, a node dying): another node may fit. Should the
				// request have got through all the same, the record the
				// next node writes is newer than the one written there,
				// whose copy its host then stops (fencing).
				req.BaseVersion++
				exclude[target] = true
				lastErr, lastListed = fmt.Errorf("node %s: %w", target, err), false
				continue
			}
			if ctx.Err() != nil {
				cause := "its spawn was abandoned by the caller"
				if abandoned != nil {
					cause = abandoned()
				}
				n.abandonSpawn(nref, req.Name, cause)
			}
			return actor.Ref{}, fmt.Errorf("spawn %s on node %s: %w", req.Name, target, err)
		}
		if rep.Err == "" {
			// The host gossips the record too; merging it here lets the
			// spawner use the handle at once.
			n.dir.merge(&update{Actors: []ActorRecord{rep.Record}})
			return rep.Record.Ref, nil
		}
		if rep.Elsewhere && req.Group == "" && req.PinNode == "" {
			// Not counted: each such node is left out from here on, and
			// placement fails once none is left.
			exclude[target] = true
			cannot = append(cannot, rep.Err)
			attempt--
			continue
		}
		if rep.TryElsewhere && req.Group == "" && req.PinNode == "" {
			// As for Elsewhere: left out from here on, not counted.
			exclude[target] = true
			refused = append(refused, rep.Err)
			attempt--
			continue
		}
		if rep.NoRoom && req.Group == "" && req.PinNode != "" {
			// The pinned node lacked free room that this node's view
			// (stale) showed it had: no other node may take it, but it
			// may have room later, as an unpinned spawn's refusal may.
			err := fmt.Errorf("%s: %w", strings.TrimSuffix(rep.Err, ": "+ErrInfeasible.Error()), ErrInfeasible)
			return actor.Ref{}, fmt.Errorf("spawn %s: %w", req.Name, n.noRoomOrNever(req, exclude, map[string]bool{target: true}, err))
		}
		if rep.NoRoom && req.Group != "" {
			// The bundle's reservation covers the actor, but the group's
			// own actors hold it: room that frees only when one of them
			// ends, and the group's owner's own.
			text := strings.TrimSuffix(rep.Err, ": "+ErrInfeasible.Error())
			if g, ok := n.dir.Group(req.Group); ok && g.Owner != "" && g.Owner == req.Owner {
				return actor.Ref{}, fmt.Errorf("spawn %s: %s; %w: %w", req.Name, text, ErrHeldBySelf, ErrNoRoom)
			}
			return actor.Ref{}, fmt.Errorf("spawn %s: %s: %w", req.Name, text, ErrNoRoom)
		}
		if !rep.Retry || req.Group != "" || req.PinNode != "" {
			return actor.Ref{}, fmt.Errorf("spawn %s: %s", req.Name, rep.Err)
		}
		exclude[target] = true
		if rep.NoRoom {
			roomless[target] = true
			roomlessFree[target] = rep.Free
		}
		lastErr, lastListed = errors.New(rep.Err), rep.NoRoom
	}
	if len(roomless) > 0 {
		// Every try was refused, the last for want of room (or not).
		err := fmt.Errorf("%s: %w", strings.TrimSuffix(lastErr.Error(), ": "+ErrInfeasible.Error()), ErrInfeasible)
		return actor.Ref{}, fmt.Errorf("spawn %s: %w", req.Name, n.noRoomOrNever(req, exclude, roomless, err))
	}
	return actor.Ref{}, fmt.Errorf("spawn %s: %w", req.Name, lastErr)
}

// withRoomless says err, a placement that found no node among those not
// excluded, again over those nodes and the ones that refused the spawn
// for want of room, each of these with the room it said it had free
// (free; the view's where it said none), and whether it did so: the
// nodes left out by the refusals are the ones a reader most needs in the
// list, since the spawner's view showed them with room.
func (n *Node) withRoomless(req spawnRequest, exclude map[string]bool, free map[string]Resources, err error) (bool, error) {
	var views []NodeView
	for _, v := range n.Views() {
		if f, ok := free[v.ID]; ok {
			if len(f) > 0 {
				v.Free = f
			}
			views = append(views, v)
		} else if !exclude[v.ID] {
			views = append(views, v)
		}
	}
	want := Request{Resources: req.Resources, Labels: req.Labels, Node: req.PinNode}
	if placeOne(views, want) != "" {
		return false, err // a refusing node has room by what it said: keep the placement's own words
	}
	return true, infeasibleOne(views, want)
}

// noRoomOrNever tells a spawn that found no node (err) that may fit
// later, ErrNoRoom, from one that never will, ErrInfeasible alone: it
// may when the live nodes it may use, those left out because they
// lacked free room among them (roomless: refusals a stale view ran
// into), could hold it with every resource free. Where it would fit only
// were the room its owner holds itself freed too, it is also
// ErrHeldBySelf, naming what.
func (n *Node) noRoomOrNever(req spawnRequest, exclude, roomless map[string]bool, err error) error {
	if !errors.Is(err, ErrInfeasible) || req.Group != "" {
		return err
	}
	var views []NodeView
	for _, v := range n.Views() {
		if !exclude[v.ID] || roomless[v.ID] {
			views = append(views, v)
		}
	}
	want := Request{Resources: req.Resources, Labels: req.Labels, Node: req.PinNode}
	if placeOne(allFree(views), want) == "" {
		return err
	}
	text := err.Error()
	for _, sentinel := range []error{ErrNoRoom, ErrInfeasible} {
		if t, ok := strings.CutSuffix(text, ": "+sentinel.Error()); ok {
			text = t
			break
		}
	}
	if own, ownWhat := n.heldBy(req.Owner); placeOne(freeBut(views, own), want) == "" {
		return fmt.Errorf("%s; %w: node %s (%s): %w", text, ErrHeldBySelf, req.Owner, ownWhat, ErrNoRoom)
	}
	if holders := n.roomHolders(req.Resources); holders != "" {
		text += "; the room is held by " + holders
	}
	return fmt.Errorf("%s: %w", text, ErrNoRoom)
}

// heldBy is what the actors and placement groups that node owner owns
// hold, per node, and the same in words; nothing for owner "".
func (n *Node) heldBy(owner string) (map[string]Resources, string) {
	held := map[string]Resources{}
	if owner == "" {
		return held, "nothing"
	}
	var what []string
	for _, rec := range n.dir.Actors() {
		if rec.Owner != owner || rec.State == Dead || rec.Group != "" || rec.Node == "" || size(rec.Resources) == 0 {
			continue // an actor that reserves nothing holds no room
		}
		held[rec.Node] = held[rec.Node].Add(rec.Resources)
		what = append(what, fmt.Sprintf("actor %s %s on %s", rec.Name, rec.Resources, rec.Node))
	}
	for _, g := range n.dir.Groups() {
		if g.Owner != owner || g.Removed {
			continue
		}
		for i, b := range g.Bundles {
			if i < len(g.Nodes) {
				held[g.Nodes[i]] = held[g.Nodes[i]].Add(b.Resources)
				what = append(what, fmt.Sprintf("placement group %s bundle %d %s on %s", g.ID, i, b.Resources, g.Nodes[i]))
			}
		}
	}
	if len(what) == 0 {
		return held, "nothing"
	}
	if len(what) > 8 {
		what = append(what[:8], fmt.Sprintf("%d more", len(what)-8))
	}
	return held, strings.Join(what, ", ")
}

// abandonSpawn asks the node at nref to stop the actor whose spawn the
// caller gave up on (ctx done: Ctrl-C while its model loads, a timeout).
// With no handle given out nobody else would stop it: it would hold its
// resources until its node stopped. The node cancels the build if it is
// still running (its actor never starts) or stops the actor once its
// record is written (hostStop); a spawn that failed leaves nothing to
// stop. Best effort: the request is sent, not confirmed.
func (n *Node) abandonSpawn(nref actor.Ref, name, cause string) {
	if err := n.sys.Tell(nref, stopRequest{Name: name, Cause: cause}); err != nil {
		n.log.Warn("could not stop an abandoned spawn", "actor", name, "node", nref.Address, "err", err)
	}
}

func (n *Node) placeSpawn(req spawnRequest, exclude map[string]bool) (string, error) {
	if req.Group != "" {
		g, ok := n.dir.Group(req.Group)
		if !ok || g.Removed {
			return "", fmt.Errorf("placement group %s does not exist", req.Group)
		}
		if req.Bundle >= len(g.Nodes) {
			// This node has the record of the group waiting for room,
			// not yet the one that placed it.
			return "", fmt.Errorf("placement group %s is not placed yet as this node knows it (%s)", req.Group, g.Pending)
		}
		return g.Nodes[req.Bundle], nil
	}
	var views []NodeView
	for _, v := range n.Views() {
		if !exclude[v.ID] {
			views = append(views, v)
		}
	}
	return PlaceOne(views, Request{Resources: req.Resources, Labels: req.Labels, Node: req.PinNode})
}

// resolve returns the current ref of a named actor, waiting while it
// restarts.
func (n *Node) resolve(ctx context.Context, name string) (actor.Ref, error) {
	rec, err := n.resolveRecord(ctx, name)
	return rec.Ref, err
}

// resolveRecord is resolve with the actor's whole record.
func (n *Node) resolveRecord(ctx context.Context, name string) (ActorRecord, error) {
	for {
		n.wmu.Lock()
		changed := n.changed
		n.wmu.Unlock()
		rec, ok := n.dir.Actor(name)
		switch {
		case !ok:
			return ActorRecord{}, fmt.Errorf("actor %s: %w", name, actor.ErrActorNotFound)
		case rec.State == Alive:
			return rec, nil
		case rec.State == Dead:
			return rec, fmt.Errorf("actor %s died (%s): %w", name, rec.Cause, actor.ErrActorDied)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return rec, fmt.Errorf("actor %s is restarting: %w", name, ctx.Err())
		case <-n.stopped:
			return rec, actor.ErrSystemStopped
		}
	}
}

// Lookup finds a named actor anywhere in the cluster: from the directory,
// or, when gossip has not brought its record yet, by asking every node at
// once, each within lookupTimeout and ctx; the first node that hosts it
// ends the lookup. Not found, the error names the nodes that did not
// answer (the actor may be on one of them). One that is DEAD is refused
// with its death cause (actor.ErrActorDied), as Ray's get_actor refuses
// a dead actor: Record reads its record.
func (n *Node) Lookup(ctx context.Context, name string) (*Handle, error) {
	if rec, ok := n.dir.Actor(name); ok {
		if rec.State == Dead {
			return nil, fmt.Errorf("lookup %s: it died (%s): %w", name, rec.Cause, actor.ErrActorDied)
		}
		return &Handle{n: n, name: name}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		node string
		rec  *ActorRecord
		err  error
	}
	ids := n.aliveIDs()
	answers := make(chan answer, len(ids))
	asked := 0
	for _, id := range ids {
		ref, err := n.nodeRef(id)
		if err != nil {
			continue
		}
		asked++
		go func() {
			actx, cancel := context.WithTimeout(ctx, lookupTimeout)
			defer cancel()
			rep, err := actor.CallAs[lookupReply](actx, n.sys, ref, lookupRequest{Name: name})
			if err == nil && rep.Found {
				answers <- answer{node: id, rec: &rep.Record}
				return
			}
			answers <- answer{node: id, err: err}
		}()
	}
	var silent []string
	for range asked {
		a := <-answers
		if a.rec != nil {
			// Found: the nodes still to answer are not waited for.
			n.dir.merge(&update{Actors: []ActorRecord{*a.rec}})
			return &Handle{n: n, name: name}, nil
		}
		if a.err != nil {
			silent = append(silent, fmt.Sprintf("node %s: %v", a.node, a.err))
		}
	}
	if len(silent) > 0 {
		sort.Strings(silent)
		return nil, fmt.Errorf("lookup %s: %w on the nodes that answered; no answer from %s", name, actor.ErrActorNotFound, strings.Join(silent, "; "))
	}
	return nil, fmt.Errorf("lookup %s: %w", name, actor.ErrActorNotFound)
}

// Record is the directory's record of the named actor, a DEAD one's
// too while the cluster keeps it (10 minutes, or its
// SpawnOptions.KeepDead): how it ended, where it ran.
func (n *Node) Record(name string) (ActorRecord, bool) {
	rec, ok := n.dir.Actor(name)
	if rec.Forgotten {
		return ActorRecord{}, false
	}
	return rec, ok
}

// Forget drops the record of the DEAD actor name from the cluster's
// view (status, Record) at once, and from every node's directory
// deadRecordTTL later, instead of after its SpawnOptions.KeepDead: its
// spawn arguments go at once (a record kept long, a finished job's, holds
// its recipe). A live actor is refused: stop it first.
func (n *Node) Forget(name string) error {
	n.hostedMu.Lock()
	defer n.hostedMu.Unlock()
	rec, ok := n.dir.Actor(name)
	switch {
	case !ok || rec.Forgotten:
		return fmt.Errorf("actor %s: %w", name, actor.ErrActorNotFound)
	case rec.State != Dead:
		return fmt.Errorf("actor %s is %s on node %s: only an ended actor's record is forgotten; stop it first", name, rec.State, rec.Node)
	}
	rec = n.rewrite(rec)
	rec.Forgotten, rec.KeepDeadMs, rec.Args, rec.ArgsAt = true, 0, nil, nil
	n.write(&update{Actors: []ActorRecord{rec}})
	return nil
}

// lookupTimeout bounds a node's answer to a lookup, which it answers from
// memory.
const lookupTimeout = 10 * time.Second

// StopActor stops a named actor wherever it runs; it is not restarted.
func (n *Node) StopActor(ctx context.Context, name string) error {
	return n.stopActor(ctx, name, "stopped")
}

// StopActors stops the named actors at once, each within ctx and, when
// per > 0, within per of its own: a node that does not answer costs only
// the stops of its own actors. (One stop after another within one ctx let
// such a node use up the time of the stops after it, which then recorded
// their answering nodes as not answering.) The error joins the failures,
// each naming its actor and node; an actor already gone is not one.
func (n *Node) StopActors(ctx context.Context, per time.Duration, names ...string) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sctx, cancel := ctx, context.CancelFunc(func() {})
			if per > 0 {
				sctx, cancel = context.WithTimeout(ctx, per)
			}
			defer cancel()
			if err := n.StopActor(sctx, name); err != nil && !errors.Is(err, actor.ErrActorNotFound) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopActor is StopActor with the cause its record keeps.
func (n *Node) stopActor(ctx context.Context, name, cause string) error {
	rec, ok := n.dir.Actor(name)
	if !ok || rec.State == Dead {
		return fmt.Errorf("stop %s: %w", name, actor.ErrActorNotFound)
	}
	if rec.Node == "" {
		return fmt.Errorf("stop %s: it is being restarted on another node (cause: %s); stop it once it is ALIVE", name, rec.Cause)
	}
	nref, err := n.nodeRef(rec.Node)
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	rep, err := actor.CallAs[okReply](ctx, n.sys, nref, stopRequest{Name: name, Cause: cause})
	if err != nil {
		// The node did not answer (frozen, or its actor port cut off while
		// gossip passes), and the request may never reach it. Record the
		// actor stopped: the node stops its copy when the record reaches it
		// (fencing, onActorChange), as it releases a removed group's
		// bundles; otherwise the actor would live on, holding the node's
		// resources, after the node is back.
		n.bury(rec, cause+" (node "+rec.Node+" did not answer the stop; it stops the actor when it hears of it)")
		return fmt.Errorf("stop %s on node %s: %w", name, rec.Node, err)
	}
	if rep.Err != "" {
		if strings.Contains(rep.Err, actor.ErrActorNotFound.Error()) {
			// It stopped on its own before its record said so.
			return fmt.Errorf("stop %s on node %s: %w", name, rec.Node, actor.ErrActorNotFound)
		}
		return fmt.Errorf("stop %s: %s", name, rep.Err)
	}
	u := &update{}
	if rep.Node != nil {
		u.Nodes = append(u.Nodes, *rep.Node)
	}
	if rep.Actor != nil && rep.Actor.Name == name {
		u.Actors = append(u.Actors, *rep.Actor)
	}
	n.dir.merge(u)
	return nil
}

// Notice tells a watcher that an actor died or was restarted.
type Notice struct {
	Name string
	// State is RESTARTING (its node was lost or stopped: it is being
	// restarted on another), ALIVE (restarted: in place after a panic, or
	// on another node after RESTARTING) or DEAD.
	State    ActorState
	Cause    string // "stopped", "panic: ...", "node lost", ...
	Node     string // the node it died on; for ALIVE, the one it runs on
	Restarts int
}

// Watch reports deaths and restarts of the named actor until it is DEAD
// (the last notice) or ctx ends; the channel is closed then. A restart
// on another node gives RESTARTING, then ALIVE once it runs there (or
// DEAD).
func (n *Node) Watch(ctx context.Context, name string) <-chan Notice {
	out := make(chan Notice, 16)
	in := make(chan ActorRecord, 64)
	n.wmu.Lock()
	n.watchers[name] = append(n.watchers[name], in)
	n.wmu.Unlock()
	go func() {
		defer close(out)
		defer n.unwatch(name, in)
		if rec, ok := n.dir.Actor(name); ok && rec.State == Dead {
			out <- Notice{Name: name, State: Dead, Cause: rec.Cause, Node: rec.Node, Restarts: rec.Restarts}
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.stopped:
				return
			case rec := <-in:
				select {
				case out <- Notice{Name: name, State: rec.State, Cause: rec.Cause, Node: rec.Node, Restarts: rec.Restarts}:
				case <-ctx.Done():
					return
				}
				if rec.State == Dead {
					return
				}
			}
		}
	}()
	return out
}

func (n *Node) unwatch(name string, ch chan ActorRecord) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	ws := n.watchers[name]
	for i, w := range ws {
		if w == ch {
			n.watchers[name] = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(n.watchers[name]) == 0 {
		delete(n.watchers, name)
	}
}

// onActorChange runs for every actor record that changed in the directory.
func (n *Node) onActorChange(old, cur ActorRecord) {
	died := cur.State == Dead && old.State != Dead
	restarted := cur.State == Restarting && old.State != Restarting ||
		cur.State == Alive && old.Version != 0 && cur.Restarts > old.Restarts && old.State == Alive ||
		cur.State == Alive && old.State == Restarting // back, on another node
	if (died || cur.State == Restarting) && old.Version != 0 && old.Ref.Address != "" {
		n.sys.FailActor(old.Ref, fmt.Errorf("%s: %s: %w", cur.Name, cur.Cause, actor.ErrActorDied))
	}
	// Fencing: another node declared this node's actor lost and is
	// replacing it, or stopped it without reaching this node (stopActor);
	// the local copy must not live on.
	if cur.Writer != n.id && old.Node == n.id && (cur.Node != n.id || cur.State != Alive) {
		for _, ref := range n.sys.Local() {
			if ref.Name == cur.Name {
				go func() {
					_ = n.sys.StopLocal(ref.Name, fmt.Sprintf("fenced: node %s recorded it %s (%s)", cur.Writer, cur.State, cur.Cause))
				}()
			}
		}
	}
	n.wmu.Lock()
	if died || restarted {
		for _, w := range n.watchers[cur.Name] {
			select {
			case w <- cur:
			default:
				n.log.Warn("watcher too slow; notice dropped", "actor", cur.Name)
			}
		}
	}
	close(n.changed)
	n.changed = make(chan struct{})
	n.wmu.Unlock()
}

// reconcile is the leader's pass over actors whose node is gone: restart
// them elsewhere while they have restarts left, or mark them DEAD.
func (n *Node) reconcile() {
	if !n.isLeader() {
		return
	}
	n.recMu.Lock()
	defer n.recMu.Unlock()
	now := time.Now()
	if n.settling(now) {
		return // more members may be lost: hasQuorum needs them all
	}
	if !n.hasQuorum(now) {
		n.warn.Warn(n.log, "this node sees fewer than half of the cluster's nodes: it leaves the actors of the nodes it lost as they are until it sees them again or they have been lost "+lostQuorumFor.String(),
			"alive", len(n.aliveIDs()))
		return
	}
	for _, rec := range n.dir.Actors() {
		if rec.State == Dead || n.isRestarting(rec.Name) {
			continue
		}
		if rec.Node != "" && n.isAlive(rec.Node) {
			if nr, ok := n.dir.Node(rec.Node); !ok || !nr.Leaving {
				delete(n.missing, rec.Node)
				continue
			}
			if rec.State != Restarting {
				continue // the leaving node is still stopping it
			}
		}
		if rec.Node != "" && !n.isAlive(rec.Node) {
			first, seen := n.missing[rec.Node]
			if !seen {
				n.missing[rec.Node] = now
				first = now
			}
			// A node we never saw leave may simply not have been seen join
			// yet (gossip lag): give it a grace period.
			if !n.sawLeave(rec.Node) && now.Sub(first) < missingGrace {
				continue
			}
		}
		if n.ownerGone(rec.Owner, now) {
			// Not restarted: its owner is gone too.
			n.bury(rec, "node lost; its owner node "+rec.Owner+" is gone")
			continue
		}
		n.restartOrBury(rec)
	}
	n.reapOrphans(now)
}

// ownerGone reports whether the owner node of an actor or placement group
// is gone: it stopped (its record said it was leaving), or it has been
// missing for its Detection.OwnerGrace, as its record says (a crash looks
// like a false loss at first). Called under recMu.
func (n *Node) ownerGone(owner string, now time.Time) bool {
	if owner == "" || owner == n.id || n.isAlive(owner) {
		delete(n.ownerMissing, owner)
		return false
	}
	grace := n.cfg.Detection.OwnerGrace
	if nr, ok := n.dir.Node(owner); ok {
		if nr.Leaving {
			return true // it stopped without stopping what it owned
		}
		if nr.OwnerGraceMs > 0 {
			grace = min(time.Duration(nr.OwnerGraceMs)*time.Millisecond, MaxOwnerGrace)
		}
	}
	first, seen := n.ownerMissing[owner]
	if !seen {
		// Missing since membership lost it, not since this pass first
		// looked: the passes wait while losses settle (settling), which
		// made a 15 s grace about 20 s.
		first = now
		if at, ok := n.left.Load(owner); ok && at.(time.Time).Before(now) {
			first = at.(time.Time)
		}
		n.ownerMissing[owner] = first
	}
	return now.Sub(first) >= grace
}

// HeldForGoneOwners says what the actors and placement groups of owner
// nodes that are gone hold on live nodes, until the cluster stops them
// (after each owner's grace); empty when nothing is held so. A driver
// about to start where a lost one ran waits for it to be empty.
func (n *Node) HeldForGoneOwners() string { return n.heldForGoneOwners() }

// heldForGoneOwners says, for an error that no node can host a request,
// what the actors and placement groups whose owner node is not alive still
// hold on live nodes: they are stopped once their owner has been gone for its owner
// grace, and the request may fit then. A run's driver killed and resumed
// at once met the bare "no node can host" while its earlier self's actors
// still held the CPUs. Empty when there are none.
func (n *Node) heldForGoneOwners() string {
	held := Resources{}
	owners := map[string]bool{}
	actors, groups := 0, 0
	gone := func(owner string) bool { return owner != "" && owner != n.id && !n.isAlive(owner) }
	for _, rec := range n.dir.Actors() {
		if rec.State == Dead || rec.Group != "" || !gone(rec.Owner) || !n.isAlive(rec.Node) {
			continue
		}
		held = held.Add(rec.Resources)
		owners[rec.Owner] = true
		actors++
	}
	for _, g := range n.dir.Groups() {
		if g.Removed || !gone(g.Owner) {
			continue
		}
		on := false // what its bundles hold on live nodes
		for i, b := range g.Bundles {
			if i < len(g.Nodes) && n.isAlive(g.Nodes[i]) {
				held = held.Add(b.Resources)
				on = true
			}
		}
		if on {
			owners[g.Owner] = true
			groups++
		}
	}
	if actors+groups == 0 {
		return ""
	}
	ids := make([]string, 0, len(owners))
	for id := range owners {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return fmt.Sprintf("%d actor%s and %d placement group%s whose owner node (%s) is not alive hold %s: the cluster stops them once their owner has been gone for its owner grace (rlnode run --owner-grace, 15 s by default), then try again",
		actors, plural(actors), groups, plural(groups), strings.Join(ids, ", "), held)
}

// reapOrphans is the leader's pass over the actors and placement groups
// whose owner node is gone (SpawnOptions.Detached): it stops them, so a
// driver killed mid-run leaves nothing holding the cluster's resources.
// Called under recMu; the stops run apart, one at a time per name.
func (n *Node) reapOrphans(now time.Time) {
	reap := func(key string, stop func(context.Context) error) {
		n.reapMu.Lock()
		if n.reaping[key] {
			n.reapMu.Unlock()
			return
		}
		n.reaping[key] = true
		n.reapMu.Unlock()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := stop(ctx); err != nil && !errors.Is(err, actor.ErrActorNotFound) {
				n.log.Warn("stop what a gone node owned", "what", key, "err", err)
			}
			n.reapMu.Lock()
			delete(n.reaping, key)
			n.reapMu.Unlock()
		}()
	}
	for _, rec := range n.dir.Actors() {
		if rec.State != Alive || rec.Node == "" || !n.ownerGone(rec.Owner, now) {
			continue
		}
		n.log.Info("stopping an actor whose owner node is gone", "actor", rec.Name, "owner", rec.Owner)
		reap("actor "+rec.Name, func(ctx context.Context) error {
			return n.stopActor(ctx, rec.Name, "owner node "+rec.Owner+" gone")
		})
	}
	for _, g := range n.dir.Groups() {
		if g.Removed || !n.ownerGone(g.Owner, now) {
			continue
		}
		n.log.Info("removing a placement group whose owner node is gone", "group", g.ID, "owner", g.Owner)
		reap("group "+g.ID, func(ctx context.Context) error {
			return n.RemovePlacementGroup(ctx, g.ID)
		})
	}
}

const missingGrace = 3 * time.Second

// rewrite is rec as this node writes it anew: the next version, written
// by this node, now, without its note (a rewrite is a change of state,
// SetNote's aside, which sets the note after).
func (n *Node) rewrite(rec ActorRecord) ActorRecord {
	rec.Version++
	rec.Writer, rec.UpdatedMs = n.id, time.Now().UnixMilli()
	rec.Note = ""
	return rec
}

// bury writes rec DEAD with cause, as this node's next version of it.
func (n *Node) bury(rec ActorRecord, cause string) {
	rec = n.rewrite(rec)
	rec.State, rec.Cause = Dead, cause
	n.write(&update{Actors: []ActorRecord{rec}})
}

func (n *Node) restartOrBury(rec ActorRecord) {
	cause := rec.Cause
	if rec.State != Restarting || cause == "" {
		cause = "node lost"
		if nr, ok := n.dir.Node(rec.Node); ok && nr.Leaving {
			cause = "node stopped"
		}
	}
	if rec.State != Restarting {
		if !restartsLeft(rec) {
			n.bury(rec, cause)
			return
		}
		rec = n.rewrite(rec)
		rec.State, rec.Cause, rec.Restarts = Restarting, cause, rec.Restarts+1
		n.write(&update{Actors: []ActorRecord{rec}})
	}
	lostNode := rec.Node
	rec = n.rewrite(rec)
	rec.Node = ""
	n.write(&update{Actors: []ActorRecord{rec}})
	req := spawnRequest{
		Name: rec.Name, Kind: rec.Kind, ArgsType: rec.ArgsType, Args: rec.Args, ArgsAt: rec.ArgsAt, Resources: rec.Resources,
		Labels: rec.Labels, PinNode: rec.PinNode, MaxRestarts: rec.MaxRestarts, MaxConcurrency: rec.MaxConcurrency, MaxCallRetries: rec.MaxCallRetries, Restarts: rec.Restarts,
		BaseVersion: rec.Version, Owner: rec.Owner, RestartTimeoutMs: rec.RestartTimeoutMs, KeepDeadMs: rec.KeepDeadMs,
	}
	if req.PinNode != "" && (req.PinNode == lostNode || !n.isAlive(req.PinNode)) {
		// The pinned node is gone, or stopping (still a member, but the
		// respawn excludes it): any fitting node will do.
		req.PinNode = ""
	}
	if rec.Group != "" {
		node, err := n.replaceBundle(rec.Group, rec.Bundle, lostNode)
		if err != nil {
			n.bury(rec, cause+"; placement group bundle could not be re-placed: "+err.Error())
			return
		}
		req.Group, req.Bundle, req.PinNode = rec.Group, rec.Bundle, node
	}
	// The build may take as long as the actor's RestartTimeout: it runs
	// apart, so that one slow actor does not hold up the others' restarts
	// (reconcile skips it meanwhile).
	n.reapMu.Lock()
	n.restarting[rec.Name] = true
	n.reapMu.Unlock()
	go func() {
		defer func() {
			n.reapMu.Lock()
			delete(n.restarting, rec.Name)
			n.reapMu.Unlock()
		}()
		limit := restartTimeout(rec.RestartTimeoutMs)
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		go func() {
			select {
			case <-n.stopped:
				cancel()
			case <-ctx.Done():
			}
		}()
		// The host records a build abandoned at the deadline DEAD with
		// this cause, and this node's record below may come second.
		late := func() string {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Sprintf("%s; restart did not finish within %v (SpawnOptions.RestartTimeout)", cause, limit)
			}
			return cause + "; restart cancelled: node " + n.id + ", which ran it, stopped"
		}
		if _, err := n.spawnSomewhere(ctx, req, map[string]bool{lostNode: true}, late); err != nil {
			select {
			case <-n.stopped:
				return // the next leader restarts it
			default:
			}
			why := cause + "; restart failed: " + err.Error()
			if ctx.Err() != nil {
				why = late() + ": " + err.Error()
			}
			cur, _ := n.dir.Actor(rec.Name)
			n.bury(cur, why)
			return
		}
		n.log.Info("actor restarted after node loss", "actor", rec.Name, "lost_node", lostNode, "restarts", rec.Restarts)
	}()
}

// isRestarting says whether this node is restarting the named actor now.
func (n *Node) isRestarting(name string) bool {
	n.reapMu.Lock()
	defer n.reapMu.Unlock()
	return n.restarting[name]
}

// restartTimeout is the bound of a restart after node loss for an actor
// whose record says ms (SpawnOptions.RestartTimeout; 0: the default).
func restartTimeout(ms int64) time.Duration {
	if ms <= 0 {
		return DefaultRestartTimeout
	}
	return min(time.Duration(ms)*time.Millisecond, MaxRestartTimeout)
}

func (n *Node) sawLeave(id string) bool {
	_, ok := n.left.Load(id)
	return ok
}

// othersLeft says whether a node not in exclude is in the view.
func (n *Node) othersLeft(exclude map[string]bool) bool {
	for _, v := range n.Views() {
		if !exclude[v.ID] {
			return true
		}
	}
	return false
}
