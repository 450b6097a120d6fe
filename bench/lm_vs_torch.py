#!/usr/bin/env python3
"""lm_vs_torch.py — a character-level language model trained by tfm and by PyTorch 1.13 for the same wall
time, and generation speed with tfm's key/value cache against PyTorch's uncached loop.

    /usr/bin/python3 bench/lm_vs_torch.py --tfm build/tfm [--seconds 30] [--rounds 3] [--part both|train|generate]
                     [--calibrate-seconds 6]

(about 8 minutes with the defaults: the calibration, 3 rounds of 3 training runs of 30 s plus evaluations, then
generation).

Data: Vim's documentation (Debian's vim-runtime), as the README's "Language models" section:
train = every /usr/share/vim/vim90/doc/*.txt but the user manual, valid = usr_0*.txt (--train-text and
--valid-text give other files).

Training (--part train): `tfm train --preset nanogpt-baby` (4 layers, 4 heads, d_model 128, FFN 512, block 64,
batch 12, no biases, pre-norm GELU, learned positions, tied embeddings, AdamW lr 1e-3 warmup 100 then cosine to
1e-4 over --max-steps 2000 steps, beta2 0.99, weight decay 0.1 on matrices, clip 1.0, dropout 0) with
--time-budget SECONDS --threads 2 and no evaluation during the run, against the same training written as a
PyTorch user would (nanoGPT's train.py loop): tools/torch_models.py's twin of the decoder (built from the
config.json tfm wrote, GPT-2 initialisation), the same character vocabulary and token ids (rebuilt here as tfm
builds it and checked against tfm's tgt_vocab.json), batches of 12 windows of 65 tokens at uniformly random
positions of the same training text (torch.randint, as nanoGPT's get_batch; tfm draws from its own generator),
torch.optim.AdamW with the same parameter groups and hyper-parameters, the same learning rate at every step,
clip_grad_norm_(1.0), torch.set_num_threads(2), float32.
Equal wall time: both clocks start before the training text is read (tfm's --time-budget counts its data
loading) and stop after the first step that ends past SECONDS. Tokens/s = trained tokens / that time (for tfm,
SECONDS·(steps+1)/steps: the last step's overshoot is bounded by one step, counted in full against tfm).
tfm's --time-budget plans its run to end well, its evaluations included: it evaluates once when it fits its
step count and once at the end, inside the budget. PyTorch's loop evaluates only after its clock stops, so
tfm's timed run validates on the first 2 kB of the validation text (two evaluations of about 30 ms, where
the whole text's would take about 3 s each of the 30) and both are scored on the whole text afterwards.
Validation loss after the run, the same way on both sides: the validation text cut into consecutive windows
of 64 tokens (the last, shorter window counts too), mean loss per predicted token; for tfm
`tfm eval --model DIR --text VALID --json --threads 2`, for PyTorch the same windows through the twin with the
log-sum-exp in float64. Bits per character = total bits / (code points − 1). Once, the script also loads
tfm's trained weights into the twin and scores them with the PyTorch evaluation, so both evaluations are
checked to be the same measurement (they agree to float32 rounding).
Rounds alternate tfm, PyTorch best, PyTorch inherited; medians are printed, the headline ratio against "best".
Every PyTorch run is a fresh /usr/bin/python3 process in a bench/torch_peer.py environment: "inherited" (this
environment, torch.set_num_threads(THREADS)) and "best" (OpenBLAS's kernel for the ISA named, passive OpenMP
waiting, and the thread split of torch_peer.splits whose training ran fastest in a calibration run of
--calibrate-seconds per split before the rounds: steps/s after the setup, on the same model and text).

Generation (--part generate): a model of the same shape with block size 256 (tfm train --preset nanogpt-baby
--block-size 256 --max-steps 1: the speed does not depend on the weights), batch 1, greedy. tfm:
`tfm generate --temperature 0 --threads 2` from a 16-character prompt, timed for --max-new-tokens 48 and 240
(context reaching 64 and 256 = block, no sliding), --num-samples 10 (each sample restarts from the prompt, so
the ten are the same measurement repeated); tokens/s = 10·192 / (t240 − t48), which removes process start,
model loading and the prompt. PyTorch: the twin with tfm's weights and nanoGPT's generate loop (the whole
forward on the growing context for every new token, argmax of the last row), timed the same way inside its
process (so without its start either).
The greedy continuations are compared too (the same weights give the same tokens up to float32 ties).

Prints markdown tables. Benchmarks only: not part of `make test`.
"""
import argparse
import collections
import glob
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import torch_models as tm  # noqa: E402
import torch_peer  # noqa: E402

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
UNK = 3


