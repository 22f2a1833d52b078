#!/usr/bin/python3
"""Writes archer_golden.json, the PyTorch reference for ArCHer's losses:
the utterance critic's TD targets r + γ(1 − done)V'(s'), its loss
mse(Q, y_Q) + mse(V, Q'(s, a)) with autograd gradients, the Polyak update
of the target weights, the advantages Q − V, and the token-level actor loss
−mean_i A_i·Σ_t log π(a_it) (the reference's pg_loss on summed log
probabilities) with its gradient.

Written with torch tensors and autograd, independently of the Go code.
Inputs are drawn in float32 and the reference is computed in float64.

Run from this folder with the system interpreter (Debian python3-torch):
    /usr/bin/python3 archer_golden.py
"""
import json

import torch

torch.manual_seed(2024)
N = 7
GAMMA = 0.95
TAU = 0.1
A_LEN = [3, 1, 5, 2, 4, 6, 2]


def f32(x):
    return x.to(torch.float32).to(torch.float64)


rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0], dtype=torch.float64)
done = torch.tensor([1, 0, 1, 0, 0, 1, 0], dtype=torch.float64)
next_v = f32(torch.rand(N, dtype=torch.float64) * 2 - 0.5)   # V'(s') of the target net
q_target_sa = f32(torch.rand(N, dtype=torch.float64) * 2 - 0.5)  # Q'(s, a) of the target net
q = f32(torch.rand(N, dtype=torch.float64) * 2 - 0.5).requires_grad_(True)
v = f32(torch.rand(N, dtype=torch.float64) * 2 - 0.5).requires_grad_(True)

y_q = rewards + (1 - done) * GAMMA * next_v
y_v = q_target_sa
mse = torch.nn.MSELoss()
q_loss = mse(q, y_q)
v_loss = mse(v, y_v)
loss = q_loss + v_loss
loss.backward()

online = f32(torch.randn(12, dtype=torch.float64))
target = f32(torch.randn(12, dtype=torch.float64))
polyak = target * (1 - TAU) + online * TAU  # the reference's soft_update_target_critic

adv = (q - v).detach()
mask = torch.zeros(N, max(A_LEN), dtype=torch.float64)
for i, n in enumerate(A_LEN):
    mask[i, :n] = 1
mask[2, 1] = 0  # one token not trained (a tool's output)
logp = f32(-3 + 2.95 * torch.rand(N, max(A_LEN), dtype=torch.float64)).requires_grad_(True)
adv32 = f32(adv)  # the learner holds per-token advantages in float32
actor = -torch.mean((logp * mask).sum(-1) * adv32)
actor.backward()
# The learner's surrogate −A·π/π_old at π_old = π: its value is −A per
# token, its gradient that of the loss above.
surrogate = -torch.mean((torch.exp(logp - logp.detach()) * mask).sum(-1) * adv32)

out = {
    "gamma": GAMMA, "tau": TAU,
    "rewards": rewards.tolist(), "done": [bool(d) for d in done.tolist()],
    "next_values": next_v.tolist(), "target_q": q_target_sa.tolist(),
    "q": q.detach().tolist(), "v": v.detach().tolist(),
    "q_targets": y_q.tolist(), "v_targets": y_v.tolist(),
    "q_loss": float(q_loss), "v_loss": float(v_loss), "loss": float(loss),
    "dq": q.grad.tolist(), "dv": v.grad.tolist(),
    "online": online.tolist(), "target": target.tolist(), "polyak": polyak.tolist(),
    "advantages": adv.tolist(),
    "mask": [mask[i, :n].tolist() for i, n in enumerate(A_LEN)],
    "logprobs": [logp.detach()[i, :n].tolist() for i, n in enumerate(A_LEN)],
    "actor_loss": float(actor), "actor_surrogate_loss": float(surrogate),
    "actor_dlogprobs": [logp.grad[i, :n].tolist() for i, n in enumerate(A_LEN)],
}
with open("archer_golden.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
