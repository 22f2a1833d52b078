#!/usr/bin/python3
"""Checks `rlnode model forward` against PyTorch: recomputes, with the
from-scratch Qwen2 / Llama of make_golden.py, each sequence's response log
probs (and with --grad the gradient of their sum for every weight) for a
checkpoint directory and compares them with the safetensors file the Go
side wrote.

    rlnode model forward --model DIR --input IN.json --out GO.safetensors --grad [--device cuda]
    python3 compare_forward.py --model DIR --input IN.json --scores GO.safetensors --grad [--device cuda]

Prints the largest log-prob difference and the largest gradient difference
relative to that tensor's largest gradient, and exits 1 when either is
above its tolerance (--tol-logp, --tol-grad). float32 throughout (TF32 off
on a GPU). Runs with Debian's PyTorch on the CPU, or any PyTorch with CUDA.
"""
import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402  (the reference forward pass)

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16}


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dt = DTYPES[h["dtype"]]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.int16 if dt == torch.bfloat16 else dt)
        if dt == torch.bfloat16:
            t = t.view(torch.bfloat16)
        out[name] = t.reshape(h["shape"]).float()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--scores", required=True, help="what rlnode model forward wrote")
    ap.add_argument("--grad", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tol-logp", type=float, default=1e-3)
    ap.add_argument("--tol-grad", type=float, default=1e-3)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    cfg.setdefault("architectures", ["Qwen2ForCausalLM"])
    cfg.setdefault("tie_word_embeddings", False)
    # Read on the host, then moved: make_golden's forward creates its
    # tensors on the default device.
    w = {k: v.to(args.device).requires_grad_(True) for k, v in load_safetensors(os.path.join(args.model, "model.safetensors")).items()}
    with open(args.input) as f:
        seqs = json.load(f)["sequences"]
    go = load_safetensors(args.scores)
    if args.device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_default_device(args.device)
    worst_lp, total = 0.0, None
    for i, s in enumerate(seqs):
        toks = s["prompt"] + s["response"]
        z = make_golden.forward(cfg, w, toks)[len(s["prompt"]) - 1 : len(toks) - 1]
        lp = z.log_softmax(-1).gather(1, torch.tensor(s["response"])[:, None])[:, 0]
        total = lp.sum() if total is None else total + lp.sum()
        d = (lp.detach().cpu() - go[f"logprobs.{i}"]).abs().max().item()
        worst_lp = max(worst_lp, d)
    print(f"{len(seqs)} sequences on {args.device}: largest log-prob difference {worst_lp:.3g} (tolerance {args.tol_logp:g})")
    ok = worst_lp <= args.tol_logp
    if args.grad:
        names = list(w)
        grads = torch.autograd.grad(total, [w[n] for n in names])
        worst, where = 0.0, ""
        for n, g in zip(names, grads):
            g = g.detach().cpu()
            scale = max(g.abs().max().item(), 1e-30)
            d = (g - go["grad." + n]).abs().max().item() / scale
            if d > worst:
                worst, where = d, n
        print(f"{len(names)} gradients: largest difference {worst:.3g} of the tensor's largest gradient, in {where} (tolerance {args.tol_grad:g})")
        ok = ok and worst <= args.tol_grad
    print("compare_forward: " + ("ok" if ok else "DIFFERENT"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
