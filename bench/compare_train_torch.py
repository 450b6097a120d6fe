#!/usr/bin/env python3
"""compare_train_torch.py — training throughput of `tfm train` against the same model trained by
PyTorch 1.13 on the same kind of data, in one run.

    /usr/bin/python3 bench/compare_train_torch.py --tfm build/tfm [--steps 200] [--threads 2] [--rounds 3]

tfm side: `tfm train --task reverse --arch encoder --max-steps STEPS --eval-every STEPS`, with its
defaults (d_model 64, 4 heads, 2 layers, FFN 256, batch 256, Adam, clip-norm 1, dropout 0); the
figure is the tokens/s tfm records in metrics.csv (target tokens, padding excluded, over the training
interval).
PyTorch side: tools/torch_models.py's twin of the same model (built from the config.json tfm wrote),
reverse-task batches of the same size and length distribution (lengths 3..15, tokens 1..19, 0 = pad),
and the same step: forward, cross-entropy ignoring padding, backward, clip_grad_norm_(1.0), Adam.
Target tokens per second over STEPS steps after 10 warm-up steps, in a fresh /usr/bin/python3 process per run
in a bench/torch_peer.py environment: "inherited" (this environment, THREADS threads) and "best" (OpenBLAS's
kernel for the ISA named, passive OpenMP waiting, the thread split of torch_peer.splits that ran a short
calibration run of --calibrate-steps steps fastest, chosen once before the rounds).
Rounds alternate tfm, PyTorch best, PyTorch inherited; medians are printed with the ratios tfm / PyTorch, the
headline against "best".
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import torch_models as tm  # noqa: E402
import torch_peer  # noqa: E402


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


def torch_in_worker(peer, model_dir, steps):
    """run_torch in a fresh /usr/bin/python3 process in the peer's environment (its own thread pools)."""
    r = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                        json.dumps([model_dir, steps, peer.torch_threads])],
                       check=True, capture_output=True, text=True, env=peer.env)
    return float(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default="build/tfm")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calibrate-steps", type=int, default=50, help="steps of each split's calibration run")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        print(run_torch(*json.loads(a.torch_worker)))
        return
    tfm_rates, best_rates, env_rates = [], [], []
    inherited = torch_peer.inherited(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        out0 = os.path.join(tmp, "calibrate")
        run_tfm(a.tfm, 1, a.threads, out0)
        cands = torch_peer.best_candidates(a.threads)
        best, note = torch_peer.fastest(cands, [-torch_in_worker(p, out0, a.calibrate_steps) for p in cands])
        print(f"best split: {note} (negated tok/s)", flush=True)
        for r in range(a.rounds):
            out = os.path.join(tmp, f"run{r}")
            tfm_rates.append(run_tfm(a.tfm, a.steps, a.threads, out))
            best_rates.append(torch_in_worker(best, out, a.steps))
            env_rates.append(torch_in_worker(inherited, out, a.steps))
            print(f"round {r + 1}: tfm {tfm_rates[-1]:,.0f} tok/s, PyTorch best {best_rates[-1]:,.0f}, "
                  f"inherited {env_rates[-1]:,.0f} tok/s; load average {os.getloadavg()[0]:.2f}", flush=True)
    t, p, e = (statistics.median(x) for x in (tfm_rates, best_rates, env_rates))
    print(f"\n{torch_peer.header(a.threads)}; best split {best.split}; medians of {a.rounds} alternating rounds\n")
    print("| model | threads | steps | tfm tok/s | PyTorch best tok/s | PyTorch inherited tok/s | tfm / best | "
          "tfm / inherited |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| reverse encoder (d 64, 2 layers, FFN 256, batch 256) | {a.threads} | {a.steps} | {t:,.0f} | {p:,.0f} | "
          f"{e:,.0f} | {t / p:.2f} | {t / e:.2f} |")


if __name__ == "__main__":
    main()
