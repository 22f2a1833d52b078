package ctxopt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// ExecutorKind is the actor kind of a workflow executor on a cluster node:
// spawned with ExecutorArgs, it runs jobs submitted with SubmitJobs in the
// background, one chunk at a time, and answers CollectJobs at once, so a
// caller tells an executor busy with a slow chunk (its calls answered)
// from one that stopped answering (ExecutorPool drops it). RunJobs runs
// jobs and answers only when they are done.
const ExecutorKind = "ctxopt.executor"

// ExecutorArgs build a remote executor: the recipe file's bytes (the node
// builds the executor from its executor, space and reward sections).
type ExecutorArgs struct {
	File   string
	Recipe []byte
}

// RunJobs asks an executor actor to run jobs and answer with their
// JobOutcomes once done; the actor answers nothing else meanwhile.
type RunJobs struct{ Jobs []Job }

// JobOutcomes answers RunJobs, in order.
type JobOutcomes struct{ Outcomes []Outcome }

// SubmitJobs asks an executor actor to run jobs in the background under
// the caller's ID (unique per caller; a submit repeated with the same ID,
// as after a call that went unanswered, starts nothing more). Answered
// with JobsAccepted; the outcomes with CollectJobs.
type SubmitJobs struct {
	ID   string
	Jobs []Job
	// Idle is how long the jobs run on with no CollectJobs for them
	// before the actor takes them for abandoned (their caller gone) and
	// stops them; 0 means 2 min. Running jobs have no other bound: a
	// slow execution is bounded by its engine's and tools' own timeouts.
	Idle time.Duration
}

// JobsAccepted answers SubmitJobs.
type JobsAccepted struct{ ID string }

// CollectJobs asks for the outcomes of submitted jobs: JobsCollected, not
// Done while they run. Once Done the actor forgets them; a job that failed
// is answered as the actor's error.
type CollectJobs struct{ ID string }

// JobsCollected answers CollectJobs.
type JobsCollected struct {
	Done     bool
	Outcomes []Outcome
}

// CancelJobs (a Tell) stops and forgets submitted jobs whose outcomes the
// caller no longer wants.
type CancelJobs struct{ ID string }

// Texts of the executor actor's answers that its pool acts on: they cross
// node boundaries as error text.
const (
	msgNoJobs          = "no jobs" // never submitted, collected, or forgotten
	msgExecutorStopped = "executor stopped"
)

const (
	// executorBuildTime bounds the build of an executor actor's executor
	// (its model's load, its engine's check).
	executorBuildTime = time.Minute
	// maxChunkTime bounds one RunJobs on an actor.
	maxChunkTime = 10 * time.Minute
	// maxHeldJobs bounds the chunks an executor actor holds, running,
	// waiting or done and not yet collected.
	maxHeldJobs = 64
	// heldJobsTTL is how long finished jobs nobody collected are kept.
	heldJobsTTL = 10 * time.Minute
	// defaultIdle is SubmitJobs.Idle's default.
	defaultIdle = 2 * time.Minute
)

func init() {
	actor.RegisterMessage(ExecutorArgs{}, RunJobs{}, JobOutcomes{}, SubmitJobs{}, JobsAccepted{}, CollectJobs{}, JobsCollected{}, CancelJobs{})
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
		ctx, cancel := context.WithTimeout(actx.Context(), executorBuildTime)
		defer cancel()
		x, err := r.NewExecutor(ctx)
		if err != nil {
			return nil, err
		}
		life, stop := context.WithCancel(actx.Context())
		return &executorActor{x: x, life: life, stop: stop, slot: make(chan struct{}, 1), jobs: map[string]*heldJobs{}}, nil
	})
}

type executorActor struct {
	x *Executor
	// life ends with the actor's (a stop) or in Stopped, whichever comes
	// first: it ends the submitted jobs.
	life context.Context
	stop context.CancelFunc
	slot chan struct{} // one chunk runs at a time, as RunJobs did
	wg   sync.WaitGroup

	mu   sync.Mutex
	jobs map[string]*heldJobs
}

