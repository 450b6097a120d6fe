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


def _agree(values):
    """values: [(where, value)], all describing what tfm's config holds once. Raises ValueError naming the first
    that differs from the first (tfm would silently compute something else)."""
    where0, v0 = values[0]
    for where, v in values[1:]:
        if v != v0:
            raise ValueError(f"{where} is {v!r} but {where0} is {v0!r}: tfm's config holds one value for both")


def _layer_args(layer, name="layer"):
    """Constructor arguments of a TransformerEncoderLayer / TransformerDecoderLayer instance (name: where it sits,
    for the errors)."""
    norms = [n for n in ("norm1", "norm2", "norm3") if hasattr(layer, n)]
    _agree([(f"{name}.{n}.eps", float(getattr(layer, n).eps)) for n in norms])
    linears = [("linear1", layer.linear1), ("linear2", layer.linear2), ("self_attn.out_proj", layer.self_attn.out_proj)]
    if hasattr(layer, "multihead_attn"):
        linears.append(("multihead_attn.out_proj", layer.multihead_attn.out_proj))
        _agree([(f"{name}.self_attn.batch_first", bool(layer.self_attn.batch_first)),
                (f"{name}.multihead_attn.batch_first", bool(layer.multihead_attn.batch_first))])
    _agree([(f"{name}.{n}.bias", lin.bias is not None) for n, lin in linears])
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


def _stack_args(stack, name):
    """The arguments shared by every layer of a TransformerEncoder / TransformerDecoder, and its final norm's eps
    (tfm's config has one layer_norm_eps)."""
    if len(stack.layers) == 0:
        raise ValueError(f"{name} has no layers: tfm runs stacks of at least one")
    args = _layer_args(stack.layers[0], f"{name}.layers[0]")
    for i in range(1, len(stack.layers)):
        other = _layer_args(stack.layers[i], f"{name}.layers[{i}]")
        for k in sorted(set(args) | set(other)):
            _agree([(f"{name}.layers[0]'s {k}", args.get(k)), (f"{name}.layers[{i}]'s {k}", other.get(k))])
    if stack.norm is not None:
        if not isinstance(stack.norm, nn.LayerNorm) or not stack.norm.elementwise_affine:
            raise ValueError(f"{name}.norm is {type(stack.norm).__name__}: tfm runs a LayerNorm with weight and bias")
        _agree([(f"{name}.layers[0]'s layer_norm_eps", args["layer_norm_eps"]), (f"{name}.norm.eps", float(stack.norm.eps))])
    return args


def _nested_args(encoder):
    """nn.TransformerEncoder's fast-path switches: with enable_nested_tensor PyTorch's no-grad call returns 0 at the
    padded positions (before the final norm), and tfm's forward does as it does (include/tfm/models/forward.h)."""
    return {"enable_nested_tensor": bool(encoder.enable_nested_tensor),
            "mask_check": bool(getattr(encoder, "mask_check", True))}


def infer_config(module):
    """The tfm config of a torch.nn module, as far as it can be read back from the instance. Raises ValueError when
    the instance holds what one tfm config cannot (layers of a stack that differ, a final norm with another eps)."""
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
        return {"module": "TransformerEncoder", **_stack_args(module, "encoder"), "num_layers": len(module.layers),
                "norm": module.norm is not None, **_nested_args(module)}
    if isinstance(module, nn.TransformerDecoder):
        return {"module": "TransformerDecoder", **_stack_args(module, "decoder"), "num_layers": len(module.layers),
                "norm": module.norm is not None}
    if isinstance(module, nn.Transformer):
        if not isinstance(module.encoder, nn.TransformerEncoder) or not isinstance(module.decoder, nn.TransformerDecoder):
            raise ValueError("a custom encoder or decoder: tfm runs nn.Transformer with its own TransformerEncoder "
                             "and TransformerDecoder")
        enc, dec = _stack_args(module.encoder, "encoder"), _stack_args(module.decoder, "decoder")
        for k in sorted(set(enc) | set(dec)):
            _agree([(f"encoder.layers[0]'s {k}", enc.get(k)), (f"decoder.layers[0]'s {k}", dec.get(k))])
        for name, stack in (("encoder", module.encoder), ("decoder", module.decoder)):
            if stack.norm is None:
                raise ValueError(f"{name}.norm is None: nn.Transformer's stacks end in a LayerNorm, and tfm's too")
        return {"module": "Transformer", **enc, "num_encoder_layers": len(module.encoder.layers),
                "num_decoder_layers": len(module.decoder.layers), **_nested_args(module.encoder)}
    return {}
