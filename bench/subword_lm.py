#!/usr/bin/env python3
"""bench/subword_lm.py — what subwords buy a language model at equal training time: --tokens char
against --tokens spm on the same text, scored in validation bits per character.

    /usr/bin/python3 bench/subword_lm.py [--budget SECONDS] [--vocab-size N] [--threads T]
                                          [--train FILE --valid FILE] [--tfm build/tfm] [--work DIR]
    /usr/bin/python3 bench/subword_lm.py --smoke        # a few seconds: checks the script runs

Both runs use nanoGPT's CPU recipe (`tfm train --preset nanogpt-baby`: 4 layers, width 128, block 64
tokens, batch 12) with `--time-budget SECONDS` instead of its step count, so each trains for the same
wall time; the spm run adds `--tokens spm --vocab-size N` (a unigram SentencePiece model trained on the
training text, lossless: whitespace and newlines kept). The block is 64 tokens either way, so an spm
window sees several times more text. Validation bits per character (`tfm eval --text VALID --json`,
"bits_per_char") divide the summed loss by the validation text's characters, whatever the tokens,
which makes the two runs comparable. The SentencePiece training time counts in the spm run's wall
time (it happens before the first step, outside --time-budget, and is printed).

Default data: Vim's documentation (Debian's vim-runtime), the README's language-model set — every help
file but the user manual for training, the manual's chapters 1-9 (usr_0*.txt) for validation.
Prints one line per run and a JSON summary on the last line.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

TINY = ["--d-model", "16", "--nhead", "2", "--layers", "1", "--dim-feedforward", "32", "--block-size", "32"]


def vim_texts(work):
    docs = sorted(glob.glob("/usr/share/vim/vim*/doc/*.txt"))
    if not docs:
        sys.exit("no /usr/share/vim/vim*/doc/*.txt: apt-get install vim-runtime, or give --train and --valid")
    train, valid = os.path.join(work, "vimtrain.txt"), os.path.join(work, "vimvalid.txt")
    with open(train, "wb") as f:
        for p in docs:
            if not os.path.basename(p).startswith("usr_"):
                f.write(open(p, "rb").read())
    with open(valid, "wb") as f:
        for p in docs:
            if os.path.basename(p).startswith("usr_0"):
                f.write(open(p, "rb").read())
    return train, valid


def run(tfm, name, train, valid, work, budget, threads, extra):
    out = os.path.join(work, name)
    cmd = [tfm, "train", "--preset", "nanogpt-baby", "--text", train, "--valid-text", valid,
           "--time-budget", str(budget), "--threads", str(threads), "--out", out, "--force"] + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{p.stderr}")
    steps = next((line.split()[1] for line in p.stderr.splitlines() if line.startswith("trained ")), "?")
    e = subprocess.run([tfm, "eval", "--model", out, "--text", valid, "--json", "--threads", str(threads)],
                       capture_output=True, text=True)
    if e.returncode != 0:
        sys.exit(e.stderr)
    score = json.loads(e.stdout)
    score.update(name=name, steps=steps, wall_seconds=round(wall, 1))
    print(f"{name:5s} steps {steps:>6s}  wall {wall:7.1f} s  valid {score['bits_per_char']:.4f} bits/char  "
          f"({score['bits_per_token']:.4f} bits/token, {score['tokens']} tokens)", flush=True)
    return score


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=300, help="training seconds per run")
    ap.add_argument("--vocab-size", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--train"), ap.add_argument("--valid")
    ap.add_argument("--tfm", default=os.path.join(os.path.dirname(__file__), "..", "build", "tfm"))
    ap.add_argument("--work", default="/tmp/tfm_subword_lm")
    ap.add_argument("--smoke", action="store_true", help="tiny model, 3 s, GPL-3: the script works")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    extra = []
    if a.smoke:
        a.train, a.valid = "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2"
        a.budget, a.vocab_size, extra = 3, 400, TINY + ["--eval-every", "50"]
    train, valid = (a.train, a.valid) if a.train and a.valid else vim_texts(a.work)
    results = [run(a.tfm, "char", train, valid, a.work, a.budget, a.threads, extra + ["--tokens", "char"]),
               run(a.tfm, "spm", train, valid, a.work, a.budget, a.threads,
                   extra + ["--tokens", "spm", "--vocab-size", str(a.vocab_size)])]
    print(json.dumps({"budget_seconds": a.budget, "vocab_size": a.vocab_size, "threads": a.threads,
                      "train": train, "valid": valid, "runs": results}))


if __name__ == "__main__":
    main()
