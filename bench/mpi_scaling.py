#!/usr/bin/env python3
"""bench/mpi_scaling.py — training throughput of tfm's data parallelism on this machine: processes
against threads, and the scaling of processes.

For an encoder of config M's shape (d_model 512, 8 heads, FFN 2048, one layer, batch 8 x 128) and one
of config S's (d_model 64, 4 heads, FFN 256, one layer, batch 32 x 32), both 1024 tokens a step, it
trains on a generated TSV (lines of random lowercase letters, the target the line reversed, --tokens
char: S = T = 128 or 32, no padding, 30 tokens in each vocabulary) and runs, alternating, ROUNDS times:

    1p x 2t   tfm train ... --threads 2 --grad-shards G
    2p x 1t   mpirun -np 2 tfm train ... --threads 1 --grad-shards G
    1p x 1t   tfm train ... --threads 1 --grad-shards G

All with the same --grad-shards (default 2), so they compute the same thing: the script checks that
their model.safetensors are bitwise equal. The throughput of a run is tfm's own figure:
metrics.csv's tokens_per_sec over the rows after the first (the first interval holds the start-up and
the first, slower steps), as total tokens / total seconds (ms per step: 1024 tokens at that rate).
Each interval also holds one evaluation of 8 lines and one checkpoint, the same for every variant;
the runs go to /dev/shm by default, so that the checkpoints' fsync costs nothing and the intervals
are long (60 steps for M, 500 for S), so these fixed costs stay small against the steps. The figure
is cross-checked against the tokens the steps must have trained (a rank that counted only its own
shard's tokens would read half). The table gives the median over rounds and the ratios the issue asks for: 2p x 1t against 1p x 2t (processes against
threads) and 2p x 1t against 1p x 1t (scaling efficiency, >= 1.8 asked for config M on loopback).

Open MPI refuses to run as root unless told twice; when run as root the script sets
OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the children's environment only.

Usage:  /usr/bin/python3 bench/mpi_scaling.py [--tfm build/tfm] [--mpirun mpirun] [--rounds 3]
        [--only M,S] [--variants 1p2t,2p1t,1p1t] [--grad-shards 2] [--workdir /dev/shm] [--markdown]
"""
import argparse
import csv
import datetime
import hashlib
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

# name: (model options, line length, batch size, steps, eval every). Steps are chosen so that each
# run measures several seconds after its first interval.
MODELS = {
    "M": (["--d-model", "512", "--nhead", "8", "--dim-feedforward", "2048"], 128, 8, 240, 60),
    "S": (["--d-model", "64", "--nhead", "4", "--dim-feedforward", "256"], 32, 32, 2000, 500),
}
# name: (processes, threads per process)
VARIANTS = {"1p2t": (1, 2), "2p1t": (2, 1), "1p1t": (1, 1)}
LABEL = {"1p2t": "1 proc × 2 threads", "2p1t": "2 procs × 1 thread", "1p1t": "1 proc × 1 thread"}


def write_tsv(path, lines, length, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(lines):
            s = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))
            f.write(s + "\t" + s[::-1] + "\n")


def command(a, model, variant, data, out):
    opts, _, batch, steps, every = MODELS[model]
    procs, threads = VARIANTS[variant]
    cmd = [a.tfm, "train", "--train", os.path.join(data, "train.tsv"), "--valid", os.path.join(data, "valid.tsv"),
           "--arch", "encoder", "--tokens", "char", "--layers", "1", *opts, "--dropout", "0.1",
           "--batch-size", str(batch), "--max-steps", str(a.steps or steps), "--eval-every", str(a.eval_every or every),
           "--seed", "1", "--threads", str(threads)]
    if a.grad_shards > 0:
        cmd += ["--grad-shards", str(a.grad_shards)]
    cmd += ["--out", out]
    if procs > 1:
        cmd = [a.mpirun, "-np", str(procs), *shlex.split(a.mpirun_args)] + cmd
    return cmd


def child_env():
    env = dict(os.environ)
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def throughput(out, tokens_per_step):
    """(tokens/s over the rows after the first, tokens reconstructed / tokens the steps trained)."""
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:
        raise RuntimeError(f"{out}/metrics.csv has {len(rows)} rows; need at least 2")
    tokens = seconds = 0.0
    for prev, row in zip(rows, rows[1:]):
        dt = float(row["elapsed_seconds"]) - float(prev["elapsed_seconds"])
        tokens += float(row["tokens_per_sec"]) * dt
        seconds += dt
    expected = tokens_per_step * (int(rows[-1]["step"]) - int(rows[0]["step"]))
    return tokens / seconds, tokens / expected


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return "?"


cmd_tfm = ["", ""]  # the executable's absolute path and as given


