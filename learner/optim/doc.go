// Package optim owns the learner's parameter update: AdamW with decoupled
// weight decay (as torch.optim.AdamW), global-norm gradient clipping (as
// torch.nn.utils.clip_grad_norm_), learning-rate schedules, and the helpers
// for gradient accumulation over micro-batches.
//
// It works on flat float32 tensors named as in the checkpoint ([Param]) and
// knows nothing of the model, the backend or the network. A step that sees a
// NaN or Inf gradient is refused before any weight or moment changes, so a bad
// micro-batch never reaches the weights.
package optim
