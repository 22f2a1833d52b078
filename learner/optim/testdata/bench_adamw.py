#!/usr/bin/python3
"""PyTorch side of BenchmarkAdamWStep: torch.optim.AdamW step time by tensor size.
Run: /usr/bin/python3 bench_adamw.py"""
import time

import torch

torch.set_num_threads(2)
for n in [131072, 1048576, 4194304]:
    p = torch.zeros(n, requires_grad=True)
    p.grad = (torch.arange(n) % 7).float() * 0.01
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01)
    for _ in range(3): opt.step()
    reps = 20
    t = time.perf_counter()
    for _ in range(reps): opt.step()
    dt = (time.perf_counter() - t) / reps
    print(f"torch {torch.__version__} AdamW n={n}: {dt*1e6:.0f} us/step")
