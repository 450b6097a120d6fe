#!/usr/bin/env python3
"""bench/compare_builds.py — two tfm executables side by side, alternating, in one run: did a change
move speed?

For each of compare_torch.py's configs (S, M, L, M6) and modes (infer, infer-bf16, train) it runs
`tfm bench --json` with the base and the new executable in turn, ROUNDS times, each measurement the
median of ITERS iterations after WARMUP (a fresh process each); and, for the training loop itself,
`tfm train --task reverse` for STEPS steps (seq2seq and encoder), timed by the wall clock. It prints
the median over rounds of each, the new/base ratio, and the spread of each side (max/min over rounds),
so a ratio can be read against the machine's run-to-run noise.

Three more modes run the language model's commands on a text (--text, else the files of
/usr/share/common-licenses, present on every Debian machine, concatenated, each once: 237 kB of licence
text on this one), written once into the temporary directory; they do not depend on --only:
  lm-train   `tfm train --preset nanogpt-baby --text T --out DIR --max-steps LM_STEPS --eval-every
             LM_STEPS`, a fresh DIR each run, timed by the wall clock (one evaluation at the end, on the
             text's last 10%); and a row of the trainer's own tokens/s, read from DIR/metrics.csv's
             last row: the training tokens over the time since the first step began, which takes in
             that evaluation but not the process's start or the text's loading.
  generate   tokens/s of `tfm generate --model MODEL --max-new-tokens GEN_TOKENS --seed 1 --ignore-eos`
             (sampling at temperature 1, no prompt, every token drawn). tfm generate says nothing of its
             speed, so each measurement runs it twice, a fresh process each: (GEN_TOKENS - 1) / (the wall
             time with GEN_TOKENS minus the wall time with --max-new-tokens 1), which takes out the start
             and the model's loading.
  eval-text  wall seconds of `tfm eval --model MODEL --text T` (the whole text, in block-size windows).
MODEL is one model directory trained at the start by the base executable (`--preset nanogpt-baby`,
50 steps: neither command's speed depends on the weights' values), read by both executables; or
--gen-model DIR, any language model directory (e.g. bench/gpt2_generate.py's import of GPT-2 small's
shape), with --gen-dtype f32|bf16|int8 for generate's --dtype.
In a tokens/s row, a new/base ratio above 1 is faster; in the others, below 1.

Usage:  python3 bench/compare_builds.py --base OLD/tfm --new build/tfm [--rounds 5] [--iters 10]
        [--only S,M,L,M6] [--modes infer,infer-bf16,train,lm-train,generate,eval-text] [--train-steps 200]
        [--text FILE] [--lm-steps 300] [--gen-tokens 5000] [--gen-model DIR] [--gen-dtype f32]
        [--threads 2] [--markdown]
"""
import argparse
import csv
import glob
import os
import shutil
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


CONFIG_MODES = ("infer", "infer-bf16", "train")  # per config of --only, through `tfm bench`
LM_MODES = ("lm-train", "generate", "eval-text")  # the language model's commands on --text
LM_MODEL_STEPS = 50  # steps of the model directory generate and eval-text read


def write_text(tmp, path):
    """The text the language-model modes read: a copy of `path`, or /usr/share/common-licenses' files
    concatenated (each file once: GPL is a link to GPL-3, and so on)."""
    out = os.path.join(tmp, "text.txt")
    if path:
        shutil.copyfile(path, out)
        return out
    seen = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        real = os.path.realpath(p)
        if os.path.isfile(real) and real not in seen:
            seen.append(real)
    if not seen:
        sys.exit("compare_builds.py: no /usr/share/common-licenses here; give --text FILE")
    with open(out, "wb") as f:
        for real in seen:
            with open(real, "rb") as src:
                f.write(src.read())
            f.write(b"\n")
    return out


