#!/usr/bin/env python3
"""bench/int8_accuracy.py — how far `--dtype int8` is from the exact answer and from float32: one layer against
float64 (as bench/bf16_accuracy.py does for bf16), and end to end on trained models (docs/int8.md).

layers (default): for each config a seeded nn.TransformerEncoderLayer (or 6-layer nn.TransformerEncoder),
batch_first, eval mode, exported with tools/export_torch.py; input uniform in [-1, 1); reference = the same module in
float64. Runs: torch f32, tfm f32, tfm bf16, tfm int8 (`tfm forward --dtype int8`: every Linear with int8 weights per
output row and uint8 inputs per row, int32 sums), torch int8 (torch.ao.quantization.quantize_dynamic(module,
{nn.Linear}, qint8): PyTorch quantizes only modules of type nn.Linear, which in nn.TransformerEncoderLayer are the
two feed-forward Linears; attention's in_proj is a bare parameter and its out_proj a NonDynamicallyQuantizableLinear,
both left in float32). Reported: rel_rms = ||y − ref||₂/||ref||₂, rel_max = max|y − ref|/max|ref|.

e2e WORK: in WORK (made if needed) the two data sets of the README, a model trained on each unless WORK/runs/<name>
already holds one, its int8 copy (`tfm quantize`), and `tfm eval` of: the f32 directory in f32, in int8 (the weights
quantized when packed, embeddings float32), and the quantized directory (int8 by default; also --dtype f32, its
dequantized weights):
  licenses  seq2seq, d_model 256, 3+3 layers, FFN 1024, joint spm vocabulary of 1000, on the common-licenses
            reversal pairs (README, "Subword tokenization"): token accuracy, BLEU, chrF on valid.tsv (200 pairs)
  vim       the nanogpt-baby preset on Vim's help files (README): bits per character on the user manual
Training length: --s2s-steps / --lm-steps (the issue asks 2,000 each), or --time-budget seconds per model (on a
shared machine; the table then says how many steps ran).

Usage:  /usr/bin/python3 bench/int8_accuracy.py [--tfm build/tfm] [--only S,M,L,M6] [--markdown]
        /usr/bin/python3 bench/int8_accuracy.py --e2e WORK [--s2s-steps 2000 --lm-steps 2000 | --time-budget S]
"""
import argparse
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))
from tables import print_table  # noqa: E402  (bench/, the script's own directory)

CONFIGS = {  # as bench/compare_torch.py: (d_model, nhead, dim_feedforward, num_layers or 0, B, N)
    "S": (64, 4, 256, 0, 32, 32),
    "M": (512, 8, 2048, 0, 8, 128),
    "L": (256, 4, 1024, 0, 1, 2048),
    "M6": (512, 8, 2048, 6, 8, 128),
}
LICENSES = ["Apache-2.0", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2.1", "MPL-2.0"]


def errors(y, ref):
    y = np.asarray(y, dtype=np.float64)
    d = y - ref
    return float(np.linalg.norm(d) / np.linalg.norm(ref)), float(np.abs(d).max() / np.abs(ref).max())


def torch_dynamic_int8(model):
    """PyTorch 1.13's dynamic int8 copy of an encoder layer or stack. The layers' fused "fast path" cannot take
    quantized Linears (it reads .weight, a method on them, and fails), so it is switched off through the flag it
    tests (activation_relu_or_gelu; the activation itself is unchanged) and the layer runs its plain forward."""
    import torch
    import torch.nn as nn
    q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)
    for m in q.modules():
        if isinstance(m, nn.TransformerEncoderLayer):
            m.activation_relu_or_gelu = False
    return q


def layers(args):
    import torch
    import torch.nn as nn
    import tfm_safetensors as st
    from export_torch import export
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            D, H, FF, nl, B, N = CONFIGS[name]
            torch.manual_seed(0)
            layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True)
            model = (nn.TransformerEncoder(layer, nl, enable_nested_tensor=False) if nl else layer).eval()
            prefix = os.path.join(tmp, name)
            cfg, weights = export(model, {}, prefix)
            x = torch.rand(B, N, D) * 2 - 1
            st.save(prefix + ".in.safetensors", {"src": x.numpy()})
            with torch.no_grad():
                runs = {"torch f32": model(x).numpy()}
                q = torch_dynamic_int8(model)
                runs["torch int8 (FFN only)"] = q(x).numpy()
                ref = model.double()(x.double()).numpy()
            for dtype in ("f32", "bf16", "int8"):
                out = prefix + "." + dtype + ".safetensors"
                subprocess.run([args.tfm, "forward", "--config", cfg, "--weights", weights, "--inputs",
                                prefix + ".in.safetensors", "--output", out, "--dtype", dtype], check=True)
                runs["tfm " + dtype] = st.load(out)[0]["output"]
            for run in ("torch f32", "tfm f32", "tfm bf16", "tfm int8", "torch int8 (FFN only)"):
                rms, mx = errors(runs[run], ref)
                rows.append((name, run, "%.2e" % rms, "%.2e" % mx))
                print("# %-3s %-22s rel_rms %.3e  rel_max %.3e" % (name, run, rms, mx), file=sys.stderr)
    print_table(("config", "run", "rel_rms vs float64", "rel_max vs float64"), rows, args.markdown)


def run(cmd, **kw):
    print("# " + " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def dir_bytes(d, files=None):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, "*"))
               if os.path.isfile(p) and (files is None or os.path.basename(p) in files))


def steps_of(d):
    """Steps the run made (the last row of its metrics.csv)."""
    with open(os.path.join(d, "metrics.csv")) as f:
        rows = [l for l in f.read().splitlines() if l and l[0].isdigit()]
    return int(rows[-1].split(",")[0]) if rows else -1


