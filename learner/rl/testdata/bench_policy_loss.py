#!/usr/bin/python3
"""PyTorch side of BenchmarkPolicyLoss: the same loss (DAPO clip 0.2/0.28,
dual-clip 3, TIS cap 2, k3 KL 0.05, entropy 0.01, token-mean) and its
backward to logprobs and entropies over 8×256 tokens, float32, timed per
call. Run: /usr/bin/python3 bench_policy_loss.py
"""
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

torch.manual_seed(0)
torch.set_num_threads(2)
B, T = 8, 256
logp0 = -0.05 - 3 * torch.rand(B, T)
old = logp0 + 1.2 * (torch.rand(B, T) - 0.5)
sample = old + 1.5 * (torch.rand(B, T) - 0.5)
ref = logp0 + 0.6 * (torch.rand(B, T) - 0.5)
ent0 = 4 * torch.rand(B, T)
adv = torch.randn(B, 1) + 0.3 * torch.randn(B, T)
mask = (torch.rand(B, T) > 0.2).float()


def step():
    lp = logp0.clone().requires_grad_(True)
    h = ent0.clone().requires_grad_(True)
    lr = torch.clamp(lp - old, -20, 20)
    ratio = torch.exp(lr)
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28))
    pg = torch.where(adv < 0, torch.minimum(pg, -adv * 3.0), pg)
    pg = pg * torch.clamp(torch.exp(torch.clamp(old - sample, -20, 20)), max=2.0)
    kl = torch.clamp(ref - lp, -20, 20)
    k3 = torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
    n = mask.sum()
    loss = (pg * mask).sum() / n + 0.05 * (k3 * mask).sum() / n - 0.01 * (h * mask).sum() / n
    loss.backward()
    return loss


for _ in range(20):
    step()
reps = 200
t = time.perf_counter()
for _ in range(reps):
    step()
dt = (time.perf_counter() - t) / reps
print(f"torch {torch.__version__}: {dt * 1e6:.0f} us per loss+backward, {B * T / dt:.3g} tokens/s")
