#!/usr/bin/env python3
"""bench/compare_torch.py — tfm against Debian's PyTorch 1.13, side by side, in one run.

Configs (nn.TransformerEncoderLayer, batch_first, ReLU, dropout 0.1 as PyTorch's default):
  S   d_model 64,  4 heads, FFN 256,  B 32, N 32
  M   d_model 512, 8 heads, FFN 2048, B 8,  N 128
  L   d_model 256, 4 heads, FFN 1024, B 1,  N 2048
  M6  a 6-layer nn.TransformerEncoder of M layers
Modes: infer (eval; PyTorch under torch.no_grad, which takes its fused "fast path"), infer-bf16 (tfm
`--dtype bf16`: bfloat16 inputs to the Linear matmuls, float32 everywhere else; PyTorch: the module and
input converted with .bfloat16(), so every op runs in bfloat16 — 1.13's CPU autocast fails in the
encoder fast path, "expected scalar type BFloat16 but found Float") and train (one step: forward in
train mode, MSE against a random target, backward, Adam).

tfm runs through `tfm bench --json` (a fresh process per measurement); PyTorch runs in long-lived worker
processes started with /usr/bin/python3 in bench/torch_peer.py's environments: "inherited" (this environment,
--threads threads) and one worker per "best" candidate (OpenBLAS's kernel named, passive OpenMP waiting, each
thread split of torch_peer.splits); a row's "best" is the fastest candidate's median, its split named.
For every (config, mode) they are measured in turn, ROUNDS times, alternating, so drift on the shared
machine hits them alike; each measurement is the median of ITERS timed iterations after WARMUP, and the
table shows the median over rounds.

The clock of these shared machines drifts (a config-M step measured 56–69 ms within one hour, PyTorch
alike). So before every measurement the script runs build/bench/peak_fma (register-only FMA chains on
every thread) and reports, per row, the median FMA peak it measured before tfm's runs ("peak now") and
tfm's fraction of it, next to the fraction of the nominal 468 GFLOP/s the issue's targets are stated in.
The same probe makes each measurement start on a quiet machine: a PyTorch worker that has just answered
leaves OpenMP/OpenBLAS threads spinning for a while (a probe right after one read 161–307 GFLOP/s
instead of ≈ 430), which slowed whoever ran next. So the probe is repeated, 0.3 s apart, until it
reads at least 92% of the best seen so far (at most 10 times) before tfm and before each PyTorch run.

Usage:  python3 bench/compare_torch.py [--tfm build/tfm] [--peak-fma build/bench/peak_fma] [--rounds 3]
        [--iters 10] [--only S,M] [--modes infer,infer-bf16,train] [--markdown]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402
from tables import print_table  # noqa: E402

PEAK_GFLOPS = 468.0  # measured fp32 FMA peak of this machine with 2 threads (issue 3)

CONFIGS = {
    # name: (d_model, nhead, dim_feedforward, num_layers or 0 for a single layer, B, N)
    "S": (64, 4, 256, 0, 32, 32),
    "M": (512, 8, 2048, 0, 8, 128),
    "L": (256, 4, 1024, 0, 1, 2048),
    "M6": (512, 8, 2048, 6, 8, 128),
}

WORKER = r'''
import copy, json, sys, time, statistics
import torch
import torch.nn as nn
import torch.nn.functional as F
threads = int(sys.argv[1])
if threads > 0:
    torch.set_num_threads(threads)
torch.manual_seed(0)
print(json.dumps({"ready": True, "threads": torch.get_num_threads()}), flush=True)
cache = {}
for line in sys.stdin:
    req = json.loads(line)
    D, H, FF, layers, B, N = req["shape"]
    key = (tuple(req["shape"]), "infer" if req["mode"] == "infer-bf16" else req["mode"])
    if key not in cache:
        layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True)
        model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers else layer
        x = torch.rand(B, N, D) * 2 - 1
        target = torch.rand(B, N, D) * 2 - 1
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        cache.clear()
        cache[key] = (model, x, target, opt)
    model, x, target, opt = cache[key]
    times = []
    if req["mode"] == "infer-bf16":
        if "bf16" not in cache:
            cache["bf16"] = (copy.deepcopy(model).bfloat16().eval(), x.bfloat16())
        m16, x16 = cache["bf16"]
        with torch.no_grad():
            for it in range(req["warmup"] + req["iters"]):
                t0 = time.perf_counter()
                y = m16(x16)
                t1 = time.perf_counter()
                if it >= req["warmup"]:
                    times.append((t1 - t0) * 1e3)
    elif req["mode"] == "infer":
        model.eval()
        with torch.no_grad():
            for it in range(req["warmup"] + req["iters"]):
                t0 = time.perf_counter()
                y = model(x)
                t1 = time.perf_counter()
                if it >= req["warmup"]:
                    times.append((t1 - t0) * 1e3)
    else:
        model.train()
        for it in range(req["warmup"] + req["iters"]):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            if it >= req["warmup"]:
                times.append((t1 - t0) * 1e3)
    print(json.dumps({"ms_median": statistics.median(times)}), flush=True)
'''


class TorchWorker:
    """A PyTorch worker process in a torch_peer.Peer's environment."""

    def __init__(self, peer):
        self.peer, self.name, self.env_desc = peer, (peer.name + " " + peer.split).strip(), peer.describe()
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", WORKER, str(peer.torch_threads)], env=peer.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = json.loads(self.proc.stdout.readline())
        self.threads = hello["threads"]

    def run(self, shape, mode, iters, warmup):
        self.proc.stdin.write(json.dumps({"shape": shape, "mode": mode, "iters": iters, "warmup": warmup}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("torch worker %s died" % self.name)
        return json.loads(line)["ms_median"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def tfm_run(tfm, cfg_path, shape, mode, iters, warmup, threads):
    D, H, FF, layers, B, N = shape
    dtype = "bf16" if mode == "infer-bf16" else "f32"
    cmd = [tfm, "bench", "--config", cfg_path, "--batch", str(B), "--seq", str(N), "--mode", mode.split("-")[0],
           "--dtype", dtype, "--iters", str(iters), "--warmup", str(warmup), "--threads", str(threads), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def peak_now(peak_bin, threads):
    """The FMA peak measured right now (GFLOP/s), or None without the peak_fma binary."""
    if not peak_bin or not os.path.exists(peak_bin):
        return None
    out = subprocess.run([peak_bin, "--threads", str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["gflops"]


class Settler:
    """Waits until the machine is quiet (see the module docstring) and returns the peak it read."""

    def __init__(self, peak_bin, threads):
        self.peak_bin, self.threads, self.best = peak_bin, threads, 0.0

    def settle(self):
        p = None
        for attempt in range(10):
            p = peak_now(self.peak_bin, self.threads)
            if p is None:
                return None
            self.best = max(self.best, p)
            if p >= 0.92 * self.best:
                break
            time.sleep(0.3)
        if attempt > 0:
            print("# quiet after %d probes (%.0f GFLOP/s, best %.0f)" % (attempt + 1, p, self.best), file=sys.stderr)
        return p


def write_config(tmp, name, shape):
    D, H, FF, layers, B, N = shape
    cfg = {"module": "TransformerEncoder" if layers else "TransformerEncoderLayer", "d_model": D, "nhead": H,
           "dim_feedforward": FF, "dropout": 0.1, "activation": "relu", "batch_first": True}
    if layers:
        cfg["num_layers"] = layers
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"), help="path of the tfm executable")
    ap.add_argument("--peak-fma", default=None,
                    help="path of build/bench/peak_fma (default: bench/peak_fma beside the tfm executable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="tfm threads and PyTorch's (the most a split uses)")
    ap.add_argument("--only", default="S,M,L,M6")
    ap.add_argument("--modes", default="infer,infer-bf16,train")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    peak_bin = args.peak_fma or os.path.join(os.path.dirname(os.path.abspath(args.tfm)), "bench", "peak_fma")
    if not os.path.exists(peak_bin):
        print("# no %s: the 'peak now' columns stay empty" % peak_bin, file=sys.stderr)

    workers = [TorchWorker(torch_peer.inherited(args.threads))] + [
        TorchWorker(p) for p in torch_peer.best_candidates(args.threads)]
    for w in workers:
        print("# %s: torch threads %d, %s" % (w.name, w.threads, w.env_desc), file=sys.stderr)

    settler = Settler(peak_bin, args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            shape = list(CONFIGS[name])
            cfg = write_config(tmp, name, shape)
            for mode in args.modes.split(","):
                t_tfm, t_torch, gflop = [], [[] for _ in workers], 0.0
                rss = 0.0
                peaks = []
                for r in range(args.rounds):
                    p = settler.settle()
                    if p is not None:
                        peaks.append(p)
                    res = tfm_run(args.tfm, cfg, shape, mode, args.iters, args.warmup, args.threads)
                    t_tfm.append(res["ms_median"])
                    gflop = res["gflop_per_iter"]
                    rss = max(rss, res["peak_rss_mb"])
                    for w, t in zip(workers, t_torch):
                        settler.settle()
                        t.append(w.run(shape, mode, args.iters, args.warmup))
                m_tfm = statistics.median(t_tfm)
                m_torch = [statistics.median(t) for t in t_torch]
                best, split = torch_peer.fastest([w.peer for w in workers[1:]], m_torch[1:])
                m_env, m_best = m_torch[0], min(m_torch[1:])
                row = dict(config=name, mode=mode, gflop=gflop, tfm=m_tfm, env=m_env, best=m_best, split=best.split,
                           r_env=m_env / m_tfm, r_best=m_best / m_tfm,
                           frac=gflop / (m_tfm / 1e3) / PEAK_GFLOPS,
                           frac_best=gflop / (m_best / 1e3) / PEAK_GFLOPS, rss=rss,
                           peak=statistics.median(peaks) if peaks else None)
                rows.append(row)
                rounds = lambda ts: " ".join("%.2f" % t for t in ts)
                print("# %-3s %-10s tfm %8.2f ms [%s]  %s  best: %s  peak now [%s]" % (
                    name, mode, m_tfm, rounds(t_tfm), "  ".join(
                        "%s %.2f [%s]" % (w.name, m, rounds(t)) for w, m, t in zip(workers, m_torch, t_torch)),
                    split, " ".join("%.0f" % p for p in peaks)), file=sys.stderr)
    for w in workers:
        w.close()

    hdr = ["config", "mode", "GFLOP", "tfm ms", "torch best ms", "best split", "torch inherited ms", "best/tfm",
           "inherited/tfm", "tfm % peak", "best % peak", "tfm RSS MB", "peak now", "tfm % peak now"]
    lines = []
    for r in rows:
        lines.append([r["config"], r["mode"], "%.2f" % r["gflop"], "%.2f" % r["tfm"], "%.2f" % r["best"], r["split"],
                      "%.2f" % r["env"], "%.2f" % r["r_best"], "%.2f" % r["r_env"], "%.0f%%" % (100 * r["frac"]),
                      "%.0f%%" % (100 * r["frac_best"]), "%.0f" % r["rss"],
                      "%.0f" % r["peak"] if r["peak"] else "-",
                      "%.0f%%" % (100 * r["frac"] * PEAK_GFLOPS / r["peak"]) if r["peak"] else "-"])
    print(torch_peer.header(args.threads))
    print_table(hdr, lines, args.markdown, right=True)
    print("\npeak %.0f GFLOP/s (nominal; 'peak now': build/bench/peak_fma before each tfm run, median); medians over "
          "%d alternating rounds of %d iterations (after %d warm-up); ratios above 1: tfm faster" % (
              PEAK_GFLOPS, args.rounds, args.iters, args.warmup))


if __name__ == "__main__":
    main()