def make_data(w):
    """The README's two data sets in directory w (made if needed): the common-licenses reversal pairs (train.tsv,
    valid.tsv: the last 200) and Vim's help files (vimtrain.txt, vimvalid.txt: the user manual)."""
    os.makedirs(w, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(w)
    try:
        if not os.path.exists("train.tsv"):
            pairs = []
            for lic in LICENSES:
                with open("/usr/share/common-licenses/" + lic, encoding="utf-8") as f:
                    for line in f:
                        words = line.split()
                        if 4 <= len(words) <= 14:
                            pairs.append(" ".join(reversed(words)) + "\t" + " ".join(words))
            with open("train.tsv", "w") as f:
                f.write("".join(p + "\n" for p in pairs[:-200]))
            with open("valid.tsv", "w") as f:
                f.write("".join(p + "\n" for p in pairs[-200:]))
        if not os.path.exists("vimtrain.txt"):
            doc = "/usr/share/vim/vim90/doc/"
            with open("vimtrain.txt", "wb") as f:
                for p in sorted(glob.glob(doc + "*.txt")):
                    if not os.path.basename(p).startswith("usr_"):
                        f.write(open(p, "rb").read())
            with open("vimvalid.txt", "wb") as f:
                for p in sorted(glob.glob(doc + "usr_0*.txt")):
                    f.write(open(p, "rb").read())
    finally:
        os.chdir(cwd)


def e2e(args):
    w = os.path.abspath(args.e2e)
    os.makedirs(os.path.join(w, "runs"), exist_ok=True)
    os.chdir(w)
    make_data(w)
    length = lambda steps: (["--time-budget", str(args.time_budget)] if args.time_budget else ["--max-steps", str(steps)])
    th = ["--threads", str(args.threads)]
    if not os.path.exists("runs/licenses/model.safetensors"):
        run([args.tfm, "train", "--train", "train.tsv", "--valid", "valid.tsv", "--arch", "seq2seq", "--tokens", "spm",
             "--joint-vocab", "--vocab-size", "1000", "--share-embeddings", "--d-model", "256", "--layers", "3",
             "--dim-feedforward", "1024", "--out", "runs/licenses", "--force"] + length(args.s2s_steps) + th)
    if not os.path.exists("runs/vim/model.safetensors"):
        run([args.tfm, "train", "--preset", "nanogpt-baby", "--text", "vimtrain.txt", "--valid-text", "vimvalid.txt",
             "--out", "runs/vim", "--force"] + length(args.lm_steps) + th)
    for name in ("licenses", "vim"):
        run([args.tfm, "quantize", "--model", "runs/" + name, "--out", "runs/" + name + "-int8", "--force"])

    cases = [("f32 directory, --dtype f32", "", "f32"), ("f32 directory, --dtype int8", "", "int8"),
             ("quantized directory (int8 by default)", "-int8", None), ("quantized directory, --dtype f32", "-int8", "f32")]
    rows = []
    for label, suffix, dtype in cases:
        d = ["--dtype", dtype] if dtype else []
        r = json.loads(run([args.tfm, "eval", "--model", "runs/licenses" + suffix, "--data", "valid.tsv", "--json"] + d + th))
        rows.append([label, "%.2f" % (100 * r["token_accuracy"]), "%.2f" % r["bleu"], "%.2f" % r["chrf"]])
    print("licenses seq2seq (d_model 256, 3+3 layers, FFN 1024, spm 1000; %d steps), valid.tsv (200 pairs):" %
          steps_of("runs/licenses"))
    print_table(("run", "token accuracy %", "BLEU", "chrF2"), rows, args.markdown)
    rows = []
    for label, suffix, dtype in cases:
        d = ["--dtype", dtype] if dtype else []
        r = json.loads(run([args.tfm, "eval", "--model", "runs/vim" + suffix, "--text", "vimvalid.txt", "--json"] + d + th))
        rows.append([label, "%.4f" % r["bits_per_char"]])
    print("\nnanogpt-baby on Vim's help (%d steps), bits per character of the user manual:" % steps_of("runs/vim"))
    print_table(("run", "bits/char"), rows, args.markdown)
    model_files = ["config.json", "model.safetensors", "spm.model", "src.spm.model", "tgt.spm.model",
                   "src_vocab.txt", "tgt_vocab.txt", "src_vocab.json", "tgt_vocab.json", "bpe_vocab.json", "bpe_merges.txt"]
    print("\nsizes (bytes):")
    rows = []
    for name in ("licenses", "vim"):
        f32_all, f32_model = dir_bytes("runs/" + name), dir_bytes("runs/" + name, model_files)
        q = dir_bytes("runs/" + name + "-int8")
        rows.append([name, str(f32_all), str(f32_model), str(q), "%.1f%%" % (100 * q / f32_all),
                     "%.1f%%" % (100 * q / f32_model)])
    print_table(("model", "f32 directory", "f32 model files (no trainer state, metrics, plot)", "quantized directory",
                 "quantized / f32 directory", "quantized / f32 model files"), rows, args.markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"))
    ap.add_argument("--only", default="S,M,L,M6")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--e2e", metavar="WORK", help="the end-to-end runs, in WORK")
    ap.add_argument("--s2s-steps", type=int, default=2000)
    ap.add_argument("--lm-steps", type=int, default=2000)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of training per model instead of steps")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    args.tfm = os.path.abspath(args.tfm)
    e2e(args) if args.e2e else layers(args)


if __name__ == "__main__":
    main()
