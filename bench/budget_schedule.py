#!/usr/bin/env python3
"""bench/budget_schedule.py — what the budget schedule and weight averaging (issue 31) buy a run trained
to a clock: a seq2seq model trained for the same --time-budget three ways, one after another:

    today     --schedule inverse_sqrt   what `--schedule auto` gave a budgeted run before the budget
                                        schedule: warmup, then lr·sqrt(warmup/step), stopped by the clock
    budget    (auto)                    the budget schedule: the step count fitted to the budget after
                                        the warmup, cosine to --min-lr 0 at that step
    budget+ema  --ema 0.999             the same with the weights' average evaluated and saved

The model: d_model 256, 8 heads, 3 + 3 layers, FFN 1024, --batch-tokens 4096, char tokens. The task
(generated, seeded): a source of 3–8 words of 2–7 letters from a 16-letter alphabet, the target the
same words in reverse order, each word's letters reversed and mapped through a fixed substitution
(so every target character depends on a source character far away in the line). --train-size pairs
(default 100,000) for training, 1,000 for validation.

For each run the script reads the last row of metrics.csv (teacher-forced validation loss, token and
sequence accuracy, on the weights the run saved) and tfm's summary (the greedy decode's sequence
accuracy, the steps, the seconds training took against the budget) and prints a Markdown table.

Usage:  /usr/bin/python3 bench/budget_schedule.py [--tfm build/tfm] [--budget 900] [--seeds 1]
        [--threads 2] [--workdir /tmp/tfm_budget] [--only today,budget,ema]
"""
import argparse
import csv
import os
import random
import re
import subprocess
import sys

VARIANTS = {
    "today": ["--schedule", "inverse_sqrt"],
    "budget": [],
    "ema": ["--ema", "0.999"],
}
LABEL = {"today": "today (inverse_sqrt, clock stop)", "budget": "budget schedule", "ema": "budget schedule + --ema 0.999"}
MODEL = ["--arch", "seq2seq", "--d-model", "256", "--nhead", "8", "--layers", "3", "--dim-feedforward", "1024",
         "--batch-tokens", "4096", "--tokens", "char"]


def write_task(path, n, seed):
    r = random.Random(seed)
    alphabet = "abcdefghijklmnop"
    shuffled = list(alphabet)
    random.Random(12345).shuffle(shuffled)  # the same substitution for every file
    sub = dict(zip(alphabet, shuffled))
    with open(path, "w") as f:
        for _ in range(n):
            words = ["".join(r.choice(alphabet) for _ in range(r.randint(2, 7))) for _ in range(r.randint(3, 8))]
            target = " ".join("".join(sub[c] for c in reversed(w)) for w in reversed(words))
            f.write(" ".join(words) + "\t" + target + "\n")


def run(args, variant, seed, train, valid):
    out = os.path.join(args.workdir, f"{variant}_s{seed}")
    cmd = [args.tfm, "train", "--train", train, "--valid", valid, *MODEL, "--time-budget", str(args.budget),
           "--seed", str(seed), "--threads", str(args.threads), "--out", out, *VARIANTS[variant]]
    subprocess.run(["rm", "-rf", out], check=True)
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{variant}: tfm failed:\n{p.stderr[-3000:]}")
    text = p.stderr + p.stdout
    with open(os.path.join(out, "metrics.csv")) as f:
        last = list(csv.DictReader(f))[-1]
    steps = int(re.search(r"trained (\d+) steps", text).group(1))
    took = re.search(r"took ([0-9.]+) s", text)
    greedy = re.search(r"sequence accuracy ([0-9.]+)%", text)
    fitted = re.search(r"time budget: (\d+) steps fit", text)
    return {
        "valid_loss": float(last["valid_loss"]),
        "token_acc": float(last["valid_token_accuracy"]),
        "seq_acc": float(last["valid_sequence_accuracy"]),
        "greedy_seq_acc": float(greedy.group(1)) / 100 if greedy else float("nan"),
        "steps": steps,
        "seconds": float(took.group(1)) if took else float("nan"),
        "fitted": fitted.group(0) if fitted else "",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tfm", default="build/tfm")
    ap.add_argument("--budget", type=float, default=900)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--train-size", type=int, default=100000)
    ap.add_argument("--workdir", default="/tmp/tfm_budget")
    ap.add_argument("--only", default="today,budget,ema")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    train, valid = os.path.join(args.workdir, "train.tsv"), os.path.join(args.workdir, "valid.tsv")
    write_task(train, args.train_size, 1)
    write_task(valid, 1000, 2)
    rows = []
    for seed in range(1, args.seeds + 1):
        for v in args.only.split(","):
            r = run(args, v, seed, train, valid)
            print(v, seed, r, file=sys.stderr, flush=True)
            rows.append((v, seed, r))
    print(f"| run | seed | steps | training s (budget {args.budget:g}) | valid loss | token acc | seq acc (teacher-forced) | seq acc (greedy) |")
    print("|---|---|---|---|---|---|---|---|")
    for v, seed, r in rows:
        print(f"| {LABEL[v]} | {seed} | {r['steps']} | {r['seconds']:.1f} | {r['valid_loss']:.4f} | "
              f"{100 * r['token_acc']:.2f}% | {100 * r['seq_acc']:.2f}% | {100 * r['greedy_seq_acc']:.2f}% |")
    base = {seed: r["valid_loss"] for v, seed, r in rows if v == "today"}
    for v, seed, r in rows:
        if v != "today" and seed in base:
            print(f"\n{LABEL[v]}, seed {seed}: validation loss {100 * (r['valid_loss'] / base[seed] - 1):+.1f}% against today's")


if __name__ == "__main__":
    main()
