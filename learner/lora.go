package learner

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

// LoRA training (Config.LoRA). The adapters start at the learner's first
// Train with an algorithm other than SFT, before its first step: A drawn from LoRA.Seed, B zero, so the
// policy is unchanged at that moment; the base freezes, the optimizer
// starts afresh over the adapters (and a value head), and a KL reference
// becomes the base the adapters sit on (the policy at that moment, as
// TRL's reference with the adapter disabled), unless Config.RefModelDir
// gives the reference. LoRA dropout, when set, is
// drawn from a source seeded with Seed whose state checkpoints keep.

// CheckLoRARank reports a Config.LoRA rank above the smaller dimension of
// a target module's matrix (model.LoRAConfig.CheckRank), reading the
// model's config.json when the model comes from ModelDir; nil without
// LoRA. NewContext calls it before it loads or builds the model, so that
// a mistyped rank fails there, not with the Go runtime's out-of-memory
// crash when the adapters start.
func (c Config) CheckLoRARank() error {
	if c.LoRA == nil {
		return nil
	}
	mc, where := c.Model, ""
	if mc == nil {
		path := filepath.Join(c.ModelDir, "config.json")
		var err error
		if mc, err = model.ReadConfig(path); err != nil {
			return fmt.Errorf("learner: %w", err)
		}
		where = "model " + path + ": "
	}
	if err := c.LoRA.CheckRank(mc); err != nil {
		return fmt.Errorf("learner: %s%w", where, err)
	}
	return nil
}

// maybeLoRA adds the adapters when Config.LoRA is set, the algorithm is
// not SFT (or Config.LoRAWarmup, from step Config.LoRAWarmupAfter on) and
// the model has none yet.
func (l *Learner) maybeLoRA() error {
	if l.cfg.LoRA == nil || l.model.LoRA() != nil {
		return nil
	}
	if l.cfg.Algorithm == SFT && (!l.cfg.LoRAWarmup || l.step < l.cfg.LoRAWarmupAfter) {
		return nil
	}
	return l.startLoRA()
}

func (l *Learner) startLoRA() error {
	m := l.model
	if err := m.AddLoRA(*l.cfg.LoRA); err != nil {
		return fmt.Errorf("learner: start lora: %w", err)
	}
	l.armDropout()
	if l.ref != nil && l.cfg.RefModelDir == "" {
		ref, err := m.Clone() // B is zero: the base
		if err != nil {
			return fmt.Errorf("learner: start lora: reference policy: %w", err)
		}
		l.ref = ref
	}
	if err := l.restartOptimizer(); err != nil {
		return fmt.Errorf("learner: start lora: %w", err)
	}
	return nil
}

// restartOptimizer starts AdamW afresh (zero moments) over the trainable
// parameters.
func (l *Learner) restartOptimizer() error {
	c := l.cfg
	l.trainer.Opt = optim.NewAdamW(c.Beta1, c.Beta2, c.Eps, c.WeightDecay)
	if l.shard != nil && l.shard.ParamsChanged != nil {
		return l.shard.ParamsChanged()
	}
	return nil
}

// armDropout turns LoRA dropout on for training when the adapters have
// any.
func (l *Learner) armDropout() {
	if lc := l.model.LoRA(); lc != nil && lc.Dropout > 0 {
		l.model.Training, l.model.DropoutSeed = true, l.cfg.Seed
	}
}

// AdapterInfo describes the LoRA adapters of AdapterWeights: an engine
// serves W + (Alpha/Rank)·B·A on each adapted projection.
type AdapterInfo struct {
	Rank          int
	Alpha         float64
	TargetModules []string
}

// Adapter is the policy's LoRA configuration, or nil before the adapters
// start (or without Config.LoRA).
func (l *Learner) Adapter() *AdapterInfo {
	lc := l.model.LoRA()
	if lc == nil {
		return nil
	}
	return &AdapterInfo{Rank: lc.Rank, Alpha: lc.Alpha, TargetModules: lc.TargetModules}
}

// AdapterWeights returns a host copy of the adapters' tensors by PEFT name
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"); empty
// without adapters.
func (l *Learner) AdapterWeights() map[string][]float32 { return l.model.LoRAWeights() }

// BaseWeights returns a host copy of the frozen base weights the adapters
// sit on (PolicyWeights without the adapters), without the value head.
func (l *Learner) BaseWeights() map[string][]float32 {
	w, _ := l.baseWeights(context.Background())
	return w
}

// baseWeights is BaseWeights that gives up once ctx is done.
func (l *Learner) baseWeights(ctx context.Context) (map[string][]float32, error) {
	return served(l.model.WeightsContext(ctx))
}
