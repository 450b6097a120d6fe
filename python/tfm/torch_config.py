"""tfm.torch_config — the `tfm forward` config of a torch.nn Transformer module, read back from the instance.

Shared by tfm.from_torch and tools/export_torch.py (which loads this file by path, so the tool runs with torch
and numpy alone, without the native module). torch is imported here, so the package imports this module only
when a torch module is converted.
"""

import re

import torch.nn as nn
import torch.nn.functional as F
import torch.nn.modules.module as _module
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear


def _activation_name(fn):
    """tfm's name of a layer's activation: F.relu / F.gelu, or an instance of exactly nn.ReLU / nn.GELU (a subclass
    may compute something else)."""
    if fn is F.relu or type(fn) is nn.ReLU:
        return "relu"
    if fn is F.gelu or type(fn) is nn.GELU:
        return "gelu_tanh" if getattr(fn, "approximate", "none") == "tanh" else "gelu"
    return None  # a callable we cannot name: the caller must pass "activation"


# The methods PyTorch's call of the six classes goes through: a subclass overriding one computes something tfm
# does not (tfm runs the stock forward).
_FORWARD_PATH = ("forward", "_sa_block", "_mha_block", "_ff_block", "__call__", "_call_impl")


def _stock(module, name, cls):
    """Raises ValueError unless module is a cls that computes as cls does: cls itself, or a subclass (adding
    attributes, an __init__) that overrides no method of the forward path, in its class or on the instance."""
    if not isinstance(module, cls):
        raise ValueError(f"{name} is {type(module).__name__}: tfm runs nn.{cls.__name__} there")
    for method in _FORWARD_PATH:
        stock = getattr(cls, method, None)
        if stock is not None and (method in vars(module) or getattr(type(module), method) is not stock):
            raise ValueError(f"{name} ({type(module).__name__}) overrides nn.{cls.__name__}.{method}: tfm runs "
                             f"nn.{cls.__name__}'s own forward")


def _exactly(module, name, *types):
    """Raises ValueError unless module's type is one of types (a submodule replaced, or subclassed, would compute
    something else)."""
    if type(module) not in types:
        names = " or ".join(("nn." if getattr(nn, t.__name__, None) is t else "") + t.__name__ for t in types)
        raise ValueError(f"{name} is {type(module).__name__}: tfm runs {names} there")


def _layer_norm(norm, name):
    """Raises ValueError unless norm is an nn.LayerNorm with a weight (elementwise_affine), as tfm runs it."""
    _exactly(norm, name, nn.LayerNorm)
    if not norm.elementwise_affine:
        raise ValueError(f"{name} has no weight and bias (elementwise_affine=False): tfm runs a LayerNorm with them")


def _no_hooks(module, root, prefix):
    """Raises ValueError when a forward hook or forward pre-hook would run in PyTorch's call of module: PyTorch's
    global ones (register_module_forward_hook), or one on module or a submodule, named by its path (root: the
    module's own name; prefix + the submodule's attribute path, list items as [i])."""
    for kind in ("_global_forward_pre_hooks", "_global_forward_hooks"):
        if getattr(_module, kind, None):
            raise ValueError(f"torch.nn.modules.module.{kind} is not empty (register_module_forward_"
                             f"{'pre_' if 'pre' in kind else ''}hook): tfm runs the module without hooks")
    for path, m in module.named_modules():
        for hooks, what in ((m._forward_pre_hooks, "forward pre-hook"), (m._forward_hooks, "forward hook")):
            if hooks:
                where = prefix + re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path) if path else root
                raise ValueError(f"{where} has a {what}: tfm runs the module without hooks")


def _attention(mha, name, standalone=False):
    """Raises ValueError when the nn.MultiheadAttention mha holds what tfm's attention does not. standalone: a
    MultiheadAttention of its own may have kdim or vdim other than embed_dim (separate q/k/v projections),
    add_bias_kv and add_zero_attn; one inside a layer may not (the layers' attention reads the layer's width and
    has neither)."""
    if not mha._qkv_same_embed_dim and not standalone:
        raise ValueError(f"{name} has separate q/k/v projections (kdim or vdim other than embed_dim): tfm runs a "
                         "layer's attention with kdim == vdim == embed_dim only")
    if (mha.bias_k is not None or mha.add_zero_attn) and not standalone:
        raise ValueError(f"{name} has add_bias_kv or add_zero_attn: tfm runs them in a MultiheadAttention of its own, "
                         "not in a layer")
    if (mha.bias_k is None) != (mha.bias_v is None):
        raise ValueError(f"{name} has {'bias_k' if mha.bias_v is None else 'bias_v'} without "
                         f"{'bias_v' if mha.bias_v is None else 'bias_k'}: add_bias_kv makes both")
    _exactly(mha.out_proj, f"{name}.out_proj", nn.Linear, NonDynamicallyQuantizableLinear)
    if (mha.in_proj_bias is None) != (mha.out_proj.bias is None):
        has = "has an in_proj_bias but no out_proj.bias" if mha.out_proj.bias is None else \
            "has an out_proj.bias but no in_proj_bias"
        raise ValueError(f"{name} {has}: tfm's config holds one bias switch for both")


def _agree(values):
    """values: [(where, value)], all describing what tfm's config holds once. Raises ValueError naming the first
    that differs from the first (tfm would silently compute something else)."""
    where0, v0 = values[0]
    for where, v in values[1:]:
        if v != v0:
            raise ValueError(f"{where} is {v!r} but {where0} is {v0!r}: tfm's config holds one value for both")


