"""PyTorch side of BenchmarkTrainStep: forward + backward of the same
~10M-parameter Qwen2-style model over 8 rows of 256 tokens, the gradient of
the sum of log probs of every token after the first.

Run:  /usr/bin/python3 bench_train_step.py [threads] [steps]
Prints seconds per step, tokens/s (mean and best step), CPU seconds per step
(user + system, all threads) and peak RSS (getrusage).
"""
import math
import resource
import sys
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
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(threads)
torch.manual_seed(0)

V, H, I, L, NH, KV, D = 768, 384, 1024, 6, 6, 2, 64
B, T = 8, 256
EPS, THETA = 1e-6, 1e6


def p(*shape, norm=False):
    t = torch.ones(shape) if norm else torch.randn(shape) * 0.02
    return t.requires_grad_(True)


params = {"embed": p(V, H), "norm": p(H, norm=True), "layers": []}
for _ in range(L):
    params["layers"].append({
        "ln1": p(H, norm=True), "ln2": p(H, norm=True),
        "q": p(NH * D, H), "qb": p(NH * D), "k": p(KV * D, H), "kb": p(KV * D),
        "v": p(KV * D, H), "vb": p(KV * D), "o": p(H, NH * D),
        "gate": p(I, H), "up": p(I, H), "down": p(H, I),
    })
all_params = [params["embed"], params["norm"]] + [t for l in params["layers"] for t in l.values()]
print("params", sum(t.numel() for t in all_params))

inv = 1.0 / (THETA ** (torch.arange(0, D, 2).float() / D))
ang = torch.arange(T).float()[:, None] * inv[None, :]
emb = torch.cat([ang, ang], -1)
COS, SIN = emb.cos()[None, None], emb.sin()[None, None]  # 1×1×T×D
MASK = torch.full((T, T), float("-inf")).triu(1)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x):  # B×heads×T×D
    rot = torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1)
    return x * COS + rot * SIN


def step(tokens):
    x = params["embed"][tokens]  # B×T×H
    for l in params["layers"]:
        h = rms(x, l["ln1"])
        q = rope(F.linear(h, l["q"], l["qb"]).view(B, T, NH, D).transpose(1, 2))
        k = rope(F.linear(h, l["k"], l["kb"]).view(B, T, KV, D).transpose(1, 2))
        v = F.linear(h, l["v"], l["vb"]).view(B, T, KV, D).transpose(1, 2)
        k = k.repeat_interleave(NH // KV, dim=1)
        v = v.repeat_interleave(NH // KV, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(D) + MASK
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, NH * D)
        x = x + F.linear(a, l["o"])
        h = rms(x, l["ln2"])
        x = x + F.linear(F.silu(F.linear(h, l["gate"])) * F.linear(h, l["up"]), l["down"])
    x = rms(x, params["norm"])
    logits = F.linear(x[:, :-1], params["embed"])
    logp = logits.log_softmax(-1).gather(-1, tokens[:, 1:, None])
    for t in all_params:
        t.grad = None
    logp.sum().backward()


tokens = torch.randint(0, V, (B, T))
step(tokens)  # warm up
def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


times = []
cpu0 = cpu_seconds()
for _ in range(steps):
    t0 = time.perf_counter()
    step(tokens)
    times.append(time.perf_counter() - t0)
cpu = (cpu_seconds() - cpu0) / steps
best, mean = min(times), sum(times) / len(times)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"threads {threads}: {mean:.3f} s/step mean, {best:.3f} best; {B*T/mean:.0f} tokens/s mean, {B*T/best:.0f} best; {cpu:.3f} cpu-s/step; peak RSS {rss:.0f} MiB")