# ---- data -------------------------------------------------------------------------------------------------------------

def vim_texts(tmp):
    docs = sorted(glob.glob("/usr/share/vim/vim90/doc/*.txt"))
    if not docs:
        sys.exit("no /usr/share/vim/vim90/doc/*.txt: apt-get install vim-runtime, or give --train-text/--valid-text")
    train, valid = os.path.join(tmp, "train.txt"), os.path.join(tmp, "valid.txt")
    with open(train, "wb") as out:  # as `ls doc/*.txt | grep -v /usr_ | xargs cat` (ls sorts in the C locale here)
        for p in sorted(d for d in docs if "/usr_" not in d):
            with open(p, "rb") as f:
                out.write(f.read())
    with open(valid, "wb") as out:
        for p in sorted(d for d in docs if os.path.basename(d).startswith("usr_0")):
            with open(p, "rb") as f:
                out.write(f.read())
    return train, valid


def build_vocab(text):
    """tfm's char vocabulary (data::build_text_vocab): the specials, then every code point by decreasing count,
    ties in byte order (UTF-8 byte order is code point order)."""
    counts = collections.Counter(text)
    return SPECIALS + sorted(counts, key=lambda ch: (-counts[ch], ord(ch)))


def encode(text, vocab):
    """Code points → ids (unknown → <unk>), vectorised: a lookup table indexed by code point."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    table = np.full(max(int(cps.max()) + 1, max(ord(c) for c in vocab[4:]) + 1), UNK, dtype=np.int64)
    for i, ch in enumerate(vocab[4:], start=4):
        table[ord(ch)] = i
    return torch.from_numpy(table[cps])


# ---- PyTorch side -----------------------------------------------------------------------------------------------------

def lr_at(step, base, warmup, total, min_lr):
    """tfm's scheduled_lr (src/train/schedule.cc) for the cosine schedule; step is 1-based."""
    if step <= warmup:
        return base * step / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def torch_eval(model, ids, block, batch=64):
    """Mean loss per predicted token over consecutive windows of `block` (the last, shorter one included), and the
    number of predicted tokens; tfm's evaluate_text."""
    model.eval()
    n = ids.numel()
    full = (n - 1) // block
    nll, count = 0.0, 0
    with torch.no_grad():
        for k in range(0, full, batch):
            rows = range(k, min(k + batch, full))
            x = torch.stack([ids[r * block:(r + 1) * block] for r in rows])
            y = torch.stack([ids[r * block + 1:(r + 1) * block + 1] for r in rows])
            logits = model(x)
            nll += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(), y.reshape(-1), reduction="sum"))
            count += y.numel()
        rest = (n - 1) % block
        if rest:
            x, y = ids[full * block:full * block + rest][None], ids[full * block + 1:][None]
            logits = model(x)
            nll += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(), y.reshape(-1), reduction="sum"))
            count += y.numel()
    model.train()
    return nll / count, count


