#!/usr/bin/env python3
"""bench/gpt2_generate.py — generation with a decoder of GPT-2 small's shape: tfm against PyTorch 1.13 running the
GPT-2 twin (tools/torch_models.py) with a key/value cache written the plain way, alternating in one run.

The model: 12 layers, d_model 768, 12 heads, FFN 3072, 1024 positions, vocabulary 50257 (random weights, the
synthetic GPT-2-format tokenizer of tools/torch_models.py), made once in --work and imported with `tfm import gpt2`.
A prompt of exactly --prompt-tokens tokens (512), batch 1, greedy (the argmax: no sampling cost on either side).
Each round measures, one after the other:
  tfm f32 / bf16   through the Python package (the library tfm generate runs):
                     prefill   generate(prompt, max_new_tokens=1): the prompt in one causal pass, and the first
                               token from its last logits
                     decode    generate(prompt, max_new_tokens=1+N) minus the prefill: N tokens, one model call each
                               (the cache grows from 512 positions)
                     loop      the same prefill with prefill=False: the prompt fed one position per call, as tfm did
                               before the one-pass prefill
  torch f32        a worker process per environment (bench/torch_peer.py: "inherited", and one per thread split of
                   "best", the fastest split's median taken for each measure): the twin under
                   torch.inference_mode(); prefill = one forward of the prompt storing each layer's keys and values,
                   logits of the last position only; decode = per token, the new token's q/k/v, torch.cat onto the
                   cache, attention over it, the last logits, argmax.
Tables show medians over rounds and ratios (above 1: tfm faster). Generation at batch 1 reads every weight once per
token: "GB/s" is (parameter bytes read per token) × tokens/s, against the read bandwidth measured in the same run
(torch.sum over 1 GiB of float32 with the same thread count) — how close decoding comes to the memory's limit.

Usage:  PYTHONPATH=build/python /usr/bin/python3 bench/gpt2_generate.py [--rounds 3] [--new-tokens 64]
        [--threads 2] [--work /tmp/tfm_gpt2_small] [--markdown]
A benchmark, not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import torch_peer  # noqa: E402

LAYERS, HEADS, D, VOCAB, POSITIONS = 12, 12, 768, 50257, 1024

WORKER = r'''
import json, math, sys, time
import torch
sys.path.insert(0, sys.argv[1])
import torch_models
torch.set_num_threads(int(sys.argv[3]))
model, g = torch_models.load_gpt2(sys.argv[2], torch.float32)
D, H = g["n_embd"], g["n_head"]
Dh = D // H

def heads(t):  # (1, T, D) -> (1, H, T, Dh)
    return t.view(1, t.size(1), H, Dh).transpose(1, 2)

def block(blk, x, cache, prefill):
    h = blk.ln_1(x)
    q, k, v = blk.attn.c_attn(h).split(D, dim=2)
    q, k, v = heads(q), heads(k), heads(v)
    if prefill:
        cache.extend([k, v])
    else:
        cache[0] = torch.cat([cache[0], k], dim=2)
        cache[1] = torch.cat([cache[1], v], dim=2)
        k, v = cache
    s = (q @ k.transpose(-2, -1)) / math.sqrt(Dh)
    if prefill:
        T = x.size(1)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, x.size(1), D)
    x = x + blk.attn.c_proj(y)
    return x + blk.mlp.c_proj(blk.act(blk.mlp.c_fc(blk.ln_2(x))))

@torch.inference_mode()
def generate(ids, new):
    t0 = time.perf_counter()
    T = len(ids)
    x = model.wte(torch.tensor([ids])) + model.wpe(torch.arange(T))[None]
    caches = []
    for blk in model.h:
        c = []
        x = block(blk, x, c, True)
        caches.append(c)
    tok = int((model.ln_f(x[:, -1]) @ model.wte.weight.t()).argmax())
    t1 = time.perf_counter()
    for i in range(new - 1):
        x = model.wte(torch.tensor([[tok]])) + model.wpe(torch.tensor([T + i]))[None]
        for blk, c in zip(model.h, caches):
            x = block(blk, x, c, False)
        tok = int((model.ln_f(x[:, -1]) @ model.wte.weight.t()).argmax())
    return t1 - t0, time.perf_counter() - t1

def bandwidth():
    x = torch.ones(256 * 1024 * 1024)
    x.sum()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter(); x.sum(); best = min(best, time.perf_counter() - t0)
    return x.numel() * 4 / best / 1e9

print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    r = json.loads(line)
    if r.get("bandwidth"):
        print(json.dumps({"gbps": bandwidth()}), flush=True)
        continue
    pre, dec = generate(r["ids"], r["new"])
    print(json.dumps({"prefill": pre, "decode": dec}), flush=True)
'''


class Worker:
    def __init__(self, name, env, hf, threads):
        self.name, self.env_desc = name, torch_peer.describe(env)
        self.p = subprocess.Popen(["/usr/bin/python3", "-c", WORKER, os.path.join(ROOT, "tools"), hf, str(threads)],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        json.loads(self.p.stdout.readline())

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"torch worker {self.name} died")
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def make_model(work, tfm_cli):
    hf, mdir = os.path.join(work, "hf"), os.path.join(work, "tfm")
    if not os.path.exists(os.path.join(mdir, "model.safetensors")):
        import torch_models
        print(f"# making GPT-2 small's shape in {hf} and importing it into {mdir}", file=sys.stderr, flush=True)
        torch_models.make_gpt2(hf, LAYERS, HEADS, D, VOCAB, POSITIONS, seed=0, prefixed=False)
        subprocess.run([tfm_cli, "import", "gpt2", hf, "--out", mdir, "--force"], check=True)
    return hf, mdir


def exact_prompt(m, n):
    """A text whose encoding has exactly n tokens."""
    import random
    rnd = random.Random(0)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9))) for _ in range(4 * n)]
    text = " ".join(words)
    while True:
        k = len(m.encode(text))
        if k == n:
            return text
        text = text[: max(1, len(text) - max(1, (k - n) // 2))] if k > n else text + " ab"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/tfm_gpt2_small")
    ap.add_argument("--tfm", default=os.path.join(ROOT, "build", "tfm"))
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    import tfm
    tfm.set_num_threads(a.threads)
    hf, mdir = make_model(a.work, a.tfm)
    models = {"f32": tfm.load(mdir, dtype="f32"), "bf16": tfm.load(mdir, dtype="bf16")}
    prompt = exact_prompt(models["f32"], a.prompt_tokens)
    ids = models["f32"].encode(prompt)
    # "best": a worker per thread split of torch_peer.splits, the fastest one's median taken for each measure.
    candidates = torch_peer.best_candidates(a.threads)
    workers = [Worker(p.split, p.env, hf, p.torch_threads) for p in candidates]  # named "torch T × OpenBLAS B"
    workers.append(Worker("torch inherited", torch_peer.inherited_env(a.threads), hf, a.threads))
    N = a.new_tokens
    res = {k: [] for k in ["f32 prefill", "f32 decode", "f32 loop", "bf16 prefill", "bf16 decode"] +
           [f"{w.name} {m}" for w in workers for m in ("prefill", "decode")]}
    gbps = []

    def gen(m, new, prefill=True):
        t0 = time.perf_counter()
        m.generate(prompt, max_new_tokens=new, temperature=0, ignore_eos=True, prefill=prefill)
        return time.perf_counter() - t0

    for dt in ("f32", "bf16"):  # warm up: weights packed, pages touched
        gen(models[dt], 2)
    for w in workers:
        w.ask({"ids": ids[:16], "new": 2})
    for r in range(a.rounds):
        for dt in ("f32", "bf16"):
            pre = gen(models[dt], 1)
            total = gen(models[dt], 1 + N)
            res[f"{dt} prefill"].append(pre)
            res[f"{dt} decode"].append(N / (total - pre))
        res["f32 loop"].append(gen(models["f32"], 1, prefill=False))
        for w in workers:
            t = w.ask({"ids": ids, "new": 1 + N})
            res[f"{w.name} prefill"].append(t["prefill"])
            res[f"{w.name} decode"].append(N / t["decode"])
        gbps.append(workers[0].ask({"bandwidth": True})["gbps"])
        print(f"# round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in res.items()), file=sys.stderr, flush=True)
    for w in workers:
        w.close()
    med = {k: statistics.median(v) for k, v in res.items()}
    best = workers[:-1]
    fast_pre = min(best, key=lambda w: med[f"{w.name} prefill"])
    fast_dec = max(best, key=lambda w: med[f"{w.name} decode"])
    med["torch best prefill"], med["torch best decode"] = med[f"{fast_pre.name} prefill"], med[f"{fast_dec.name} decode"]
    bw = statistics.median(gbps)
    # Bytes of weights read per generated token: every layer matrix and vector, the tied head (V × D), one
    # position row; f32 4 bytes, bf16 2 for the Linear weights (the head included) and 4 for the rest.
    layer_mats = LAYERS * (4 * D * D + 2 * 4 * D * D)
    head = VOCAB * D
    small = LAYERS * (4 * D + 4 * D + 4 * D + D + 2 * 2 * D) + 2 * D + D
    bytes_f32 = 4 * (layer_mats + head + small)
    bytes_bf16 = 2 * (layer_mats + head) + 4 * small
    rows = [
        ["prefill %d (s)" % a.prompt_tokens, "%.3f" % med["f32 prefill"], "%.3f" % med["bf16 prefill"], "%.3f" % med["torch best prefill"],
         "%.3f" % med["torch inherited prefill"],
         "%.2f× (bf16 %.2f×)" % (med["torch best prefill"] / med["f32 prefill"], med["torch best prefill"] / med["bf16 prefill"]),
         "one-position loop %.3f s: %.1f× slower than the prefill" % (med["f32 loop"], med["f32 loop"] / med["f32 prefill"])],
        ["decode (tok/s)", "%.1f" % med["f32 decode"], "%.1f" % med["bf16 decode"], "%.1f" % med["torch best decode"],
         "%.1f" % med["torch inherited decode"],
         "%.2f× (bf16 %.2f×)" % (med["f32 decode"] / med["torch best decode"], med["bf16 decode"] / med["torch best decode"]),
         "bf16/f32 %.2f×; weights read: f32 %.1f GB/s, bf16 %.1f GB/s, torch %.1f GB/s of %.1f GB/s measured" % (
             med["bf16 decode"] / med["f32 decode"], bytes_f32 * med["f32 decode"] / 1e9,
             bytes_bf16 * med["bf16 decode"] / 1e9, bytes_f32 * med["torch best decode"] / 1e9, bw)],
    ]
    hdr = ["measure", "tfm f32", "tfm bf16", "torch best", "torch inherited", "tfm / torch best", "notes"]
    print("%s (%s), %d threads, GPT-2 small's shape (12 × 768, vocab 50257), batch 1, prompt %d tokens, %d new tokens, "
          "greedy; median of %d alternating rounds; torch %s: best = the fastest split (prefill: %s, decode: %s) of %s; "
          "inherited = %s" % (
              torch_peer.cpu_name(), torch_peer.isa(), a.threads, a.prompt_tokens, N, a.rounds,
              __import__("torch").__version__, fast_pre.name, fast_dec.name,
              "; ".join(w.name + ": " + w.env_desc for w in best), workers[-1].env_desc))
    if a.markdown:
        print("| " + " | ".join(hdr) + " |\n|" + "---|" * len(hdr))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in [hdr] + rows:
            print("  ".join("%-18s" % c for c in r))


if __name__ == "__main__":
    main()
