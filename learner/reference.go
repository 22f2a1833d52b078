package learner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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

// loadReference loads Config.RefModelDir and checks that it speaks the
// policy's vocabulary: the same vocab_size and, token by token, the same
// tokenizer.
func loadReference(cfg Config, policy *model.Model) (*model.Model, error) {
	dir := cfg.RefModelDir
	ref, err := model.Load(dir, cpu.New())
	if err != nil {
		return nil, fmt.Errorf("learner: reference model: %w", err)
	}
	if model.HasAdapter(dir) {
		if err := ref.LoadLoRA(dir); err != nil {
			return nil, fmt.Errorf("learner: reference model: %w", err)
		}
	}
	policyName := cfg.ModelDir
	if policyName == "" {
		policyName = "the policy initialized from scratch"
	}
	if a, b := ref.Config.VocabSize, policy.Config.VocabSize; a != b {
		return nil, fmt.Errorf("learner: reference model %s: vocab_size %d, the policy's (%s) %d: the KL term needs one vocabulary", dir, a, policyName, b)
	}
	refTok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("learner: reference model %s: %w", dir, err)
	}
	var polTok *tokenizer.Tokenizer
	if cfg.ModelDir != "" {
		polTok, err = tokenizer.Load(filepath.Join(cfg.ModelDir, "tokenizer.json"))
	} else {
		polTok, err = tokenizer.BuiltinSized(policy.Config.VocabSize)
	}
	if err != nil {
		return nil, fmt.Errorf("learner: the policy's tokenizer (%s): %w", policyName, err)
	}
	if err := sameTokens(refTok, polTok); err != nil {
		return nil, fmt.Errorf("learner: reference model %s and the policy (%s) have different tokenizers: %w", dir, policyName, err)
	}
	return ref, nil
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
