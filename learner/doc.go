// Package learner holds the policy model, tokenizer, tensor backends, optimizer,
// RL objectives and sharding. Its math is pure code with no network and no
// actors; only the learner actor wrapper (actor.go) and the folder
// transfers of its actors (folders.go) import package actor.
//
// At its root, Learner trains a policy (and an optional value head) on
// batches of trajectories with one of the algorithms GRPO, Dr.GRPO, RLOO,
// REINFORCE++, PPO with a shared-trunk critic (GAE), reward-weighted SFT and
// plain SFT, over micro-batches and optional PPO mini-batches and epochs
// (Stats reports the critic's value loss and explained variance), with the
// clipped surrogate of learner/rl (clip-higher, dual-clip, TIS, KL to a frozen
// reference as a loss term or, for PPO, a per-token reward penalty
// (Config.KLInReward), entropy bonus); it saves and loads checkpoints
// (weights in safetensors, AdamW moments unless Config.OmitOptimizer,
// reference, step, where the RL phase began).
//
// A learner actor whose node does not see the driver's run folder
// (ActorConfig.Folders) fetches the folders it loads from the driver's
// folder server and stages the checkpoints it saves for the driver to pull,
// over the bulk path (folders.go; the actor wrappers and the folder
// server import package actor).
//
// Phases: an SFT warm-up (SetAlgorithm(SFT, lr)) trains at a constant rate;
// the learning-rate schedule (warm-up, cosine) belongs to the RL phase and
// counts optimizer steps from its first Train. The KL reference is a frozen
// copy of RL's initial policy (the warmed-up one; under LoRA the base), or
// a model of its own (Config.RefModelDir, reference.go). The learner actor (ActorKind)
// hosts one and offers its weights on the bulk path for engines. With
// Config.Shards > 1 the learner runs as ranks of learner/shard (data
// parallel, ZeRO-1), each a Learner with SetSharding.
//
// Config.LoRA trains PEFT-style adapters in every algorithm but SFT
// (lora.go): they start at the first such Train on the frozen base, the
// optimizer keeps state for them only, checkpoints hold the base and the
// adapter in PEFT's layout (plus the dropout's random state), weights are
// offered whole and merged (what engines serve), as the base, or as the
// adapters alone (WeightsRequest.Part), and sharded ranks reduce only the
// adapters' gradients.
//
// InitCheckpoint and ScoreSequences (modelfiles.go) write a random
// checkpoint and score sequences from files, for `rlnode model`.
//
// Not done yet: the learner runs on the cpu backend only.
package learner
