#!/usr/bin/env python3
"""gen_optim.py — golden values for tests/optim_test.cc from torch.optim (PyTorch 1.13).

Writes tests/fixtures/optim/optim.json:
  {"magic": "tfm-optim-fixture", "version": 1,
   "params": {name: {"shape": [..], "values": [..]}},        initial parameters (float32)
   "grads":  [{name: [..] or null}, ...],                     the gradient of each step (null: no grad)
   "cases":  [{"name", "optimizer", "lr", hyper-parameters..., ["decay_params": "matrices"],
               "expected": [{name: [..]}, ...]}],
             the parameters after each step
   "clip":   [{"max_norm", "total_norm", "grads": {name: [..]}}],  clip_grad_norm_ on grads[2]
   "clip_coef": [{"grad", "max_norm", "clipped"}]}  clip_grad_norm_ on one one-element gradient
The "clip_coef" cases isolate the clip factor: the norm of a one-element gradient g is |g| exactly,
so the clipped value is g times torch's factor, (1 / (|g| + 1e-6)) * max_norm in float32 (1.13's
Tensor.__rtruediv__ is reciprocal() * other), which a single division max_norm / (|g| + 1e-6)
misses by an ulp in about a quarter of the cases.
Every number is a float32 value written as the shortest decimal that reads back to the same double,
so it is exact. Hyper-parameters are rounded to float32 before torch sees them, because tfm's
optimizers take float arguments: both then start from the same numbers.

Usage: /usr/bin/python3 tests/gen/gen_optim.py [OUT.json]
To add a case: append to CASES; the C++ test iterates over whatever the file holds.
"""
import json
import os
import sys

import numpy as np
import torch

STEPS = 6
SHAPES = {"a.weight": (3, 4), "a.bias": (5,), "late": (2, 3)}  # "late" has no grad on steps 1-2
CASES = [
    {"name": "sgd", "optimizer": "sgd", "lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
    {"name": "sgd_momentum_wd", "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
    {"name": "adam", "optimizer": "adam", "lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
    {"name": "adam_l2", "optimizer": "adam", "lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1},
    {"name": "adam_betas", "optimizer": "adam", "lr": 3e-3, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.0},
    {"name": "adamw", "optimizer": "adamw", "lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1},
    # decay_params "matrices": weight decay only on the parameters with two or more dimensions (a.weight, late), the
    # others in a second parameter group with weight_decay 0 (nanoGPT's groups; tfm's Adam `decayed` flags).
    {"name": "adamw_matrices", "optimizer": "adamw", "lr": 1e-2, "beta1": 0.85, "beta2": 0.99, "eps": 1e-8,
     "weight_decay": 0.1, "decay_params": "matrices"},
    {"name": "adam_l2_matrices", "optimizer": "adam", "lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
     "weight_decay": 0.1, "decay_params": "matrices"},
]


def f32(x):
    return float(np.float32(x))


def values(t):
    return [float(v) for v in t.detach().numpy().astype(np.float32).reshape(-1)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "optim", "optim.json")
    rng = np.random.default_rng(20240611)
    init = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    grads = []
    for step in range(STEPS):
        g = {k: rng.standard_normal(s).astype(np.float32) * np.float32(0.5 + step) for k, s in SHAPES.items()}
        if step < 2:
            g["late"] = None
        grads.append(g)

    cases = []
    for case in CASES:
        params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
        plist = list(params.values())
        h = {k: f32(v) for k, v in case.items() if k not in ("name", "optimizer", "decay_params")}
        if case["optimizer"] == "sgd":
            opt = torch.optim.SGD(plist, lr=h["lr"], momentum=h["momentum"], weight_decay=h["weight_decay"])
        else:
            cls = torch.optim.Adam if case["optimizer"] == "adam" else torch.optim.AdamW
            if case.get("decay_params") == "matrices":
                groups = [{"params": [p for p in plist if p.dim() >= 2], "weight_decay": h["weight_decay"]},
                          {"params": [p for p in plist if p.dim() < 2], "weight_decay": 0.0}]
            else:
                groups = [{"params": plist, "weight_decay": h["weight_decay"]}]
            opt = cls(groups, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
        expected = []
        for g in grads:
            opt.zero_grad(set_to_none=True)
            for k, p in params.items():
                if g[k] is not None:
                    p.grad = torch.tensor(g[k])
            opt.step()
            expected.append({k: values(p) for k, p in params.items()})
        cases.append({**case, **h, "expected": expected})

    clip = []
    for max_norm in (1.0, 100.0):
        params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
        for k, p in params.items():
            p.grad = torch.tensor(grads[2][k])
        total = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
        clip.append({"max_norm": max_norm, "total_norm": float(total),
                     "grads": {k: values(p.grad) for k, p in params.items()}})

    clip_coef = []
    crng = np.random.default_rng(20261128)  # its own generator: the data above stays as it was
    for _ in range(32):
        g = f32(crng.uniform(1.0, 100.0) * (1 if crng.uniform() < 0.5 else -1))
        max_norm = f32(crng.uniform(0.05, 1.0))
        p = torch.zeros(1, requires_grad=True)
        p.grad = torch.tensor([g])
        torch.nn.utils.clip_grad_norm_([p], max_norm)
        clip_coef.append({"grad": g, "max_norm": max_norm, "clipped": float(p.grad[0])})

    doc = {
        "magic": "tfm-optim-fixture", "version": 1, "torch": torch.__version__,
        "params": {k: {"shape": list(v.shape), "values": [float(x) for x in v.reshape(-1)]} for k, v in init.items()},
        "grads": [{k: (None if v is None else [float(x) for x in v.reshape(-1)]) for k, v in g.items()} for g in grads],
        "cases": cases, "clip": clip, "clip_coef": clip_coef,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
