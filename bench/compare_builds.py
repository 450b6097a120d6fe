#!/usr/bin/env python3
"""bench/compare_builds.py — two tfm executables side by side, alternating, in one run: did a change
move speed?

For each of compare_torch.py's configs (S, M, L, M6) and modes (infer, infer-bf16, train) it runs
`tfm bench --json` with the base and the new executable in turn, ROUNDS times, each measurement the
median of ITERS iterations after WARMUP (a fresh process each); and, for the training loop itself,
`tfm train --task reverse` for STEPS steps (seq2seq and encoder), timed by the wall clock. It prints
the median over rounds of each, the new/base ratio, and the spread of each side (max/min over rounds),
so a ratio can be read against the machine's run-to-run noise.

Usage:  python3 bench/compare_builds.py --base OLD/tfm --new build/tfm [--rounds 5] [--iters 10]
        [--only S,M,L,M6] [--modes infer,infer-bf16,train] [--train-steps 200] [--threads 2] [--markdown]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import CONFIGS, tfm_run, write_config  # noqa: E402


def train_seconds(tfm, arch, steps, threads, out):
    """Wall seconds of a `tfm train --task reverse` run of `steps` steps (one evaluation at the end)."""
    cmd = [tfm, "train", "--task", "reverse", "--arch", arch, "--out", out, "--max-steps", str(steps),
           "--eval-every", str(steps), "--task-train-size", "4096", "--threads", str(threads)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def spread(xs):
    return max(xs) / min(xs) if min(xs) > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the tfm executable before the change")
    ap.add_argument("--new", required=True, help="the tfm executable after it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="S,M,L,M6")
    ap.add_argument("--modes", default="infer,infer-bf16,train")
    ap.add_argument("--train-steps", type=int, default=200, help="0 skips the training-loop rows")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    rows = []  # (name, unit, base values, new values)
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only.split(","):
            shape = CONFIGS[name]
            cfg = write_config(tmp, name, shape)
            for mode in a.modes.split(","):
                base, new = [], []
                for r in range(a.rounds):
                    # Alternate which goes first, so a drift within a round hits both alike.
                    order = [("base", a.base), ("new", a.new)] if r % 2 == 0 else [("new", a.new), ("base", a.base)]
                    for who, exe in order:
                        ms = tfm_run(exe, cfg, shape, mode, a.iters, a.warmup, a.threads)["ms_median"]
                        (base if who == "base" else new).append(ms)
                rows.append(("%s %s" % (name, mode), "ms", base, new))
                print("# %s %s done" % (name, mode), file=sys.stderr)
        if a.train_steps > 0:
            for arch in ("seq2seq", "encoder"):
                base, new = [], []
                for r in range(a.rounds):
                    order = [("base", a.base), ("new", a.new)] if r % 2 == 0 else [("new", a.new), ("base", a.base)]
                    for who, exe in order:
                        s = train_seconds(exe, arch, a.train_steps, a.threads, os.path.join(tmp, "run_%s_%d" % (who, r)))
                        (base if who == "base" else new).append(s)
                rows.append(("train loop %s, %d steps" % (arch, a.train_steps), "s", base, new))
                print("# train loop %s done" % arch, file=sys.stderr)

    head = ["what", "base (median)", "new (median)", "new/base", "base spread", "new spread"]
    lines = []
    for name, unit, base, new in rows:
        mb, mn = statistics.median(base), statistics.median(new)
        lines.append([name, "%.3f %s" % (mb, unit), "%.3f %s" % (mn, unit), "%.3f" % (mn / mb),
                      "%.2f" % spread(base), "%.2f" % spread(new)])
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        w = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
        for l in [head] + lines:
            print("  ".join(str(x).ljust(n) for x, n in zip(l, w)))


if __name__ == "__main__":
    main()
