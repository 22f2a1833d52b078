package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// Tasks are functions run once on some node of the cluster, as Ray's
// remote functions: RegisterTask names one on every node that may run it
// (as kinds are registered), Submit places a call of it by its resources
// and returns a Future. The node that runs it charges the resources for
// as long as it runs, so tasks queue when the cluster is full. A task
// whose node is lost or stops runs again elsewhere (at least once, not
// exactly once: give idempotent functions MaxRetries); its own error is
// returned as it is, as an *actor.ActorError.

// TaskOptions place and bound one task.
type TaskOptions struct {
	// Resources it holds while it runs; nil: one CPU, as Ray's default.
	Resources Resources
	// Labels a node must carry; Node pins it to one node.
	Labels map[string]string
	Node   string
	// MaxRetries is how many times it runs again after its node was lost
	// mid-run, or stuck (0: never; the task failed with actor.ErrNodeLost,
	// actor.ErrConnLost or ErrNodeUnresponsive then; a stuck node is told
	// to cancel it, should it come back). A node that stops gracefully
	// hands its tasks back without counting.
	MaxRetries int
}

type taskFunc func(ctx context.Context, args any) (any, error)

var tasks = struct {
	sync.RWMutex
	fns map[string]taskFunc
	// types are each task's argument and result types, for Submit's
	// checks before anything runs.
	types map[string][2]reflect.Type
}{fns: map[string]taskFunc{}, types: map[string][2]reflect.Type{}}

// RegisterTask registers fn as task name in this process, and A and R as
// messages (actor.RegisterMessage), unless they are interface types.
// Every node that may run it registers it, as kinds are registered; the
// submitter registers it too, for the types.
func RegisterTask[A, R any](name string, fn func(ctx context.Context, args A) (R, error)) {
	var a A
	var r R
	for _, ex := range []any{a, r} {
		if ex != nil {
			actor.RegisterMessage(ex)
		}
	}
	tasks.Lock()
	defer tasks.Unlock()
	tasks.types[name] = [2]reflect.Type{reflect.TypeFor[A](), reflect.TypeFor[R]()}
	tasks.fns[name] = func(ctx context.Context, args any) (any, error) {
		a, ok := args.(A)
		if !ok && args != nil {
			var want A
			return nil, fmt.Errorf("task %s takes %T arguments, got %T", name, want, args)
		}
		return fn(ctx, a)
	}
}

type taskRequest struct {
	ID       string
	Name     string
	ArgsType string
	Args     []byte
	// ArgsAt replaces Args over InlineArgsMax: they stay on the
	// submitter's bulk path for the node to fetch.
	ArgsAt    *actor.BulkRef `msgpack:",omitempty"`
	Resources Resources
	Labels    map[string]string
}

type taskReply struct {
	ResultType string
	Result     []byte
	// ResultAt replaces Result over InlineArgsMax: offered once on the
	// node's bulk path for the submitter to fetch.
	ResultAt *actor.BulkRef `msgpack:",omitempty"`
	// Err is the node's refusal or the task's error; Retry says another
	// node may run it (this one is full or stopping), Own that the task
	// function itself failed.
	Err   string
	Retry bool
	Own   bool
	// Node is the answering node's record, as it stands after the refusal
	// or after the task ended and gave its resources back (as okReply.Node).
	Node *NodeRecord `msgpack:",omitempty"`
	// Elsewhere: this node's program has not registered the task or its
	// arguments' type (spawnReply.Elsewhere): another node's may.
	Elsewhere bool `msgpack:",omitempty"`
}

type taskCancel struct{ ID string }

func init() { actor.RegisterMessage(taskRequest{}, taskReply{}, taskCancel{}) }

// Future is a submitted task's or an actor call's result to come.
type Future[R any] struct {
	done   chan struct{}
	res    R
	err    error
	cancel context.CancelFunc // nil for a future that failed before it began
}

// Cancel gives the call or task up, as Ray's ray.cancel: a call still in
// its actor's mailbox is dropped without running and a running one sees
// its Context end (actor.ErrCallCancelled); a task's context is cancelled
// on its node. The Future then fails with context.Canceled, unless its
// result was in first. Cancelling twice, or a done Future, does nothing.
func (f *Future[R]) Cancel() {
	if f != nil && f.cancel != nil {
		f.cancel()
	}
}

// Done is closed once the result (or the error) is in.
func (f *Future[R]) Done() <-chan struct{} { return f.done }

