package ctxopt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
)

// ExecutorKind is the actor kind of a workflow executor on a cluster node:
// spawned with ExecutorArgs, it answers RunJobs with JobOutcomes.
const ExecutorKind = "ctxopt.executor"

// ExecutorArgs build a remote executor: the recipe file's bytes (the node
// builds the executor from its executor, space and reward sections).
type ExecutorArgs struct {
	File   string
	Recipe []byte
}

// RunJobs asks an executor actor to run jobs.
type RunJobs struct{ Jobs []Job }

// JobOutcomes answers RunJobs, in order.
type JobOutcomes struct{ Outcomes []Outcome }

// maxChunkTime bounds one RunJobs on an actor.
const maxChunkTime = 10 * time.Minute

func init() {
	actor.RegisterMessage(ExecutorArgs{}, RunJobs{}, JobOutcomes{})
	actor.RegisterKind(ExecutorKind, func(_ *actor.Context, args any) (actor.Actor, error) {
		a, ok := args.(ExecutorArgs)
		if !ok {
			return nil, fmt.Errorf("%s: spawn arguments are %T, want ExecutorArgs", ExecutorKind, args)
		}
		r, err := ParseRecipe(a.File, a.Recipe)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		x, err := r.NewExecutor(ctx)
		if err != nil {
			return nil, err
		}
		return &executorActor{x: x}, nil
	})
}

type executorActor struct{ x *Executor }

func (a *executorActor) Receive(_ *actor.Context, msg any) (any, error) {
	m, ok := msg.(RunJobs)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected %T", ExecutorKind, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), maxChunkTime)
	defer cancel()
	outs, err := a.x.RunBatch(ctx, m.Jobs)
	if err != nil {
		return nil, err
	}
	return JobOutcomes{Outcomes: outs}, nil
}

// Stopped implements actor.Stopper: the engine is released.
func (a *executorActor) Stopped(*actor.Context) { a.x.Engine.Close() }

// ExecutorPool runs batches on executor actors: a batch is cut into one
// chunk per replica, sent through a cluster.Pool (fewest outstanding calls
// first), and the outcomes put back in order. Jobs carry their seeds, so
// the outcomes are those a local executor would give.
type ExecutorPool struct {
	pool    *cluster.Pool
	handles []*cluster.Handle
}

// StartExecutors spawns one executor actor of recipe r on each of nodes
// (node ids), named prefix-i.
func StartExecutors(ctx context.Context, n *cluster.Node, r *Recipe, prefix string, nodes []string) (*ExecutorPool, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("start executors: no nodes")
	}
	p := &ExecutorPool{}
	for i, node := range nodes {
		h, err := n.Spawn(ctx, ExecutorKind, cluster.SpawnOptions{Name: fmt.Sprintf("%s-%d", prefix, i), Node: node,
			Args: ExecutorArgs{File: r.file, Recipe: r.source}})
		if err != nil {
			p.Close(ctx)
			return nil, fmt.Errorf("start executor on node %s: %w", node, err)
		}
		p.handles = append(p.handles, h)
	}
	pool, err := cluster.NewPool(p.handles...)
	if err != nil {
		p.Close(ctx)
		return nil, err
	}
	p.pool = pool
	return p, nil
}

// Close stops the executor actors.
func (p *ExecutorPool) Close(ctx context.Context) {
	for _, h := range p.handles {
		h.Stop(ctx)
	}
}

// RunBatch implements Runner.
func (p *ExecutorPool) RunBatch(ctx context.Context, jobs []Job) ([]Outcome, error) {
	k := min(p.pool.Size(), len(jobs))
	out := make([]Outcome, len(jobs))
	errs := make([]error, k)
	var wg sync.WaitGroup
	for c := range k {
		lo, hi := c*len(jobs)/k, (c+1)*len(jobs)/k
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.pool.Call(ctx, RunJobs{Jobs: jobs[lo:hi]})
			if err != nil {
				errs[c] = err
				return
			}
			o, ok := res.(JobOutcomes)
			if !ok || len(o.Outcomes) != hi-lo {
				errs[c] = fmt.Errorf("executor answered %T with %d outcomes for %d jobs", res, len(o.Outcomes), hi-lo)
				return
			}
			copy(out[lo:hi], o.Outcomes)
		}()
	}
	wg.Wait()
	for c, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("jobs %d..%d: %w", c*len(jobs)/k, (c+1)*len(jobs)/k-1, err)
		}
	}
	return out, nil
}
