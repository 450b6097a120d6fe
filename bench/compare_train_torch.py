#!/usr/bin/env python3
"""compare_train_torch.py — training throughput of `tfm train` against the same model trained by
PyTorch 1.13 on the same kind of data, in one run.

    /usr/bin/python3 bench/compare_train_torch.py --tfm build/tfm [--models reverse,s2s] [--steps 200]
                     [--s2s-steps 40] [--threads 2] [--rounds 3]

Two models (--models):
- reverse: `tfm train --task reverse --arch encoder --max-steps STEPS --eval-every STEPS`, with its
  defaults (d_model 64, 4 heads, 2 layers, FFN 256, batch 256, Adam, clip-norm 1, dropout 0);
  PyTorch: reverse-task batches of the same size and length distribution (lengths 3..15, tokens 1..19,
  0 = pad).
- s2s: the issue-32 seq2seq model, `tfm train --arch seq2seq --tokens char --d-model 256 --layers 3
  --dim-feedforward 1024 --batch-tokens 4096` (4 heads, post-norm ReLU, dropout 0.1, Adam, clip-norm 1)
  on a TSV task: the common-licenses reversal pairs of bench/int8_accuracy.py (train.tsv, 1,707 pairs
  of 4–14 words, reversed), --s2s-steps steps; PyTorch: the same pairs as the same character ids (tfm's
  src_vocab.txt/tgt_vocab.txt), batched as tfm batches them (shuffled, sorted by length in pools of 64
  batches, cut where a batch's rows × longest padded length would pass 4,096: `src/data/batching.cc`),
  source as it is, target in with bos, out with eos.
Both sides count target tokens (padding excluded) and time the same way: 10 untimed warm-up steps, then
windows of 10 steps, the figure the median of the windows' tokens/s. tfm runs 10 + STEPS steps with
--eval-every 10 and reads each metrics.csv row's tokens_per_sec (its window's training rate, the evaluation
left out). PyTorch runs tools/torch_models.py's twin of the same model (built from the
config.json tfm wrote) with the same step: forward (dropout as configured), cross-entropy ignoring
padding, backward, clip_grad_norm_(1.0), Adam.
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
import random
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
import int8_accuracy  # noqa: E402  (make_data: the licenses TSV)
import torch_peer  # noqa: E402


S2S_ARGS = ["--arch", "seq2seq", "--tokens", "char", "--d-model", "256", "--layers", "3", "--dim-feedforward", "1024",
            "--batch-tokens", "4096"]
NAMES = {"reverse": "reverse encoder (d 64, 2 layers, FFN 256, batch 256)",
         "s2s": "seq2seq on a TSV task (d 256, 3+3 layers, FFN 1024, --batch-tokens 4096, chars)"}


WARMUP, WINDOW = 10, 10  # untimed first steps, and the steps of each timed window, on both sides


def run_tfm(tfm, steps, threads, out, model="reverse", data=None):
    """tfm's training tokens/s: WARMUP + steps steps with a metrics row every WINDOW steps (each row's
    tokens_per_sec is its window's training rate, the evaluation left out); the median over the windows after the
    warm-up."""
    task = (["--task", "reverse", "--arch", "encoder"] if model == "reverse" else
            ["--train", os.path.join(data, "train.tsv"), "--valid", os.path.join(data, "valid.tsv")] + S2S_ARGS)
    subprocess.run([tfm, "train"] + task + ["--out", out, "--max-steps", str(WARMUP + steps), "--eval-every",
                    str(WINDOW), "--threads", str(threads)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    header = rows[0]
    return statistics.median(float(r[header.index("tokens_per_sec")]) for r in rows[1:]
                             if int(r[header.index("step")]) > WARMUP)


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


def tsv_batches(model_dir, cfg, tsv, batch_tokens, count):
    """`count` batches (src, tgt_in, tgt_out) of the TSV's pairs as character ids of tfm's vocabularies, planned
    as src/data/batching.cc plans an epoch (one epoch after another until there are enough)."""
    def vocab(name):
        with open(os.path.join(model_dir, name), encoding="utf-8") as f:
            return {tok: i for i, tok in enumerate(f.read().split("\n")[:-1])}
    sv, tv = vocab("src_vocab.txt"), vocab("tgt_vocab.txt")
    pairs = []
    with open(tsv, encoding="utf-8") as f:
        for line in f:
            a, b = line.rstrip("\n").split("\t")
            pairs.append(([sv.get(c, 3) for c in a], [tv.get(c, 3) for c in b]))
    padded = [max(len(a), len(b)) + 1 for a, b in pairs]
    pool = max(1, 64 * batch_tokens // max(1, sum(padded) // len(pairs)))
    rng = random.Random(0)
    out = []
    while len(out) < count:
        order = list(range(len(pairs)))
        rng.shuffle(order)
        plan = []
        for p0 in range(0, len(order), pool):
            chunk = sorted(order[p0:p0 + pool], key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
            cur, longest = [], 0
            for i in chunk:
                if cur and (len(cur) + 1) * max(longest, padded[i]) > batch_tokens:
                    plan.append(cur)
                    cur, longest = [], 0
                cur.append(i)
                longest = max(longest, padded[i])
            if cur:
                plan.append(cur)
        rng.shuffle(plan)
        for rows in plan:
            S = max(len(pairs[i][0]) for i in rows)
            T = max(len(pairs[i][1]) for i in rows) + 1
            src = torch.full((len(rows), S), cfg["pad_id"], dtype=torch.long)
            tin = torch.full((len(rows), T), cfg["pad_id"], dtype=torch.long)
            tout = torch.full((len(rows), T), cfg["pad_id"], dtype=torch.long)
            for r, i in enumerate(rows):
                a, b = pairs[i]
                src[r, :len(a)] = torch.tensor(a)
                tin[r, 0] = cfg["bos_id"]
                tin[r, 1:len(b) + 1] = torch.tensor(b)
                tout[r, :len(b)] = torch.tensor(b)
                tout[r, len(b)] = cfg["eos_id"]
            out.append((src, tin, tout))
    return out[:count]


def run_torch(model_dir, steps, threads, tsv=None):
    torch.set_num_threads(threads)
    cfg = tm.read_model_config(model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        train_cfg = json.load(f).get("train", {})
    batch = int(train_cfg.get("batch_size", 256))
    lr = float(train_cfg.get("lr", 2e-3))
    model = tm.Model(cfg).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    if tsv:
        batches = tsv_batches(model_dir, cfg, tsv, int(train_cfg["batch_tokens"]), WARMUP + steps)
    else:
        gen = torch.Generator().manual_seed(0)
        batches = [(src, None, tgt) for src, tgt in (reverse_batch(gen, batch, cfg["pad_id"]) for _ in range(WARMUP + steps))]

    def step(src, tgt_in, tgt):
        loss = model.loss(model(src) if tgt_in is None else model(src, tgt_in), tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for b in batches[:WARMUP]:
        step(*b)
    rates = []  # as tfm's: the median of the WINDOW-step windows' tokens/s
    for w0 in range(WARMUP, len(batches), WINDOW):
        window = batches[w0:w0 + WINDOW]
        tokens = sum(int((tgt != cfg["pad_id"]).sum()) for _, _, tgt in window)
        t0 = time.perf_counter()
        for b in window:
            step(*b)
        rates.append(tokens / (time.perf_counter() - t0))
    return statistics.median(rates)


def torch_in_worker(peer, model_dir, steps, tsv=None):
    """run_torch in a fresh /usr/bin/python3 process in the peer's environment (its own thread pools)."""
    r = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                        json.dumps([model_dir, steps, peer.torch_threads, tsv])],
                       check=True, capture_output=True, text=True, env=peer.env)
    return float(r.stdout.strip().splitlines()[-1])