// Get waits for the result within ctx. A result already in is returned
// whatever ctx's state.
func (f *Future[R]) Get(ctx context.Context) (R, error) {
	select {
	case <-f.done:
		return f.res, f.err
	default:
	}
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// Gather waits for every future, within ctx, and returns their results
// in order, or the first error met in that order.
func Gather[R any](ctx context.Context, fs []*Future[R]) ([]R, error) {
	if err := checkFutures(fs); err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	out := make([]R, len(fs))
	for i, f := range fs {
		r, err := f.Get(ctx)
		if err != nil {
			return nil, fmt.Errorf("future %d of %d: %w", i, len(fs), err)
		}
		out[i] = r
	}
	return out, nil
}

// Wait waits, within ctx, until n of fs are done (all of them when n is
// more), and splits fs into n done ones and the rest, each in fs's order:
// Ray's ray.wait(refs, num_returns=n), for a program that handles results
// as they come in (ready's Get returns at once; pending may hold more
// that are done by now). When ctx ends first, ready is what is done by
// then, fewer than n, and err is ctx's error.
func Wait[R any](ctx context.Context, fs []*Future[R], n int) (ready, pending []*Future[R], err error) {
	if err := checkFutures(fs); err != nil {
		return nil, nil, fmt.Errorf("wait: %w", err)
	}
	n = min(n, len(fs))
	cases := make(chan int, len(fs))
	stop := make(chan struct{})
	defer close(stop)
	for i, f := range fs {
		go func() {
			select {
			case <-f.done:
				cases <- i
			case <-stop:
			}
		}()
	}
	for got := 0; got < n; got++ {
		select {
		case <-cases:
		case <-ctx.Done():
			err = ctx.Err()
			got = n
		}
	}
	for _, f := range fs {
		select {
		case <-f.done:
			if len(ready) < n {
				ready = append(ready, f)
				continue
			}
		default:
		}
		pending = append(pending, f)
	}
	if len(ready) == n {
		err = nil // done by the time ctx's end was seen
	}
	return ready, pending, err
}

// checkFutures refuses a nil future, which no call or task made.
func checkFutures[R any](fs []*Future[R]) error {
	for i, f := range fs {
		if f == nil || f.done == nil {
			return fmt.Errorf("future %d of %d is nil, not one CallAsync or Submit made", i, len(fs))
		}
	}
	return nil
}

// CallAsync is Call in the background: the Future of h's reply to msg,
// bounded by ctx. Calls to many actors at once, collected with Gather,
// are Ray's ray.get([a.f.remote() for a in actors]).
func CallAsync[R any](ctx context.Context, h *Handle, msg any) *Future[R] {
	ctx, cancel := context.WithCancel(ctx)
	f := &Future[R]{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(f.done)
		defer cancel()
		f.res, f.err = Call[R](ctx, h, msg)
	}()
	return f
}

// Submit runs task name with args on a node that fits o, as n places it,
// and returns at once. ctx bounds the whole task, its waits for room and
// its retries; when it ends, the running task's context is cancelled on
// its node. A request that no node could ever fit fails at once, saying
// what every node offers; one that fits but finds every such node busy
// waits for room.
func Submit[R any](ctx context.Context, n *Node, name string, args any, o TaskOptions) *Future[R] {
	f := &Future[R]{done: make(chan struct{})}
	if err := checkTaskTypes(name, args, reflect.TypeFor[R]()); err != nil {
		// Known wrong before it runs: a task that ran would have done its
		// work for a result the caller cannot take.
		f.err = err
		close(f.done)
		return f
	}
	ctx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	go func() {
		defer close(f.done)
		defer cancel()
		v, err := n.runTask(ctx, name, args, o)
		if err != nil {
			f.err = err
			return
		}
		r, ok := v.(R)
		if !ok && v != nil {
			f.err = fmt.Errorf("task %s: result is %T, not %T", name, v, f.res)
			return
		}
		f.res = r
	}()
	return f
}

// checkTaskTypes refuses a Submit whose arguments or result type do not
// fit task name as this process registered it (a task this process does
// not know is left to the nodes).
func checkTaskTypes(name string, args any, result reflect.Type) error {
	tasks.RLock()
	ts, ok := tasks.types[name]
	tasks.RUnlock()
	if !ok {
		return nil
	}
	if args != nil && !reflect.TypeOf(args).AssignableTo(ts[0]) {
		return fmt.Errorf("task %s takes %v arguments, not %T", name, ts[0], args)
	}
	if ts[1].Kind() != reflect.Interface && !ts[1].AssignableTo(result) {
		return fmt.Errorf("task %s returns %v, not %v (Submit's type parameter)", name, ts[1], result)
	}
	return nil
}

// MaxTaskBytes bounds a task's arguments and its result, encoded. Those
// over InlineArgsMax travel on the bulk path, not in the messages.
const MaxTaskBytes = 1 << 30

// taskResultTTL is how long a large result waits for its submitter.
const taskResultTTL = 10 * time.Minute

// taskRoomPoll is how often a task that found no free room looks again
// when no node record changed meanwhile (membership may have).
const taskRoomPoll = time.Second

func (n *Node) runTask(ctx context.Context, name string, args any, o TaskOptions) (any, error) {
	if o.MaxRetries < 0 {
		return nil, fmt.Errorf("task %s: MaxRetries %d is negative", name, o.MaxRetries)
	}
	res := o.Resources
	if res == nil {
		res = Resources{CPU: 1}
	}
	if err := res.Check(); err != nil {
		return nil, fmt.Errorf("task %s: %w", name, err)
	}
	at, body, err := actor.EncodeMessage(args)
	if err != nil {
		return nil, fmt.Errorf("task %s: arguments: %w", name, err)
	}
	if len(body) > MaxTaskBytes {
		return nil, fmt.Errorf("task %s: arguments: %s of %d bytes encoded, over the %d-byte bound: pass what the task can read itself (a path, a bulk reference)", name, at, len(body), MaxTaskBytes)
	}
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	req := taskRequest{ID: hex.EncodeToString(raw[:]), Name: name, ArgsType: at, Args: body, Resources: res, Labels: o.Labels}
	if len(body) > InlineArgsMax {
		// Fetched by each node that runs it; withdrawn once it is done.
		ref := n.sys.Bulk().Offer(body, math.MaxInt32, 24*time.Hour)
		defer n.sys.Bulk().Release(ref)
		req.Args, req.ArgsAt = nil, &ref
	}
	want := Request{Resources: res, Labels: o.Labels, Node: o.Node}
	retries := 0
	// avoid: nodes that refused it for want of room, until it next waits
	// for room; lost: nodes it was lost with, for good.
	avoid, lost := map[string]bool{}, map[string]bool{}
	var lostErr error   // the last loss
	var cannot []string // refusals of nodes whose program lacks the task (Elsewhere)
	for {
		// Taken before placing, so a change in between is not missed.
		changes := n.dir.nodeChanges()
		target, err := n.placeTask(want, avoid, lost)
		if err != nil && len(cannot) > 0 {
			rest := ""
			for _, v := range n.Views() {
				if !lost[v.ID] {
					rest = fmt.Sprintf("; the other nodes do not fit: %v", err)
					break
				}
			}
			return nil, fmt.Errorf("task %s: no node that fits can run it: %s%s", name, strings.Join(cannot, "; "), rest)
		}
		if err != nil && lostErr != nil {
			// Say the loss, which callers test for (errors.Is), not only
			// that the task's pinned node or labels fit nowhere else.
			return nil, fmt.Errorf("task %s (retry %d of %d): %w; no other node can run it: %v", name, retries, o.MaxRetries, lostErr, err)
		}
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", name, err)
		}
		if target == "" {
			// Room on none now: wait for a node's record to change (room
			// freed here, or gossip of it from elsewhere), or a while.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("task %s: waiting for %s of free room: %w", name, res, ctx.Err())
			case <-changes:
			case <-time.After(taskRoomPoll):
			}
			clear(avoid)
			continue
		}
		nref, err := n.nodeRef(target)
		if err != nil {
			avoid[target] = true
			continue
		}
		rep, err := actor.CallAs[taskReply](ctx, n.sys, nref, req)
		if err == nil && rep.Node != nil && rep.Node.ID == target {
			// The node as it stands after refusing or running the task.
			n.dir.merge(&update{Nodes: []NodeRecord{*rep.Node}})
		}
		switch {
		case err != nil && ctx.Err() != nil:
			_ = n.sys.Tell(nref, taskCancel{ID: req.ID})
			return nil, fmt.Errorf("task %s on node %s: %w", name, target, err)
		case err != nil && (errors.Is(err, actor.ErrConnLost) || errors.Is(err, actor.ErrNodeLost) || errors.Is(err, ErrNodeUnresponsive)):
			if errors.Is(err, ErrNodeUnresponsive) {
				_ = n.sys.Tell(nref, taskCancel{ID: req.ID}) // should it come back to life
			}
			if retries >= o.MaxRetries {
				return nil, fmt.Errorf("task %s on node %s (after %d retries): %w", name, target, retries, err)
			}
			retries++
			lost[target] = true
			lostErr = fmt.Errorf("lost with node %s: %w", target, err)
			n.log.Warn("task lost with its node; running it again", "task", name, "node", target, "retry", retries, "err", err)
		case err != nil:
			return nil, fmt.Errorf("task %s on node %s: %w", name, target, err)
		case rep.Own:
			return nil, &actor.ActorError{Message: fmt.Sprintf("task %s on node %s: %s", name, target, rep.Err)}
		case rep.Elsewhere && !registeredTask(name):
			// Not this program's task either: a name no node may have (a
			// typo), not a node of another program. Said at once, rather
			// than waiting for room on busy nodes to be refused there too.
			return nil, fmt.Errorf("task %s (not registered in this process either): %s", name, rep.Err)
		case rep.Elsewhere:
			// Left out for good, as a lost node is; not a retry.
			lost[target] = true
			cannot = append(cannot, rep.Err)
		case rep.Err != "" && rep.Retry:
			// Refused for want of room (the view was stale: the node's own
			// record comes with it) or handed back by a stopping node.
			// Neither counts: each try avoids that node until the task
			// next waits, and it waits for a record to change.
			avoid[target] = true
		case rep.Err != "":
			return nil, fmt.Errorf("task %s: %s", name, rep.Err)
		default:
			raw := rep.Result
			if rep.ResultAt != nil {
				if raw, err = n.sys.Bulk().Fetch(ctx, *rep.ResultAt); err != nil {
					return nil, fmt.Errorf("task %s on node %s: fetch the result: %w", name, target, err)
				}
			}
			v, err := actor.DecodeMessage(rep.ResultType, raw)
			if err != nil {
				return nil, fmt.Errorf("task %s on node %s: result: %w", name, target, err)
			}
			return v, nil
		}
	}
}

