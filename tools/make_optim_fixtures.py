#!/usr/bin/env python3
"""Reference values for tests/optim: torch.optim.AdamW and a Muon written from
docs/ARCHITECTURE.md §4.

Writes tests/optim/fixtures/optim_reference.json: per scenario the optimizer options, initial
parameters, per-step lrs and gradients (null = no gradient that step), and the parameters and state
after every step. Run: /work/venv/bin/python tools/make_optim_fixtures.py
"""
import json
import math
import os

import torch

NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315


def newton_schulz(g, steps):
    """Keller Jordan's quintic iteration in f32 on the last two dims, transposing tall matrices."""
    x = g.float()
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        a = x @ x.mT
        b = NS_B * a + NS_C * (a @ a)
        x = NS_A * x + b @ x
    return x.mT if tall else x


class RefMuon:
    """Muon from the spec: buf = mu*buf + g; u = g + mu*buf (nesterov) or buf; NS(u) per matrix;
    p *= 1 - lr*wd; p -= lr*scale*NS(u)."""

    def __init__(self, params, momentum, nesterov, ns_steps, update_scale, weight_decay):
        self.params = params
        self.mu, self.nesterov, self.ns, self.scale_rule, self.wd = (
            momentum, nesterov, ns_steps, update_scale, weight_decay)
        self.state = {}

    @torch.no_grad()
    def step(self, lr):
        for p in self.params:
            if p.grad is None:
                continue
            st = self.state.setdefault(p, {"momentum_buffer": torch.zeros_like(p), "step": 0})
            st["step"] += 1
            buf = st["momentum_buffer"]
            buf.mul_(self.mu).add_(p.grad)
            u = p.grad + self.mu * buf if self.nesterov else buf
            o = newton_schulz(u, self.ns)
            rows, cols = p.shape[-2], p.shape[-1]
            if self.scale_rule == "rms_match":
                scale = 0.2 * math.sqrt(max(rows, cols))
            else:
                scale = math.sqrt(max(1.0, rows / cols))
            p.mul_(1 - lr * self.wd)
            p.add_(o, alpha=-lr * scale)


SHAPES = {
    "embed.weight": [5, 4],       # adamw (group glob)
    "layers.0.w": [4, 6],         # muon, wide
    "layers.0.v": [7, 3],         # muon, tall (transposed inside Newton–Schulz)
    "layers.0.bias": [6],         # adamw (auto: 1-D)
    "experts.w": [2, 3, 5],       # muon, a stack of two [3, 5] matrices
}
MUON = {"layers.0.w", "layers.0.v", "experts.w"}


def scenario(seed, nesterov, update_scale):
    g = torch.Generator().manual_seed(seed)
    params = {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}
    init = {k: v.clone() for k, v in params.items()}
    lrs = [0.01, 0.02, 0.005]
    adamw_ps = [params[k] for k in SHAPES if k not in MUON]
    muon_ps = [params[k] for k in SHAPES if k in MUON]
    for p in params.values():
        p.requires_grad_(True)
    adamw = torch.optim.AdamW(adamw_ps, lr=lrs[0], betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                              foreach=False)
    muon = RefMuon(muon_ps, 0.95, nesterov, 5, update_scale, 0.1)
    steps = []
    for i, lr in enumerate(lrs):
        grads = {}
        for k, s in SHAPES.items():
            # Step 1 leaves the bias and one muon matrix without a gradient: both must be skipped.
            if i == 1 and k in ("layers.0.bias", "layers.0.v"):
                params[k].grad = None
                grads[k] = None
                continue
            gr = torch.randn(s, generator=g)
            params[k].grad = gr.clone()
            grads[k] = gr.flatten().tolist()
        for group in adamw.param_groups:
            group["lr"] = lr
        adamw.step()
        muon.step(lr)
        after = {k: v.detach().flatten().tolist() for k, v in params.items()}
        state = {}
        for k, p in params.items():
            if k in MUON and p in muon.state:
                state[k] = {"step": muon.state[p]["step"],
                            "momentum_buffer": muon.state[p]["momentum_buffer"].flatten().tolist()}
            elif k not in MUON and p in adamw.state:
                st = adamw.state[p]
                state[k] = {"step": int(st["step"]), "exp_avg": st["exp_avg"].flatten().tolist(),
                            "exp_avg_sq": st["exp_avg_sq"].flatten().tolist()}
        steps.append({"lr": lr, "grads": grads, "params": after, "state": state})
    return {"nesterov": nesterov, "update_scale": update_scale, "shapes": SHAPES,
            "init": {k: v.flatten().tolist() for k, v in init.items()}, "steps": steps}


def main():
    torch.set_num_threads(1)
    out = {"adamw": {"betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
           "muon": {"momentum": 0.95, "ns_steps": 5, "weight_decay": 0.1},
           "scenarios": [scenario(0, True, "rms_match"), scenario(1, False, "shape")]}
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "optim", "fixtures",
                        "optim_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
