#!/usr/bin/python3
"""Writes context_golden.json, the PyTorch reference for the textual
actor-critic's context reward:

    R = success + a·mean_t log π(y*_t | x, c) + b·Σ_t [log π(y_t | x, c) − log π(y_t | x)]

and the context generator's GRPO advantages on it. The solver's
distributions are random logits over a small vocabulary, log-softmaxed in
float64; the log-probabilities handed to the Go code are rounded to
float32 as the engine returns them. Also the exact KL(π(·|x,c) ‖ π(·|x))
of each one-token distribution beside the Monte-Carlo estimate from many
samples, which shows the dependence term estimates it.

Run from this folder with the system interpreter (Debian python3-torch):
    /usr/bin/python3 context_golden.py
"""
import json

import torch

torch.manual_seed(77)
E, GROUP, V = 6, 3, 11
ANS_LEN = [3, 1, 4, 2, 3, 2]   # y*: the verified answer
Y_LEN = [2, 4, 1, 3, 2, 5]     # y: the solver's sampled answer
A, B = 0.5, 0.2


def f32(x):
    return x.to(torch.float32).to(torch.float64)


def logprobs(length):
    logits = 2 * torch.randn(length, V, dtype=torch.float64)
    ids = torch.randint(0, V, (length,))
    return f32(torch.log_softmax(logits, -1)[torch.arange(length), ids])


success = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
ans = [logprobs(n) for n in ANS_LEN]
with_c = [logprobs(n) for n in Y_LEN]
without_c = [logprobs(n) for n in Y_LEN]
conf = torch.stack([a.mean() for a in ans])
dep = torch.stack([(w - wo).sum() for w, wo in zip(with_c, without_c)])
rewards = success + A * conf + B * dep
g = rewards.view(-1, GROUP)
adv = ((g - g.mean(-1, keepdim=True)) / (g.std(-1, keepdim=True) + 1e-6)).flatten()

# The estimator: E_{y~p}[log p(y) − log q(y)] = KL(p‖q), one token.
p = torch.log_softmax(torch.randn(V, dtype=torch.float64), -1)
q = torch.log_softmax(torch.randn(V, dtype=torch.float64), -1)
kl = float((p.exp() * (p - q)).sum())
ys = torch.multinomial(p.exp(), 200000, replacement=True)
mc = float((p[ys] - q[ys]).mean())

out = {
    "group_size": GROUP, "confidence_coef": A, "dependence_coef": B,
    "success": success.tolist(),
    "answer_logprobs": [a.tolist() for a in ans],
    "with_context": [w.tolist() for w in with_c],
    "without_context": [w.tolist() for w in without_c],
    "confidence": conf.tolist(), "dependence": dep.tolist(),
    "rewards": rewards.tolist(), "advantages": adv.tolist(),
    "p": p.tolist(), "q": q.tolist(), "kl": kl, "kl_monte_carlo": mc,
}
with open("context_golden.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
