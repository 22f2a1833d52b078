package ctxopt

import (
	"context"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/actor"
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
	actor.RegisterKind(ExecutorKind, func(actx *actor.Context, args any) (actor.Actor, error) {
		a, ok := args.(ExecutorArgs)
		if !ok {
			return nil, fmt.Errorf("%s: spawn arguments are %T, want ExecutorArgs", ExecutorKind, args)
		}
		r, err := ParseRecipe(a.File, a.Recipe)
		if err != nil {
			return nil, err
		}
		// The node's stop ends the build (the executor model's load).
		ctx, cancel := context.WithTimeout(actx.Context(), time.Minute)
		defer cancel()
		x, err := r.NewExecutor(ctx)
		if err != nil {
			return nil, err
		}
		return &executorActor{x: x}, nil
	})
}

type executorActor struct{ x *Executor }

func (a *executorActor) Receive(actx *actor.Context, msg any) (any, error) {
	m, ok := msg.(RunJobs)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected %T", ExecutorKind, msg)
	}
	// A stop of the actor (its pool's Close, its node's stop) ends the jobs.
	ctx, cancel := context.WithTimeout(actx.Context(), maxChunkTime)
	defer cancel()
	outs, err := a.x.RunBatch(ctx, m.Jobs)
	if err != nil {
		return nil, err
	}
	return JobOutcomes{Outcomes: outs}, nil
}

// Stopped implements actor.Stopper: the engine is released.
func (a *executorActor) Stopped(*actor.Context) { a.x.Engine.Close() }