def run_torch(train_path, valid_path, model_dir, seconds, max_steps, seed):
    """nanoGPT's training loop on the twin of model_dir's config for `seconds`. Returns a result dict."""
    tc = json.load(open(os.path.join(model_dir, "config.json")))["train"]
    cfg = tm.read_model_config(model_dir)
    block, B = int(tc["block_size"]), int(tc["batch_size"])
    lr, min_lr, warmup = float(tc["lr"]), float(tc["min_lr"]), int(tc["warmup"])
    torch.manual_seed(seed)
    t0 = time.perf_counter()  # the clock starts before the text is read, as tfm's --time-budget
    with open(train_path, encoding="utf-8") as f:
        text = f.read()
    vocab = build_vocab(text)
    data = encode(text, vocab)
    del text
    if len(vocab) != cfg["tgt_vocab_size"]:
        raise RuntimeError(f"vocabulary of {len(vocab)} tokens, tfm's config says {cfg['tgt_vocab_size']}")
    model = tm.Model(cfg).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]  # the tied matrix once
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(tc["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(float(tc["beta1"]), float(tc["beta2"])))
    clip = float(tc["clip_norm"])
    n = data.numel()
    t_setup = time.perf_counter() - t0
    step = 0
    while step < max_steps:
        ix = torch.randint(n - block, (B,))
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        step += 1
        for g in opt.param_groups:
            g["lr"] = lr_at(step, lr, warmup, max_steps, min_lr)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if time.perf_counter() - t0 >= seconds:
            break
    elapsed = time.perf_counter() - t0
    with open(valid_path, encoding="utf-8") as f:
        vtext = f.read()
    vloss, count = torch_eval(model, encode(vtext, vocab), block)
    return {"steps": step, "tokens": step * B * block, "seconds": elapsed, "setup": t_setup,
            "tok_s": step * B * block / elapsed, "loss": vloss,
            "bpc": vloss * count / math.log(2) / (len(vtext) - 1), "vocab": vocab}


# ---- tfm side ---------------------------------------------------------------------------------------------------------

def short_text(valid_path, tmp):
    """The first 2 kB of the validation text: what the timed training runs validate on (see the docstring)."""
    path = os.path.join(tmp, "short_valid.txt")
    with open(valid_path, encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
        out.write(f.read(2048))
    return path


def run_tfm(tfm, train_path, valid_path, out, seconds, max_steps, threads, seed, train_valid=None):
    """Trains for `seconds` validating on train_valid (default valid_path), then `tfm eval` on valid_path."""
    cmd = [tfm, "train", "--preset", "nanogpt-baby", "--text", train_path, "--valid-text", train_valid or valid_path,
           "--time-budget", str(seconds), "--max-steps", str(max_steps), "--eval-every", "100000000",
           "--threads", str(threads), "--seed", str(seed), "--out", out]
    # cwd: tfm train without --token-cache leaves a ".valid" token file in its working directory (fixed on branch spm)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=os.path.dirname(out))
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    steps = int(rows[-1][rows[0].index("step")])
    tc = json.load(open(os.path.join(out, "config.json")))["train"]
    B, block = int(tc["batch_size"]), int(tc["block_size"])
    wall = seconds * (steps + 1) / steps if steps < max_steps else float(rows[-1][rows[0].index("elapsed_seconds")])
    ev = subprocess.run([tfm, "eval", "--model", out, "--text", valid_path, "--json", "--threads", str(threads)],
                        check=True, capture_output=True, text=True)
    j = json.loads(ev.stdout.strip().splitlines()[-1])
    return {"steps": steps, "tokens": steps * B * block, "seconds": wall, "tok_s": steps * B * block / wall,
            "loss": j["loss"], "bpc": j["bits_per_char"], "cmd": " ".join(cmd)}


# ---- generation -------------------------------------------------------------------------------------------------------

def torch_generate(model, idx, n, block):
    """nanoGPT's generate, greedy: the whole forward on the (cropped) context for every new token."""
    with torch.no_grad():
        for _ in range(n):
            logits = model(idx[:, -block:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


def torch_generate_timed(model_dir, prompt, counts):
    """For each count n: (seconds of torch_generate for n tokens from the prompt, the prompt and its continuation)."""
    model, cfg = tm.load_tfm_model(model_dir)
    vocab = json.load(open(os.path.join(model_dir, "tgt_vocab.json")))
    pids = encode(prompt, vocab)[None]
    out = []
    for n in counts:
        t0 = time.perf_counter()
        ids = torch_generate(model, pids, n, cfg["max_len"])
        out.append((time.perf_counter() - t0, "".join(vocab[i] for i in ids[0].tolist())))
    return out


def bench_generate(args, train_path, valid_path, tmp):
    gdir = os.path.join(tmp, "gen_model")
    small_valid = os.path.join(tmp, "gen_valid.txt")
    with open(valid_path, encoding="utf-8") as f:
        vtext = f.read()
    with open(small_valid, "w", encoding="utf-8") as f:
        f.write(vtext[:4096])
    subprocess.run([args.tfm, "train", "--preset", "nanogpt-baby", "--block-size", "256", "--max-steps", "1",
                    "--text", train_path, "--valid-text", small_valid, "--threads", str(args.threads), "--out", gdir],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    block = tm.read_model_config(gdir)["max_len"]
    prompt = vtext[:16]
    n1, n2 = 64 - len(prompt), block - len(prompt)  # contexts reach 64 and 256
    samples = 10  # tfm: ten greedy samples a run, so the timed difference is long enough to measure

    def tfm_time(n):
        cmd = [args.tfm, "generate", "--model", gdir, "--prompt", prompt, "--max-new-tokens", str(n),
               "--temperature", "0", "--num-samples", str(samples), "--threads", str(args.threads)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t0, r.stdout.decode("utf-8").split("\n---\n")[0], cmd

    rows = []  # per round: [tfm tok/s, then each PyTorch peer's]
    for r in range(args.rounds):
        a1, _, _ = tfm_time(n1)
        a2, tfm_text, cmd = tfm_time(n2)
        row = [samples * (n2 - n1) / (a2 - a1)]
        for peer in args.peers:
            (b1, _), (b2, torch_text) = torch_in_worker(peer, "generate", [gdir, prompt, [n1, n2]])
            row.append((n2 - n1) / (b2 - b1))
        rows.append(row)
        print(f"  generate round {r + 1}: tfm {row[0]:,.0f} tok/s, PyTorch " +
              ", ".join(f"{x:,.0f}" for x in row[1:]) + " tok/s", flush=True)
    prefix = next((i for i, (a, b) in enumerate(zip(tfm_text, torch_text)) if a != b), min(len(tfm_text), len(torch_text)))
    med = [statistics.median(row[i] for row in rows) for i in range(len(rows[0]))]
    print()
    print(f"Generation, batch 1, greedy, block 256, contexts 64→{block} ({n2 - n1} tokens timed as the difference of "
          f"--max-new-tokens {n2} and {n1}; tfm: {samples} samples a run); {torch_peer.header(args.threads)}; "
          f"best split {args.peers[0].split}; medians of {args.rounds} rounds:")
    print()
    print("| | tokens/s | tfm / this |")
    print("|---|---|---|")
    print(f"| tfm generate (KV cache) | {med[0]:,.0f} | |")
    for peer, m in zip(args.peers, med[1:]):
        print(f"| PyTorch, uncached nanoGPT loop, {peer.name} | {m:,.0f} | {med[0] / m:.1f} |")
    print()
    print("per round: " + "; ".join(", ".join(f"{x:,.0f}" for x in row) for row in rows))
    print(f"tfm command: {shlex.join(cmd)}")
    print(f"greedy continuations (prompt included) identical for the first {prefix} of {len(tfm_text)} characters")


def torch_in_worker(peer, job, run_args):
    """run_torch or torch_generate_timed in a fresh /usr/bin/python3 process in the peer's environment (its own
    OpenMP and OpenBLAS thread pools: no thread of an earlier run is alive and each run starts alike)."""
    r = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                        json.dumps({"threads": peer.torch_threads, "job": job, "args": run_args})],
                       check=True, capture_output=True, text=True, env=peer.env)
    return json.loads(r.stdout.strip().splitlines()[-1])


def calibrate(args, train_path, cvalid, tmp):
    """The fastest "best" candidate: each trains the preset for --calibrate-seconds (validated on the short text
    cvalid); returns it and a note with every split's steps/s."""
    cdir = os.path.join(tmp, "calibrate")
    run_tfm(args.tfm, train_path, cvalid, cdir, 1e9, 1, args.threads, 0)
    cands = torch_peer.best_candidates(args.threads)
    rates = []
    for p in cands:
        r = torch_in_worker(p, "train", [train_path, cvalid, cdir, args.calibrate_seconds, args.max_steps, 0])
        rates.append(r["steps"] / (r["seconds"] - r["setup"]))
    best, note = torch_peer.fastest(cands, [-x for x in rates])
    return best, note + " (negated steps/s)"


# ---- main -------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tfm", default=os.path.join(HERE, "..", "build", "tfm"))
    ap.add_argument("--seconds", type=float, default=30.0, help="wall time of each training run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=2000, help="the cosine schedule's length (the preset's)")
    ap.add_argument("--part", choices=["both", "train", "generate"], default="both")
    ap.add_argument("--train-text")
    ap.add_argument("--valid-text")
    ap.add_argument("--keep", help="keep the tfm model directories under this directory")
    ap.add_argument("--calibrate-seconds", type=float, default=6.0,
                    help="training time of each thread split's calibration run (PyTorch best)")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        w = json.loads(args.torch_worker)
        torch.set_num_threads(w["threads"])
        print(json.dumps((run_torch if w["job"] == "train" else torch_generate_timed)(*w["args"])))
        return
    torch.set_num_threads(args.threads)
    tmp_obj = tempfile.TemporaryDirectory()
    tmp = os.path.abspath(args.keep or tmp_obj.name)
    os.makedirs(tmp, exist_ok=True)
    args.tfm = os.path.abspath(args.tfm)
    if args.train_text and args.valid_text:
        train_path, valid_path = os.path.abspath(args.train_text), os.path.abspath(args.valid_text)
    else:
        train_path, valid_path = vim_texts(tmp)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; torch {torch.__version__}, {args.threads} threads; "
          f"train {os.path.getsize(train_path):,} B, valid {os.path.getsize(valid_path):,} B; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    short_valid = short_text(valid_path, tmp)  # what the timed runs validate on
    best, note = calibrate(args, train_path, short_valid, tmp)
    args.peers = [best, torch_peer.inherited(args.threads)]
    print(f"{torch_peer.header(args.threads)}\nPyTorch best split: {note}; load average {os.getloadavg()[0]:.2f}",
          flush=True)

    if args.part in ("both", "train"):
        results = [[] for _ in range(1 + len(args.peers))]  # tfm, then each PyTorch peer
        checked = False
        for r in range(args.rounds):
            out = os.path.join(tmp, f"tfm_{r}")
            time.sleep(1)  # this process's OpenMP threads stop spinning after the check below (round 1)
            t = run_tfm(args.tfm, train_path, valid_path, out, args.seconds, args.max_steps, args.threads, r,
                        train_valid=short_valid)
            results[0].append(t)
            print(f"  round {r + 1} tfm: {t['steps']} steps, {t['tok_s']:,.0f} tok/s, val loss {t['loss']:.4f} "
                  f"({t['bpc']:.3f} bits/char); load average {os.getloadavg()[0]:.2f}", flush=True)
            for i, peer in enumerate(args.peers):
                p = torch_in_worker(peer, "train", [train_path, valid_path, out, args.seconds, args.max_steps, r])
                results[1 + i].append(p)
                print(f"  round {r + 1} PyTorch {peer.name}: {p['steps']} steps, {p['tok_s']:,.0f} tok/s, "
                      f"val loss {p['loss']:.4f} ({p['bpc']:.3f} bits/char), setup {p['setup']:.1f} s; "
                      f"load average {os.getloadavg()[0]:.2f}", flush=True)
            if not checked:  # the same vocabulary, and the two evaluations are one measurement
                tfm_vocab = json.load(open(os.path.join(out, "tgt_vocab.json")))
                if tfm_vocab != results[1][0]["vocab"]:
                    raise RuntimeError("the rebuilt vocabulary differs from tfm's tgt_vocab.json")
                twin, cfg = tm.load_tfm_model(out)
                with open(valid_path, encoding="utf-8") as f:
                    loss, _ = torch_eval(twin, encode(f.read(), tfm_vocab), cfg["max_len"])
                print(f"  check: tfm's round-1 weights scored by the PyTorch evaluation: {loss:.6f} "
                      f"(tfm eval: {t['loss']:.6f})", flush=True)
                checked = True
        med = [{f: statistics.median(x[f] for x in v) for f in ("tok_s", "loss", "bpc", "steps")} for v in results]
        print()
        print(f"Training, nanogpt-baby, {args.seconds:g} s each; {torch_peer.header(args.threads)}; best split "
              f"{args.peers[0].split}; medians of {args.rounds} alternating rounds:")
        print()
        print("| | steps | tokens/s | tfm / this | validation loss (nats/char) | bits/char |")
        print("|---|---|---|---|---|---|")
        for name, m in zip(["tfm"] + [f"PyTorch, {p.name}" for p in args.peers], med):
            ratio = "" if m is med[0] else f"{med[0]['tok_s'] / m['tok_s']:.2f}"
            print(f"| {name} | {m['steps']:.0f} | {m['tok_s']:,.0f} | {ratio} | {m['loss']:.4f} | {m['bpc']:.3f} |")
        print()
        print("per round (tokens/s and validation loss, tfm then PyTorch): " + "; ".join(
            ", ".join(f"{results[k][r]['tok_s']:,.0f} {results[k][r]['loss']:.4f}" for k in range(len(results)))
            for r in range(args.rounds)))
        print(f"tfm command: {results[0][0]['cmd']}")
        print()

    if args.part in ("both", "generate"):
        bench_generate(args, train_path, valid_path, tmp)


if __name__ == "__main__":
    main()
