#!/usr/bin/python3
"""Writes bilevel_golden.json, the PyTorch reference for the bi-level MLMT
losses (BiLevel SCoRe): the solver's −(R − V_L)(log π(z) + log π(ŷ)), the
value loss (V_L − R)², and the feedback policy's GRPO loss on the shaped
reward R + c·V_L with its own KL term.

Written with torch tensors and autograd, independently of the Go code.
Inputs are drawn in float32 and the reference is computed in float64.

Run from this folder with the system interpreter (Debian python3-torch):
    /usr/bin/python3 bilevel_golden.py
"""
import json

import torch

torch.manual_seed(4321)
E = 6            # episodes: 3 groups of 2
GROUP = 2
Z_LEN = [4, 2, 5, 3, 1, 6]    # solver turn 1 (z)
Y_LEN = [3, 5, 2, 4, 6, 1]    # solver refine turn (ŷ)
G_LEN = [5, 3, 4, 2, 6, 3]    # feedback turn (g)


def f32(x):
    return x.to(torch.float32).to(torch.float64)


def pad_mask(lengths, holes=()):
    m = torch.zeros(len(lengths), max(lengths), dtype=torch.float64)
    for i, n in enumerate(lengths):
        m[i, :n] = 1
    for i, t in holes:
        m[i, t] = 0
    return m


def ragged(x, lengths):
    return [x[i, :n].tolist() for i, n in enumerate(lengths)]


def draw(lengths, lo, hi):
    return f32(lo + (hi - lo) * torch.rand(len(lengths), max(lengths), dtype=torch.float64))


z_mask = pad_mask(Z_LEN, [(0, 1)])
y_mask = pad_mask(Y_LEN, [(3, 3)])
g_mask = pad_mask(G_LEN, [(0, 4), (4, 2)])  # sequence 0's last token is masked out
z_logp = draw(Z_LEN, -3, -0.05)
y_logp = draw(Y_LEN, -3, -0.05)
g_logp = draw(G_LEN, -3, -0.05)
g_ref = f32(g_logp + 0.6 * (torch.rand(g_logp.shape, dtype=torch.float64) - 0.5))
g_values = draw(G_LEN, -0.5, 1.5)
rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
VALUE_COEF = 0.1        # shaping: R + c·V
VALUE_LOSS_COEF = 0.5
KL_COEF = 0.05


def last_index(mask):
    idx = []
    for row in mask:
        nz = row.nonzero()
        idx.append(int(nz[-1]))
    return torch.tensor(idx)


g_last = last_index(g_mask)

# Solver: both turns on R − V_L, V_L detached.
zl = z_logp.clone().requires_grad_(True)
yl = y_logp.clone().requires_grad_(True)
v_l = g_values[torch.arange(E), g_last]
adv = f32(rewards - v_l)  # per-token advantages are float32, as the learner holds them
solver = {}
for mode in ["seq-mean-token-sum-norm", "token-mean"]:
    zl.grad = None
    yl.grad = None
    sum_z = (zl * z_mask).sum(-1)
    sum_y = (yl * y_mask).sum(-1)
    # The surrogate −A·π/π_old at π_old = π (detached): its value is −A per
    # token, its gradient REINFORCE's.
    sur_z = (torch.exp(zl - zl.detach()) * z_mask).sum(-1)
    sur_y = (torch.exp(yl - yl.detach()) * y_mask).sum(-1)
    if mode == "seq-mean-token-sum-norm":  # Σ_e −A_e(log π(z) + log π(ŷ)) over 2E sequences, const 1
        norm = 2 * E
    else:
        norm = z_mask.sum() + y_mask.sum()
    reinforce = -(adv * (sum_z + sum_y)).sum() / norm
    surrogate = -(adv * (sur_z + sur_y)).sum() / norm
    reinforce.backward()
    solver[mode] = {"loss": float(surrogate), "reinforce_loss": float(reinforce),
                    "dlogp_z": ragged(zl.grad, Z_LEN), "dlogp_y": ragged(yl.grad, Y_LEN)}

# Value loss (V_L − R)², mean over episodes.
gv = g_values.clone().requires_grad_(True)
vl = gv[torch.arange(E), g_last]
value_loss = ((vl - rewards) ** 2).mean()
value_loss.backward()
dvalues = gv.grad.clone()

# Feedback: GRPO on the shaped reward, ratio 1 (on-policy), k3 KL, token-mean,
# plus the weighted value loss.
shaped = rewards + VALUE_COEF * v_l
groups = shaped.view(-1, GROUP)
g_adv = ((groups - groups.mean(-1, keepdim=True)) / (groups.std(-1, keepdim=True) + 1e-6)).flatten()
gl = g_logp.clone().requires_grad_(True)
gv2 = g_values.clone().requires_grad_(True)
ratio = torch.exp(gl - gl.detach())
tokens = g_mask.sum()
pg = (-g_adv[:, None] * ratio * g_mask).sum() / tokens
kl = torch.clamp(g_ref - gl, -20, 20)
kl = torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
kl_term = (kl * g_mask).sum() / tokens
vl2 = gv2[torch.arange(E), g_last]
fb_value = ((vl2 - rewards) ** 2).mean()
fb_loss = pg + KL_COEF * kl_term + VALUE_LOSS_COEF * fb_value
fb_loss.backward()

out = {
    "rewards": rewards.tolist(),
    "group_size": GROUP,
    "value_coef": VALUE_COEF,
    "value_loss_coef": VALUE_LOSS_COEF,
    "kl_coef": KL_COEF,
    "z_mask": ragged(z_mask, Z_LEN), "z_logprobs": ragged(z_logp, Z_LEN),
    "y_mask": ragged(y_mask, Y_LEN), "y_logprobs": ragged(y_logp, Y_LEN),
    "g_mask": ragged(g_mask, G_LEN), "g_logprobs": ragged(g_logp, G_LEN),
    "g_ref_logprobs": ragged(g_ref, G_LEN), "g_values": ragged(g_values, G_LEN),
    "last_values": v_l.tolist(),
    "solver_advantages": adv.tolist(),
    "solver": solver,
    "value_loss": float(value_loss),
    "dvalues": ragged(dvalues, G_LEN),
    "shaped_rewards": shaped.tolist(),
    "feedback_advantages": g_adv.tolist(),
    "feedback_pg_kl_loss": float(pg + KL_COEF * kl_term),
    "feedback_loss": float(fb_loss),
    "feedback_dlogprobs": ragged(gl.grad, G_LEN),
    "feedback_dvalues": ragged(gv2.grad, G_LEN),
}
with open("bilevel_golden.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
