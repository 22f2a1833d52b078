#!/usr/bin/python3
"""Writes rl_golden.json, the PyTorch reference for rl's golden tests.

The losses are written here in torch the way verl writes them (padded
batch × time tensors, masks, torch.maximum/minimum/clamp, autograd for the
gradients), independently of the Go code. Inputs are drawn in float32 and
the reference is computed in float64, so the Go results (float64 math on
float32 inputs, float32 gradients) should agree to float32 rounding.

Run from this folder with the system interpreter (Debian python3-torch):
    /usr/bin/python3 rl_golden.py
"""
import json
import math

import torch

torch.manual_seed(1234)
LENGTHS = [7, 3, 9, 1, 5]
B, T = len(LENGTHS), max(LENGTHS)


def f32(x):
    return x.to(torch.float32).to(torch.float64)


def ragged(x):
    return [x[i, :n].tolist() for i, n in enumerate(LENGTHS)]


pad = torch.zeros(B, T, dtype=torch.float64)
for i, n in enumerate(LENGTHS):
    pad[i, :n] = 1
mask = pad.clone()
mask[0, 2] = 0  # a masked tool-output token inside a sequence
mask[2, 4] = 0
mask[2, 5] = 0
mask[4, 0] = 0

logp = f32(-0.05 - 3 * torch.rand(B, T, dtype=torch.float64))
old = f32(logp + 1.2 * (torch.rand(B, T, dtype=torch.float64) - 0.5))
sample = f32(old + 1.5 * (torch.rand(B, T, dtype=torch.float64) - 0.5))
ref = f32(logp + 0.8 * (torch.rand(B, T, dtype=torch.float64) - 0.5))
ent = f32(4 * torch.rand(B, T, dtype=torch.float64))
adv = f32(torch.randn(B, 1, dtype=torch.float64) + 0.3 * torch.randn(B, T, dtype=torch.float64))

norm = {"tokens": float(mask.sum()), "seqs": float((mask.sum(-1) > 0).sum()), "const": 12.0}


def agg(loss_mat, mode):
    if mode == "token-mean":
        return (loss_mat * mask).sum() / norm["tokens"]
    if mode == "seq-mean-token-mean":
        n = mask.sum(-1)
        return ((loss_mat * mask).sum(-1) / n.clamp(min=1)).sum() / norm["seqs"]
    if mode == "seq-mean-token-sum-norm":
        return (loss_mat * mask).sum() / (norm["const"] * norm["seqs"])
    raise ValueError(mode)


def kl_term(lp, kind):
    if kind == "k1":
        return lp - ref
    if kind == "k2":
        return 0.5 * (lp - ref) ** 2
    kl = torch.clamp(ref - lp, -20, 20)
    return torch.clamp(torch.exp(kl) - kl - 1, -10, 10)


def masked_mean(x):
    return float((x * mask).sum() / mask.sum())


def policy_case(name, clip_low, clip_high, dual, tis, kl_coef, kl, ent_coef, mode):
    lp = logp.clone().requires_grad_(True)
    h = ent.clone().requires_grad_(True)
    log_ratio = torch.clamp(lp - old, -20, 20)
    ratio = torch.exp(log_ratio)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    pg = torch.maximum(l1, l2)
    clipped = (l2 > l1).double()
    dual_clipped = torch.zeros_like(pg)
    if dual > 0:
        l3 = -adv * dual
        dual_clipped = ((l3 < pg) & (adv < 0)).double()
        pg = torch.where(adv < 0, torch.minimum(pg, l3), pg)
    if tis > 0:
        w = torch.clamp(torch.exp(torch.clamp(old - sample, -20, 20)), max=tis)
        pg = pg * w
    loss = agg(pg, mode)
    if kl_coef > 0:
        loss = loss + kl_coef * agg(kl_term(lp, kl), mode)
    if ent_coef > 0:
        loss = loss - ent_coef * agg(h, mode)
    loss.backward()
    r = ratio.detach()
    return {
        "name": name,
        "clip_low": clip_low, "clip_high": clip_high, "dual_clip": dual, "tis_cap": tis,
        "kl_coef": kl_coef, "kl": kl, "entropy_coef": ent_coef, "aggregation": mode,
        "loss": float(loss),
        "dlogprobs": ragged(lp.grad),
        "dentropy": ragged(h.grad) if ent_coef > 0 else None,
        "clip_frac_low": masked_mean(clipped * (adv < 0)),
        "clip_frac_high": masked_mean(clipped * (adv > 0)),
        "dual_clip_frac": masked_mean(dual_clipped),
        "mean_ratio": masked_mean(r),
        "approx_kl": masked_mean(r - 1 - log_ratio.detach()),
        "entropy_mean": masked_mean(ent),
    }


