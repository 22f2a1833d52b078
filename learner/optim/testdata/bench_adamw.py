#!/usr/bin/python3
"""PyTorch side of BenchmarkAdamWStep: torch.optim.AdamW step time by tensor size.
Run: /usr/bin/python3 bench_adamw.py"""
import time

# Debian's OpenBLAS 0.3.21 does not recognise this machine's CPU and falls
# back to slow SSE3 kernels; pick the core type from the CPU flags (see
# learner/blas/bench_torch.py) before torch loads OpenBLAS.
import os as _os
if "OPENBLAS_CORETYPE" not in _os.environ:
    _flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    _core = "Cooperlake" if "avx512_bf16" in _flags else "SkylakeX" if "avx512f" in _flags else "Haswell" if "avx2" in _flags else ""
    if _core:
        _os.environ["OPENBLAS_CORETYPE"] = _core
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