def _layer_args(layer, name="layer"):
    """Constructor arguments of a TransformerEncoderLayer / TransformerDecoderLayer instance (name: where it sits,
    for the errors). Raises ValueError when a submodule is not the stock one tfm runs."""
    decoder = isinstance(layer, nn.TransformerDecoderLayer)
    _stock(layer, name, nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer)
    attentions = ["self_attn", "multihead_attn"] if decoder else ["self_attn"]
    for n in attentions:
        _exactly(getattr(layer, n), f"{name}.{n}", nn.MultiheadAttention)
        _stock(getattr(layer, n), f"{name}.{n}", nn.MultiheadAttention)  # its forward replaced on the instance
        _attention(getattr(layer, n), f"{name}.{n}")
    for n in ("linear1", "linear2"):
        _exactly(getattr(layer, n), f"{name}.{n}", nn.Linear)
    norms = ["norm1", "norm2", "norm3"] if decoder else ["norm1", "norm2"]
    for n in norms:
        _layer_norm(getattr(layer, n), f"{name}.{n}")
    for n in ["dropout", "dropout1", "dropout2"] + (["dropout3"] if decoder else []):
        _exactly(getattr(layer, n), f"{name}.{n}", nn.Dropout)
    _agree([(f"{name}.{n}.eps", float(getattr(layer, n).eps)) for n in norms])
    linears = [("linear1", layer.linear1), ("linear2", layer.linear2), ("self_attn.out_proj", layer.self_attn.out_proj)]
    if decoder:
        linears.append(("multihead_attn.out_proj", layer.multihead_attn.out_proj))
        _agree([(f"{name}.self_attn.batch_first", bool(layer.self_attn.batch_first)),
                (f"{name}.multihead_attn.batch_first", bool(layer.multihead_attn.batch_first))])
        _agree([(f"{name}.self_attn.num_heads", layer.self_attn.num_heads),
                (f"{name}.multihead_attn.num_heads", layer.multihead_attn.num_heads)])
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
    decoder = isinstance(stack, nn.TransformerDecoder)
    _stock(stack, name, nn.TransformerDecoder if decoder else nn.TransformerEncoder)
    for i, layer in enumerate(stack.layers):
        _stock(layer, f"{name}.layers[{i}]", nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer)
    if len(stack.layers) == 0:
        raise ValueError(f"{name} has no layers: tfm runs stacks of at least one")
    args = _layer_args(stack.layers[0], f"{name}.layers[0]")
    for i in range(1, len(stack.layers)):
        other = _layer_args(stack.layers[i], f"{name}.layers[{i}]")
        for k in sorted(set(args) | set(other)):
            _agree([(f"{name}.layers[0]'s {k}", args.get(k)), (f"{name}.layers[{i}]'s {k}", other.get(k))])
    if stack.norm is not None:
        _layer_norm(stack.norm, f"{name}.norm")
        _agree([(f"{name}.layers[0]'s layer_norm_eps", args["layer_norm_eps"]), (f"{name}.norm.eps", float(stack.norm.eps))])
    return args


def _nested_args(encoder):
    """nn.TransformerEncoder's fast-path switches: with enable_nested_tensor PyTorch's no-grad call returns 0 at the
    padded positions (before the final norm), and tfm's forward does as it does (include/tfm/models/forward.h)."""
    return {"enable_nested_tensor": bool(encoder.enable_nested_tensor),
            "mask_check": bool(getattr(encoder, "mask_check", True))}


def infer_config(module):
    """The tfm config of a torch.nn module, as far as it can be read back from the instance. Raises ValueError when
    the instance holds what one tfm config cannot (layers of a stack that differ, a final norm with another eps) or
    what PyTorch computes otherwise than its stock forward, which tfm runs (a subclass overriding the forward, a
    forward hook, a submodule of another type), naming the submodule (a Transformer's by their attribute path, the
    others' under the names attention, layer, encoder, decoder)."""
    roots = ((nn.MultiheadAttention, "attention"), (nn.TransformerEncoderLayer, "layer"),
             (nn.TransformerDecoderLayer, "layer"), (nn.TransformerEncoder, "encoder"),
             (nn.TransformerDecoder, "decoder"), (nn.Transformer, "transformer"))
    for cls, root in roots:
        if isinstance(module, cls):
            _no_hooks(module, root, "" if cls is nn.Transformer else root + ".")
    if isinstance(module, nn.MultiheadAttention):
        _stock(module, "attention", nn.MultiheadAttention)
        _attention(module, "attention", standalone=True)
        widths = {} if module._qkv_same_embed_dim else {"kdim": module.kdim, "vdim": module.vdim}
        extra = {k: True for k, on in (("add_bias_kv", module.bias_k is not None),
                                       ("add_zero_attn", bool(module.add_zero_attn))) if on}
        return {"module": "MultiheadAttention", "embed_dim": module.embed_dim, "num_heads": module.num_heads,
                "dropout": float(module.dropout), "bias": module.in_proj_bias is not None,
                "batch_first": bool(module.batch_first), **widths, **extra}
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
        _stock(module, "transformer", nn.Transformer)
        enc, dec = _stack_args(module.encoder, "encoder"), _stack_args(module.decoder, "decoder")
        for k in sorted(set(enc) | set(dec)):
            _agree([(f"encoder.layers[0]'s {k}", enc.get(k)), (f"decoder.layers[0]'s {k}", dec.get(k))])
        for name, stack in (("encoder", module.encoder), ("decoder", module.decoder)):
            if stack.norm is None:
                raise ValueError(f"{name}.norm is None: nn.Transformer's stacks end in a LayerNorm, and tfm's too")
        return {"module": "Transformer", **enc, "num_encoder_layers": len(module.encoder.layers),
                "num_decoder_layers": len(module.decoder.layers), **_nested_args(module.encoder)}
    return {}