policy = [
    policy_case("ppo", 0.2, 0.2, 0, 0, 0, "k1", 0, "token-mean"),
    policy_case("dapo-k3-entropy", 0.2, 0.28, 3.0, 0, 0.05, "k3", 0.01, "seq-mean-token-mean"),
    policy_case("dapo-tis-k1-sumnorm", 0.2, 0.28, 3.0, 2.0, 0.1, "k1", 0, "seq-mean-token-sum-norm"),
    policy_case("ppo-tis-k2-entropy", 0.2, 0.2, 0, 1.5, 0.2, "k2", 0.003, "token-mean"),
    policy_case("dualclip-k3-sumnorm", 0.1, 0.1, 1.5, 0, 1.0, "k3", 0.02, "seq-mean-token-sum-norm"),
]

# Clipped value loss, verl's compute_value_loss.
values_old = f32(torch.randn(B, T, dtype=torch.float64))
values = f32(values_old + 0.8 * (torch.rand(B, T, dtype=torch.float64) - 0.5))
returns = f32(values_old + torch.randn(B, T, dtype=torch.float64))
value = []
for mode in ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]:
    v = values.clone().requires_grad_(True)
    vc = torch.clamp(v, values_old - 0.2, values_old + 0.2)
    e1, e2 = (v - returns) ** 2, (vc - returns) ** 2
    loss = 0.5 * agg(torch.maximum(e1, e2), mode)
    loss.backward()
    value.append({"aggregation": mode, "clip": 0.2, "loss": float(loss), "dvalues": ragged(v.grad),
                  "clip_frac": masked_mean((e2 > e1).double())})

# Group advantages: torch.std is unbiased.
rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.25, 0.0, 0.0, 0.0, 2.0, -1.0], dtype=torch.float64)
groups = rewards.view(-1, 4)
mean, std = groups.mean(-1, keepdim=True), groups.std(-1, keepdim=True)
grpo = ((groups - mean) / (std + 1e-6)).flatten().tolist()
drgrpo = (groups - mean).flatten().tolist()
rloo = (groups - (groups.sum(-1, keepdim=True) - groups) / 3).flatten().tolist()

# Token-level: k3 penalty in the reward, REINFORCE++ and GAE. Time steps
# are the loss tokens of each sequence (masked tokens skipped).
scores = [1.0, 0.0, 0.5, -1.0, 2.0]
beta, gamma, lam = 0.05, 0.99, 0.95
with torch.no_grad():
    kl_pen = kl_term(logp, "k3") * mask
tok_rewards = (-beta * kl_pen).clone()
for i in range(B):
    idx = mask[i].nonzero().flatten().tolist()
    if idx:
        tok_rewards[i, idx[-1]] += scores[i]
tok_rewards = f32(tok_rewards)
rpp_returns = torch.zeros(B, T, dtype=torch.float64)
gae_adv = torch.zeros(B, T, dtype=torch.float64)
for i in range(B):
    g, next_v, next_a = 0.0, 0.0, 0.0
    for t in reversed(mask[i].nonzero().flatten().tolist()):
        g = float(tok_rewards[i, t]) + gamma * g
        rpp_returns[i, t] = g
        delta = float(tok_rewards[i, t]) + gamma * next_v - float(values[i, t])
        a = delta + gamma * lam * next_a
        gae_adv[i, t] = a
        next_v, next_a = float(values[i, t]), a
rpp_returns = f32(rpp_returns)
n = mask.sum()
m = (rpp_returns * mask).sum() / n
var = (((rpp_returns - m) ** 2) * mask).sum() / (n - 1)
rpp_adv = (rpp_returns - m) * torch.rsqrt(var + 1e-8) * mask
gae_ret = (gae_adv + values) * mask

out = {
    "torch": torch.__version__,
    "inputs": {
        "mask": ragged(mask), "logprobs": ragged(logp), "old_logprobs": ragged(old),
        "sample_logprobs": ragged(sample), "ref_logprobs": ragged(ref), "entropy": ragged(ent),
        "advantages": ragged(adv), "norm_tokens": norm["tokens"], "norm_seqs": norm["seqs"],
        "norm_const": norm["const"],
        "values": ragged(values), "old_values": ragged(values_old), "returns": ragged(returns),
    },
    "policy": policy,
    "value": value,
    "groups": {"rewards": rewards.tolist(), "group_size": 4, "grpo": grpo, "drgrpo": drgrpo, "rloo": rloo},
    "token": {
        "scores": scores, "beta": beta, "gamma": gamma, "lambda": lam,
        "kl_k3": ragged(kl_pen), "token_rewards": ragged(tok_rewards),
        "reinforcepp_returns": ragged(rpp_returns), "reinforcepp_advantages": ragged(rpp_adv),
        "gae_advantages": ragged(gae_adv), "gae_returns": ragged(gae_ret),
    },
}
with open("rl_golden.json", "w") as f:
    json.dump(out, f)