// heldJobs is one submitted chunk.
type heldJobs struct {
	cancel context.CancelFunc
	polled time.Time // the submit or the last CollectJobs
	done   bool
	ended  time.Time
	outs   []Outcome
	err    error
}

func (a *executorActor) Receive(actx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case RunJobs:
		// A stop of the actor (its pool's Close, its node's stop) ends the jobs.
		ctx, cancel := context.WithTimeout(actx.Context(), maxChunkTime)
		defer cancel()
		outs, err := a.x.RunBatch(ctx, m.Jobs)
		if err != nil {
			return nil, err
		}
		return JobOutcomes{Outcomes: outs}, nil
	case SubmitJobs:
		return a.submit(actx, m)
	case CollectJobs:
		return a.collect(m.ID)
	case CancelJobs:
		a.mu.Lock()
		if j, ok := a.jobs[m.ID]; ok {
			j.cancel()
			delete(a.jobs, m.ID)
		}
		a.mu.Unlock()
		return nil, nil
	}
	return nil, fmt.Errorf("%s: unexpected %T", ExecutorKind, msg)
}

func (a *executorActor) submit(actx *actor.Context, m SubmitJobs) (JobsAccepted, error) {
	if m.ID == "" {
		return JobsAccepted{}, fmt.Errorf("%s: submit without an ID", ExecutorKind)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if j, ok := a.jobs[m.ID]; ok {
		j.polled = time.Now()
		return JobsAccepted{ID: m.ID}, nil
	}
	for id, j := range a.jobs {
		if j.done && time.Since(j.ended) > heldJobsTTL {
			delete(a.jobs, id)
		}
	}
	if len(a.jobs) >= maxHeldJobs {
		return JobsAccepted{}, fmt.Errorf("%s %s: %d chunks held already (at most %d)", ExecutorKind, actx.Self().Name, len(a.jobs), maxHeldJobs)
	}
	idle := m.Idle
	if idle <= 0 {
		idle = defaultIdle
	}
	idle = max(idle, time.Second)
	// A stop of the actor (its pool's Close, its node's stop) ends the jobs.
	ctx, cancel := context.WithCancel(a.life)
	j := &heldJobs{cancel: cancel, polled: time.Now()}
	a.jobs[m.ID] = j
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer cancel()
		done := make(chan struct{})
		var outs []Outcome
		var err error
		go func() {
			defer close(done)
			select {
			case a.slot <- struct{}{}:
				outs, err = a.x.RunBatch(ctx, m.Jobs)
				<-a.slot
			case <-ctx.Done():
				err = ctx.Err()
			}
		}()
		tick := time.NewTicker(idle / 4)
		defer tick.Stop()
		abandoned := false
		for running := true; running; {
			select {
			case <-done:
				running = false
			case <-tick.C:
				a.mu.Lock()
				abandoned = time.Since(j.polled) > idle
				a.mu.Unlock()
				if abandoned {
					cancel()
					<-done
					running = false
				}
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case abandoned:
			// Nobody collects them: forget them.
			if a.jobs[m.ID] == j {
				delete(a.jobs, m.ID)
			}
			return
		case err != nil && a.life.Err() != nil:
			err = fmt.Errorf("%s: %w", msgExecutorStopped, err)
		}
		j.done, j.ended, j.outs, j.err = true, time.Now(), outs, err
	}()
	return JobsAccepted{ID: m.ID}, nil
}

func (a *executorActor) collect(id string) (JobsCollected, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j, ok := a.jobs[id]
	switch {
	case !ok:
		return JobsCollected{}, fmt.Errorf("%s: %s %q (never submitted, already collected, or forgotten)", ExecutorKind, msgNoJobs, id)
	case !j.done:
		j.polled = time.Now()
		return JobsCollected{}, nil
	}
	delete(a.jobs, id)
	if j.err != nil {
		return JobsCollected{}, j.err
	}
	return JobsCollected{Done: true, Outcomes: j.outs}, nil
}

// Stopped implements actor.Stopper: the running jobs end (the actor's
// context is done), then the engine is released.
func (a *executorActor) Stopped(*actor.Context) {
	a.stop()
	a.wg.Wait()
	a.x.Engine.Close()
}
