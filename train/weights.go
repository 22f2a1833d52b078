package train

// A policy's weights reach its engines through its weightsync.PolicyServer
// (startEngine picks the implementation from the config): after every
// learner step the loop publishes the run's step as the new version, and
// the server reads from the learner (learnerSource) what its engines load.
//
// LoRA training (Learner.LoRA, FeedbackPolicy.LoRA): the learner trains
// every weight in the SFT warm-up and only the adapters from the first RL
// step on (package learner starts them there, on the warmed-up base).
// Weight sync then moves adapter deltas, not weights: the learner offers
// its adapter tensors (learner.WeightsAdapter) and
//   - the in-process engine gets them merged, W + (alpha/r)·B·A, onto the
//     base read from the learner once per engine (only the adapted
//     projections change);
//   - rollout actors get them published as a LoRA update, and each merges
//     onto the base it holds (the last full push, else the model
//     directory it loaded);
//   - vLLM servers get a PEFT adapter directory Out/vllm-weights/step-N/
//     loaded in place under the name VLLMLoRAName, which requests then
//     name; a server reloads the base first when it may not hold it (at
//     start and after a restart).
// Checkpoints are the frozen base in Hugging Face layout plus the adapter
// in PEFT layout (adapter_model.safetensors, adapter_config.json), the
// adapters' optimizer state and learner_state.json; whatever loads one to
// serve it (evaluation, rollout actors) merges the adapter (native.Load),
// and --resume and learner restarts continue from base plus adapter.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/shard"
	"github.com/rlnode/rlnode/rollout/weights"
	"github.com/rlnode/rlnode/weightsync"
)

// VLLMLoRAName is the adapter name the solver's LoRA is loaded under on
// vLLM servers, and the model name its requests use.
const VLLMLoRAName = "rlnode-solver"

// testAdapterPushed, when set by a test, is told of every adapter push:
// policy, version and the number of tensors pushed.
var testAdapterPushed func(policy string, version int64, tensors int)

// testWeightsFetched, when set by a test, sees (and may change) every
// part of a learner's weights fetched for a push: policy, step, tensors.
var testWeightsFetched func(policy string, step int, w map[string][]float32)

// learnerSource is a policy's learner as the weightsync.Source of the
// version the run's current step publishes.
type learnerSource struct {
	r *run
	p *policy
}

func (r *run) source(p *policy) learnerSource { return learnerSource{r, p} }

var _ weightsync.Source = learnerSource{}

// Update is the learner's adapters once a LoRA learner has them, else
// its policy.
func (s learnerSource) Update(ctx context.Context) (weights.Update, error) {
	part := learner.WeightsPolicy
	if s.p.l.LoRA != nil {
		part = learner.WeightsAdapter
	}
	off, w, err := s.fetch(ctx, part)
	if err != nil {
		return weights.Update{}, err
	}
	if off.Adapter == nil {
		return weights.Update{Tensors: w}, nil
	}
	s.adapterPushed(len(w))
	return weights.AdapterUpdate(w, off.Adapter.Rank, off.Adapter.Alpha, off.Adapter.TargetModules), nil
}

// Adapter is the learner's adapters; nil, with nothing fetched, while it
// has none.
func (s learnerSource) Adapter(ctx context.Context) (*weights.Update, error) {
	if s.p.l.LoRA == nil {
		return nil, nil
	}
	r, p := s.r, s.p
	off, err := p.learner.Weights(ctx, learner.WeightsRequest{Readers: 1, Part: learner.WeightsAdapter})
	if err != nil {
		return nil, fmt.Errorf("%s adapter of step %d: %w", p.id, r.step, err)
	}
	if off.Adapter == nil {
		r.node.System().Bulk().Release(off.Ref)
		return nil, nil
	}
	w, err := s.decode(ctx, off, p.id+" adapter")
	if err != nil {
		return nil, err
	}
	s.adapterPushed(len(w))
	u := weights.AdapterUpdate(w, off.Adapter.Rank, off.Adapter.Alpha, off.Adapter.TargetModules)
	return &u, nil
}

// Base is the learner's frozen base (its policy without LoRA).
func (s learnerSource) Base(ctx context.Context) (map[string][]float32, error) {
	_, w, err := s.fetch(ctx, learner.WeightsBase)
	return w, err
}

// WriteModel writes the learner's checkpoint into dir, stripped to what
// vLLM loads (modelOnly), with the tokenizer.
func (s learnerSource) WriteModel(ctx context.Context, dir string) error {
	p := s.p
	saved, err := p.learner.Save(ctx, dir)
	if err != nil {
		return fmt.Errorf("write the %s checkpoint for vLLM to %s: %w", p.id, dir, err)
	}
	if err := modelOnly(ctx, dir); err != nil {
		return fmt.Errorf("%s checkpoint of learner step %d for vLLM: %w", p.id, saved.Step, err)
	}
	if err := p.tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		return fmt.Errorf("write the %s checkpoint for vLLM: %w", p.id, err)
	}
	return nil
}

func (s learnerSource) adapterPushed(tensors int) {
	if testAdapterPushed != nil {
		testAdapterPushed(s.p.id, int64(s.r.step), tensors)
	}
}

// fetch pulls part of the learner's weights over the bulk path; the
// offer's Adapter says whether an adapter part holds adapters (nil: the
// learner's adapters have not started, and it holds the policy).
func (s learnerSource) fetch(ctx context.Context, part string) (learner.WeightsOffer, map[string][]float32, error) {
	what := s.p.id + " weights"
	if part != learner.WeightsPolicy {
		what = s.p.id + " " + part + " weights"
	}
	off, err := s.p.learner.Weights(ctx, learner.WeightsRequest{Readers: 1, Part: part})
	if err != nil {
		return off, nil, fmt.Errorf("%s of step %d: %w", what, s.r.step, err)
	}
	w, err := s.decode(ctx, off, what)
	if err == nil && testWeightsFetched != nil {
		testWeightsFetched(s.p.id, s.r.step, w)
	}
	return off, w, err
}

func (s learnerSource) decode(ctx context.Context, off learner.WeightsOffer, what string) (map[string][]float32, error) {
	data, err := s.r.node.System().Bulk().Fetch(ctx, off.Ref)
	if err != nil {
		err = fmt.Errorf("fetch %s of step %d from %s: %w", what, off.Step, off.Ref.Addr, err)
		if ctx.Err() == nil {
			// The learner's node went away between its offer and the
			// fetch: a loss, which the training loop restarts from.
			err = &shard.Failure{Policy: s.p.id, Op: "weights", Err: err}
		}
		return nil, err
	}
	return learner.DecodeWeightsContext(ctx, fmt.Sprintf("%s of learner step %d", what, off.Step), data)
}
