#!/usr/bin/python3
"""Writes adamw_golden.json: torch.optim.AdamW + clip_grad_norm_ over a few
steps, the reference for TestAdamWGolden. Run from this folder with the
system interpreter (Debian python3-torch): /usr/bin/python3 adamw_golden.py
"""
import json

import torch

torch.manual_seed(7)
BETAS, EPS, WD, MAX_NORM = (0.9, 0.95), 1e-8, 0.1, 1.0
LRS = [1e-2, 5e-3, 2e-2, 1e-3]
shapes = {"model.embed_tokens.weight": (5, 3), "model.norm.weight": (4,), "lm_head.bias": (2,)}

params = {n: torch.randn(s, dtype=torch.float32, requires_grad=True) for n, s in shapes.items()}
init = {n: p.detach().flatten().tolist() for n, p in params.items()}
opt = torch.optim.AdamW(list(params.values()), lr=LRS[0], betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)

steps = []
for i, lr in enumerate(LRS):
    # Step 2 has small gradients so that clipping leaves them alone.
    scale = 0.05 if i == 2 else 1.0 + i
    grads = {n: (torch.randn(s) * scale) for n, s in shapes.items()}
    for n, p in params.items():
        p.grad = grads[n].clone()
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), MAX_NORM)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    steps.append({
        "lr": lr,
        "grads": {n: g.flatten().tolist() for n, g in grads.items()},
        "total_norm": float(norm),
        "params": {n: p.detach().flatten().tolist() for n, p in params.items()},
    })

state = {}
for n, p in params.items():
    st = opt.state[p]
    state["exp_avg." + n] = st["exp_avg"].flatten().tolist()
    state["exp_avg_sq." + n] = st["exp_avg_sq"].flatten().tolist()

out = {
    "torch": torch.__version__,
    "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS, "weight_decay": WD, "max_norm": MAX_NORM,
    "names": list(shapes),
    "init": init,
    "steps": steps,
    "state": state,
}
with open("adamw_golden.json", "w") as f:
    json.dump(out, f, indent=1)
