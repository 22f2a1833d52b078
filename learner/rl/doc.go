// Package rl owns the RL post-training objectives: advantage estimators
// (GRPO, Dr.GRPO, RLOO, REINFORCE++, GAE), KL estimators to a reference
// policy, the PPO clipped policy loss with its variants (clip-higher,
// dual-clip, truncated importance sampling), the clipped value loss,
// reward-weighted SFT, loss aggregation, and the per-step statistics
// trainers log.
//
// Everything here is a pure function of per-token numbers: no model, no
// tensors backend, no network. Losses return the scalar loss together with
// its gradient with respect to every per-token input that carries one
// (logprobs, entropies, values); the model backpropagates from those.
//
// Sequences are ragged: a batch is one []float32 per sequence, holding one
// value per response token, and every per-token field of a batch has the same
// shape. Masks are 0/1 per token; tokens with mask 0 (padding, tool output,
// prompt) neither contribute to a loss nor get a gradient. Inputs are checked
// and bad ones (mismatched lengths, NaN rewards, group sizes that do not
// divide the batch) give an error naming the field and the sequence.
//
// Conventions follow verl where the field has one; where a choice is ours
// it is stated on the function.
package rl
