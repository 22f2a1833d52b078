#!/usr/bin/python3
"""Peer of BenchmarkDecodeGPU: transformers' generate on a GPU, greedy, 128
new tokens after a 16-token prompt for a batch of sequences at once, on
Qwen2.5-0.5B's shape with random weights (Qwen2ForCausalLM built from its
configuration: nothing is downloaded).

    python3 rollout/native/testdata/hf_generate.py [--batch 1 64] [--dtype float32 bfloat16] [--reps 2]

Prints generated tokens/s over the whole generation (prefill included), as
the Go benchmark reports it. With no end-of-sequence token every sequence
runs its full length, as the Go benchmark's do.
"""
import argparse
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

PROMPT, NEW = 16, 128


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name(0)}")
    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                      rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    for name in args.dtype:
        dtype = getattr(torch, name)
        model = Qwen2ForCausalLM(cfg).to("cuda", dtype).eval()
        for B in args.batch:
            prompt = torch.randint(0, 700, (B, PROMPT), generator=g).cuda()
            mask = torch.ones_like(prompt)
            # No end-of-sequence token: every sequence runs its full length.
            kw = dict(attention_mask=mask, do_sample=False, max_new_tokens=NEW, pad_token_id=0, eos_token_id=None)
            with torch.no_grad():
                model.generate(prompt[:, :4], **{**kw, "attention_mask": mask[:, :4], "max_new_tokens": 8})
                best = None
                for _ in range(args.reps):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    out = model.generate(prompt, **kw)
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
                    assert out.shape == (B, PROMPT + NEW), out.shape
                    best = dt if best is None else min(best, dt)
            print(f"hf_generate {name} batch={B}: {B * NEW / best:.1f} tokens/s ({best:.3f} s for {B}x{NEW} tokens, best of {args.reps})")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
