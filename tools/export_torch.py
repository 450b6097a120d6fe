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
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfm_safetensors as st  # noqa: E402


def _activation_name(fn):
    if fn is F.relu or isinstance(fn, nn.ReLU):
        return "relu"
    if fn is F.gelu or isinstance(fn, nn.GELU):
        return "gelu_tanh" if getattr(fn, "approximate", "none") == "tanh" else "gelu"
    return None  # a callable we cannot name: the caller must pass "activation"


def _layer_args(layer):
    """Constructor arguments of a TransformerEncoderLayer / TransformerDecoderLayer instance."""
    args = {
        "d_model": layer.self_attn.embed_dim,
        "nhead": layer.self_attn.num_heads,
        "dim_feedforward": layer.linear2.in_features,
        "dropout": float(layer.dropout.p),
        "layer_norm_eps": float(layer.norm1.eps),
        "batch_first": bool(layer.self_attn.batch_first),
        "norm_first": bool(layer.norm_first),
        "bias": layer.linear1.bias is not None,
    }
    act = _activation_name(layer.activation)
    if act is not None:
        args["activation"] = act
    return args


def infer_config(module):
    """The tfm config of a torch.nn module, as far as it can be read back from the instance."""
    if isinstance(module, nn.MultiheadAttention):
        if not module._qkv_same_embed_dim:
            raise ValueError("tfm supports MultiheadAttention with kdim == vdim == embed_dim only")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("tfm does not support add_bias_kv / add_zero_attn")
        return {"module": "MultiheadAttention", "embed_dim": module.embed_dim, "num_heads": module.num_heads,
                "dropout": float(module.dropout), "bias": module.in_proj_bias is not None,
                "batch_first": bool(module.batch_first)}
    if isinstance(module, nn.TransformerEncoderLayer):
        return {"module": "TransformerEncoderLayer", **_layer_args(module)}
    if isinstance(module, nn.TransformerDecoderLayer):
        return {"module": "TransformerDecoderLayer", **_layer_args(module)}
    if isinstance(module, nn.TransformerEncoder):
        return {"module": "TransformerEncoder", **_layer_args(module.layers[0]), "num_layers": len(module.layers),
                "norm": module.norm is not None}
    if isinstance(module, nn.TransformerDecoder):
        return {"module": "TransformerDecoder", **_layer_args(module.layers[0]), "num_layers": len(module.layers),
                "norm": module.norm is not None}
    if isinstance(module, nn.Transformer):
        return {"module": "Transformer", **_layer_args(module.encoder.layers[0]),
                "num_encoder_layers": len(module.encoder.layers), "num_decoder_layers": len(module.decoder.layers)}
    return {}


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
