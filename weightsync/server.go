package weightsync

import (
	"context"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/weights"
)

// PolicyServer serves one policy's generation and takes each weight
// version its learner publishes: the training loop holds one per policy
// and never asks which engines are behind it. EngineServer (a native
// engine in the loop's process), RolloutServer (rollout actors fed by a
// Syncer) and VLLMServer (vLLM servers) implement it.
//
// Concurrency: Generate and GenerateFor may run concurrently with each
// other and with Publish (an asynchronous run generates ahead while the
// learner trains); every sample comes from one version, which its Result
// carries. Publish calls come one at a time, with versions increasing.
// Close is called once, after every other call has returned.
type PolicyServer interface {
	// Engine generates with the newest version published (Generate),
	// reports the lowest version its engines serve (WeightVersion) and
	// stops them (Close).
	engine.Engine
	// GenerateFor generates the samples of the batch whose on-policy
	// version is onPolicy: servers whose engines may lag refuse results
	// older than onPolicy minus the max staleness.
	GenerateFor(ctx context.Context, onPolicy int64, reqs []engine.Request) ([]engine.Result, error)
	// Publish makes the learner's current weights, read from src during
	// the call, the served version. A version the engines already serve
	// is not pushed again.
	Publish(ctx context.Context, version int64, src Source) error
	// Status reports the server for the loop's metrics and plans.
	Status() ServerStatus
}

// Source is where Publish reads a version's weights: the learner that
// trained them. Each method reads the learner's current state; a server
// calls only those it needs.
type Source interface {
	// Update is the new weights: the adapters (Update.LoRA set) once a
	// LoRA learner trains them, the full policy otherwise.
	Update(ctx context.Context) (weights.Update, error)
	// Adapter is the adapters, or nil (and nothing read) while the
	// learner has none.
	Adapter(ctx context.Context) (*weights.Update, error)
	// Base is the full weights adapters merge onto (the frozen base under
	// LoRA, else the policy).
	Base(ctx context.Context) (map[string][]float32, error)
	// WriteModel writes the learner's model as a directory a server loads
	// from a path (config.json, model safetensors without a value head,
	// tokenizer.json): the policy, or under LoRA once adapters train, the
	// frozen base.
	WriteModel(ctx context.Context, dir string) error
}

// ServerStatus is what a PolicyServer reports of its engines.
type ServerStatus struct {
	// PushOnDemand: a push moves the weights over the network to remote
	// engines, so the loop skips pushes no generation needs before the
	// next one (single-turn warm-up steps without evaluation).
	PushOnDemand bool
	// Replicas counts rollout actors; nil for servers without any.
	Replicas *Replicas
}

// Replicas counts a RolloutServer's rollout actors.
type Replicas struct {
	Live, Want int
	// Replaced counts actors started in place of lost ones; Regenerated
	// the generation chunks that ran again after their actor was lost.
	Replaced, Regenerated int64
}

// AtVersion is s as an engine.Engine that generates the batch whose
// on-policy version is onPolicy (GenerateFor).
func AtVersion(s PolicyServer, onPolicy int64) engine.Engine {
	return atVersion{s, onPolicy}
}

type atVersion struct {
	PolicyServer
	onPolicy int64
}

func (a atVersion) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	return a.GenerateFor(ctx, a.onPolicy, reqs)
}
