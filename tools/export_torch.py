#!/usr/bin/env python3
"""export_torch.py — export a PyTorch Transformer module for `tfm forward`: its state_dict to
PREFIX.safetensors (F32, PyTorch keys) and its constructor arguments to PREFIX.json.

As a library (torch and numpy only):

    import sys; sys.path.insert(0, "tools")
    from export_torch import export
    layer = torch.nn.TransformerEncoderLayer(4, 2, 64, 0.2, activation="gelu", batch_first=True, norm_first=True)
    enc = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    export(enc, {}, "model")                # -> model.json, model.safetensors
    tfm forward --config model.json --weights model.safetensors --inputs in.safetensors --output out.safetensors

config_dict: constructor arguments in the config format of `tfm forward` (include/tfm/models/forward.h). Arguments that can be read back
from a torch.nn module (d_model, nhead, dim_feedforward, dropout, layer_norm_eps, batch_first, norm_first, bias,
activation when it is relu / gelu, num_layers, norm, ...) are filled in when absent; give the others (e.g. "activation":
"swiglu" for a custom module) explicitly. Values in config_dict win over inferred ones.

As a script, `python3 tools/export_torch.py PREFIX` exports the test notebook's example model (seeded) and a matching
PREFIX.inputs.safetensors, as a runnable demonstration.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfm_safetensors as st  # noqa: E402


def _load_torch_config():
    """python/tfm/torch_config.py, the config code tfm.from_torch uses, loaded by path: this tool needs neither
    the built package nor its native module."""
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, os.pardir, "python", "tfm", "torch_config.py")
    spec = importlib.util.spec_from_file_location("tfm_torch_config", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


infer_config = _load_torch_config().infer_config


def export(module, config_dict, out_prefix):
    """Writes out_prefix + ".safetensors" (the state_dict as F32) and out_prefix + ".json" (the config).
    Returns (config_path, weights_path)."""
    cfg = infer_config(module)
    cfg.update(config_dict or {})
    if "module" not in cfg:
        raise ValueError(f"cannot infer the tfm module of {type(module).__name__}: pass config_dict['module']")
    if cfg["module"] != "MultiheadAttention" and "activation" not in cfg:
        raise ValueError("the activation is a callable tfm cannot name: pass config_dict['activation']")
    tensors = [(k, v.detach().cpu().float().contiguous().numpy()) for k, v in module.state_dict().items()]
    weights_path, config_path = out_prefix + ".safetensors", out_prefix + ".json"
    st.save(weights_path, tensors, {"format": "pt", "exported_by": "tfm tools/export_torch.py"})
    with open(config_path, "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    return config_path, weights_path


def _demo(prefix):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 64, 0.2, activation="gelu", batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).eval()
    export(model, {}, prefix)
    src = torch.randn(2, 5, 4)
    st.save(prefix + ".inputs.safetensors", {"src": src.numpy()})
    with torch.no_grad():
        print(model(src))
    print(f"wrote {prefix}.json, {prefix}.safetensors, {prefix}.inputs.safetensors; now run\n"
          f"  tfm forward --config {prefix}.json --weights {prefix}.safetensors "
          f"--inputs {prefix}.inputs.safetensors --output {prefix}.out.safetensors")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    _demo(sys.argv[1])