// placeTask picks the node for a task among those in neither avoid nor
// lost: "" when some node not in lost could fit it but none has the room
// free now; an error when none ever could.
func (n *Node) placeTask(want Request, avoid, lost map[string]bool) (string, error) {
	var all, views []NodeView
	for _, v := range n.Views() {
		if !lost[v.ID] {
			all = append(all, v)
		}
		if !lost[v.ID] && !avoid[v.ID] {
			views = append(views, v)
		}
	}
	if id, err := PlaceOne(views, want); err == nil {
		return id, nil
	}
	for _, v := range all {
		if (want.Node == "" || v.ID == want.Node) && matchLabels(v.Labels, want.Labels) && v.Total.Covers(want.Resources) {
			return "", nil
		}
	}
	return "", infeasibleOne(all, want)
}

// hostTask is the node actor's part of a task: charge its resources, run
// it off the loop, answer later.
func (n *Node) hostTask(ctx *actor.Context, m taskRequest) (any, error) {
	refuse := func(retry bool, format string, a ...any) (any, error) {
		rep := taskReply{Err: fmt.Sprintf("node %s: ", n.id) + fmt.Sprintf(format, a...), Retry: retry}
		if retry {
			n.publishNode()
			if rec, ok := n.dir.Node(n.id); ok {
				rep.Node = &rec
			}
		}
		return rep, nil
	}
	if n.stopping() {
		return refuse(true, "stopping")
	}
	tasks.RLock()
	fn := tasks.fns[m.Name]
	tasks.RUnlock()
	if fn == nil {
		rep, _ := refuse(false, "no task %q is registered here (cluster.RegisterTask on every node)", m.Name)
		r := rep.(taskReply)
		r.Elsewhere = true
		return r, nil
	}
	if !matchLabels(n.cfg.Labels, m.Labels) {
		return refuse(true, "labels %s, not %s", fmtLabels(n.cfg.Labels), fmtLabels(m.Labels))
	}
	var args any
	if m.ArgsAt == nil {
		var err error
		if args, err = actor.DecodeMessage(m.ArgsType, m.Args); err != nil {
			rep, _ := refuse(false, "task %s: arguments: %v", m.Name, err)
			r := rep.(taskReply)
			r.Elsewhere = errors.Is(err, actor.ErrUnregistered)
			return r, nil
		}
	}
	key := "task/" + m.ID
	if err := n.ledger.acquire(key, m.Resources, "", 0); err != nil {
		return refuse(errors.Is(err, ErrInfeasible), "%v", err)
	}
	tctx, cancel := context.WithCancel(context.WithValue(context.Background(), nodeKey{}, n))
	if gpus := n.ledger.gpusOf(key); gpus != nil {
		tctx = context.WithValue(tctx, taskGPUsKey{}, gpus)
	}
	n.tmu.Lock()
	if n.tasks == nil {
		n.tasks = map[string]context.CancelFunc{}
	}
	n.tasks[m.ID] = cancel
	n.tmu.Unlock()
	n.publishNode()
	reply := ctx.ReplyLater()
	go func() {
		var v any
		var err error
		if m.ArgsAt != nil {
			// Off the node actor's loop: fetched, then decoded.
			var raw []byte
			if raw, err = n.sys.Bulk().Fetch(tctx, *m.ArgsAt); err != nil {
				err = fmt.Errorf("fetch the task's arguments: %w", err)
			} else if args, err = actor.DecodeMessage(m.ArgsType, raw); err != nil {
				err = fmt.Errorf("arguments: %w", err)
			}
		}
		if err == nil {
			v, err = runTaskFunc(tctx, fn, args)
		}
		cancel()
		n.tmu.Lock()
		delete(n.tasks, m.ID)
		n.tmu.Unlock()
		n.ledger.release(key)
		n.publishNode()
		// Every answer carries this node's record, the task's resources
		// given back: the submitter's next placement counts them at once
		// (gossip brings them a little later).
		var own *NodeRecord
		if rec, ok := n.dir.Node(n.id); ok {
			own = &rec
		}
		switch {
		case err != nil && n.stopping():
			reply.Send(taskReply{Err: fmt.Sprintf("node %s stopped while task %s ran", n.id, m.Name), Retry: true, Node: own}, nil)
		case err != nil:
			reply.Send(taskReply{Err: err.Error(), Own: true, Node: own}, nil)
		default:
			rt, rb, err := actor.EncodeMessage(v)
			switch {
			case err != nil:
				reply.Send(taskReply{Err: fmt.Sprintf("result: %v", err), Own: true, Node: own}, nil)
			case len(rb) > MaxTaskBytes:
				reply.Send(taskReply{Err: fmt.Sprintf("result: %s of %d bytes encoded, over the %d-byte bound", rt, len(rb), MaxTaskBytes), Own: true, Node: own}, nil)
			case len(rb) > InlineArgsMax:
				ref := n.sys.Bulk().Offer(rb, 1, taskResultTTL)
				reply.Send(taskReply{ResultType: rt, ResultAt: &ref, Node: own}, nil)
			default:
				reply.Send(taskReply{ResultType: rt, Result: rb, Node: own}, nil)
			}
		}
	}()
	return nil, nil
}

