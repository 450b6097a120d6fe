#!/usr/bin/env python3
"""gen_ema.py — golden values for tests/train/ema_test.cc: the weights' exponential moving average of
`tfm train --ema DECAY` (src/train/ema.h) written in PyTorch (1.13), over 50 steps of a real optimizer.

The weights: two tensors trained by torch.optim.Adam (lr 0.05) on a fixed quadratic, so that they move
as a training run's do, large steps first. After optimizer step t (t = 1..50) the average is

    d = min(decay, (1 + t) / (10 + t))              in double; decay is the float32 config value
    avg.mul_(float32(d)).add_(w * float32(1 - d))   in float32

starting from a copy of the initial weights: src/train/ema.h's rule, which tfm must match bit for bit.

Writes tests/fixtures/ema/ema.json:
  {"magic": "tfm-ema-fixture", "version": 1, "steps": 50,
   "cases": [{"decay": float32 value,
              "init": {name: {"shape": [..], "values": [..]}},
              "weights": [{name: [..]}, ...],          the weights after each optimizer step
              "average": [{name: [..]}, ...]}]}        the average after each step
Every number is a float32 value written as the shortest decimal that reads back to the same double.

Usage: /usr/bin/python3 tests/gen/gen_ema.py [OUT.json]
"""
import json
import os
import sys

import numpy as np
import torch

STEPS = 50
SHAPES = {"w": (3, 4), "b": (5,)}
DECAYS = [0.999, 0.9, 0.5]  # 0.5 binds from t = 9 on ((1 + t)/(10 + t) > 0.5): min() switches mid-run


def values(t):
    return [float(v) for v in t.detach().numpy().astype(np.float32).reshape(-1)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "ema", "ema.json")
    cases = []
    for ci, decay in enumerate(DECAYS):
        decay = float(np.float32(decay))
        torch.manual_seed(1234 + ci)
        params = {k: torch.randn(s, dtype=torch.float32).requires_grad_() for k, s in SHAPES.items()}
        targets = {k: torch.randn(s, dtype=torch.float32) for k, s in SHAPES.items()}
        case = {"decay": decay, "init": {k: {"shape": list(p.shape), "values": values(p)} for k, p in params.items()},
                "weights": [], "average": []}
        opt = torch.optim.Adam(list(params.values()), lr=0.05)
        avg = {k: p.detach().clone() for k, p in params.items()}
        for t in range(1, STEPS + 1):
            opt.zero_grad()
            loss = sum(((p - targets[k]) ** 2 * (1 + i)).sum() for i, (k, p) in enumerate(params.items()))
            loss.backward()
            opt.step()
            d = min(decay, (1.0 + t) / (10.0 + t))
            a, b = float(np.float32(d)), float(np.float32(1.0 - d))
            with torch.no_grad():
                for k, p in params.items():
                    avg[k].mul_(a).add_(p * b)
            case["weights"].append({k: values(p) for k, p in params.items()})
            case["average"].append({k: values(v) for k, v in avg.items()})
        cases.append(case)
    with open(out, "w") as f:
        json.dump({"magic": "tfm-ema-fixture", "version": 1, "steps": STEPS, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
