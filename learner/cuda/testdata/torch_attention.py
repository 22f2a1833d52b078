"""PyTorch peer for BenchmarkAttention: one causal attention's forward and
backward passes through torch.nn.functional.scaled_dot_product_attention
on the same shape (rows of one sequence each, Qwen2.5-0.5B's heads: 14
query, 2 key/value, 64 dimensions), in float32 and bfloat16. GQA through
enable_gqa for bfloat16 where this torch has it, else by repeating the
key/value heads (counted in the time): float32 with enable_gqa falls back
to the slow math backend, while repeated heads reach the memory-efficient
one. A torch without scaled_dot_product_attention (before 2.0) runs the
eager product-softmax-product instead ("impl": "eager"). Prints one JSON
line per dtype: ms per forward+backward and TFLOP/s counted as
BenchmarkAttention counts them."""

import argparse
import json
import time

import torch
import torch.nn.functional as F


def has_enable_gqa(sdpa):
    """Whether sdpa takes enable_gqa (torch 2.5 and later). A builtin's
    signature cannot be inspected, so this asks it on tiny tensors."""
    q = torch.zeros(1, 2, 1, 4)
    kv = torch.zeros(1, 1, 1, 4)
    try:
        sdpa(q, kv, kv, enable_gqa=True)
    except TypeError:
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    a = ap.parse_args()
    heads, kv, hd = 14, 2, 64
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    gqa = sdpa is not None and has_enable_gqa(sdpa)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for name in a.dtypes.split(","):
        dt = getattr(torch, name)
        g = torch.Generator(device="cpu").manual_seed(1)
        q = torch.randn(a.batch, heads, a.seq, hd, generator=g).to(dev, dt).requires_grad_()
        k = torch.randn(a.batch, kv, a.seq, hd, generator=g).to(dev, dt).requires_grad_()
        v = torch.randn(a.batch, kv, a.seq, hd, generator=g).to(dev, dt).requires_grad_()
        dout = torch.randn(a.batch, heads, a.seq, hd, generator=g).to(dev, dt)

        use_gqa = gqa and dt in (torch.float16, torch.bfloat16)

        def step():
            if use_gqa:
                o = sdpa(q, k, v, is_causal=True, enable_gqa=True)
            else:
                rep = heads // kv
                kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
                if sdpa is not None:
                    o = sdpa(q, kr, vr, is_causal=True)
                else:
                    s = (q @ kr.transpose(-1, -2)) * hd**-0.5
                    mask = torch.ones(a.seq, a.seq, dtype=torch.bool, device=dev).triu(1)
                    o = s.masked_fill(mask, float("-inf")).softmax(-1) @ vr
            o.backward(dout)
            q.grad = k.grad = v.grad = None

        for _ in range(3):
            step()
        sync()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            step()
        sync()
        sec = (time.perf_counter() - t0) / a.iters
        fwd = 4 * heads * hd * a.seq * a.seq / 2 * a.batch
        print(json.dumps({"peer": "torch", "impl": "sdpa" if sdpa is not None else "eager", "torch": torch.__version__, "dtype": name, "device": str(dev), "gqa": "enable_gqa" if use_gqa else "repeat",
                          "seq": a.seq, "batch": a.batch, "ms_per_pass": round(sec * 1e3, 3), "tflops": round(3.5 * fwd / sec / 1e12, 2)}))


if __name__ == "__main__":
    main()
