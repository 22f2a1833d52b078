"""Writes the golden files for learner/model's tests.

A from-scratch Qwen2 / Llama forward pass in PyTorch (no transformers
package), run on small random checkpoints. For each checkpoint directory it
writes config.json and model.safetensors, and golden.safetensors holding,
for the sequences in golden_input.json (each run alone, batch size 1):

  logits    scored positions × vocab (the position before each response token)
  logprobs  log p(response token | everything before it)
  entropy   entropy of the next-token distribution at those positions
  w_logp, w_ent  random weights; loss = sum(w_logp*logprobs + w_ent*entropy)
  grad.<tensor name>  d loss / d parameter
  sum_logprobs_grad.<tensor name>  d sum(logprobs) / d parameter

For the value head (qwen2-value: a smaller Qwen2 whose checkpoint also holds
TRL's v_head.summary.weight/bias) golden.safetensors holds instead:

  logprobs, values  per response token; a value is read at the token before
                    the response token, as the logits are
  old_values, returns  random; the value loss's detached inputs
  vf_loss, vf_clipfrac  PPO's clipped value loss (verl's compute_value_loss,
                    token-mean, cliprange_value 0.2) and its clip fraction
  w_logp            random; loss = sum(w_logp*logprobs) + vf_loss
  grad.<tensor name>  d loss / d parameter, value head included

Run with Debian's PyTorch:  /usr/bin/python3 make_golden.py
"""
import json
import math
import os
import struct

import torch