def lm_train(tfm, text, steps, threads, out):
    """(wall seconds, the trainer's tokens/s or None) of a `tfm train --preset nanogpt-baby` run of `steps` steps."""
    cmd = [tfm, "train", "--preset", "nanogpt-baby", "--text", text, "--out", out, "--max-steps", str(steps),
           "--eval-every", str(steps), "--threads", str(threads)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    s = time.perf_counter() - t0
    tps = None
    metrics = os.path.join(out, "metrics.csv")
    if os.path.exists(metrics):
        with open(metrics) as f:
            rows = list(csv.DictReader(f))
        if rows and rows[-1].get("tokens_per_sec"):
            tps = float(rows[-1]["tokens_per_sec"])
    shutil.rmtree(out, ignore_errors=True)
    return s, tps


def wall(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def generate_tps(tfm, model, tokens, threads, dtype="f32"):
    """Tokens/s of `tfm generate`: (tokens - 1) over the wall time of a run of `tokens` new tokens minus
    that of a run of 1 (the start and the model's loading)."""
    cmd = [tfm, "generate", "--model", model, "--seed", "1", "--threads", str(threads), "--dtype", dtype,
           "--ignore-eos", "--max-new-tokens"]  # every run draws all its tokens
    one = wall(cmd + ["1"])
    many = wall(cmd + [str(tokens)])
    return (tokens - 1) / (many - one) if many > one else float("nan")


def eval_text_seconds(tfm, model, text, threads):
    """Wall seconds of `tfm eval --text` on the whole text."""
    return wall([tfm, "eval", "--model", model, "--text", text, "--threads", str(threads)])


def alternating(a, measure):
    """measure(who, exe, round) for base and new in turn, ROUNDS times: (base values, new values)."""
    base, new = [], []
    for r in range(a.rounds):
        # Alternate which goes first, so a drift within a round hits both alike.
        order = [("base", a.base), ("new", a.new)] if r % 2 == 0 else [("new", a.new), ("base", a.base)]
        for who, exe in order:
            (base if who == "base" else new).append(measure(who, exe, r))
    return base, new


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
    ap.add_argument("--modes", default=",".join(CONFIG_MODES + LM_MODES))
    ap.add_argument("--train-steps", type=int, default=200, help="0 skips the training-loop rows")
    ap.add_argument("--text", help="the language-model modes' text (default: /usr/share/common-licenses/*)")
    ap.add_argument("--lm-steps", type=int, default=300, help="steps of a lm-train run")
    ap.add_argument("--gen-tokens", type=int, default=5000, help="new tokens of a generate run")
    ap.add_argument("--gen-model", help="the model directory generate and eval-text read (default: one trained here)")
    ap.add_argument("--gen-dtype", default="f32", choices=("f32", "bf16", "int8"), help="generate's --dtype")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    unknown = [m for m in modes if m not in CONFIG_MODES + LM_MODES]
    if unknown:
        ap.error("unknown mode(s) %s (expected some of %s)" % (",".join(unknown), ",".join(CONFIG_MODES + LM_MODES)))

    rows = []  # (name, unit, base values, new values)
    with tempfile.TemporaryDirectory() as tmp:
        lm_modes = [m for m in LM_MODES if m in modes]
        if lm_modes:
            text = write_text(tmp, a.text)
        if a.gen_model:
            model = a.gen_model
        elif "generate" in lm_modes or "eval-text" in lm_modes:
            model = os.path.join(tmp, "lm_model")
            subprocess.run([a.base, "train", "--preset", "nanogpt-baby", "--text", text, "--out", model, "--max-steps",
                            str(LM_MODEL_STEPS), "--eval-every", str(LM_MODEL_STEPS), "--threads", str(a.threads)],
                           check=True, capture_output=True)
            print("# model for generate and eval-text trained (base, %d steps)" % LM_MODEL_STEPS, file=sys.stderr)
        config_modes = [m for m in modes if m in CONFIG_MODES]
        for name in (n for n in a.only.split(",") if n and config_modes):
            shape = CONFIGS[name]
            cfg = write_config(tmp, name, shape)
            for mode in config_modes:
                base, new = alternating(
                    a, lambda who, exe, r: tfm_run(exe, cfg, shape, mode, a.iters, a.warmup, a.threads)["ms_median"])
                rows.append(("%s %s" % (name, mode), "ms", base, new))
                print("# %s %s done" % (name, mode), file=sys.stderr)
        if a.train_steps > 0:
            for arch in ("seq2seq", "encoder"):
                base, new = alternating(a, lambda who, exe, r: train_seconds(
                    exe, arch, a.train_steps, a.threads, os.path.join(tmp, "run_%s_%s_%d" % (arch, who, r))))
                rows.append(("train loop %s, %d steps" % (arch, a.train_steps), "s", base, new))
                print("# train loop %s done" % arch, file=sys.stderr)
        if "lm-train" in lm_modes:
            base, new = alternating(a, lambda who, exe, r: lm_train(
                exe, text, a.lm_steps, a.threads, os.path.join(tmp, "lm_%s_%d" % (who, r))))
            what = "lm train nanogpt-baby, %d steps" % a.lm_steps
            rows.append((what, "s", [s for s, _ in base], [s for s, _ in new]))
            if all(t is not None for _, t in base + new):
                rows.append((what + ", trainer's", "tok/s", [t for _, t in base], [t for _, t in new]))
            print("# lm train done", file=sys.stderr)
        if "generate" in lm_modes:
            base, new = alternating(a, lambda who, exe, r: generate_tps(exe, model, a.gen_tokens, a.threads,
                                                                        a.gen_dtype))
            rows.append(("generate %s, %d tokens%s" % (a.gen_dtype, a.gen_tokens,
                                                       ", " + os.path.basename(os.path.normpath(a.gen_model))
                                                       if a.gen_model else ""), "tok/s", base, new))
            print("# generate done", file=sys.stderr)
        if "eval-text" in lm_modes:
            base, new = alternating(a, lambda who, exe, r: eval_text_seconds(exe, model, text, a.threads))
            rows.append(("eval --text", "s", base, new))
            print("# eval --text done", file=sys.stderr)

    head = ["what", "base (median)", "new (median)", "new/base", "base spread", "new spread"]
    lines = []
    for name, unit, base, new in rows:
        mb, mn = statistics.median(base), statistics.median(new)
        f = "%.0f %s" if unit == "tok/s" else "%.3f %s"
        lines.append([name, f % (mb, unit), f % (mn, unit), "%.3f" % (mn / mb),
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
