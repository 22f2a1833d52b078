package train

// One RL step's multi-turn episodes, played in the background so that an
// asynchronous run (MaxStaleness k > 0) plays the episodes of steps
// t+1..t+k, all turns, one batch after another, while step t trains.

import (
	"context"
	"time"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/weightsync"
)

// episodeBatch is one RL step's problems and, once done is closed, their
// played and scored episodes.
type episodeBatch struct {
	x          *rollouts
	firstGroup int   // data cursor of x.probs[0]: the problems' group ids
	onPolicy   int64 // the weight version on-policy for this batch
	done       chan struct{}
	err        error
	genSeconds float64
}

// lowestVersion is the oldest weight version among the batch's samples,
// every turn's (the feedback policy's versions count the run's steps as
// the solver's do).
func (b *episodeBatch) lowestVersion() int64 {
	low := lowestVersion(b.x.first)
	for _, res := range [][]engine.Result{b.x.fb, b.x.final} {
		if len(res) > 0 {
			low = min(low, lowestVersion(res))
		}
	}
	return low
}

// stepEngineOf is what a batch whose on-policy version is onPolicy
// generates with on policy p: its server bound to that version.
func stepEngineOf(p *policy, onPolicy int64) *policyEngine {
	if p == nil {
		return nil
	}
	return &policyEngine{Engine: weightsync.AtVersion(p.server, onPolicy), tok: p.tok}
}

// startEpisodes draws the next PromptsPerStep problems and their sampling
// seeds (here, so that the data cursor moves in step order and the seeds
// are those of a synchronous run) and plays their episodes in the
// background for the batch whose on-policy version is onPolicy, once after
// is closed (the batch drawn before it has played; nil: at once).
func (r *run) startEpisodes(ctx context.Context, onPolicy int64, after <-chan struct{}) (*episodeBatch, error) {
	cfg := r.cfg
	b := &episodeBatch{firstGroup: r.cursor, onPolicy: onPolicy, done: make(chan struct{})}
	probs, err := r.nextProblems(cfg.PromptsPerStep)
	if err != nil {
		return nil, err
	}
	b.x = newRollouts(probs, cfg.GroupSize, r.src)
	sp := [3]sampling{r.rlSampling(0), r.rlSampling(1), r.rlSampling(2)}
	solver, fb := stepEngineOf(r.solver, onPolicy), stepEngineOf(r.feedback, onPolicy)
	tpl, v, workers := r.tpl, r.verifier, cfg.verifyWorkers()
	score := func(ctx context.Context, jobs []verifyJob) ([]verify.Result, error) {
		return verifyAll(ctx, v, workers, jobs)
	}
	r.prefetched += len(probs)
	go func() {
		defer close(b.done)
		if b.err = waitTurn(ctx, after); b.err != nil {
			return
		}
		t0 := time.Now()
		defer func() { b.genSeconds = time.Since(t0).Seconds() }()
		x := b.x
		if b.err = x.firstTurn(ctx, solver, tpl, sp[0], score); b.err != nil {
			return
		}
		if cfg.Episode == EpisodeMLMT {
			if b.err = x.feedbackTurn(ctx, fb, tpl, sp[1]); b.err != nil {
				return
			}
		}
		b.err = x.finalTurn(ctx, &cfg, solver, tpl, sp[2], score)
	}()
	return b, nil
}

func (b *episodeBatch) ready() <-chan struct{} { return b.done }
func (b *episodeBatch) failed() error          { return b.err }
func (b *episodeBatch) problems() int          { return len(b.x.probs) }
