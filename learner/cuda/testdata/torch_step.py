"""PyTorch eager baseline for BenchmarkTrainingStep: the same Qwen2 shape,
rows and loss (mean log-probability of the second half of each row, the
LM head applied to those positions only), AdamW with clipping at 1, random
weights. fp32 master weights; with --dtype bf16 the forward and backward
run under torch.autocast(bfloat16), as rlnode's cuda-bf16 runs its matrix
products. Attention is scaled_dot_product_attention, or the eager
product-softmax-product on a torch before 2.0 (the "attention" field says
which). Prints one JSON line."""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "tiny": dict(hidden=64, inter=160, layers=2, heads=4, kv=2, head_dim=16, vocab=256),
    "qwen2.5-0.5b": dict(hidden=896, inter=4864, layers=24, heads=14, kv=2, head_dim=64, vocab=151936),
}


SDPA = getattr(F, "scaled_dot_product_attention", None)


def causal_attention(q, k, v):
    if SDPA is not None:
        return SDPA(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return s.masked_fill(mask, float("-inf")).softmax(-1) @ v


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def rope(x, pos, theta=1e6):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device).float() / d)
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos.to(x.dtype) + torch.cat([-x2, x1], -1) * sin.to(x.dtype)


class Layer(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        h, hd = s["hidden"], s["head_dim"]
        self.s = s
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q = torch.nn.Linear(h, s["heads"] * hd)
        self.k = torch.nn.Linear(h, s["kv"] * hd)
        self.v = torch.nn.Linear(h, s["kv"] * hd)
        self.o = torch.nn.Linear(s["heads"] * hd, h, bias=False)
        self.gate = torch.nn.Linear(h, s["inter"], bias=False)
        self.up = torch.nn.Linear(h, s["inter"], bias=False)
        self.down = torch.nn.Linear(s["inter"], h, bias=False)

    def forward(self, x, pos):
        b, t, _ = x.shape
        s, hd = self.s, self.s["head_dim"]
        y = self.n1(x)
        q = rope(self.q(y).view(b, t, s["heads"], hd).transpose(1, 2), pos)
        k = rope(self.k(y).view(b, t, s["kv"], hd).transpose(1, 2), pos)
        v = self.v(y).view(b, t, s["kv"], hd).transpose(1, 2)
        g = s["heads"] // s["kv"]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        a = causal_attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.emb = torch.nn.Embedding(s["vocab"], s["hidden"])
        self.layers = torch.nn.ModuleList(Layer(s) for _ in range(s["layers"]))
        self.norm = RMSNorm(s["hidden"])

    def forward(self, ids, targets, first):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb(ids)
        for l in self.layers:
            x = l(x, pos)
        h = self.norm(x[:, first - 1 : -1])  # positions that predict the response
        logits = h @ self.emb.weight.t()  # tied LM head
        logp = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None])
        return -logp.mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="tiny", choices=SHAPES)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    s = SHAPES[a.shape]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Model(s).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ids = torch.randint(0, s["vocab"], (a.batch, a.seq), device=dev)
    first = a.seq // 2
    targets = ids[:, first:]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = m(ids, targets, first)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        return loss

    step()  # warm-up
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    if dev == "cuda":
        torch.cuda.synchronize()
    sec = (time.perf_counter() - t0) / a.steps
    params = sum(p.numel() for p in m.parameters())
    tokens = a.seq * a.batch
    flops = 6 * params * tokens + 6 * s["layers"] * s["heads"] * s["head_dim"] * a.batch * a.seq * a.seq / 2
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    # Dense bf16 tensor-core peaks, TFLOP/s (NVIDIA's datasheets), as
    # BenchmarkTrainingStep's bf16Peaks: the first fragment of the name
    # that matches.
    peaks = [("H100 PCIe", 756), ("H100 NVL", 835), ("H100", 989), ("H200", 989), ("GH200", 989), ("A100", 312), ("L40S", 362)]
    peak = next((p for frag, p in peaks if frag in name), 0)
    print(json.dumps({
        "mfu_pct": round(100 * flops / sec / 1e12 / peak, 2) if peak else None,
        "torch": torch.__version__, "attention": "sdpa" if SDPA is not None else "eager", "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "shape": a.shape,
        "seq": a.seq, "batch": a.batch, "dtype": a.dtype, "ms_per_step": round(sec * 1e3, 2),
        "tokens_per_s": round(tokens / sec, 1), "tflops": float(f"{flops / sec / 1e12:.4g}"), "loss": round(float(loss), 5),
        "params": params, "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if dev == "cuda" else None,
    }))


if __name__ == "__main__":
    main()
