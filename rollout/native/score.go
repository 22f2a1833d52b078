package native

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/engine"
)

var _ engine.Scorer = (*Engine)(nil)

// scoreOp is a Score call waiting for the scheduler, which runs it
// between steps (the only goroutine that touches the model).
type scoreOp struct {
	bt   *model.Batch
	out  [][]float32
	err  error
	done chan struct{}
}

// Score implements engine.Scorer: one forward pass over all requests
// (each its own row), run by the scheduler between generation steps with
// the weights served then. Requests are checked first: a non-empty prompt,
// a non-empty response, token ids in the vocabulary, prompt and response
// within the context.
func (e *Engine) Score(ctx context.Context, reqs []engine.ScoreRequest) ([][]float32, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	V, P := e.m.Config.VocabSize, e.m.Config.MaxPositions
	seqs := make([]model.Sequence, len(reqs))
	tokens := 0
	for i, r := range reqs {
		switch n := len(r.Prompt) + len(r.Response); {
		case len(r.Prompt) == 0 || len(r.Response) == 0:
			return nil, fmt.Errorf("native engine: score request %d: %d prompt and %d response tokens, want both > 0: %w", i, len(r.Prompt), len(r.Response), engine.ErrBadRequest)
		case n > P:
			return nil, fmt.Errorf("native engine: score request %d: %d tokens, the context is %d: %w", i, n, P, engine.ErrBadRequest)
		default:
			tokens += n
		}
		for _, ids := range [][]int{r.Prompt, r.Response} {
			for _, t := range ids {
				if t < 0 || t >= V {
					return nil, fmt.Errorf("native engine: score request %d: token id %d outside the vocabulary [0, %d): %w", i, t, V, engine.ErrBadRequest)
				}
			}
		}
		seqs[i] = model.Sequence{Prompt: toInt32(r.Prompt), Response: toInt32(r.Response)}
	}
	if tokens > scoreMaxTokens {
		return nil, fmt.Errorf("native engine: score: %d tokens in one call, at most %d: %w", tokens, scoreMaxTokens, engine.ErrBadRequest)
	}
	bt, err := model.NewBatch(seqs, 0, true, V)
	if err != nil {
		return nil, fmt.Errorf("native engine: score: %w", err)
	}
	op := &scoreOp{bt: bt, done: make(chan struct{})}
	select {
	case e.scores <- op:
	case <-ctx.Done():
		return nil, fmt.Errorf("native engine: score: %w", ctx.Err())
	case <-e.closing:
		return nil, fmt.Errorf("native engine: score: %w", ErrClosed)
	}
	select {
	case <-op.done:
	case <-e.done:
		select {
		case <-op.done:
		default:
			return nil, fmt.Errorf("native engine: score: %w", ErrClosed)
		}
	}
	if op.err != nil {
		return nil, fmt.Errorf("native engine: score: %w", op.err)
	}
	return op.out, nil
}

// scoreMaxTokens bounds one Score call's tokens (the forward pass holds
// activations for all of them at once).
const scoreMaxTokens = 1 << 18

// runScore is the scheduler's part of a Score call.
func (e *Engine) runScore(op *scoreOp) {
	defer close(op.done)
	logp, _, err := e.m.Forward(op.bt)
	if err == nil {
		err = backend.Err(e.m.B)
	}
	if err != nil {
		op.err = err
		return
	}
	out := op.bt.Split(logp)
	op.out = make([][]float32, len(out))
	for i, o := range out {
		op.out[i] = append([]float32(nil), o...)
	}
}