def display(cmd, data_dir, out_dir):
    """The command as a user would type it: the temporary paths replaced by short names."""
    text = " ".join(shlex.quote(c) for c in cmd)
    return text.replace(data_dir + "/", "").replace(out_dir, "OUT").replace(cmd_tfm[0], cmd_tfm[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default="build/tfm")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpirun-args", default="", help="extra mpirun options, e.g. '--bind-to none'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="M,S")
    ap.add_argument("--variants", default="1p2t,2p1t,1p1t")
    ap.add_argument("--grad-shards", type=int, default=2, help="0 leaves the option out (a tfm without it)")
    ap.add_argument("--steps", type=int, default=0, help="override every model's step count (smoke tests)")
    ap.add_argument("--eval-every", type=int, default=0, help="override every model's evaluation interval")
    ap.add_argument("--workdir", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None,
                    help="where the data and runs go (default /dev/shm: checkpoints' fsync then costs nothing)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    cmd_tfm[:] = [os.path.abspath(a.tfm), a.tfm]
    a.tfm = os.path.abspath(a.tfm)
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v!r} (expected one of {', '.join(VARIANTS)})")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load()
    env = child_env()

    results = {}  # (model, variant) -> [tokens/s per round]
    shown = {}    # (model, variant) -> the command, paths shortened
    same = {}     # model -> all variants' weights bitwise equal in every round
    notes = []
    with tempfile.TemporaryDirectory(prefix="mpi_scaling.", dir=a.workdir) as tmp:
        for model in a.only.split(","):
            _, length, batch, steps, _ = MODELS[model]
            data = os.path.join(tmp, f"data_{model}")
            os.makedirs(data)
            write_tsv(os.path.join(data, "train.tsv"), 1024 if model == "M" else 4096, length, 1)
            write_tsv(os.path.join(data, "valid.tsv"), 8, length, 2)
            same[model] = True
            for rnd in range(a.rounds):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]  # alternate the order
                digests = {}
                for v in order:
                    out = os.path.join(tmp, f"run_{model}_{v}_{rnd}")
                    cmd = command(a, model, v, data, out)
                    shown[(model, v)] = display(cmd, data, out)
                    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if p.returncode != 0:
                        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
                    tps, ratio = throughput(out, length * batch)
                    if abs(ratio - 1) > 0.02:
                        notes.append(f"{model} {v} round {rnd + 1}: metrics.csv's tokens are {ratio:.3f}x "
                                     "the tokens its steps trained")
                    results.setdefault((model, v), []).append(tps)
                    digests[v] = sha256(os.path.join(out, "model.safetensors"))
                    shutil.rmtree(out)
                    print(f"{model} {LABEL[v]:<20} round {rnd + 1}: {tps:10.0f} tokens/s", file=sys.stderr)
                if len(set(digests.values())) > 1:
                    same[model] = False

    def med(model, v):
        return statistics.median(results[(model, v)]) if (model, v) in results else None

    lines = []
    if a.markdown:
        lines.append("| config | processes × threads | tokens/s (median) | min–max | ms per step | vs 1p × 1t | vs 1p × 2t |")
        lines.append("|---|---|---|---|---|---|---|")
    for model in a.only.split(","):
        for v in variants:
            xs = results[(model, v)]
            m = med(model, v)
            r11 = f"{m / med(model, '1p1t'):.2f}" if med(model, "1p1t") else "-"
            r12 = f"{m / med(model, '1p2t'):.2f}" if med(model, "1p2t") else "-"
            _, length, batch, _, _ = MODELS[model]
            cells = [model, LABEL[v], f"{m:,.0f}", f"{min(xs):,.0f}–{max(xs):,.0f}", f"{1e3 * length * batch / m:.2f}",
                     r11, r12]
            lines.append("| " + " | ".join(cells) + " |" if a.markdown else "  ".join(f"{c:<20}" for c in cells))
    print("\n".join(lines))
    print()
    for model in a.only.split(","):
        print(f"{model}: weights after the run bitwise equal across the variants in every round: "
              f"{'yes' if same[model] else 'NO'}")
    for n in notes:
        print("note: " + n)
    print(f"\n{started}; {cpu_model()}; {os.cpu_count()} CPUs; load average before {load_before}, after {load()}; "
          f"medians over {a.rounds} alternating rounds; tokens/s = metrics.csv's tokens_per_sec over the rows after "
          "the first (total tokens / total seconds)")
    print("\nCommands (train.tsv / valid.tsv: the generated data, OUT: the run's directory):\n")
    for model in a.only.split(","):
        for v in variants:
            print(f"    {shown[(model, v)]}")


if __name__ == "__main__":
    main()
