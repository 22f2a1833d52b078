"""Reference for ctxopt's PPO update (TestPPOGolden), in PyTorch.

A policy MLP (4 -> 5 tanh -> heads [3, 2]) and a value MLP (4 -> 5 tanh -> 1)
with seeded weights; three episodes of one to three steps with action masks
and an inactive head; GAE (gamma 0.95, lambda 1) from the recorded values,
whitened with the unbiased variance; the PPO clipped loss, the entropy bonus
and the value loss, token-mean over steps; gradients; then one global
grad-norm clip to 0.5 and one AdamW step. Run with /usr/bin/python3
(Debian's torch) to regenerate ppo_golden.json.
"""
import json
import torch

torch.manual_seed(7)
D = torch.float64
OBS, HID, HEADS = 4, 5, [3, 2]
cfg = dict(lr=0.01, entropy_coef=0.05, clip=0.2, value_coef=0.5, gamma=0.95, max_grad_norm=0.5)


def f32(t):
    return t.to(torch.float32).to(D)


params = {}
for net, out in (("g.policy", sum(HEADS)), ("g.value", 1)):
    for l, (i, o) in enumerate([(OBS, HID), (HID, out)]):
        params[f"{net}.{l}.weight"] = f32(torch.randn(o, i) * 0.7).requires_grad_()
        params[f"{net}.{l}.bias"] = f32(torch.randn(o) * 0.2).requires_grad_()


def mlp(net, x):
    h = torch.tanh(params[f"{net}.0.weight"] @ x + params[f"{net}.0.bias"])
    return params[f"{net}.1.weight"] @ h + params[f"{net}.1.bias"]


def heads(logits, mask, active, actions):
    logp, ent, off = 0.0, 0.0, 0
    for h, n in enumerate(HEADS):
        z = logits[off:off + n]
        off += n
        m = torch.ones(n, dtype=torch.bool) if mask is None or mask[h] is None else torch.tensor(mask[h])
        ls = torch.log_softmax(z.masked_fill(~m, float("-inf")), 0)
        p = ls.exp()
        if active[h]:
            logp = logp + ls[actions[h]]
            ent = ent - torch.where(m, p * ls.masked_fill(~m, 0.0), torch.zeros_like(p)).sum()
    return logp, ent


episodes = []
spec = [1, 3, 2]
for e, n in enumerate(spec):
    ep = []
    for t in range(n):
        obs = f32(torch.randn(OBS))
        mask = [None, [True, False]] if (e + t) % 2 == 0 else [[True, True, False], None]
        active = [True, t != 1]
        actions = [0 if mask[0] is None else 1, 0]
        with torch.no_grad():
            lp, _ = heads(mlp("g.policy", obs), mask, active, actions)
            v = mlp("g.value", obs)[0]
        old = float(torch.tensor(float(lp) + 0.3 * (t - 1) * (1 if e % 2 else -1), dtype=torch.float32))
        ep.append(dict(obs=obs.tolist(), mask=mask, active=active, actions=actions, old_logprob=old,
                       old_value=float(torch.tensor(float(v), dtype=torch.float32)),
                       reward=float(torch.tensor([1.5, -0.5, 3.0][e] * (t == n - 1) + 0.02 * t, dtype=torch.float32))))
    episodes.append(ep)

# GAE with lambda 1 from the recorded values, then whitening over all steps.
advs, rets = [], []
for ep in episodes:
    a_next, v_next, a_ep = 0.0, 0.0, []
    for s in reversed(ep):
        delta = s["reward"] + cfg["gamma"] * v_next - s["old_value"]
        a = delta + cfg["gamma"] * a_next
        a_ep.append(float(torch.tensor(a, dtype=torch.float32)))
        v_next, a_next = s["old_value"], float(torch.tensor(a, dtype=torch.float32))
    a_ep.reverse()
    advs.append(a_ep)
    rets.append([float(torch.tensor(a + s["old_value"], dtype=torch.float32)) for a, s in zip(a_ep, ep)])
flat = torch.tensor([a for ep in advs for a in ep], dtype=D)
flat = (flat - flat.mean()) / torch.sqrt(flat.var(unbiased=True) + 1e-8)
white = [f32(x) for x in flat]

N = sum(spec)
pg_sum, ent_sum, v_sum, k = 0.0, 0.0, 0.0, 0
for e, ep in enumerate(episodes):
    for t, s in enumerate(ep):
        obs = torch.tensor(s["obs"], dtype=D)
        lp, ent = heads(mlp("g.policy", obs), s["mask"], s["active"], s["actions"])
        ratio = torch.exp(lp - s["old_logprob"])
        A = white[k]
        k += 1
        pg_sum = pg_sum + torch.maximum(-A * ratio, -A * torch.clamp(ratio, 1 - cfg["clip"], 1 + cfg["clip"]))
        ent_sum = ent_sum + ent
        v = mlp("g.value", obs)[0]
        v_sum = v_sum + 0.5 * (v - rets[e][t]) ** 2
loss = pg_sum / N - cfg["entropy_coef"] * ent_sum / N + cfg["value_coef"] * v_sum / N
loss.backward()
grads = {n: p.grad.flatten().tolist() for n, p in params.items()}
before = {n: p.detach().flatten().tolist() for n, p in params.items()}

ps = list(params.values())
torch.nn.utils.clip_grad_norm_(ps, cfg["max_grad_norm"])
opt = torch.optim.AdamW(ps, lr=cfg["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
opt.step()
after = {n: p.detach().flatten().tolist() for n, p in params.items()}

json.dump(dict(obs=OBS, hidden=[HID], heads=HEADS, cfg=cfg, params=before, episodes=episodes,
               loss=float(loss), grads=grads, after_step=after), open("ppo_golden.json", "w"), indent=1)
print("loss", float(loss))
