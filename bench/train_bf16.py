#!/usr/bin/env python3
"""bench/train_bf16.py — training in bfloat16 against float32 and against PyTorch, alternating in one run.

Training steps (--part steps, default both): configs M (nn.TransformerEncoderLayer d_model 512, 8 heads, FFN 2048,
batch_first, B 8, N 128) and L (256, 4, 1024, B 1, N 2048) — the shapes of bench/compare_torch.py — one step =
forward, MSE loss against a fixed random target, backward, Adam:
  tfm f32 / tfm bf16      `tfm bench --config C --mode train --dtype f32|bf16 --json` (bf16: tfm::Autocast — every
                          Linear's forward and both backward matmuls with bfloat16 operands, float32 sums and master
                          weights)
  torch f32               the same module and step in PyTorch 1.13, float32
  torch bf16              the step under torch.autocast("cpu", dtype=torch.bfloat16) (float32 master weights); where
                          autocast fails for the module, the module converted with .bfloat16() and float32 master
                          copies stepped by Adam (the table says which ran)
Every PyTorch figure runs in the environments of bench/torch_peer.py — "best" (OpenBLAS's kernel named, the thread
split of torch threads x OpenBLAS threads and the OpenMP wait policy, passive or active, that are fastest: autocast's
bf16 products run in oneDNN on libgomp's threads, which passive waiting puts to sleep between every op) and
"inherited" — and ratios are against "best". Medians over --iters steps after --warmup, --rounds rounds alternating every runner.

Seq2seq throughput (--part s2s): `tfm train` of a seq2seq model (d_model 256, 3+3 layers, FFN 1024,
--batch-tokens 4096) on the README's licenses TSV (bench/int8_accuracy.py builds it), --max-steps S in f32 and in
bf16 alternately; tokens/s from the run's summary line.

Usage: /usr/bin/python3 bench/train_bf16.py [--tfm build/tfm] [--threads 2] [--rounds 3] [--part steps,s2s]
       [--markdown]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_peer  # noqa: E402
from tables import print_table  # noqa: E402

CONFIGS = {"M": (512, 8, 2048, 8, 128), "L": (256, 4, 1024, 1, 2048)}


def torch_worker(args):
    """Times PyTorch's training step for one config and mode; prints one JSON line."""
    import torch
    import torch.nn as nn
    torch.set_num_threads(args.torch_threads)
    d, h, f, B, N = CONFIGS[args.config]
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d, h, f, dropout=0.0, batch_first=True)
    layer.train()
    x = torch.rand(B, N, d) * 2 - 1
    target = torch.rand(B, N, d) * 2 - 1
    ran = args.mode
    if args.mode == "f32":
        opt = torch.optim.Adam(layer.parameters())

        def step():
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(layer(x), target)
            loss.backward()
            opt.step()
    else:
        opt = torch.optim.Adam(layer.parameters())

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = layer(x)
            loss = nn.functional.mse_loss(y.float(), target)
            loss.backward()
            opt.step()
        try:
            step()
            ran = "autocast bf16"
        except RuntimeError:
            # The bf16 module with float32 master weights: Adam steps the masters, copied into the module.
            master = [p.detach().clone().requires_grad_(True) for p in layer.parameters()]
            layer.bfloat16()
            opt = torch.optim.Adam(master)
            xb = x.bfloat16()

            def step():
                for p in layer.parameters():
                    p.grad = None
                loss = nn.functional.mse_loss(layer(xb).float(), target)
                loss.backward()
                for m, p in zip(master, layer.parameters()):
                    m.grad = p.grad.float()
                opt.step()
                with torch.no_grad():
                    for m, p in zip(master, layer.parameters()):
                        p.copy_(m)
            ran = "bf16 module, f32 masters"
    for _ in range(args.warmup):
        step()
    ms = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"ms": statistics.median(ms), "ran": ran}))


