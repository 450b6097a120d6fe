"""tfm.torch_config — the `tfm forward` config of a torch.nn Transformer module, read back from the instance.

Shared by tfm.from_torch and tools/export_torch.py (which loads this file by path, so the tool runs with torch
and numpy alone, without the native module). torch is imported here, so the package imports this module only
when a torch module is converted.
"""

import torch.nn as nn
import torch.nn.functional as F


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
