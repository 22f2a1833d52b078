package weightsync

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/weights"
)

// EngineServer is a PolicyServer over a native engine in the caller's
// process: a version's weights are swapped in with SetWeights, adapters
// merged onto the base first (W + (alpha/r)·B·A).
type EngineServer struct {
	e *native.Engine
	// base is what adapters merge onto, read from the Source at the
	// engine's first adapter update (the engine may hold anything then).
	base map[string][]float32
}

// StartEngine starts a native engine on a fresh model of mc (its weights
// come with the first Publish) or, with dir set, on the checkpoint there;
// cfg gives its decode batch (MaxBatch) and device (Device). Its prefill
// step is 4096 tokens. Loading the checkpoint gives up once ctx is done.
func StartEngine(ctx context.Context, mc *model.Config, dir string, cfg native.Config) (*EngineServer, error) {
	ncfg := native.Config{MaxBatch: cfg.MaxBatch, MaxStepTokens: 4096, Device: cfg.Device}
	if dir != "" {
		e, err := native.LoadContext(ctx, dir, ncfg)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		return &EngineServer{e: e}, nil
	}
	tok, err := tokenizer.BuiltinSized(mc.VocabSize)
	if err != nil {
		return nil, fmt.Errorf("model.vocab_size: %w", err)
	}
	e, err := native.NewOn(*mc, tok, ncfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return &EngineServer{e: e}, nil
}

// Tokenizer is the served model's tokenizer.
func (s *EngineServer) Tokenizer() *tokenizer.Tokenizer { return s.e.Tokenizer() }

// Generate implements engine.Engine.
func (s *EngineServer) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	return s.e.Generate(ctx, reqs)
}

// GenerateFor is Generate: the engine always serves the newest version.
func (s *EngineServer) GenerateFor(ctx context.Context, _ int64, reqs []engine.Request) ([]engine.Result, error) {
	return s.e.Generate(ctx, reqs)
}

// Score implements engine.Scorer with the engine's current weights.
func (s *EngineServer) Score(ctx context.Context, reqs []engine.ScoreRequest) ([][]float32, error) {
	return s.e.Score(ctx, reqs)
}

// WeightVersion implements engine.Engine.
func (s *EngineServer) WeightVersion() int64 { return s.e.WeightVersion() }

// Close implements engine.Engine.
func (s *EngineServer) Close() error { return s.e.Close() }

// Status implements PolicyServer.
func (s *EngineServer) Status() ServerStatus { return ServerStatus{} }

// Publish swaps src's update in as version. The engine's first adapter
// update also sets the base (read from src), in the same version.
func (s *EngineServer) Publish(ctx context.Context, version int64, src Source) error {
	u, err := src.Update(ctx)
	if err != nil {
		return err
	}
	w := u.Tensors
	if u.LoRA != nil {
		first := s.base == nil
		if first {
			if s.base, err = src.Base(ctx); err != nil {
				return err
			}
		}
		if w, err = weights.MergeLoRA(u, s.base); err != nil {
			return fmt.Errorf("adapters of version %d: %w", version, err)
		}
		if first {
			for n, v := range s.base {
				if _, ok := w[n]; !ok {
					w[n] = v
				}
			}
		}
	}
	return s.e.SetWeights(ctx, version, w)
}

var _ PolicyServer = (*EngineServer)(nil)