// registeredTask says whether this process registered task name.
func registeredTask(name string) bool {
	tasks.RLock()
	defer tasks.RUnlock()
	return tasks.fns[name] != nil
}

// runTaskFunc runs fn, a panic in it becoming its error.
func runTaskFunc(ctx context.Context, fn taskFunc, args any) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return fn(ctx, args)
}

// runningTasks is how many tasks run here.
func (n *Node) runningTasks() int {
	n.tmu.Lock()
	defer n.tmu.Unlock()
	return len(n.tasks)
}

// cancelTask cancels the running task id, if it runs here.
func (n *Node) cancelTask(id string) {
	n.tmu.Lock()
	cancel := n.tasks[id]
	n.tmu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// cancelTasks cancels every task running here (the node stops); their
// submitters run them elsewhere.
func (n *Node) cancelTasks() {
	n.tmu.Lock()
	defer n.tmu.Unlock()
	for _, cancel := range n.tasks {
		cancel()
	}
}

// waitTasks waits up to max for the tasks running here to end, so their
// submitters hear that this node stopped (and run them elsewhere) before
// it leaves.
func (n *Node) waitTasks(max time.Duration) {
	for deadline := time.Now().Add(max); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		n.tmu.Lock()
		k := len(n.tasks)
		n.tmu.Unlock()
		if k == 0 {
			return
		}
	}
}
