#!/usr/bin/env python3
"""check_roundtrip.py — load a tfm model directory into its PyTorch twin (tools/torch_models.py) and compare logits.

    check_roundtrip.py MODEL_DIR INPUTS.safetensors [MODEL_DIR INPUTS.safetensors ...] [--tol 2e-5]

MODEL_DIR holds config.json (a ModelConfig object, or tfm train's {"model": {...}, ...}) and model.safetensors; or it
is a Hugging Face GPT-2 folder (config.json with n_embd: what tfm import gpt2 reads and tfm export gpt2 writes), run by
torch_models.py's GPT-2 twin.
Every ModelConfig option is understood: with the layer variants (head_dim, v_head_dim, bias, qkv_bias, out_bias,
ffn_bias, norm_bias, attn_scale, norm_type rms_norm, share_layers, drop_path) or a gated activation (glu, geglu,
swiglu) the twin is torch_models.py's functional re-statement of the layers, otherwise torch.nn's own classes;
positional sinusoidal, learned or none and scale_embeddings either way. An int8 directory (tfm quantize) is refused.
INPUTS holds "src" (B, S) ids (arch decoder: the window (B, T)), "tgt_in" (B, T) ids for arch seq2seq, and "logits" —
what tfm computed for them, e.g. with the Python package:

    m = tfm.load("runs/mt"); src = np.array([[5, 6, 7]]); tgt_in = np.array([[1, 8, 9]])   # bos first
    tfm_safetensors.save("in.safetensors", {"src": src, "tgt_in": tgt_in, "logits": m.logits(src, tgt_in)})
The reference is the twin in float64 on the same (float32) weights. Prints, per pair, one JSON line
    {"model": ..., "twin": "torch.nn" | "functional", "max_rel_err": tfm vs reference,
     "torch_f32_rel_err": PyTorch float32 vs reference, "bound": ..., "ok": ...}
with rel err = max|a − ref| / max|ref|, and exits 1 when max_rel_err > max(tol, 20 × torch_f32_rel_err) — the
parity suite's rule: tfm may be as far from the exact result as PyTorch's own float32 is, with a margin.
Several pairs may be given, to pay for one torch start-up only.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfm_safetensors  # noqa: E402
import torch_models  # noqa: E402


def check(model_dir, inputs, tol):
    tensors, _ = tfm_safetensors.load(inputs)
    src = torch.from_numpy(np.asarray(tensors["src"]).astype(np.int64))
    tgt = torch.from_numpy(np.asarray(tensors["tgt_in"]).astype(np.int64)) if "tgt_in" in tensors else None
    tfm_logits = np.asarray(tensors["logits"], dtype=np.float64)

    outs = {}
    twin = None
    gpt2 = torch_models.is_gpt2_dir(model_dir)
    for name, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        if gpt2:  # a Hugging Face GPT-2 folder (tfm import gpt2's source, or what tfm export gpt2 wrote)
            model, _ = torch_models.load_gpt2(model_dir, dtype)
            outs[name] = model(src).detach().double().numpy()
            twin = "gpt2"
            continue
        model, cfg = torch_models.load_tfm_model(model_dir, dtype)
        # Gradient mode stays on: torch 1.13's encoder "fast path" (nested tensors, zeros at padded positions) only
        # runs without autograd, and the twin must compute every position like tfm does.
        out = model(src, tgt) if cfg["arch"] == "seq2seq" else model(src)
        outs[name] = out.detach().double().numpy()
        twin = "functional" if torch_models.uses_variants(cfg) else "torch.nn"
    ref = outs["f64"]
    if ref.shape != tfm_logits.shape:
        return {"model": model_dir, "twin": twin, "ok": False,
                "error": f"shape {list(tfm_logits.shape)} vs torch {list(ref.shape)}"}
    mag = max(np.abs(ref).max(), 1e-30)
    err = float(np.abs(tfm_logits - ref).max() / mag)
    err32 = float(np.abs(outs["f32"] - ref).max() / mag)
    bound = max(tol, 20 * err32)
    return {"model": model_dir, "twin": twin, "max_rel_err": err, "torch_f32_rel_err": err32, "bound": bound, "ok": bool(err <= bound)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("pairs", nargs="+", metavar="MODEL_DIR INPUTS")
    ap.add_argument("--tol", type=float, default=2e-5)
    a = ap.parse_args()
    if len(a.pairs) % 2:
        ap.error("give MODEL_DIR INPUTS.safetensors pairs")
    ok = True
    for i in range(0, len(a.pairs), 2):
        r = check(a.pairs[i], a.pairs[i + 1], a.tol)
        print(json.dumps(r))
        ok = ok and r["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