torch.manual_seed(1234)
HERE = os.path.dirname(os.path.abspath(__file__))


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if t.dtype == torch.float32:
            dt, raw = "F32", t.numpy().tobytes()
        elif t.dtype == torch.bfloat16:
            dt, raw = "BF16", t.view(torch.int16).numpy().tobytes()
        else:
            raise ValueError(f"{name}: dtype {t.dtype}")
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def param_shapes(c):
    h, d = c["hidden_size"], c["hidden_size"] // c["num_attention_heads"]
    q, kv, inter = c["num_attention_heads"] * d, c["num_key_value_heads"] * d, c["intermediate_size"]
    bias = c["architectures"][0] == "Qwen2ForCausalLM" or c.get("attention_bias", False)
    out = {"model.embed_tokens.weight": (c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attn.q_proj.weight"] = (q, h)
        out[p + "self_attn.k_proj.weight"] = (kv, h)
        out[p + "self_attn.v_proj.weight"] = (kv, h)
        if bias:
            out[p + "self_attn.q_proj.bias"] = (q,)
            out[p + "self_attn.k_proj.bias"] = (kv,)
            out[p + "self_attn.v_proj.bias"] = (kv,)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        out[p + "post_attention_layernorm.weight"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (inter, h)
        out[p + "mlp.up_proj.weight"] = (inter, h)
        out[p + "mlp.down_proj.weight"] = (h, inter)
    out["model.norm.weight"] = (h,)
    if not c["tie_word_embeddings"]:
        out["lm_head.weight"] = (c["vocab_size"], h)
    return out


def random_weights(c):
    w = {}
    for name, shape in param_shapes(c).items():
        if name.endswith("norm.weight"):
            w[name] = 1 + 0.1 * torch.randn(shape)  # not all ones, so norm grads matter
        elif name.endswith(".bias"):
            w[name] = 0.1 * torch.randn(shape)
        else:
            w[name] = 0.2 * torch.randn(shape)
    return w


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    # x: T × heads × D, positions 0..T-1, "rotate half" layout as in HF.
    T, D = x.shape[0], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    ang = torch.arange(T).float()[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    rot = torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1)
    return x * cos + rot * sin


def forward(c, w, tokens):
    """Logits (T × vocab) of one sequence."""
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return hidden(c, w, tokens) @ head.T


def hidden(c, w, tokens):
    """Final-norm hidden states (T × hidden) of one sequence."""
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    D = c["hidden_size"] // H
    eps, theta = c["rms_norm_eps"], c["rope_theta"]
    T = len(tokens)
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    mask = torch.full((T, T), float("-inf")).triu(1)

    def lin(name, v):
        y = v @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        return y

    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = rope(lin(p + "self_attn.q_proj", h).view(T, H, D), theta)
        k = rope(lin(p + "self_attn.k_proj", h).view(T, KV, D), theta)
        v = lin(p + "self_attn.v_proj", h).view(T, KV, D)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D) + mask
        a = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, H * D)
        x = x + lin(p + "self_attn.o_proj", a)
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(lin(p + "mlp.gate_proj", h)) * lin(p + "mlp.up_proj", h)
        x = x + lin(p + "mlp.down_proj", g)
    return rmsnorm(x, w["model.norm.weight"], eps)


def make(name, config, dtype, seqs):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    w = random_weights(config)
    stored = {k: v.to(dtype) for k, v in w.items()}
    save_safetensors(os.path.join(d, "model.safetensors"), stored)
    # The learner keeps float32 master weights of whatever was stored.
    w = {k: v.float().requires_grad_(True) for k, v in stored.items()}
    logits, logp, ent = [], [], []
    for s in seqs:
        toks = s["prompt"] + s["response"]
        z = forward(config, w, toks)[len(s["prompt"]) - 1 : len(toks) - 1]
        lp = z.log_softmax(-1)
        logits.append(z)
        logp.append(lp.gather(1, torch.tensor(s["response"])[:, None])[:, 0])
        ent.append(-(lp.exp() * lp).sum(-1))
    logits, logp, ent = torch.cat(logits), torch.cat(logp), torch.cat(ent)
    w_logp, w_ent = torch.randn(logp.shape), torch.randn(ent.shape)
    out = {"logits": logits, "logprobs": logp, "entropy": ent, "w_logp": w_logp, "w_ent": w_ent}
    # What `rlnode model forward --grad` writes: d sum(logprobs) / d params.
    sum_grads = torch.autograd.grad(logp.sum(), list(w.values()), retain_graph=True)
    for k, g in zip(w.keys(), sum_grads):
        out["sum_logprobs_grad." + k] = g
    loss = (w_logp * logp).sum() + (w_ent * ent).sum()
    loss.backward()
    for k, v in w.items():
        out["grad." + k] = v.grad
    save_safetensors(os.path.join(d, "golden.safetensors"), out)
    print(name, sum(v.numel() for v in w.values()), "params, loss", loss.item())


VALUE_CLIP = 0.2


def make_value(name, config, seqs):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    w = random_weights(config)
    w["v_head.summary.weight"] = 0.2 * torch.randn(1, config["hidden_size"])
    w["v_head.summary.bias"] = 0.1 * torch.randn(1)
    save_safetensors(os.path.join(d, "model.safetensors"), w)
    w = {k: v.requires_grad_(True) for k, v in w.items()}
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    logp, values = [], []
    for s in seqs:
        toks = s["prompt"] + s["response"]
        x = hidden(config, w, toks)[len(s["prompt"]) - 1 : len(toks) - 1]
        lp = (x @ head.T).log_softmax(-1)
        logp.append(lp.gather(1, torch.tensor(s["response"])[:, None])[:, 0])
        values.append((x @ w["v_head.summary.weight"].T + w["v_head.summary.bias"])[:, 0])
    logp, values = torch.cat(logp), torch.cat(values)
    old = values.detach() + 0.3 * torch.randn(values.shape)
    returns = values.detach() + torch.randn(values.shape)
    # verl's compute_value_loss, token-mean over all response tokens.
    clipped = torch.max(torch.min(values, old + VALUE_CLIP), old - VALUE_CLIP)
    l1, l2 = (values - returns) ** 2, (clipped - returns) ** 2
    vf_loss = 0.5 * torch.max(l1, l2).mean()
    clipfrac = (l2 > l1).float().mean()
    w_logp = torch.randn(logp.shape)
    loss = (w_logp * logp).sum() + vf_loss
    loss.backward()
    out = {"logprobs": logp, "values": values, "old_values": old, "returns": returns,
           "vf_loss": vf_loss.reshape(1), "vf_clipfrac": clipfrac.reshape(1), "w_logp": w_logp}
    for k, v in w.items():
        out["grad." + k] = v.grad
    save_safetensors(os.path.join(d, "golden.safetensors"), out)
    print(name, sum(v.numel() for v in w.values()), "params, vf_loss", vf_loss.item(), "clipfrac", clipfrac.item())


def main():
    vocab = 64
    seqs = []
    for p, r in [(5, 4), (3, 6), (7, 2), (1, 5), (4, 3)]:
        seqs.append({"prompt": torch.randint(0, vocab, (p,)).tolist(), "response": torch.randint(0, vocab, (r,)).tolist()})
    with open(os.path.join(HERE, "golden_input.json"), "w") as f:
        json.dump({"sequences": seqs}, f)
    qwen2 = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": vocab,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "torch_dtype": "float32", "use_sliding_window": False,
    }
    llama = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": vocab,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "attention_bias": False, "torch_dtype": "float32",
    }
    make("qwen2", qwen2, torch.float32, seqs)
    make("llama", llama, torch.float32, seqs)
    make("qwen2-bf16", dict(qwen2, torch_dtype="bfloat16"), torch.bfloat16, seqs)
    small = dict(qwen2, hidden_size=16, intermediate_size=24)
    make_value("qwen2-value", small, seqs)


if __name__ == "__main__":
    main()
