#!/usr/bin/python3
"""PyTorch side of BenchmarkDecode: greedy generation with a KV cache on the
same ~10M-parameter Qwen2-style model (random weights), 128 new tokens after
a 16-token prompt, for a batch of sequences at once.

Run with Debian's PyTorch (OpenBLAS installed):

    /usr/bin/python3 rollout/native/testdata/bench_decode.py [--batch 1 64] [--threads 2] [--reps 2]

Prints generated tokens/s over the whole generation (prefill included), as
the Go benchmark reports it. OPENBLAS_CORETYPE is set from the CPU flags
unless the environment sets it (OpenBLAS 0.3.21 does not know this CPU and
would fall back to SSE3 kernels); see learner/blas/bench_torch.py.
"""
import argparse
import os
import time


def best_coretype():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512_bf16" in flags:
        return "Cooperlake"
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


if "OPENBLAS_CORETYPE" not in os.environ and best_coretype():
    os.environ["OPENBLAS_CORETYPE"] = best_coretype()

import torch  # noqa: E402  (after OPENBLAS_CORETYPE)

V, H, I, L, NH, KV, D = 768, 384, 1024, 6, 6, 2, 64
EPS, THETA = 1e-6, 1e6
PROMPT, NEW = 16, 128


def build():
    g = torch.Generator().manual_seed(0)

    def p(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    layers = []
    for _ in range(L):
        layers.append({
            "ln1": torch.ones(H), "ln2": torch.ones(H),
            "q": p(NH * D, H), "qb": torch.zeros(NH * D), "k": p(KV * D, H), "kb": torch.zeros(KV * D),
            "v": p(KV * D, H), "vb": torch.zeros(KV * D), "o": p(H, NH * D),
            "gate": p(I, H), "up": p(I, H), "down": p(H, I),
        })
    return {"embed": p(V, H), "norm": torch.ones(H), "layers": layers}


W = build()
inv = 1.0 / (THETA ** (torch.arange(0, D, 2).float() / D))
ang = torch.arange(PROMPT + NEW).float()[:, None] * inv[None, :]
emb = torch.cat([ang, ang], -1)
COS, SIN = emb.cos(), emb.sin()  # T×D


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos0):  # B×heads×T×D
    T = x.shape[2]
    c, s = COS[pos0:pos0 + T], SIN[pos0:pos0 + T]
    rot = torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1)
    return x * c + rot * s


def forward(tokens, cache, pos0):
    """tokens B×T at positions pos0..; cache: per layer (K, V) B×KV×maxT×D,
    filled in place. Returns the last position's logits B×V."""
    B, T = tokens.shape
    x = W["embed"][tokens]
    for l, (kc, vc) in zip(W["layers"], cache):
        h = rms(x, l["ln1"])
        q = torch.nn.functional.linear(h, l["q"], l["qb"]).view(B, T, NH, D).transpose(1, 2)
        k = torch.nn.functional.linear(h, l["k"], l["kb"]).view(B, T, KV, D).transpose(1, 2)
        v = torch.nn.functional.linear(h, l["v"], l["vb"]).view(B, T, KV, D).transpose(1, 2)
        q, k = rope(q, pos0), rope(k, pos0)
        kc[:, :, pos0:pos0 + T] = k
        vc[:, :, pos0:pos0 + T] = v
        ctx = pos0 + T
        keys = kc[:, :, :ctx].repeat_interleave(NH // KV, dim=1)
        vals = vc[:, :, :ctx].repeat_interleave(NH // KV, dim=1)
        s = q @ keys.transpose(-1, -2) / D ** 0.5  # B×NH×T×ctx
        if T > 1:
            mask = torch.full((T, ctx), float("-inf")).triu(pos0 + 1)
            s = s + mask
        a = (s.softmax(-1) @ vals).transpose(1, 2).reshape(B, T, NH * D)
        x = x + torch.nn.functional.linear(a, l["o"])
        h = rms(x, l["ln2"])
        m = torch.nn.functional.silu(torch.nn.functional.linear(h, l["gate"])) * torch.nn.functional.linear(h, l["up"])
        x = x + torch.nn.functional.linear(m, l["down"])
    return rms(x[:, -1], W["norm"]) @ W["embed"].t()


def generate(prompt):
    B = prompt.shape[0]
    cache = [(torch.zeros(B, KV, PROMPT + NEW, D), torch.zeros(B, KV, PROMPT + NEW, D)) for _ in range(L)]
    logits = forward(prompt, cache, 0)
    out = []
    pos = PROMPT
    for _ in range(NEW):
        nxt = logits.argmax(-1)
        # The log prob of the chosen token, as the native engine reports it.
        _ = logits.log_softmax(-1).gather(-1, nxt[:, None])
        out.append(nxt)
        if len(out) == NEW:
            break
        logits = forward(nxt[:, None], cache, pos)
        pos += 1
    return torch.stack(out, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for B in args.batch:
            prompt = torch.randint(0, 700, (B, PROMPT), generator=g)
            generate(prompt[:, :4])  # warm-up
            best = None
            for _ in range(args.reps):
                t0 = time.perf_counter()
                toks = generate(prompt)
                dt = time.perf_counter() - t0
                assert toks.shape == (B, NEW)
                best = dt if best is None else min(best, dt)
            print(f"batch={B}: {B * NEW / best:.1f} tokens/s ({best:.3f} s for {B}x{NEW} tokens, best of {args.reps})")


if __name__ == "__main__":
    main()
