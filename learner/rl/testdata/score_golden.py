#!/usr/bin/python3
"""Writes score_golden.json, the PyTorch reference for SCoRe's two stages
(Kumar et al., 2024) as the policy loss takes them with per-sequence
weights: stage I trains the second attempt y on r2 (GRPO, clipped
surrogate) with KL β1 and holds the first attempt z to the reference by the
KL alone at β2 (PG weight 0, KL weight β2/β1); stage II trains both, y on
the shaped reward r2 + α(r2 − r1), KL β1 on both (weights 1).

Written with torch tensors and autograd, independently of the Go code.
Inputs are drawn in float32 and the reference is computed in float64.

Run from this folder with the system interpreter (Debian python3-torch):
    /usr/bin/python3 score_golden.py
"""
import json

import torch

torch.manual_seed(2024)
E = 6            # episodes: 3 groups of 2
GROUP = 2
Z_LEN = [4, 2, 5, 3, 1, 6]    # first attempt
Y_LEN = [3, 5, 2, 4, 6, 1]    # second attempt
BETA1, BETA2, ALPHA = 0.01, 0.1, 10.0
CLIP_LOW, CLIP_HIGH = 0.2, 0.28


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


def pad(a, b):
    """Stacks the rows of a and b (z rows then y rows), padded to one width."""
    w = max(a.shape[1], b.shape[1])
    out = torch.zeros(a.shape[0] + b.shape[0], w, dtype=torch.float64)
    out[:a.shape[0], :a.shape[1]] = a
    out[a.shape[0]:, :b.shape[1]] = b
    return out


z_mask = pad_mask(Z_LEN, [(0, 1)])
y_mask = pad_mask(Y_LEN, [(3, 3)])
mask = pad(z_mask, y_mask)
LENS = Z_LEN + Y_LEN
logp = pad(draw(Z_LEN, -3, -0.05), draw(Y_LEN, -3, -0.05))
old = f32(logp + 0.8 * (torch.rand(logp.shape, dtype=torch.float64) - 0.5))
ref = f32(logp + 0.6 * (torch.rand(logp.shape, dtype=torch.float64) - 0.5))
r1 = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
r2 = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0], dtype=torch.float64)


def grpo(r):
    g = r.view(-1, GROUP)
    return ((g - g.mean(-1, keepdim=True)) / (g.std(-1, keepdim=True) + 1e-6)).flatten()


def loss(adv, pg_w, kl_w, agg):
    lp = logp.clone().requires_grad_(True)
    a = f32(adv)[:, None]  # per-token advantages are float32, as the learner holds them
    ratio = torch.exp(torch.clamp(lp - old, -20, 20))
    pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH))
    kl = torch.clamp(ref - lp, -20, 20)
    kl = torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
    tok = pg_w[:, None] * pg + BETA1 * kl_w[:, None] * kl
    if agg == "token-mean":
        total = (tok * mask).sum() / mask.sum()
    else:  # seq-mean-token-mean
        total = ((tok * mask).sum(-1) / mask.sum(-1)).mean()
    total.backward()
    return float(total), ragged(lp.grad, LENS)


stage1_adv = torch.cat([grpo(r1), grpo(r2)])  # z's advantages are computed, then weighed 0
stage1_pg = torch.tensor([0.0] * E + [1.0] * E, dtype=torch.float64)
stage1_kl = torch.tensor([BETA2 / BETA1] * E + [1.0] * E, dtype=torch.float64)
shaped = r2 + ALPHA * (r2 - r1)
stage2_adv = torch.cat([grpo(r1), grpo(shaped)])
ones = torch.ones(2 * E, dtype=torch.float64)

cases = []
for agg in ["token-mean", "seq-mean-token-mean"]:
    l1, d1 = loss(stage1_adv, stage1_pg, stage1_kl, agg)
    cases.append({"name": "stage1 " + agg, "aggregation": agg, "advantages": stage1_adv.tolist(),
                  "pg_weights": stage1_pg.tolist(), "kl_weights": stage1_kl.tolist(), "loss": l1, "dlogprobs": d1})
    l2, d2 = loss(stage2_adv, ones, ones, agg)
    cases.append({"name": "stage2 " + agg, "aggregation": agg, "advantages": stage2_adv.tolist(),
                  "pg_weights": None, "kl_weights": None, "loss": l2, "dlogprobs": d2})

out = {
    "group_size": GROUP, "beta1": BETA1, "beta2": BETA2, "alpha": ALPHA,
    "clip_low": CLIP_LOW, "clip_high": CLIP_HIGH,
    "r1": r1.tolist(), "r2": r2.tolist(), "shaped": shaped.tolist(),
    "mask": ragged(mask, LENS), "logprobs": ragged(logp, LENS),
    "old_logprobs": ragged(old, LENS), "ref_logprobs": ragged(ref, LENS),
    "cases": cases,
}
with open("score_golden.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
