#!/usr/bin/env python3
"""compare_train_torch.py — training throughput of `tfm train` against the same model trained by
PyTorch 1.13 on the same kind of data, in one run.

    /usr/bin/python3 bench/compare_train_torch.py --tfm build/tfm [--steps 200] [--threads 1] [--rounds 3]

tfm side: `tfm train --task reverse --arch encoder --max-steps STEPS --eval-every STEPS`, with its
defaults (d_model 64, 4 heads, 2 layers, FFN 256, batch 256, Adam, clip-norm 1, dropout 0); the
figure is the tokens/s tfm records in metrics.csv (target tokens, padding excluded, over the training
interval).
PyTorch side: tools/torch_models.py's twin of the same model (built from the config.json tfm wrote),
reverse-task batches of the same size and length distribution (lengths 3..15, tokens 1..19, 0 = pad),
and the same step: forward, cross-entropy ignoring padding, backward, clip_grad_norm_(1.0), Adam.
Target tokens per second over STEPS steps after 10 warm-up steps.
Rounds alternate tfm and PyTorch; medians are printed with the ratio tfm / PyTorch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import torch_models as tm  # noqa: E402


def run_tfm(tfm, steps, threads, out):
    subprocess.run([tfm, "train", "--task", "reverse", "--arch", "encoder", "--out", out, "--max-steps", str(steps),
                    "--eval-every", str(steps), "--threads", str(threads)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    header, last = rows[0], rows[-1]
    return float(last[header.index("tokens_per_sec")])


def reverse_batch(gen, batch, pad=0):
    lengths = torch.randint(3, 16, (batch,), generator=gen)
    S = int(lengths.max())
    src = torch.full((batch, S), pad, dtype=torch.long)
    tgt = torch.full((batch, S), pad, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        seq = torch.randint(1, 20, (n,), generator=gen)
        src[i, :n] = seq
        tgt[i, :n] = seq.flip(0)
    return src, tgt


def run_torch(model_dir, steps, threads):
    torch.set_num_threads(threads)
    cfg = tm.read_model_config(model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        train_cfg = json.load(f).get("train", {})
    batch = int(train_cfg.get("batch_size", 256))
    lr = float(train_cfg.get("lr", 2e-3))
    model = tm.Model(cfg).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    batches = [reverse_batch(gen, batch, cfg["pad_id"]) for _ in range(steps + 10)]

    def step(src, tgt):
        loss = model.loss(model(src), tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for src, tgt in batches[:10]:
        step(src, tgt)
    tokens = sum(int((tgt != cfg["pad_id"]).sum()) for _, tgt in batches[10:])
    t0 = time.perf_counter()
    for src, tgt in batches[10:]:
        step(src, tgt)
    return tokens / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default="build/tfm")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tfm_rates, torch_rates = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            out = os.path.join(tmp, f"run{r}")
            tfm_rates.append(run_tfm(a.tfm, a.steps, a.threads, out))
            torch_rates.append(run_torch(out, a.steps, a.threads))
            print(f"round {r + 1}: tfm {tfm_rates[-1]:,.0f} tok/s, PyTorch {torch_rates[-1]:,.0f} tok/s", flush=True)
    t, p = statistics.median(tfm_rates), statistics.median(torch_rates)
    print(f"\n| model | threads | steps | tfm tok/s | PyTorch tok/s | tfm / PyTorch |")
    print(f"|---|---|---|---|---|---|")
    print(f"| reverse encoder (d 64, 2 layers, FFN 256, batch 256) | {a.threads} | {a.steps} | {t:,.0f} | {p:,.0f} | {t / p:.2f} |")


if __name__ == "__main__":
    main()
