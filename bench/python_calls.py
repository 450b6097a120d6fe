#!/usr/bin/env python3
"""bench/python_calls.py — the Python package's calls against the same PyTorch module in eager mode, in one process.

For each config, the module is built once in PyTorch (eval mode, batch_first) and converted once with
tfm.from_torch; then, ROUNDS times, alternating so that drift on a shared machine hits both alike:
  torch   module(x) under torch.inference_mode() (PyTorch 1.13 takes its fused encoder "fast path" there)
  tfm     fast(x) with the same torch tensor in and a torch tensor out (the input shared without a copy)
Each measurement is the median of ITERS calls after WARMUP; the table shows the median over rounds, and the
ratio torch / tfm (above 1: tfm faster). Both use the same thread count (--threads, default 2), set through
torch.set_num_threads and tfm.set_num_threads. The small config measures the per-call overhead of the binding
(argument conversion, GIL release, output wrapping) more than the math.

Configs (nn.TransformerEncoderLayer, ReLU, dropout 0.1 as PyTorch's default, inactive in eval mode):
  tiny  d_model 32,  2 heads, FFN 64,   B 1,  N 8      (call overhead)
  S     d_model 64,  4 heads, FFN 256,  B 32, N 32
  M     d_model 512, 8 heads, FFN 2048, B 8,  N 128
  M6    a 6-layer nn.TransformerEncoder of M layers

Usage:  PYTHONPATH=build/python /usr/bin/python3 bench/python_calls.py [--rounds 5] [--iters 20] [--threads 2]
        [--only tiny,S] [--dtype f32|bf16]
A benchmark, not a test: never part of the test run.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn

import tfm

CONFIGS = {
    "tiny": dict(d=32, h=2, f=64, b=1, n=8, layers=1),
    "S": dict(d=64, h=4, f=256, b=32, n=32, layers=1),
    "M": dict(d=512, h=8, f=2048, b=8, n=128, layers=1),
    "M6": dict(d=512, h=8, f=2048, b=8, n=128, layers=6),
}


def build(c):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(c["d"], c["h"], c["f"], batch_first=True)
    if c["layers"] == 1:
        return layer.eval()
    return nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False).eval()


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=",".join(CONFIGS))
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tfm.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} threads, tfm dtype {a.dtype}, median of {a.iters} calls, "
          f"median over {a.rounds} alternating rounds")
    print(f"{'config':8s} {'torch ms':>10s} {'tfm ms':>10s} {'torch/tfm':>10s} {'max |diff|':>11s}")
    for name in a.only.split(","):
        c = CONFIGS[name]
        module = build(c)
        fast = tfm.from_torch(module, dtype=a.dtype)
        x = torch.randn(c["b"], c["n"], c["d"])
        with torch.inference_mode():
            diff = float((module(x) - fast(x)).abs().max())

        def run_torch():
            with torch.inference_mode():
                module(x)

        def run_tfm():
            fast(x)

        t_torch, t_tfm = [], []
        for _ in range(a.rounds):
            t_torch.append(timed(run_torch, a.iters, a.warmup))
            t_tfm.append(timed(run_tfm, a.iters, a.warmup))
        mt, mf = statistics.median(t_torch), statistics.median(t_tfm)
        print(f"{name:8s} {mt * 1e3:10.3f} {mf * 1e3:10.3f} {mt / mf:10.2f} {diff:11.2e}", flush=True)


if __name__ == "__main__":
    main()
