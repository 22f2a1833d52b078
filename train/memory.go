package train

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
)

// What actors reserve of their node's memory (cluster.Memory) is a lower
// bound of what they will hold, never an estimate: a reservation above
// what a run needs would refuse a run that fits. Activations, KV caches,
// batches and the runtime come on top and are not counted.

// bytesPerWeight is what the CPU backend stores per element (float32):
// weights, gradients and AdamW's two moments alike.
const bytesPerWeight = 4

// modelParams is the parameter count of l's model, from its config (the
// model directory's config.json where it starts from one).
func modelParams(l learner.Config) (int64, error) {
	mc := l.Model
	if mc == nil && l.ModelDir != "" {
		var err error
		if mc, err = model.ReadConfig(filepath.Join(l.ModelDir, "config.json")); err != nil {
			return 0, err
		}
	}
	if mc == nil {
		return 0, nil
	}
	return int64(mc.NumParams()), nil
}

// onHost reports whether device keeps a model in the host's memory (the
// CPU backend); a GPU's memory is not the node's memory resource.
func onHost(device string) bool { return device == "" || device == "cpu" }

// learnerRankMemory is a lower bound of the host memory one learner rank
// of l holds once it has trained a step: on the CPU backend the weights,
// the gradients of the trained weights and AdamW's two moments of them
// (with ZeRO-1, the rank's slice of the moments), and the KL reference
// model's weights where there is one. With LoRA only the base weights are
// counted (the adapters' are small). With a KL term the reference is a
// frozen copy of the policy unless it is a model of its own. On a GPU it
// holds none counted here.
func learnerRankMemory(l learner.Config) (int64, error) {
	if !onHost(l.Device) {
		return 0, nil
	}
	n, err := modelParams(l)
	if err != nil {
		return 0, err
	}
	total := n * bytesPerWeight
	if l.LoRA == nil {
		moments := 2 * n * bytesPerWeight
		if l.Shards > 1 && l.ZeROStage >= 1 {
			moments /= int64(l.Shards)
		}
		total += n*bytesPerWeight + moments
	}
	switch {
	case l.RefModelDir != "":
		ref, err := modelParams(learner.Config{ModelDir: l.RefModelDir})
		if err != nil {
			return 0, err
		}
		total += ref * bytesPerWeight
	case l.Loss.KLCoef > 0: // the reference is a frozen copy of the policy
		total += n * bytesPerWeight
	}
	return total, nil
}

// engineMemory is a lower bound of the host memory a native engine of
// l's model holds on device: its weights, on the CPU backend.
func engineMemory(l learner.Config, device string) (int64, error) {
	if !onHost(device) {
		return 0, nil
	}
	n, err := modelParams(l)
	return n * bytesPerWeight, err
}

// withMemory is res (nil: the default 1 CPU) reserving bytes of memory as
// well, unless res names an amount of memory itself (the recipe's).
func withMemory(res cluster.Resources, bytes int64) cluster.Resources {
	if res == nil {
		res = cluster.Resources{cluster.CPU: 1}
	}
	if _, ok := res[cluster.Memory]; ok || bytes <= 0 {
		return res
	}
	out := res.Clone()
	out[cluster.Memory] = float64(bytes)
	return out
}

// memoryNeed is one kind of actor's share of a run's memory, for the
// message of checkEmbeddedMemory.
type memoryNeed struct {
	field string // the recipe field that sets the count
	count int
	what  string
	each  float64
}

// checkEmbeddedMemory refuses, before any model is built, a run whose
// learner ranks and rollout actors together reserve more memory than the
// embedded node offers (its host's memory, or Config.EmbeddedMemory): on
// one process they would all be loaded, and the run would die out of
// memory instead.
func (r *run) checkEmbeddedMemory(solver learner.Config) error {
	total, _ := r.node.Resources()
	has := total[cluster.Memory]
	var needs []memoryNeed
	add := func(field string, count int, what string, res cluster.Resources) {
		if v := res[cluster.Memory]; count > 0 && v > 0 {
			needs = append(needs, memoryNeed{field, count, what, v})
		}
	}
	learners := func(id string, l learner.Config) error {
		b, err := learnerRankMemory(l)
		if err != nil {
			return fmt.Errorf("%s policy: %w", id, err)
		}
		add("placement.learner_shards", max(l.Shards, 1), id+" learner ranks (weights, gradients, AdamW moments)", withMemory(r.cfg.LearnerResources, b))
		return nil
	}
	rollouts := func(field, id string, l learner.Config, ro *Rollout) error {
		if ro == nil {
			return nil
		}
		b, err := engineMemory(l, r.cfg.EngineDevice)
		if err != nil {
			return fmt.Errorf("%s policy: %w", id, err)
		}
		add(field, ro.Replicas, id+" rollout actors (the model's weights)", withMemory(ro.Resources, b))
		return nil
	}
	if err := learners("solver", solver); err != nil {
		return err
	}
	if err := rollouts("engines.policy.replicas", "solver", solver, r.cfg.Rollout); err != nil {
		return err
	}
	if fb := r.cfg.Feedback; fb != nil {
		fl := solver
		if !r.cfg.SharedWeights {
			fl = fb.learnerConfig(r.cfg)
			if err := learners("feedback", fl); err != nil {
				return err
			}
		}
		if err := rollouts("engines.feedback.replicas", "feedback", fl, r.cfg.FeedbackRollout); err != nil {
			return err
		}
	}
	need := 0.0
	biggest := -1
	var parts []string
	for i, n := range needs {
		need += float64(n.count) * n.each
		if biggest < 0 || float64(n.count)*n.each > float64(needs[biggest].count)*needs[biggest].each {
			biggest = i
		}
		parts = append(parts, fmt.Sprintf("%s %d %s × %s", n.field, n.count, n.what, cluster.FormatBytes(n.each)))
	}
	if need <= has {
		return nil
	}
	return fmt.Errorf("%s: the run reserves memory %s on the embedded node, which has %s: %s; lower %s, or run on a cluster (rlnode run --address)",
		needs[biggest].field, cluster.FormatBytes(need), cluster.FormatBytes(has), strings.Join(parts, ", "), needs[biggest].field)
}
