package train

// LoRA training (Learner.LoRA, FeedbackPolicy.LoRA): the learner trains
// every weight in the SFT warm-up and only the adapters from the first RL
// step on (package learner starts them there, on the warmed-up base).
// Weight sync then moves adapter deltas, not weights: the learner offers
// its adapter tensors (learner.WeightsAdapter) and
//   - the in-process engine gets them merged, W + (alpha/r)·B·A, onto the
//     base the driver fetched from the learner once per engine (only the
//     adapted projections change);
//   - rollout actors get them published as a weightsync LoRA update, and
//     each merges onto the base it holds (the last full push, else the
//     model directory it loaded);
//   - vLLM servers get a PEFT adapter directory Out/vllm-weights/step-N/
//     loaded in place through /v1/load_lora_adapter under the name
//     VLLMLoRAName, which requests then name; a server reloads the base
//     first when it may not hold it (at start and after a restart).
// Checkpoints are the frozen base in Hugging Face layout plus the adapter
// in PEFT layout (adapter_model.safetensors, adapter_config.json), the
// adapters' optimizer state and learner_state.json; whatever loads one to
// serve it (evaluation, rollout actors) merges the adapter
// (native.Load), and --resume and learner restarts continue
// from base plus adapter.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/rollout/weights"
)

// VLLMLoRAName is the adapter name the solver's LoRA is loaded under on
// vLLM servers, and the model name its requests use.
const VLLMLoRAName = "rlnode-solver"

// testAdapterPushed, when set by a test, is told of every adapter push:
// policy, version and the number of tensors pushed.
var testAdapterPushed func(policy string, version int64, tensors int)

// weightsPart is what a policy's weight sync asks its learner for:
// adapter deltas once a LoRA learner has adapters.
func (p *policy) weightsPart() string {
	if p.l.LoRA != nil {
		return learner.WeightsAdapter
	}
	return learner.WeightsPolicy
}

// adapterUpdate is an adapter offer's tensors as a weightsync update.
func adapterUpdate(ad *learner.AdapterInfo, w map[string][]float32) weights.Update {
	return weights.AdapterUpdate(w, ad.Rank, ad.Alpha, ad.TargetModules)
}

// pushAdapter gives p's engine the adapters w as the run's current
// version: merged onto the in-process engine's base, or published to the
// rollout actors.
func (r *run) pushAdapter(ctx context.Context, p *policy, ad *learner.AdapterInfo, w map[string][]float32) error {
	u := adapterUpdate(ad, w)
	version := int64(r.step)
	if testAdapterPushed != nil {
		testAdapterPushed(p.id, version, len(w))
	}
	if p.pool != nil {
		return r.publish(ctx, p, version, u)
	}
	full := p.loraBase == nil
	if full {
		// A new engine (start, restart, resume) may hold anything: give it
		// the learner's base with the adapters merged, in one version.
		_, base, err := r.fetchWeights(ctx, p, learner.WeightsBase)
		if err != nil {
			return err
		}
		p.loraBase = base
	}
	merged, err := weights.MergeLoRA(u, p.loraBase)
	if err != nil {
		return fmt.Errorf("driver: %s adapters of step %d: %w", p.id, r.step, err)
	}
	if full {
		for n, v := range p.loraBase {
			if _, ok := merged[n]; !ok {
				merged[n] = v
			}
		}
	}
	if err := p.local.SetWeights(ctx, version, merged); err != nil {
		return fmt.Errorf("driver: %s: %w", p.id, err)
	}
	return nil
}

// fetchWeights pulls part of p's learner weights over the bulk path; the
// offer's Adapter says whether an adapter part holds adapters (nil: the
// learner's adapters have not started, and it holds the policy).
func (r *run) fetchWeights(ctx context.Context, p *policy, part string) (learner.WeightsOffer, map[string][]float32, error) {
	what := p.id + " weights"
	if part != learner.WeightsPolicy {
		what = p.id + " " + part + " weights"
	}
	off, err := p.learner.Weights(ctx, learner.WeightsRequest{Readers: 1, Part: part})
	if err != nil {
		return off, nil, fmt.Errorf("driver: %s of step %d: %w", what, r.step, err)
	}
	data, err := r.node.System().Bulk().Fetch(ctx, off.Ref)
	if err != nil {
		return off, nil, fmt.Errorf("driver: fetch %s of step %d: %w", what, off.Step, err)
	}
	w, err := learner.DecodeWeights(fmt.Sprintf("%s of learner step %d", what, off.Step), data)
	if err != nil {
		return off, nil, fmt.Errorf("driver: %w", err)
	}
	return off, w, nil
}

// syncVLLMAdapter loads p's adapters on its vLLM servers as the run's
// current version, reloading the base first when the servers may not
// hold it. It reports false (nothing done) while the learner has no
// adapters yet: the caller reloads full weights then.
func (r *run) syncVLLMAdapter(ctx context.Context, p *policy) (bool, error) {
	off, err := p.learner.Weights(ctx, learner.WeightsRequest{Readers: 1, Part: learner.WeightsAdapter})
	if err != nil {
		return false, fmt.Errorf("driver: %s adapter of step %d: %w", p.id, r.step, err)
	}
	if off.Adapter == nil {
		r.node.System().Bulk().Release(off.Ref)
		return false, nil
	}
	data, err := r.node.System().Bulk().Fetch(ctx, off.Ref)
	if err != nil {
		return false, fmt.Errorf("driver: fetch the %s adapter of step %d: %w", p.id, off.Step, err)
	}
	w, err := learner.DecodeWeights(fmt.Sprintf("%s adapter of learner step %d", p.id, off.Step), data)
	if err != nil {
		return false, fmt.Errorf("driver: %w", err)
	}
	root, err := r.vllmDir(p)
	if err != nil {
		return false, fmt.Errorf("driver: vLLM weights directory: %w", err)
	}
	version := int64(r.step)
	if !p.vllmBase {
		// The learner's checkpoint holds the frozen base as its model:
		// reloaded as this version, then the adapter on top.
		if err := r.reloadVLLM(ctx, p, root, "base-"+strconv.FormatInt(version, 10)); err != nil {
			return false, err
		}
		r.pruneVLLMDirs(root, "base-", version) // older bases
		p.vllmBase = true
	}
	dir := filepath.Join(root, "step-"+strconv.FormatInt(version, 10))
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("driver: vLLM weights: %w", err)
	}
	if err := weights.WriteAdapter(dir, adapterUpdate(off.Adapter, w), r.vllmConfig(p).Model); err != nil {
		return false, fmt.Errorf("driver: %s adapter of step %d for vLLM: %w", p.id, version, err)
	}
	if testAdapterPushed != nil {
		testAdapterPushed(p.id, version, len(w))
	}
	rctx, cancel := context.WithTimeout(ctx, r.vllmReloadTimeout(p))
	err = p.vllm.LoadLoRA(rctx, VLLMLoRAName, dir, version)
	timedOut := rctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		return false, fmt.Errorf("driver: %s step %d: the vLLM servers did not confirm loading the adapter within %v: %w", p.id, version, r.vllmReloadTimeout(p), err)
	case err != nil:
		return false, fmt.Errorf("driver: %s step %d: %w", p.id, version, err)
	}
	return true, nil
}
