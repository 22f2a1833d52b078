package learner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// The KL reference (Loss.KLCoef > 0) is, by default, a frozen copy of the
// initial policy (under LoRA, of the base the adapters start on), and
// checkpoints carry it (ReferenceFile). Config.RefModelDir names another
// model instead: a Hugging Face checkpoint directory (a PEFT adapter
// beside it is applied), loaded once per learner (on every rank of a
// sharded one), frozen, of any architecture but with the policy's
// vocabulary and tokenizer. It is a second model in memory. Checkpoints
// then record its directory (learner_state.json) rather than copy it, and
// a resumed learner loads it from there again.

// loadReference loads Config.RefModelDir after CheckReference, onto the
// policy's device where it has one, else onto a CPU backend of its own.
func loadReference(ctx context.Context, cfg Config, policy *model.Model) (*model.Model, error) {
	dir := cfg.RefModelDir
	if err := CheckReference(cfg.ModelDir, &policy.Config, dir); err != nil {
		return nil, fmt.Errorf("learner: %w", err)
	}
	b := backend.Backend(cpu.New())
	if _, host := policy.B.(backend.HostMemory); !host {
		b = policy.B
	}
	ref, err := model.LoadContext(ctx, dir, b)
	if err != nil {
		return nil, fmt.Errorf("learner: reference model: %w", err)
	}
	if model.HasAdapter(dir) {
		err = ref.LoadLoRAContext(ctx, dir)
	}
	if a, b := ref.Config.VocabSize, policy.Config.VocabSize; err == nil && a != b {
		err = fmt.Errorf("%s: vocab_size %d, the policy's %d", dir, a, b)
	}
	if err != nil {
		ref.Release() // device memory goes back
		return nil, fmt.Errorf("learner: reference model: %w", err)
	}
	return ref, nil
}

// CheckReference reports whether the model in refDir can be the KL
// reference of a policy (its checkpoint directory policyDir, or when that
// is empty a model of config policy with the built-in tokenizer): the
// same vocab_size and, token by token, the same tokenizer. Errors name
// both. Recipes call it before any actor starts; the learner again when
// it loads the reference.
func CheckReference(policyDir string, policy *model.Config, refDir string) error {
	policyName := policyDir
	if policyDir != "" {
		c, err := model.ReadConfig(filepath.Join(policyDir, "config.json"))
		if err != nil {
			return fmt.Errorf("the policy: %w", err)
		}
		policy = c
	} else {
		policyName = "the policy initialized from scratch"
	}
	rc, err := model.ReadConfig(filepath.Join(refDir, "config.json"))
	if err != nil {
		return fmt.Errorf("reference model: %w", err)
	}
	if rc.VocabSize != policy.VocabSize {
		return fmt.Errorf("reference model %s: vocab_size %d, the policy's (%s) %d: the KL term needs one vocabulary", refDir, rc.VocabSize, policyName, policy.VocabSize)
	}
	refTok, err := tokenizer.Load(filepath.Join(refDir, "tokenizer.json"))
	if err != nil {
		return fmt.Errorf("reference model %s: %w", refDir, err)
	}
	var polTok *tokenizer.Tokenizer
	if policyDir != "" {
		polTok, err = tokenizer.Load(filepath.Join(policyDir, "tokenizer.json"))
	} else {
		polTok, err = tokenizer.BuiltinSized(policy.VocabSize)
	}
	if err != nil {
		return fmt.Errorf("the policy's tokenizer (%s): %w", policyName, err)
	}
	if err := sameTokens(refTok, polTok); err != nil {
		return fmt.Errorf("reference model %s and the policy (%s) have different tokenizers: %w", refDir, policyName, err)
	}
	return nil
}

// sameTokens reports the first token id where a and b differ.
func sameTokens(a, b *tokenizer.Tokenizer) error {
	if a.VocabSize() != b.VocabSize() {
		return fmt.Errorf("%d tokens and %d", a.VocabSize(), b.VocabSize())
	}
	for id := range a.VocabSize() {
		x, okx := a.Token(id)
		y, oky := b.Token(id)
		if x != y || okx != oky {
			return fmt.Errorf("token %d is %q and %q", id, x, y)
		}
	}
	return nil
}

// removeReferenceFile drops a stale ReferenceFile from dir.
func removeReferenceFile(dir string) error {
	if err := os.Remove(filepath.Join(dir, ReferenceFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("learner: save %s: stale reference: %w", dir, err)
	}
	return nil
}