def compare(a, model, steps, data, tmp):
    """Calibrates PyTorch's best split on this model, then alternates tfm, PyTorch best and inherited for
    a.rounds rounds; returns the table row."""
    tsv = os.path.join(data, "train.tsv") if model == "s2s" else None
    tfm_rates, best_rates, env_rates = [], [], []
    inherited = torch_peer.inherited(a.threads)
    out0 = os.path.join(tmp, model + "-calibrate")
    run_tfm(a.tfm, 1, a.threads, out0, model, data)
    cands = torch_peer.best_candidates(a.threads)
    calib = a.calibrate_steps if model == "reverse" else max(WINDOW, steps // 3)
    best, note = torch_peer.fastest(cands, [-torch_in_worker(p, out0, calib, tsv) for p in cands])
    print(f"{model}: best split {note} (negated tok/s)", flush=True)
    for r in range(a.rounds):
        out = os.path.join(tmp, f"{model}-run{r}")
        tfm_rates.append(run_tfm(a.tfm, steps, a.threads, out, model, data))
        best_rates.append(torch_in_worker(best, out, steps, tsv))
        env_rates.append(torch_in_worker(inherited, out, steps, tsv))
        print(f"{model} round {r + 1}: tfm {tfm_rates[-1]:,.0f} tok/s, PyTorch best {best_rates[-1]:,.0f}, "
              f"inherited {env_rates[-1]:,.0f} tok/s; load average {os.getloadavg()[0]:.2f}", flush=True)
    t, p, e = (statistics.median(x) for x in (tfm_rates, best_rates, env_rates))
    return (f"| {NAMES[model]} | {a.threads} | {steps} | {t:,.0f} | {p:,.0f} | {e:,.0f} | {t / p:.2f} | {t / e:.2f} "
            f"| {best.split} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default="build/tfm")
    ap.add_argument("--models", default="reverse,s2s")
    ap.add_argument("--steps", type=int, default=200, help="the reverse model's steps")
    ap.add_argument("--s2s-steps", type=int, default=40, help="the seq2seq model's steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calibrate-steps", type=int, default=50, help="steps of each split's calibration run (reverse)")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        print(run_torch(*json.loads(a.torch_worker)))
        return
    a.tfm = os.path.abspath(a.tfm)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        int8_accuracy.make_data(data)
        for model in a.models.split(","):
            rows.append(compare(a, model, a.steps if model == "reverse" else a.s2s_steps, data, tmp))
    print(f"\n{torch_peer.header(a.threads)}; medians of {a.rounds} alternating rounds\n")
    print("| model | threads | steps | tfm tok/s | PyTorch best tok/s | PyTorch inherited tok/s | tfm / best | "
          "tfm / inherited | best split (torch × OpenBLAS) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
