#!/usr/bin/env python3
"""bench/python_calls.py — the Python package's calls against the same PyTorch module in eager mode, and
against `tfm bench` for the same work, alternating in one run.

For each config an nn.TransformerEncoderLayer (or a 6-layer nn.TransformerEncoder, M6) of compare_torch.py's
shapes is built in this process and converted once with tfm.from_torch; each round then measures, one after
the other so that drift on a shared machine hits all alike:
  tfm          fast(x), x a float32 numpy array (shared without a copy), in this process
  torch-env    the same module shape in eager mode under torch.no_grad() in a worker process that inherits
               this environment (OPENBLAS_CORETYPE as the machine pins it, OMP_NUM_THREADS as set)
  torch-tuned  the same in a worker with PyTorch at its best on this CPU, as compare_torch.py names it:
               OpenBLAS's kernel for the ISA (SkylakeX with AVX-512, else Haswell), passive OpenMP waiting,
               --threads intra-op threads
Each measurement is the median of ITERS calls after WARMUP; a row shows the median over rounds and the
ratios torch / tfm (above 1: tfm faster). With --dtype bf16 the tfm side converts with dtype="bf16" and the
PyTorch side runs the module's bfloat16() copy on bfloat16 input.

The first row, "call", is config S at B 1, N 16: what one call through Python costs over the library's own
loop for the same work, `tfm bench` (the CLI timing the same module, config and shape in C++): the
difference of the two medians, in microseconds.

Configs (compare_torch.py's CONFIGS: d_model, heads, FFN, layers, B, N; ReLU, dropout 0.1 inactive in eval):
  S 64/4/256 B 32 N 32, M 512/8/2048 B 8 N 128, L 256/4/1024 B 1 N 2048, M6 = M with 6 layers.

Usage:  PYTHONPATH=build/python /usr/bin/python3 bench/python_calls.py [--tfm build/tfm] [--rounds 3]
        [--iters 20] [--threads 2] [--only S,M,L] [--dtype f32|bf16] [--markdown]
A benchmark, not a test: never part of the test run.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

import tfm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import CONFIGS, TorchWorker, tfm_run, write_config  # noqa: E402

CALL_SHAPE = (64, 4, 256, 0, 1, 16)  # config S at B 1, N 16: the call's overhead


def build(shape):
    D, H, FF, layers, B, N = shape
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True)
    return (nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers else layer).eval()


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3  # ms


def tuned_env(threads):
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    env = dict(os.environ)
    env.update({"OPENBLAS_CORETYPE": "SkylakeX" if avx512 else "Haswell", "OMP_NUM_THREADS": str(threads),
                "OMP_WAIT_POLICY": "passive"})
    return env


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"), help="the tfm executable (for the call row)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="S,M,L")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    tfm.set_num_threads(a.threads)
    mode = "infer-bf16" if a.dtype == "bf16" else "infer"
    workers = [TorchWorker("torch-env", dict(os.environ), 0), TorchWorker("torch-tuned", tuned_env(a.threads), a.threads)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["call"] + a.only.split(","):
            shape = CALL_SHAPE if name == "call" else list(CONFIGS[name])
            D, H, FF, layers, B, N = shape
            fast = tfm.from_torch(build(shape), dtype=a.dtype)
            x = np.random.default_rng(0).uniform(-1, 1, (B, N, D)).astype(np.float32)
            iters = a.iters * (10 if name == "call" else 1)
            cfg = write_config(tmp, name, shape) if name == "call" else None
            t_tfm, t_env, t_tuned, t_bench = [], [], [], []
            for _ in range(a.rounds):
                t_tfm.append(timed(lambda: fast(x), iters, a.warmup))
                t_env.append(workers[0].run(shape, mode, iters, a.warmup))
                t_tuned.append(workers[1].run(shape, mode, iters, a.warmup))
                if cfg:
                    t_bench.append(tfm_run(a.tfm, cfg, shape, mode, iters, a.warmup, a.threads)["ms_median"])
            m = [statistics.median(t) for t in (t_tfm, t_env, t_tuned)]
            row = [name, "%d/%d/%d x%d, B %d, N %d" % (D, H, FF, max(layers, 1), B, N), "%.3f" % m[0], "%.3f" % m[1],
                   "%.3f" % m[2], "%.2f" % (m[1] / m[0]), "%.2f" % (m[2] / m[0])]
            row.append("%.1f µs over tfm bench's %.3f ms" % ((m[0] - statistics.median(t_bench)) * 1e3,
                                                             statistics.median(t_bench)) if cfg else "")
            rows.append(row)
            print("# %s done: tfm %s, env %s, tuned %s" % (name, ["%.3f" % t for t in t_tfm], ["%.3f" % t for t in t_env],
                                                           ["%.3f" % t for t in t_tuned]), file=sys.stderr, flush=True)
    for w in workers:
        w.close()
    hdr = ["config", "shape", "tfm (Python) ms", "torch env ms", "torch tuned ms", "env/tfm", "tuned/tfm", "call overhead"]
    print("torch %s, %d threads, dtype %s, median of %d calls (call row: %d), median over %d alternating rounds; "
          "torch-env: %s; torch-tuned: %s" % (torch.__version__, a.threads, a.dtype, a.iters, a.iters * 10, a.rounds,
                                              workers[0].env_desc, workers[1].env_desc + " OMP_WAIT_POLICY=passive"))
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in [hdr] + rows:
            print("  ".join("%-16s" % c for c in r))


if __name__ == "__main__":
    main()
