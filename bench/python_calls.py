#!/usr/bin/env python3
"""bench/python_calls.py — the Python package's calls against the same PyTorch module in eager mode, and
against `tfm bench` for the same work, alternating in one run.

For each config an nn.TransformerEncoderLayer (or a 6-layer nn.TransformerEncoder, M6) of compare_torch.py's
shapes is built in this process and converted once with tfm.from_torch; each round then measures, one after
the other so that drift on a shared machine hits all alike:
  tfm          fast(x), x a float32 numpy array (shared without a copy), in this process
  torch        the same module shape in eager mode under torch.no_grad() in worker processes, one per
               bench/torch_peer.py environment: "inherited" (this environment, --threads threads) and each "best"
               candidate (OpenBLAS's kernel for the ISA named, passive OpenMP waiting, each thread split of
               torch_peer.splits); a row's "best" is the fastest candidate, its split named
Each measurement is the median of ITERS calls after WARMUP; a row shows the median over rounds and the
ratios torch / tfm (above 1: tfm faster; the headline is against "best"). With --dtype bf16 the tfm side converts with dtype="bf16" and the
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
import torch_peer  # noqa: E402
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
    workers = [TorchWorker(torch_peer.inherited(a.threads))] + [
        TorchWorker(p) for p in torch_peer.best_candidates(a.threads)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["call"] + a.only.split(","):
            shape = CALL_SHAPE if name == "call" else list(CONFIGS[name])
            D, H, FF, layers, B, N = shape
            fast = tfm.from_torch(build(shape), dtype=a.dtype)
            x = np.random.default_rng(0).uniform(-1, 1, (B, N, D)).astype(np.float32)
            iters = a.iters * (10 if name == "call" else 1)
            cfg = write_config(tmp, name, shape) if name == "call" else None
            t_tfm, t_torch, t_bench = [], [[] for _ in workers], []
            for _ in range(a.rounds):
                t_tfm.append(timed(lambda: fast(x), iters, a.warmup))
                for w, t in zip(workers, t_torch):
                    t.append(w.run(shape, mode, iters, a.warmup))
                if cfg:
                    t_bench.append(tfm_run(a.tfm, cfg, shape, mode, iters, a.warmup, a.threads)["ms_median"])
            m_tfm = statistics.median(t_tfm)
            m_torch = [statistics.median(t) for t in t_torch]
            best, _ = torch_peer.fastest([w.peer for w in workers[1:]], m_torch[1:])
            m_best, m_env = min(m_torch[1:]), m_torch[0]
            row = [name, "%d/%d/%d x%d, B %d, N %d" % (D, H, FF, max(layers, 1), B, N), "%.3f" % m_tfm,
                   "%.3f" % m_best, best.split, "%.3f" % m_env, "%.2f" % (m_best / m_tfm), "%.2f" % (m_env / m_tfm)]
            row.append("%.1f µs over tfm bench's %.3f ms" % ((m_tfm - statistics.median(t_bench)) * 1e3,
                                                             statistics.median(t_bench)) if cfg else "")
            rows.append(row)
            print("# %s done: tfm %s, %s" % (name, ["%.3f" % t for t in t_tfm], ", ".join(
                "%s %s" % (w.name, ["%.3f" % x for x in t]) for w, t in zip(workers, t_torch))), file=sys.stderr, flush=True)
    for w in workers:
        w.close()
    hdr = ["config", "shape", "tfm (Python) ms", "torch best ms", "best split", "torch inherited ms", "best/tfm",
           "inherited/tfm", "call overhead"]
    print("%s; torch %s, dtype %s, median of %d calls (call row: %d), median over %d alternating rounds" % (
        torch_peer.header(a.threads), torch.__version__, a.dtype, a.iters, a.iters * 10, a.rounds))
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
