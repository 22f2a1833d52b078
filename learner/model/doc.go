// Package model is the decoder-only transformer policy of the Llama / Qwen2
// family, written once against learner/backend: token embedding, RMSNorm,
// rotary position embedding, grouped-query attention (with q/k/v bias for
// Qwen2), SwiGLU MLP and a tied or separate lm_head.
//
// It owns the training math that needs the network's internals: per-token
// log probabilities and entropies of response tokens given their prompts,
// with padding and packing of several sequences per row; the backward pass
// from dLoss/dLogProb (and dLoss/dEntropy) to every parameter; gradient
// accumulation; LoRA adapters; checkpoints in Hugging Face layout; and an
// optional scalar value head on the same trunk (a shared PPO critic), whose
// values come with the log probabilities and whose dLoss/dValue joins the
// policy's gradients in one backward pass.
//
// Each layer is a plain struct holding its parameters, with a forward and a
// backward method next to each other. The package does not define losses
// (learner/rl) or optimizers (learner/optim); it runs no goroutines itself.
package model
