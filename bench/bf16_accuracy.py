#!/usr/bin/env python3
"""bench/bf16_accuracy.py — how far `tfm forward --dtype bf16` is from the exact answer, next to
float32 (tfm and PyTorch) and PyTorch's own bfloat16 module, for the benchmark configs.

For each config a seeded nn.TransformerEncoderLayer (or 6-layer nn.TransformerEncoder), batch_first,
eval mode, is exported with tools/export_torch.py; the input is uniform in [-1, 1). The reference is
the same module in float64 (PyTorch). Reported per run, against that reference:
  rel_rms  ||y − ref||₂ / ||ref||₂           (normwise relative error)
  rel_max  max|y − ref| / max|ref|          (the suite's elementwise measure)
Runs: torch f32 (the module as trained), tfm f32 (`tfm forward`), tfm bf16 (`tfm forward --dtype bf16`:
bfloat16 inputs to every Linear matmul, float32 sums, float32 attention/softmax/LayerNorm/residuals),
torch bf16 (module and input converted with .bfloat16(): every op in bfloat16).

Usage:  /usr/bin/python3 bench/bf16_accuracy.py [--tfm build/tfm] [--only S,M,L,M6] [--markdown]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))
import tfm_safetensors as st  # noqa: E402
from export_torch import export  # noqa: E402
from tables import print_table  # noqa: E402  (bench/, the script's own directory)

CONFIGS = {  # as bench/compare_torch.py: (d_model, nhead, dim_feedforward, num_layers or 0, B, N)
    "S": (64, 4, 256, 0, 32, 32),
    "M": (512, 8, 2048, 0, 8, 128),
    "L": (256, 4, 1024, 0, 1, 2048),
    "M6": (512, 8, 2048, 6, 8, 128),
}


def errors(y, ref):
    y = np.asarray(y, dtype=np.float64)
    d = y - ref
    return float(np.linalg.norm(d) / np.linalg.norm(ref)), float(np.abs(d).max() / np.abs(ref).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default=os.path.join(here, "..", "build", "tfm"))
    ap.add_argument("--only", default="S,M,L,M6")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            D, H, FF, layers, B, N = CONFIGS[name]
            torch.manual_seed(0)
            layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True)
            model = (nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers else layer).eval()
            prefix = os.path.join(tmp, name)
            cfg, weights = export(model, {}, prefix)
            x = torch.rand(B, N, D) * 2 - 1
            st.save(prefix + ".in.safetensors", {"src": x.numpy()})
            with torch.no_grad():
                ref = model.double()(x.double()).numpy()
                model.float()
                runs = {"torch f32": model(x).numpy()}
                runs["torch bf16"] = model.bfloat16()(x.bfloat16()).float().numpy()
                model.float()
            for dtype in ("f32", "bf16"):
                out = prefix + "." + dtype + ".safetensors"
                subprocess.run([args.tfm, "forward", "--config", cfg, "--weights", weights, "--inputs",
                                prefix + ".in.safetensors", "--output", out, "--dtype", dtype], check=True)
                runs["tfm " + dtype] = st.load(out)[0]["output"]
            for run in ("torch f32", "tfm f32", "tfm bf16", "torch bf16"):
                rms, mx = errors(runs[run], ref)
                rows.append((name, run, rms, mx))
                print("# %-3s %-10s rel_rms %.3e  rel_max %.3e" % (name, run, rms, mx), file=sys.stderr)
    hdr = ("config", "run", "rel_rms vs float64", "rel_max vs float64")
    print_table(hdr, [(name, run, "%.2e" % rms, "%.2e" % mx) for name, run, rms, mx in rows], args.markdown)
    print("\nbfloat16 unit roundoff u_b = 2^-8 = %.2e; float32 u = 2^-24 = %.2e" % (2.0 ** -8, 2.0 ** -24))


if __name__ == "__main__":
    main()