def run_torch(env, config, mode, iters, warmup, torch_threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--config", config, "--mode", mode,
           "--iters", str(iters), "--warmup", str(warmup), "--torch-threads", str(torch_threads)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_tfm(tfm, cfg, config, dtype, iters, warmup, threads):
    d, h, f, B, N = CONFIGS[config]
    out = subprocess.run([tfm, "bench", "--config", cfg, "--batch", str(B), "--seq", str(N), "--mode", "train",
                          "--dtype", dtype, "--iters", str(iters), "--warmup", str(warmup), "--threads", str(threads),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def steps_part(a, tmp):
    best_split = {}
    rows = []
    envs = {"best": torch_peer.best_env(a.threads), "inherited": torch_peer.inherited_env(a.threads)}
    splits = torch_peer.splits(a.threads)  # (torch threads, OpenBLAS threads)
    for config in a.only.split(","):
        d, h, f, B, N = CONFIGS[config]
        cfg = os.path.join(tmp, config + ".json")
        with open(cfg, "w") as fh:
            json.dump({"module": "TransformerEncoderLayer", "d_model": d, "nhead": h, "dim_feedforward": f,
                       "dropout": 0.0, "batch_first": True}, fh)
        times = {k: [] for k in ("tfm f32", "tfm bf16", "torch f32 best", "torch bf16 best", "torch f32 inherited",
                                 "torch bf16 inherited")}
        ran = ""
        rss = {"f32": 0.0, "bf16": 0.0}
        for r in range(a.rounds):
            for dtype in ("f32", "bf16"):
                res = run_tfm(a.tfm, cfg, config, dtype, a.iters, a.warmup, a.threads)
                times["tfm " + dtype].append(res["ms_median"])
                rss[dtype] = max(rss[dtype], res["peak_rss_mb"])
            for mode in ("f32", "bf16"):
                # best: the fastest thread split (torch threads, OpenBLAS/OpenMP threads) and OpenMP wait policy,
                # chosen in round 0
                key = (config, mode)
                if key not in best_split:
                    trial = []
                    for wait in ("passive", "active"):
                        for tt, ot in splits:
                            env = torch_peer.best_env(tt, blas_threads=ot, wait=wait)
                            trial.append((run_torch(env, config, mode, a.iters, a.warmup, tt)["ms"], (tt, ot, wait)))
                    best_split[key] = min(trial)[1]
                tt, ot, wait = best_split[key]
                res = run_torch(torch_peer.best_env(tt, blas_threads=ot, wait=wait), config, mode, a.iters, a.warmup, tt)
                times["torch %s best" % mode].append(res["ms"])
                if mode == "bf16":
                    ran = res["ran"]
                res = run_torch(envs["inherited"], config, mode, a.iters, a.warmup, a.threads)
                times["torch %s inherited" % mode].append(res["ms"])
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append([config, "%.1f" % med["tfm f32"], "%.1f" % med["tfm bf16"], "%.2fx" % (med["tfm f32"] / med["tfm bf16"]),
                     "%.1f" % med["torch f32 best"], "%.1f" % med["torch bf16 best"],
                     "%.2fx" % (med["torch bf16 best"] / med["tfm bf16"]),
                     "%.1f / %.1f" % (med["torch f32 inherited"], med["torch bf16 inherited"]), ran,
                     "%.0f / %.0f" % (rss["f32"], rss["bf16"])])
        print("# %s done: %s" % (config, json.dumps(med)), file=sys.stderr)
    print("Training steps (forward, MSE, backward, Adam), %s (%s), %d threads, medians of %d rounds x %d steps; "
          "torch best = %s with the fastest thread split (torch threads, OpenBLAS threads) and OMP_WAIT_POLICY %s; "
          "ratios against best" % (
              torch_peer.cpu_name(), torch_peer.isa(), a.threads, a.rounds, a.iters,
              torch_peer.describe(envs["best"]).replace(" OMP_WAIT_POLICY=passive", ""),
              {"%s %s" % k: v for k, v in best_split.items()}))
    print_table(["config", "tfm f32 ms", "tfm bf16 ms", "bf16 / f32 speed-up", "torch f32 ms (best)", "torch bf16 ms (best)",
           "tfm bf16 vs torch bf16", "torch inherited f32 / bf16 ms", "torch bf16 ran", "tfm peak RSS MB f32 / bf16"],
          rows, a.markdown)


def s2s_part(a, tmp):
    work = a.s2s_data
    import int8_accuracy
    int8_accuracy.make_data(work)
    tps = {"f32": [], "bf16": []}
    for r in range(a.rounds):
        for dtype in ("f32", "bf16"):
            out = os.path.join(tmp, "s2s_%s_%d" % (dtype, r))
            subprocess.run([a.tfm, "train", "--train", os.path.join(work, "train.tsv"), "--valid",
                            os.path.join(work, "valid.tsv"), "--arch", "seq2seq", "--tokens", "spm", "--joint-vocab", "--vocab-size", "1000",
                            "--share-embeddings", "--d-model", "256", "--layers",
                            "3", "--dim-feedforward", "1024", "--batch-tokens", "4096", "--max-steps",
                            str(a.s2s_steps), "--eval-every", str(10 * a.s2s_steps), "--dtype", dtype,
                            "--threads", str(a.threads), "--out", out], check=True, capture_output=True,
                           text=True)
            with open(os.path.join(out, "metrics.csv")) as fh:
                last = fh.read().strip().splitlines()[-1].split(",")
            tps[dtype].append(float(last[7]))  # tokens_per_sec of the last row
    f32, bf16 = statistics.median(tps["f32"]), statistics.median(tps["bf16"])
    print("\n`tfm train` seq2seq (d_model 256, 3+3 layers, FFN 1024, --batch-tokens 4096, %d steps), %s (%s), "
          "%d threads, medians of %d alternating runs:" % (a.s2s_steps, torch_peer.cpu_name(), torch_peer.isa(),
                                                            a.threads, a.rounds))
    print_table(["dtype", "tokens/s", "vs f32"], [["f32", "%.0f" % f32, "1.00x"], ["bf16", "%.0f" % bf16, "%.2fx" % (bf16 / f32)]],
          a.markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="M,L")
    ap.add_argument("--part", default="steps,s2s")
    ap.add_argument("--s2s-data", default=os.path.join(tempfile.gettempdir(), "tfm_licenses"))
    ap.add_argument("--s2s-steps", type=int, default=60)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--torch-threads", type=int, default=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)
    a.tfm = os.path.abspath(a.tfm)
    with tempfile.TemporaryDirectory() as tmp:
        if "steps" in a.part:
            steps_part(a, tmp)
        if "s2s" in a.part:
            s2s_part(a, tmp)


if __name__ == "__main__":
    main()
