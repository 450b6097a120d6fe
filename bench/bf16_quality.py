#!/usr/bin/env python3
"""bench/bf16_quality.py — does training in bfloat16 (`tfm train --dtype bf16`) reach what float32 reaches?

  reverse   the built-in reverse task with its preset (`tfm train --task reverse`), bf16: validation sequence
            accuracy (the issue's bar: 99%)
  vim       the nanogpt-baby preset on Vim's help files (README, "Language models"), --lm-steps steps, seeds
            --seeds, in f32 and in bf16: validation loss at the end
  licenses  a seq2seq model (d_model 256, 3+3 layers, FFN 1024, joint SentencePiece vocabulary of 1000,
            --batch-tokens 4096) on the common-licenses reversal pairs (bench/int8_accuracy.py makes both data
            sets), --s2s-steps steps, the same seeds, f32 and bf16: validation loss at the end
For vim and licenses it prints each run, the means, the bf16 mean's distance from the f32 mean in percent, and
the f32 seeds' spread ((max − min) / mean), the issue's two yardsticks. Thread counts do not change any number
(tfm is deterministic across threads), so --threads only sets the wall time.

Usage: /usr/bin/python3 bench/bf16_quality.py [--tfm build/tfm] [--work DIR] [--seeds 1,2,3] [--lm-steps 2000]
       [--s2s-steps 2000] [--only reverse,vim,licenses] [--threads 2] [--markdown]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import int8_accuracy  # noqa: E402  (make_data: the README's data sets)
import torch_peer  # noqa: E402  (cpu_name, isa)
from tables import print_table  # noqa: E402


def train(a, out, args):
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        subprocess.run([a.tfm, "train", "--out", out, "--force", "--threads", str(a.threads)] + args, check=True,
                       capture_output=True, text=True)
    with open(os.path.join(out, "metrics.csv")) as fh:
        rows = [r.split(",") for r in fh.read().strip().splitlines()]
    hdr = rows[0]
    last = dict(zip(hdr, rows[-1]))
    return last


def compare(a, key, name, args_of, steps):
    seeds = [int(s) for s in a.seeds.split(",")]
    loss = {"f32": [], "bf16": []}
    rows = []
    for seed in seeds:
        for dtype in ("f32", "bf16"):
            out = os.path.join(a.work, "runs", "%s-%s-%d-%d" % (key, dtype, steps, seed))
            last = train(a, out, args_of(seed, dtype))
            loss[dtype].append(float(last["valid_loss"]))
            rows.append([str(seed), dtype, last["step"], "%.4f" % float(last["valid_loss"]),
                         "%.2f" % (100 * float(last["valid_token_accuracy"]))])
            print("# %s seed %d %s: %s" % (name, seed, dtype, json.dumps(last)), file=sys.stderr)
    m32, m16 = statistics.mean(loss["f32"]), statistics.mean(loss["bf16"])
    spread = (max(loss["f32"]) - min(loss["f32"])) / m32
    print("\n%s, %d steps, seeds %s, %s (%s):" % (name, steps, a.seeds, torch_peer.cpu_name(), torch_peer.isa()))
    print_table(["seed", "dtype", "step", "valid loss", "valid token accuracy %"], rows, a.markdown)
    print("\nmean valid loss f32 %.4f, bf16 %.4f: bf16 %+.2f%% of f32; f32 seeds' spread %.2f%%" % (
        m32, m16, 100 * (m16 - m32) / m32, 100 * spread))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"))
    ap.add_argument("--work", default="/tmp/tfm_bf16_quality")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--lm-steps", type=int, default=2000)
    ap.add_argument("--s2s-steps", type=int, default=2000)
    ap.add_argument("--only", default="reverse,vim,licenses")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    a.tfm = os.path.abspath(a.tfm)
    data = os.path.join(a.work, "data")
    int8_accuracy.make_data(data)
    d = lambda f: os.path.join(data, f)
    if "reverse" in a.only:
        last = train(a, os.path.join(a.work, "runs", "reverse-bf16"), ["--task", "reverse", "--dtype", "bf16"])
        print("reverse task preset in bf16 (%s, %s): step %s, valid sequence accuracy %.2f%%, token accuracy %.2f%%" % (
            torch_peer.cpu_name(), torch_peer.isa(), last["step"], 100 * float(last["valid_sequence_accuracy"]),
            100 * float(last["valid_token_accuracy"])))
    if "vim" in a.only:
        compare(a, "vim", "nanogpt-baby on Vim's help", lambda seed, dtype: [
            "--preset", "nanogpt-baby", "--text", d("vimtrain.txt"), "--valid-text", d("vimvalid.txt"), "--max-steps",
            str(a.lm_steps), "--seed", str(seed), "--dtype", dtype], a.lm_steps)
    if "licenses" in a.only:
        compare(a, "licenses", "seq2seq on the licenses TSV", lambda seed, dtype: [
            "--train", d("train.tsv"), "--valid", d("valid.tsv"), "--arch", "seq2seq", "--tokens", "spm", "--joint-vocab",
            "--vocab-size", "1000", "--share-embeddings", "--d-model", "256", "--layers", "3", "--dim-feedforward", "1024",
            "--batch-tokens", "4096", "--max-steps", str(a.s2s_steps), "--seed", str(seed), "--dtype", dtype], a.s2s_steps)


if __name__ == "__main__":
    main()
