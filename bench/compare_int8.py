#!/usr/bin/env python3
"""bench/compare_int8.py — int8 inference speed (docs/int8.md, bench/RESULTS.md), in one run, alternating.

encoder (default): configs M and M6 of bench/compare_torch.py (nn.TransformerEncoderLayer / 6-layer
nn.TransformerEncoder, d_model 512, 8 heads, FFN 2048, B 8, N 128, batch_first, ReLU), inference. Per round, each
measurement after build/bench/peak_fma reads a quiet machine (compare_torch.py's Settler):
  tfm f32, tfm bf16, tfm int8        `tfm bench --mode infer --dtype ...` (a fresh process each)
  torch f32, torch int8              long-lived /usr/bin/python3 workers, one per bench/torch_peer.py environment:
                                     "inherited" (this environment, THREADS threads) and each "best" candidate
                                     (OpenBLAS's kernel for the ISA named, passive OpenMP waiting, each thread
                                     split of torch_peer.splits); "best" is the fastest candidate per row and
                                     dtype, its split named; under torch.no_grad.
                                     int8 = torch.ao.quantization.quantize_dynamic(module, {nn.Linear}, qint8) with
                                     the build's quantized engine (printed), which quantizes only the feed-forward
                                     Linears (attention's projections are not nn.Linear modules) and runs the layers'
                                     plain forward (the fused fast path cannot take quantized Linears).
Each measurement is the median of ITERS iterations after WARMUP; the table shows the median over ROUNDS, and the
ratios against PyTorch are against "best" (inherited in its own columns).

generate: `tfm generate` tokens/s at batch 1 on a decoder of GPT-2 small's shape (12 layers, d_model 768, 12 heads,
FFN 3072, vocabulary 50257, context 1024, tied output head; weights from its initialisation plus one training step
on a text holding every token once: a character vocabulary of 50257 entries, made in WORK). tokens/s =
(N2 − N1) / (t(N2) − t(N1)) over two greedy generations of N1 and N2 new tokens after a 16-character prompt, so the
load and the packing of the weights cancel. f32, bf16 and int8 alternate within each round.

Usage:  python3 bench/compare_int8.py [--tfm build/tfm] [--rounds 3] [--iters 10] [--only M,M6] [--markdown]
        python3 bench/compare_int8.py --generate WORK [--rounds 3] [--n1 16 --n2 144]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_peer  # noqa: E402
from tables import print_table  # noqa: E402
from compare_torch import CONFIGS, Settler, write_config  # noqa: E402

WORKER = r'''
import copy, json, sys, time, statistics
import torch
import torch.nn as nn
threads = int(sys.argv[1])
torch.set_num_threads(threads)  # the peer's torch threads
torch.manual_seed(0)
print(json.dumps({"ready": True, "threads": torch.get_num_threads(), "engine": torch.backends.quantized.engine}),
      flush=True)
cache = {}
for line in sys.stdin:
    req = json.loads(line)
    D, H, FF, layers, B, N = req["shape"]
    key = tuple(req["shape"])
    if key not in cache:
        cache.clear()
        layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True)
        model = (nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers else layer).eval()
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8).eval()
        for m in q.modules():
            if isinstance(m, nn.TransformerEncoderLayer):
                m.activation_relu_or_gelu = False  # no fast path: it cannot take quantized Linears
        cache[key] = {"f32": model, "int8": q, "x": torch.rand(B, N, D) * 2 - 1}
    c = cache[key]
    model, x = c[req["mode"]], c["x"]
    times = []
    with torch.no_grad():
        for it in range(req["warmup"] + req["iters"]):
            t0 = time.perf_counter()
            y = model(x)
            t1 = time.perf_counter()
            if it >= req["warmup"]:
                times.append((t1 - t0) * 1e3)
    print(json.dumps({"ms_median": statistics.median(times)}), flush=True)
'''


def tfm_bench(tfm, cfg, shape, dtype, iters, warmup, threads):
    D, H, FF, layers, B, N = shape
    out = subprocess.run([tfm, "bench", "--config", cfg, "--batch", str(B), "--seq", str(N), "--mode", "infer",
                          "--dtype", dtype, "--iters", str(iters), "--warmup", str(warmup), "--threads", str(threads),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ms_median"]


class Worker:
    """The PyTorch worker (WORKER) in a torch_peer.Peer's environment."""

    def __init__(self, peer):
        self.peer = peer
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", WORKER, str(peer.torch_threads)], env=peer.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = json.loads(self.proc.stdout.readline())

    def run(self, shape, mode, iters, warmup):
        self.proc.stdin.write(json.dumps({"shape": shape, "mode": mode, "iters": iters, "warmup": warmup}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["ms_median"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def encoder(args, settler):
    workers = [Worker(torch_peer.inherited(args.threads))] + [Worker(p) for p in torch_peer.best_candidates(args.threads)]
    engine = workers[0].hello["engine"]
    print("# torch: quantized engine %s; %s" % (engine, "; ".join(
        "%s %s: %s" % (w.peer.name, w.peer.split, w.peer.describe()) for w in workers)), file=sys.stderr)

    runs = ["tfm f32", "tfm bf16", "tfm int8", "torch f32", "torch int8"]
    tfm_runs, torch_runs = runs[:3], runs[3:]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            shape = list(CONFIGS[name])
            cfg = write_config(tmp, name, shape)
            t = {r: [] for r in tfm_runs}
            tt = {(r, k): [] for r in torch_runs for k in range(len(workers))}
            for _ in range(args.rounds):
                for r in tfm_runs:
                    settler.settle()
                    t[r].append(tfm_bench(args.tfm, cfg, shape, r.split()[1], args.iters, args.warmup, args.threads))
                for r in torch_runs:
                    for k, w in enumerate(workers):
                        settler.settle()
                        tt[(r, k)].append(w.run(shape, r.split()[1], args.iters, args.warmup))
            m = {r: statistics.median(v) for r, v in t.items()}
            splits = {}
            for r in torch_runs:
                med = [statistics.median(tt[(r, k)]) for k in range(len(workers))]
                best, _ = torch_peer.fastest([w.peer for w in workers[1:]], med[1:])
                m[r], m[r + " inherited"], splits[r] = min(med[1:]), med[0], best.split
            print("# %s " % name + "  ".join("%s %s" % (r, " ".join("%.2f" % x for x in t[r])) for r in tfm_runs) +
                  "  " + "  ".join("%s %s %s" % (r, w.peer.name + " " + w.peer.split, " ".join(
                      "%.2f" % x for x in tt[(r, k)])) for r in torch_runs for k, w in enumerate(workers)),
                  file=sys.stderr)
            rows.append([name] + ["%.2f" % m[r] for r in runs] +
                        ["%.2f" % m[r + " inherited"] for r in torch_runs] +
                        ["%s / %s" % (splits["torch f32"], splits["torch int8"]),
                         "%.2f" % (m["tfm f32"] / m["tfm int8"]), "%.2f" % (m["tfm bf16"] / m["tfm int8"]),
                         "%.2f" % (m["torch int8"] / m["tfm int8"]), "%.2f" % (m["torch f32"] / m["torch int8"])])
    for w in workers:
        w.close()
    print(torch_peer.header(args.threads) + "\n")
    print_table(["config"] + [r + (" best ms" if r.startswith("torch") else " ms") for r in runs] +
          [r + " inherited ms" for r in torch_runs] + ["best split (f32 / int8)", "tfm f32 / int8", "tfm bf16 / int8", "torch best int8 / tfm int8", "torch best f32 / int8"], rows, args.markdown)
    print("\nmedians over %d alternating rounds of %d iterations (after %d warm-up); torch: quantized engine %s, "
          "dynamic int8 of the feed-forward Linears only" % (args.rounds, args.iters, args.warmup, engine))


def make_gpt2_dir(tfm, work, threads):
    """A decoder of GPT-2 small's shape, WORK/gpt2 (see the module docstring)."""
    d = os.path.join(work, "gpt2")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return d
    os.makedirs(work, exist_ok=True)
    text = os.path.join(work, "gpt2_text.txt")
    specials = 4  # <pad> <bos> <eos> <unk> of a character vocabulary; checked below
    chars = []
    cp = 0x0A00  # printable code points from U+0A00 on (surrogates and unassigned ones skipped)
    while len(chars) < 50257 - specials:
        if not (0xD800 <= cp <= 0xDFFF) and chr(cp).isprintable():
            chars.append(chr(cp))
        cp += 1
    with open(text, "w", encoding="utf-8") as f:
        f.write("".join(chars))
    subprocess.run([tfm, "train", "--arch", "decoder", "--tokens", "char", "--text", text, "--d-model", "768",
                    "--nhead", "12", "--layers", "12", "--dim-feedforward", "3072", "--block-size", "1024",
                    "--batch-size", "1", "--max-steps", "1", "--eval-every", "1000000", "--threads", str(threads),
                    "--out", d, "--force"], check=True, capture_output=True, text=True)
    with open(os.path.join(d, "config.json")) as f:
        v = json.load(f)["model"]["tgt_vocab_size"]
    if v != 50257:
        raise SystemExit("made a vocabulary of %d, not 50257: adjust `specials`" % v)
    return d


def generate(args, settler):
    d = make_gpt2_dir(args.tfm, os.path.abspath(args.generate), args.threads)
    prompt = "".join(chr(0x4E00 + i) for i in range(16))

    def timed(dtype, n):
        t0 = time.perf_counter()
        subprocess.run([args.tfm, "generate", "--model", d, "--prompt", prompt, "--max-new-tokens", str(n),
                        "--temperature", "0", "--dtype", dtype, "--threads", str(args.threads)], check=True,
                       capture_output=True)
        return time.perf_counter() - t0

    dtypes = ["f32", "bf16", "int8"]
    tps = {x: [] for x in dtypes}
    for _ in range(args.rounds):
        for x in dtypes:
            settler.settle()
            t1 = timed(x, args.n1)
            settler.settle()
            t2 = timed(x, args.n2)
            tps[x].append((args.n2 - args.n1) / (t2 - t1))
    m = {x: statistics.median(v) for x, v in tps.items()}
    print("# " + "  ".join("%s %s" % (x, " ".join("%.1f" % t for t in tps[x])) for x in dtypes), file=sys.stderr)
    print_table(["dtype", "tokens/s", "vs f32"], [[x, "%.1f" % m[x], "%.2f" % (m[x] / m["f32"])] for x in dtypes],
          args.markdown)
    print("\ntfm generate, GPT-2 small's shape (124M parameters, the output head tied to the 50257-token embedding), batch 1, greedy; tokens/s = "
          "(%d − %d) / (t(%d) − t(%d)), medians over %d alternating rounds, %d threads" %
          (args.n2, args.n1, args.n2, args.n1, args.rounds, args.threads))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"))
    ap.add_argument("--peak-fma", default=None, help="build/bench/peak_fma (default: beside the tfm executable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="M,M6")
    ap.add_argument("--generate", metavar="WORK", help="the GPT-2-shape generation benchmark, its model in WORK")
    ap.add_argument("--n1", type=int, default=16)
    ap.add_argument("--n2", type=int, default=144)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    args.tfm = os.path.abspath(args.tfm)
    peak = args.peak_fma or os.path.join(os.path.dirname(args.tfm), "bench", "peak_fma")
    print("CPU: %s (%s)\n" % (torch_peer.cpu_name(), torch_peer.isa()))
    settler = Settler(peak if os.path.exists(peak) else None, args.threads)
    generate(args, settler) if args.generate else encoder(args, settler)


if __name__ == "__main__":
    main()
