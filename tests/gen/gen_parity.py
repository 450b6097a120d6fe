#!/usr/bin/env python3
"""gen_parity.py — writes the PyTorch parity fixtures that tests/parity/parity_test.cc checks tfm against.

    /usr/bin/python3 tests/gen/gen_parity.py --out tests/fixtures/parity            # the fixed case list
    /usr/bin/python3 tests/gen/gen_parity.py --out /tmp/x --sample 12 --seed 7      # 12 random cases

Each case is a directory holding the four files of the `tfm forward` contract (issue 2, section 5):
    config.json            {"module": NAME, ...PyTorch constructor arguments}
    weights.safetensors    the module's state_dict (F32, PyTorch keys)
    inputs.safetensors     F32 inputs named as the PyTorch forward arguments; masks BOOL or F32; causal flags
                           0-dim BOOL; F32 `grad_output` when the case checks gradients
    expected.safetensors   F64 reference `output`, and with grad_output every `grad.<param key>` and
                           `grad.<input>`; __metadata__ = {"format": "tfm-parity", "version": "1",
                           "f32_err.<tensor>": PyTorch float32's own relative error on that tensor, ...}

Reference. PyTorch in float64: the module is run in double with inputs cast from the stored float32 values.
`torch.nn` modules are the reference wherever 1.13 has the option. Where it does not (bias=False on the Transformer
layers, the gated FFNs glu/geglu/swiglu, is_causal flags, a float key_padding_mask combined with an attn_mask — 1.13
ORs it as if bool — and the zero rows for fully-masked queries), the reference is the functional re-statement below
(`fn_*`), which is itself asserted equal to torch.nn on every case: directly when nn is the reference, and otherwise
on an nn-expressible twin (biases zeroed for bias=False, causal and padding masks folded into one explicit float
(B*nhead, L, S) attn_mask). Gated FFNs have no nn twin; their attention/norm parts are the checked code. Nor have
the attention variants (VARIANT_KEYS: head widths independent of d_model, bias switches, attn_scale); fn_mha, which
every other case checks against torch.nn, is their reference, with the widths and scale taken from the config.
The layer variants (LAYER_VARIANT_KEYS): ffn_bias / norm_bias switches and share_layers have an nn twin (missing
biases zeroed; a shared layer's weights loaded into every nn layer, its gradient the sum over them); norm_type
rms_norm has none (1.13 has no nn.RMSNorm): fn_norm states it, x / sqrt(mean(x^2) + eps) * weight, and is asserted
equal to F.layer_norm of [x, -x] (zero mean, variance mean(x^2)) on the case's inputs. drop_path is a training-only
option: in the eval mode of these fixtures it is the identity, so a config carrying it keeps its reference.

Relative error of a tensor: max|x - ref| / max|ref| (denominator 1 when ref is all zeros, e.g. grad.key with one
key). f32_err is that measure for PyTorch's own float32 run of the same reference path on the same inputs; the C++
test passes a tensor when tfm's error is <= max(2e-5, 20 * f32_err).

Conditioning (the random cases of --sample): a draw where float32 rounding itself moves a tensor by more than that
bound cannot judge an implementation. In a three-layer pre-norm decoder, for example, the first layer's weight
gradients can be sums of large terms that cancel, so half an ulp on one activation of the forward moves them by
1e-5 to 1e-4 of their scale while PyTorch's own float32 run happens to land within 3e-6. So each random draw is also
run in float32 with every product accumulated in float64 (exact_products: fewer roundings than PyTorch's), and when
that run exceeds the bound on some tensor the weights and inputs are drawn again (well_conditioned). The bound
itself is unchanged, and the fixed cases are generated as before.

Fully-masked query rows: tfm returns zeros from attention for a query whose keys are all masked; PyTorch returns
NaN. Random masks are redrawn until no row is fully masked, and the one case `mha_fully_masked_rows` builds its
reference with those rows' attention weights set to zero (its output rows are then out_proj.bias), asserting that
torch.nn indeed gives NaN there.

To add a case: append a Case(...) to fixed_cases(); run this script; commit the new directory. Keep cases tiny
(the whole fixture tree stays under ~6 MB).
"""

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import tfm_safetensors as st  # noqa: E402

FORMAT, VERSION = "tfm-parity", "1"
MODULES = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
           "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]
ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "glu", "geglu", "swiglu"]
GATED = {"glu", "geglu", "swiglu"}

# PyTorch's constructor defaults (tfm's too: "Missing keys take PyTorch's defaults").
LAYER_DEFAULTS = dict(dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                      batch_first=False, norm_first=False, bias=True)
DEFAULTS = {
    "MultiheadAttention": dict(dropout=0.0, bias=True, batch_first=False),
    "TransformerEncoderLayer": LAYER_DEFAULTS,
    "TransformerEncoder": dict(LAYER_DEFAULTS, num_layers=1, norm=False),
    "TransformerDecoderLayer": LAYER_DEFAULTS,
    "TransformerDecoder": dict(LAYER_DEFAULTS, num_layers=1, norm=False),
    "Transformer": dict(LAYER_DEFAULTS, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6),
}

# Per module: float inputs (name -> sequence-length symbol), masks (name -> (kind, query len, key len)),
# causal flags (name -> the attention it applies to, named by its mask). L = target/query length, S = source.
INPUTS = {
    "MultiheadAttention": {"query": "L", "key": "S", "value": "S"},
    "TransformerEncoderLayer": {"src": "L"},
    "TransformerEncoder": {"src": "L"},
    "TransformerDecoderLayer": {"tgt": "L", "memory": "S"},
    "TransformerDecoder": {"tgt": "L", "memory": "S"},
    "Transformer": {"src": "S", "tgt": "L"},
}
MASKS = {
    "MultiheadAttention": {"attn_mask": ("attn", "L", "S"), "key_padding_mask": ("kpm", "S")},
    "TransformerEncoderLayer": {"src_mask": ("attn", "L", "L"), "src_key_padding_mask": ("kpm", "L")},
    "TransformerEncoder": {"mask": ("attn", "L", "L"), "src_key_padding_mask": ("kpm", "L")},
    "TransformerDecoderLayer": {"tgt_mask": ("attn", "L", "L"), "memory_mask": ("attn", "L", "S"),
                                "tgt_key_padding_mask": ("kpm", "L"), "memory_key_padding_mask": ("kpm", "S")},
    "Transformer": {"src_mask": ("attn", "S", "S"), "tgt_mask": ("attn", "L", "L"), "memory_mask": ("attn", "L", "S"),
                    "src_key_padding_mask": ("kpm", "S"), "tgt_key_padding_mask": ("kpm", "L"),
                    "memory_key_padding_mask": ("kpm", "S")},
}
MASKS["TransformerDecoder"] = MASKS["TransformerDecoderLayer"]
CAUSAL = {
    "MultiheadAttention": ["is_causal"],
    "TransformerEncoderLayer": ["is_causal"],
    "TransformerEncoder": ["is_causal"],
    "TransformerDecoderLayer": ["tgt_is_causal", "memory_is_causal"],
    "TransformerDecoder": ["tgt_is_causal", "memory_is_causal"],
    "Transformer": ["src_is_causal", "tgt_is_causal", "memory_is_causal"],
}


# The attention variant keys (tfm only; nn.MultiheadAttention has none of them). Unset, each takes the value that
# makes the attention nn.MultiheadAttention's: head_dim = d_model / nhead, v_head_dim = head_dim, qkv_bias =
# out_bias = bias, attn_scale = 1/sqrt(head_dim).
VARIANT_KEYS = ("head_dim", "v_head_dim", "qkv_bias", "out_bias", "attn_scale")
# The layer variant keys (tfm only): ffn_bias (linear1/linear2 biases; unset: bias), norm_bias (every LayerNorm's
# bias; unset: bias, and false with rms_norm), norm_type ("layer_norm" | "rms_norm", every norm including the stacks'
# final norm), share_layers (stacks and Transformer: one layer's weights, keys under layers.0., used num_layers
# times), drop_path (stochastic depth, training only: the identity in eval).
LAYER_VARIANT_KEYS = ("ffn_bias", "norm_bias", "norm_type", "share_layers", "drop_path")


def full_config(cfg):
    c = dict(DEFAULTS[cfg["module"]])
    c.update(cfg)
    if c["module"] == "MultiheadAttention":
        c["d_model"], c["nhead"] = c["embed_dim"], c["num_heads"]
    c.setdefault("head_dim", c["d_model"] // c["nhead"])
    c.setdefault("v_head_dim", c["head_dim"])
    c.setdefault("qkv_bias", c["bias"])
    c.setdefault("out_bias", c["bias"])
    if c["module"] != "MultiheadAttention":
        c.setdefault("ffn_bias", c["bias"])
        c.setdefault("norm_type", "layer_norm")
        c.setdefault("norm_bias", c["bias"] and c["norm_type"] == "layer_norm")
        c.setdefault("share_layers", False)
        c.setdefault("drop_path", 0.0)
    return c


def is_variant(c):
    """True when an attention option makes the attention something nn.MultiheadAttention cannot express."""
    return (c["head_dim"] * c["nhead"] != c["d_model"] or c["v_head_dim"] != c["head_dim"] or "attn_scale" in c
            or c["qkv_bias"] != c["bias"] or c["out_bias"] != c["bias"])


def is_layer_variant(c):
    """True when a layer option takes the module beyond 1.13's torch.nn as is (drop_path, an identity in eval,
    does not)."""
    return c["module"] != "MultiheadAttention" and (
        c["ffn_bias"] != c["bias"] or c["norm_bias"] != c["bias"] or c["norm_type"] != "layer_norm"
        or c["share_layers"])


def distinct_layers(c, n):
    """How many layers of a stack of n have weights of their own: 1 when shared."""
    return min(n, 1) if c.get("share_layers") else n


# ------------------------------------------------------------------------------------------------------------------
# Parameters: PyTorch state_dict keys and shapes (bias=False drops every Linear / projection / LayerNorm bias, as
# PyTorch >= 2.1 does). D = d_model, F = dim_feedforward; a gated activation doubles linear1's outputs.

def separate_projections(c):
    """nn.MultiheadAttention's kdim or vdim other than embed_dim (its _qkv_same_embed_dim false)."""
    d = c["d_model"]
    return c.get("kdim", d) != d or c.get("vdim", d) != d


def spec_mha(pre, c):
    """in_proj (2A + Av, D) with the q, k, v rows in that order, out_proj (D, Av); A = H*Dh, Av = H*Dv. With kdim
    or vdim other than D: q_proj (A, D), k_proj (A, kdim), v_proj (Av, vdim) instead of in_proj_weight. With
    add_bias_kv: bias_k (1, 1, A) and bias_v (1, 1, Av), after in_proj_bias as PyTorch registers them."""
    d, a, av = c["d_model"], c["nhead"] * c["head_dim"], c["nhead"] * c["v_head_dim"]
    if separate_projections(c):
        out = [(pre + "q_proj_weight", (a, d), "w"), (pre + "k_proj_weight", (a, c.get("kdim", d)), "w"),
               (pre + "v_proj_weight", (av, c.get("vdim", d)), "w")]
    else:
        out = [(pre + "in_proj_weight", (2 * a + av, d), "w")]
    if c["qkv_bias"]:
        out.append((pre + "in_proj_bias", (2 * a + av,), "b"))
    if c.get("add_bias_kv"):
        out += [(pre + "bias_k", (1, 1, a), "kv"), (pre + "bias_v", (1, 1, av), "kv")]
    out.append((pre + "out_proj.weight", (d, av), "w"))
    if c["out_bias"]:
        out.append((pre + "out_proj.bias", (d,), "b"))
    return out


def spec_ln(pre, d, bias):
    return [(pre + "weight", (d,), "g")] + ([(pre + "bias", (d,), "b")] if bias else [])


def spec_linear(pre, n_out, n_in, bias):
    return [(pre + "weight", (n_out, n_in), "w")] + ([(pre + "bias", (n_out,), "b")] if bias else [])


def spec_layer(pre, c, decoder):
    d, f, ffn_bias, norm_bias = c["d_model"], c["dim_feedforward"], c["ffn_bias"], c["norm_bias"]
    f1 = 2 * f if c["activation"] in GATED else f
    out = spec_mha(pre + "self_attn.", c)
    if decoder:
        out += spec_mha(pre + "multihead_attn.", c)
    out += spec_linear(pre + "linear1.", f1, d, ffn_bias) + spec_linear(pre + "linear2.", d, f, ffn_bias)
    for i in range(1, 4 if decoder else 3):
        out += spec_ln(pre + f"norm{i}.", d, norm_bias)
    return out


def param_spec(c):
    """Keys in registration order; a shared stack lists its one layer once, as layers.0."""
    m, d = c["module"], c["d_model"]
    bias = c.get("norm_bias")  # the final norms' bias (stacks and Transformer)
    if m == "MultiheadAttention":
        return spec_mha("", c)
    if m == "TransformerEncoderLayer":
        return spec_layer("", c, False)
    if m == "TransformerDecoderLayer":
        return spec_layer("", c, True)
    if m in ("TransformerEncoder", "TransformerDecoder"):
        out = []
        for i in range(distinct_layers(c, c["num_layers"])):
            out += spec_layer(f"layers.{i}.", c, m == "TransformerDecoder")
        return out + (spec_ln("norm.", d, bias) if c["norm"] else [])
    if m == "Transformer":
        out = []
        for i in range(distinct_layers(c, c["num_encoder_layers"])):
            out += spec_layer(f"encoder.layers.{i}.", c, False)
        out += spec_ln("encoder.norm.", d, bias)
        for i in range(distinct_layers(c, c["num_decoder_layers"])):
            out += spec_layer(f"decoder.layers.{i}.", c, True)
        return out + spec_ln("decoder.norm.", d, bias)
    raise ValueError(m)


def random_params(c, rng):
    """Weights ~ U(-a, a) with variance 1/fan_in (keeps activations O(1)); biases and LayerNorm affine terms
    random too, so that their gradients and a wrong bias/norm are visible; bias_k / bias_v ~ N(0, 1)."""
    params = {}
    for key, shape, kind in param_spec(c):
        if kind == "w":
            a = math.sqrt(3.0 / shape[1])
            v = rng.uniform(-a, a, size=shape)
        elif kind == "g":
            v = 1.0 + 0.2 * rng.standard_normal(shape)
        elif kind == "kv":  # an added key / value position: as large as the projected ones
            v = rng.standard_normal(shape)
        else:
            v = 0.2 * rng.standard_normal(shape)
        params[key] = v.astype(np.float32)
    return params


# ------------------------------------------------------------------------------------------------------------------
# The functional re-statement: every module of the contract as plain torch ops over a {key: tensor} dict.

def additive(mask, dtype):
    """bool (True = blocked) -> 0 / -inf; float -> itself. Shapes unchanged."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))
    return mask.to(dtype)


def combined_mask(attn_mask, kpm, causal, b, h, lq, lk, dtype):
    """tfm's mask semantics (= PyTorch >= 2.0 for two masks; is_causal on top of both): the sum of the additive
    forms of attn_mask (L, S) or (B*H, L, S), key_padding_mask (B, S) and the causal mask (j > i blocked).
    Returns (B*H, L, S) or None."""
    total = None

    def add(x):
        nonlocal total
        total = x if total is None else total + x

    if attn_mask is not None:
        am = additive(attn_mask, dtype)
        add(am.unsqueeze(0) if am.dim() == 2 else am)
    if kpm is not None:
        add(additive(kpm, dtype).view(b, 1, 1, lk).expand(b, h, 1, lk).reshape(b * h, 1, lk))
    if causal:
        add(additive(torch.ones(lq, lk, dtype=torch.bool).triu(1), dtype).unsqueeze(0))
    if total is None:
        return None
    return total.expand(b * h, lq, lk)


def fn_mha(p, pre, query, key, value, c, batch_first, attn_mask=None, kpm=None, causal=False, safe=False):
    """out = out_proj(concat_h softmax(scale * q_h k_hᵀ + mask) v_h), scale = attn_scale or 1/sqrt(Dh); q, k, v
    from the packed in_proj rows [0, A), [A, 2A), [2A, 2A + Av) (A = H*Dh, Av = H*Dv). safe: fully-masked query
    rows get zero attention weights (tfm's rule) instead of NaN."""
    if batch_first:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))
    lq, b, _ = query.shape  # (L, B, D)
    lk = key.shape[0]  # (S, B, D)
    h, dh, dv = c["nhead"], c["head_dim"], c["v_head_dim"]
    a = h * dh
    if pre + "in_proj_weight" in p:
        w = p[pre + "in_proj_weight"]  # (2A + Av, D)
        wq, wk, wv = w[:a], w[a:2 * a], w[2 * a:]
    else:  # separate projections: (A, D), (A, kdim), (Av, vdim)
        wq, wk, wv = (p[pre + n + "_proj_weight"] for n in "qkv")
    bias = p.get(pre + "in_proj_bias")
    bq, bk, bv = (bias[:a], bias[a:2 * a], bias[2 * a:]) if bias is not None else (None, None, None)
    # nn.MultiheadAttention's add_bias_kv / add_zero_attn: positions after the S keys and values of every batch row,
    # bias_k / bias_v, then one of zeros. Every mask gains columns that block nothing (PyTorch pads with 0 / False);
    # causal, over the first S keys only, is folded into attn_mask first (tfm's rule: 1.13's nn.MultiheadAttention
    # has no is_causal).
    added = [n for n in ("bias", "zero") if c.get({"bias": "add_bias_kv", "zero": "add_zero_attn"}[n])]
    if added:
        if causal:
            tri = additive(torch.ones(lq, lk, dtype=torch.bool).triu(1), query.dtype)
            attn_mask = tri if attn_mask is None else additive(attn_mask, query.dtype) + tri
            causal = False
        attn_mask = None if attn_mask is None else F.pad(additive(attn_mask, query.dtype), (0, len(added)))
        kpm = None if kpm is None else F.pad(additive(kpm, query.dtype), (0, len(added)))

    def heads(x, w, bias, name, width):  # (S, B, H*width) projection, positions appended -> (B*H, S', width)
        t = F.linear(x, w, bias)
        if added:
            rows = [p[pre + name].expand(1, b, h * width) if n == "bias" else
                    torch.zeros(1, b, h * width, dtype=t.dtype) for n in added]
            t = torch.cat([t] + rows)
        return t.reshape(t.shape[0], b * h, width).transpose(0, 1)

    q = F.linear(query, wq, bq).reshape(lq, b * h, dh).transpose(0, 1)  # (B*H, L, Dh)
    k = heads(key, wk, bk, "bias_k", dh)  # (B*H, S, Dh)
    v = heads(value, wv, bv, "bias_v", dv)  # (B*H, S, Dv)
    lk += len(added)
    scores = torch.bmm(q, k.transpose(1, 2))  # (B*H, L, S)
    scores = scores * c["attn_scale"] if "attn_scale" in c else scores / math.sqrt(dh)
    mask = combined_mask(attn_mask, kpm, causal, b, h, lq, lk, scores.dtype)
    if mask is not None:
        scores = scores + mask
    if safe and mask is not None:
        dead = torch.isneginf(mask).all(dim=-1, keepdim=True)  # (B*H, L, 1)
        probs = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    else:
        probs = torch.softmax(scores, dim=-1)
    o = torch.bmm(probs, v).transpose(0, 1).reshape(lq, b, h * dv)  # (L, B, Av)
    o = F.linear(o, p[pre + "out_proj.weight"], p.get(pre + "out_proj.bias"))
    return o.transpose(0, 1) if batch_first else o


def fn_norm(p, pre, x, c):
    """LayerNorm (F.layer_norm), or RMSNorm: x / sqrt(mean(x^2) + eps) * weight (no bias), eps = layer_norm_eps."""
    eps = c["layer_norm_eps"]
    if c.get("norm_type", "layer_norm") == "rms_norm":
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * p[pre + "weight"]
    return F.layer_norm(x, (x.shape[-1],), p[pre + "weight"], p.get(pre + "bias"), eps)


def check_rms_norm(x, eps):
    """fn_norm's RMSNorm against an independent statement: F.layer_norm of [x, -x] (mean 0, biased variance
    mean(x^2)), first half."""
    d = x.shape[-1]
    w = torch.ones(d, dtype=x.dtype)
    ours = fn_norm({"weight": w}, "", x, {"layer_norm_eps": eps, "norm_type": "rms_norm"})
    twin = F.layer_norm(torch.cat([x, -x], dim=-1), (2 * d,), None, None, eps)[..., :d]
    e = float((ours - twin).abs().max()) / max(float(twin.abs().max()), 1e-300)
    assert e <= 1e-12, f"fn_norm rms_norm differs from the layer_norm twin by {e:.3g}"


def fn_activation(name, x):
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    a, g = x.chunk(2, dim=-1)  # gate = second half (F.glu's convention)
    if name == "glu":
        return a * torch.sigmoid(g)
    if name == "geglu":
        return a * F.gelu(g)
    if name == "swiglu":
        return a * F.silu(g)
    raise ValueError(name)


def fn_ffn(p, pre, c, x):
    hid = F.linear(x, p[pre + "linear1.weight"], p.get(pre + "linear1.bias"))
    return F.linear(fn_activation(c["activation"], hid), p[pre + "linear2.weight"], p.get(pre + "linear2.bias"))


def fn_encoder_layer(p, pre, c, x, mask, kpm, causal, safe=False):
    bf = c["batch_first"]

    def sa(y):
        return fn_mha(p, pre + "self_attn.", y, y, y, c, bf, mask, kpm, causal, safe)

    if c["norm_first"]:
        x = x + sa(fn_norm(p, pre + "norm1.", x, c))
        return x + fn_ffn(p, pre, c, fn_norm(p, pre + "norm2.", x, c))
    x = fn_norm(p, pre + "norm1.", x + sa(x), c)
    return fn_norm(p, pre + "norm2.", x + fn_ffn(p, pre, c, x), c)


def fn_decoder_layer(p, pre, c, x, mem, tmask, mmask, tkpm, mkpm, tcausal, mcausal, safe=False):
    bf = c["batch_first"]

    def sa(y):
        return fn_mha(p, pre + "self_attn.", y, y, y, c, bf, tmask, tkpm, tcausal, safe)

    def ca(y):
        return fn_mha(p, pre + "multihead_attn.", y, mem, mem, c, bf, mmask, mkpm, mcausal, safe)

    if c["norm_first"]:
        x = x + sa(fn_norm(p, pre + "norm1.", x, c))
        x = x + ca(fn_norm(p, pre + "norm2.", x, c))
        return x + fn_ffn(p, pre, c, fn_norm(p, pre + "norm3.", x, c))
    x = fn_norm(p, pre + "norm1.", x + sa(x), c)
    x = fn_norm(p, pre + "norm2.", x + ca(x), c)
    return fn_norm(p, pre + "norm3.", x + fn_ffn(p, pre, c, x), c)


def fn_encoder(p, pre, c, n_layers, final_norm, x, mask, kpm, causal, safe=False):
    """share_layers: layers.0's parameters (the same tensors, so autograd sums their gradients) at every depth."""
    for i in range(n_layers):
        j = 0 if c.get("share_layers") else i
        x = fn_encoder_layer(p, f"{pre}layers.{j}.", c, x, mask, kpm, causal, safe)
    return fn_norm(p, pre + "norm.", x, c) if final_norm else x


def fn_decoder(p, pre, c, n_layers, final_norm, x, mem, tmask, mmask, tkpm, mkpm, tcausal, mcausal, safe=False):
    for i in range(n_layers):
        j = 0 if c.get("share_layers") else i
        x = fn_decoder_layer(p, f"{pre}layers.{j}.", c, x, mem, tmask, mmask, tkpm, mkpm, tcausal, mcausal, safe)
    return fn_norm(p, pre + "norm.", x, c) if final_norm else x


def fn_forward(c, p, x, safe=False):
    """x: the inputs dict (float tensors, masks, python bool causal flags). Returns the output tensor."""
    m, g = c["module"], x.get
    if m == "MultiheadAttention":
        return fn_mha(p, "", x["query"], x["key"], x["value"], c, c["batch_first"],
                      g("attn_mask"), g("key_padding_mask"), g("is_causal", False), safe)
    if m == "TransformerEncoderLayer":
        return fn_encoder_layer(p, "", c, x["src"], g("src_mask"), g("src_key_padding_mask"), g("is_causal", False),
                                safe)
    if m == "TransformerEncoder":
        return fn_encoder(p, "", c, c["num_layers"], c["norm"], x["src"], g("mask"), g("src_key_padding_mask"),
                          g("is_causal", False), safe)
    if m == "TransformerDecoderLayer":
        return fn_decoder_layer(p, "", c, x["tgt"], x["memory"], g("tgt_mask"), g("memory_mask"),
                                g("tgt_key_padding_mask"), g("memory_key_padding_mask"), g("tgt_is_causal", False),
                                g("memory_is_causal", False), safe)
    if m == "TransformerDecoder":
        return fn_decoder(p, "", c, c["num_layers"], c["norm"], x["tgt"], x["memory"], g("tgt_mask"),
                          g("memory_mask"), g("tgt_key_padding_mask"), g("memory_key_padding_mask"),
                          g("tgt_is_causal", False), g("memory_is_causal", False), safe)
    if m == "Transformer":
        mem = fn_encoder(p, "encoder.", c, c["num_encoder_layers"], True, x["src"], g("src_mask"),
                         g("src_key_padding_mask"), g("src_is_causal", False), safe)
        return fn_decoder(p, "decoder.", c, c["num_decoder_layers"], True, x["tgt"], mem, g("tgt_mask"),
                          g("memory_mask"), g("tgt_key_padding_mask"), g("memory_key_padding_mask"),
                          g("tgt_is_causal", False), g("memory_is_causal", False), safe)
    raise ValueError(m)


# ------------------------------------------------------------------------------------------------------------------
# torch.nn: the module itself, and its call with raw masks (exact) or with all masks folded into one float
# (B*H, L, S) attn_mask per attention (the twin used to check the functional version where nn lacks an option).

def nn_activation(name):
    return (lambda t: F.gelu(t, approximate="tanh")) if name == "gelu_tanh" else name


def nn_build(c):
    m = c["module"]
    if m == "MultiheadAttention":
        kw = {k: c[k] for k in ("kdim", "vdim", "add_bias_kv", "add_zero_attn") if k in c}
        return nn.MultiheadAttention(c["embed_dim"], c["num_heads"], dropout=c["dropout"], bias=c["bias"],
                                     batch_first=c["batch_first"], **kw)
    kw = dict(dim_feedforward=c["dim_feedforward"], dropout=c["dropout"], activation=nn_activation(c["activation"]),
              layer_norm_eps=c["layer_norm_eps"], batch_first=c["batch_first"], norm_first=c["norm_first"])
    d, h, eps = c["d_model"], c["nhead"], c["layer_norm_eps"]
    if m == "TransformerEncoderLayer":
        return nn.TransformerEncoderLayer(d, h, **kw)
    if m == "TransformerDecoderLayer":
        return nn.TransformerDecoderLayer(d, h, **kw)
    if m == "TransformerEncoder":
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, **kw), c["num_layers"],
                                     norm=nn.LayerNorm(d, eps=eps) if c["norm"] else None,
                                     enable_nested_tensor=False)
    if m == "TransformerDecoder":
        return nn.TransformerDecoder(nn.TransformerDecoderLayer(d, h, **kw), c["num_layers"],
                                     norm=nn.LayerNorm(d, eps=eps) if c["norm"] else None)
    if m == "Transformer":
        return nn.Transformer(d, h, c["num_encoder_layers"], c["num_decoder_layers"], **kw)
    raise ValueError(m)


def folded_mask_loops(attn_mask, kpm, causal, b, h, lq, lk, dtype):
    """Element by element, independently of combined_mask (so the twin check also checks the mask logic):
    out[b*H + h, i, j] = A(attn_mask[.., i, j]) + A(kpm[b, j]) + (-inf if causal and j > i), A(bool) = 0 / -inf."""
    if attn_mask is None and kpm is None and not causal:
        return None
    ninf = float("-inf")

    def a(v):
        return (ninf if v else 0.0) if isinstance(v, bool) else v

    out = [[[0.0] * lk for _ in range(lq)] for _ in range(b * h)]
    for bb in range(b):
        for hh in range(h):
            for i in range(lq):
                for j in range(lk):
                    v = 0.0
                    if attn_mask is not None:
                        v += a((attn_mask[bb * h + hh] if attn_mask.dim() == 3 else attn_mask)[i, j].item())
                    if kpm is not None:
                        v += a(kpm[bb, j].item())
                    if causal and j > i:
                        v += ninf
                    out[bb * h + hh][i][j] = v
    return torch.tensor(out, dtype=dtype)


def nn_call(c, mod, x, fold):
    """Runs the nn module on inputs x. fold: pass every attention's masks (incl. causal) as one float
    (B*H, Lq, Lk) attn_mask built by combined_mask; else pass the raw masks (causal flags must be off)."""
    m, h, g = c["module"], c["nhead"], x.get
    shapes = seq_lengths(c, x)
    b = shapes["B"]

    def fm(mask, kpm, causal, lq, lk):
        dtype = next(iter(v for v in x.values() if torch.is_tensor(v) and v.is_floating_point())).dtype
        return folded_mask_loops(mask, kpm, causal, b, h, shapes[lq], shapes[lk], dtype)

    if m == "MultiheadAttention":
        if fold:
            kw = dict(attn_mask=fm(g("attn_mask"), g("key_padding_mask"), g("is_causal", False), "L", "S"))
        else:
            kw = dict(attn_mask=g("attn_mask"), key_padding_mask=g("key_padding_mask"))
        return mod(x["query"], x["key"], x["value"], need_weights=False, **kw)[0]
    if m in ("TransformerEncoderLayer", "TransformerEncoder"):
        mk = "src_mask" if m == "TransformerEncoderLayer" else "mask"
        if fold:
            kw = {mk: fm(g(mk), g("src_key_padding_mask"), g("is_causal", False), "L", "L")}
        else:
            kw = {mk: g(mk), "src_key_padding_mask": g("src_key_padding_mask")}
        return mod(x["src"], **kw)
    if fold:
        kw = dict(tgt_mask=fm(g("tgt_mask"), g("tgt_key_padding_mask"), g("tgt_is_causal", False), "L", "L"),
                  memory_mask=fm(g("memory_mask"), g("memory_key_padding_mask"), g("memory_is_causal", False),
                                 "L", "S"))
    else:
        kw = {k: g(k) for k in ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")}
    if m in ("TransformerDecoderLayer", "TransformerDecoder"):
        return mod(x["tgt"], x["memory"], **kw)
    if fold:
        kw["src_mask"] = fm(g("src_mask"), g("src_key_padding_mask"), g("src_is_causal", False), "S", "S")
    else:
        kw["src_mask"], kw["src_key_padding_mask"] = g("src_mask"), g("src_key_padding_mask")
    return mod(x["src"], x["tgt"], **kw)


def seq_lengths(c, x):
    m, bf = c["module"], c["batch_first"]
    out = {}
    for name, sym in INPUTS[m].items():
        t = x[name]
        out["B"] = t.shape[0] if bf else t.shape[1]
        out[sym] = t.shape[1] if bf else t.shape[0]
    return out


def nn_exact(c, case):
    """True when 1.13's torch.nn expresses this case as is (then nn is the reference)."""
    if case.safe or any(case.causal.values()) or is_variant(c) or is_layer_variant(c):
        return False
    if c["module"] != "MultiheadAttention" and (not c["bias"] or c["activation"] in GATED):
        return False
    # 1.13 combines a float key_padding_mask with an attn_mask by logical_or / masked_fill (as if bool), where
    # tfm (and PyTorch >= 2.0) add the float masks.
    for name, (kind, *_), in MASKS[c["module"]].items():
        if kind == "kpm" and case.masks.get(name, "").startswith("float"):
            partner = {"key_padding_mask": "attn_mask", "src_key_padding_mask": "src_mask" if "src_mask" in
                       MASKS[c["module"]] else "mask", "tgt_key_padding_mask": "tgt_mask",
                       "memory_key_padding_mask": "memory_mask"}[name]
            if partner in case.masks:
                return False
    return True


def nn_twin_possible(c):
    if is_variant(c):  # no nn twin: the functional attention is checked on the non-variant cases
        return False
    if c["module"] != "MultiheadAttention" and c["norm_type"] != "layer_norm":  # 1.13 has no nn.RMSNorm
        return False
    return c["activation"] in ("relu", "gelu", "gelu_tanh") if c["module"] != "MultiheadAttention" else True


def nn_keys(c, params):
    """Our key -> the torch.nn keys holding the same tensor. nn.Transformer* deep-copy their layer, so a shared
    layer (ours under layers.0.) becomes the same values loaded into every nn layer; its gradient is their sum."""
    if not c.get("share_layers"):
        return {k: [k] for k in params}
    counts = {"layers.": c.get("num_layers", 0), "encoder.layers.": c.get("num_encoder_layers", 0),
              "decoder.layers.": c.get("num_decoder_layers", 0)}
    out = {}
    for k in params:
        out[k] = [k]
        for pre, n in counts.items():
            if k.startswith(pre + "0."):
                out[k] = [f"{pre}{i}.{k[len(pre) + 2:]}" for i in range(n)]
    return out


def load_into_nn(mod, params):
    """Strict load of our keys; keys nn has that we lack must be biases (bias=False twin) and are zeroed."""
    sd = mod.state_dict()
    ours = set(params)
    unexpected = ours - set(sd)
    assert not unexpected, f"keys not in torch.nn's state_dict: {sorted(unexpected)}"
    full = {}
    for k, v in sd.items():
        if k in params:
            assert tuple(v.shape) == tuple(params[k].shape), f"{k}: {tuple(v.shape)} vs {tuple(params[k].shape)}"
            full[k] = params[k]
        else:
            assert k.endswith("bias"), f"torch.nn has a non-bias key we lack: {k}"
            full[k] = torch.zeros_like(v)
    mod.load_state_dict(full, strict=True)


# ------------------------------------------------------------------------------------------------------------------
# Running one path in one dtype, with gradients of sum(output * grad_output).

FLOAT_INPUTS = ("query", "key", "value", "src", "tgt", "memory")


def to_torch_inputs(inputs_np, dtype):
    x = {}
    for name, v in inputs_np.items():
        if name == "grad_output":
            continue
        if v.dtype == np.bool_ and v.ndim == 0:
            x[name] = bool(v)
        elif v.dtype == np.bool_:
            x[name] = torch.from_numpy(v.copy())
        else:
            t = torch.from_numpy(v.astype(np.float32)).to(dtype)  # masks too: same stored f32 values
            if name in FLOAT_INPUTS:
                t.requires_grad_(True)
            x[name] = t
    return x


def run_path(path, c, case, params_np, inputs_np, dtype):
    """path: "nn" (raw masks), "nn_folded" or "fn". Returns {name: float64 numpy} of output and grads."""
    x = to_torch_inputs(inputs_np, dtype)
    if path == "fn":
        p = {k: torch.from_numpy(v).to(dtype).requires_grad_(True) for k, v in params_np.items()}
        out = fn_forward(c, p, x, safe=case.safe)
        leaves = {k: [t] for k, t in p.items()}
    else:
        mod = nn_build(c)
        keys = nn_keys(c, params_np)
        load_into_nn(mod, {nk: torch.from_numpy(params_np[k]) for k, nks in keys.items() for nk in nks})
        mod = mod.to(dtype).eval()
        out = nn_call(c, mod, x, fold=(path == "nn_folded"))
        named = dict(mod.named_parameters())
        leaves = {k: [named[nk] for nk in nks] for k, nks in keys.items()}
    res = {"output": out.detach().double().numpy()}
    if "grad_output" in inputs_np:
        go = torch.from_numpy(inputs_np["grad_output"]).to(dtype)
        (out * go).sum().backward()
        for k, ts in leaves.items():
            g = ts[0].grad.detach().double().numpy()
            for t in ts[1:]:  # a shared layer's copies in nn
                g = g + t.grad.detach().double().numpy()
            res["grad." + k] = g
        for k in FLOAT_INPUTS:
            if k in x:
                res["grad." + k] = x[k].grad.detach().double().numpy()
    return res


def rel_err(a, ref):
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return float(np.max(np.abs(a - ref))) / (scale if scale > 0 else 1.0) if ref.size else 0.0


# ------------------------------------------------------------------------------------------------------------------
# Cases

class Case:
    """config: the config.json dict. B, L, S: batch, target/query length, source/key length.
    masks: {mask name: "bool" | "float" | "bool3d" | "float3d"}. causal: {flag name: bool} (written as 0-dim BOOL).
    grad: write grad_output and expect gradients. same_qkv: MHA query, key, value hold the same values.
    safe: the fully-masked-rows MHA case (see module docstring). conditioned: draw the weights and inputs again
    until the case is well-conditioned (well_conditioned; the live samples)."""

    def __init__(self, name, config, B=2, L=5, S=7, masks=None, causal=None, grad=True, same_qkv=False,
                 safe=False, note="", conditioned=False):
        self.name, self.config, self.B, self.L, self.S = name, config, B, L, S
        self.masks, self.causal = masks or {}, causal or {}
        self.grad, self.same_qkv, self.safe, self.note = grad, same_qkv, safe, note
        self.conditioned = conditioned


def make_mask(kind, role, shape_syms, dims, h, rng, p_block):
    b = dims["B"]
    if role == "kpm":
        shape = (b, dims[shape_syms[0]])
    elif kind.endswith("3d"):
        shape = (b * h, dims[shape_syms[0]], dims[shape_syms[1]])
    else:
        shape = (dims[shape_syms[0]], dims[shape_syms[1]])
    blocked = rng.random(shape) < p_block
    if kind.startswith("bool"):
        return blocked
    v = rng.standard_normal(shape).astype(np.float32)
    v[blocked] = -np.inf
    return v


def make_inputs(case, c, rng, p_block=0.25):
    m, bf = c["module"], c["batch_first"]
    dims = {"B": case.B, "L": case.L, "S": case.S}
    if m in ("TransformerEncoderLayer", "TransformerEncoder"):
        dims["S"] = case.L
    d = c["d_model"]
    width = {"key": c.get("kdim", d), "value": c.get("vdim", d)} if m == "MultiheadAttention" else {}
    x = {}
    for name, sym in INPUTS[m].items():
        w = width.get(name, d)
        shape = (dims["B"], dims[sym], w) if bf else (dims[sym], dims["B"], w)
        x[name] = rng.standard_normal(shape).astype(np.float32)
    if case.same_qkv:
        assert m == "MultiheadAttention" and case.L == case.S
        x["key"] = x["query"].copy()
        x["value"] = x["query"].copy()
    for name, kind in case.masks.items():
        role, *syms = MASKS[m][name]
        x[name] = make_mask(kind, role, syms, dims, c["nhead"], rng, p_block)
    for name, on in case.causal.items():
        assert name in CAUSAL[m], f"{case.name}: {name} is not a causal flag of {m}"
        x[name] = np.array(bool(on))
    return x


def no_dead_rows(c, params, x):
    with torch.no_grad():
        xt = to_torch_inputs(x, torch.float64)
        p = {k: torch.from_numpy(v).double() for k, v in params.items()}
        return bool(torch.isfinite(fn_forward(c, p, xt)).all())


def force_dead_rows(case, c, x):
    """The dedicated case: query 0 of batch 0 blocked from every key by key_padding_mask + attn_mask, and every
    query of the last batch by its key_padding_mask."""
    am, kpm = x["attn_mask"], x["key_padding_mask"]
    assert am.dtype == np.bool_ and am.ndim == 2 and kpm.dtype == np.bool_
    kpm[-1, :] = True
    kpm[0, :] = False
    kpm[0, 1::2] = True
    am[0, 0::2] = True


def check_close(what, a, ref, tol=1e-9):
    for k in ref:
        e = rel_err(a[k], ref[k])
        assert e <= tol, f"{what}: {k} differs by {e:.3g}"


# The bound parity_test.cc holds tfm to, per tensor: max(kFloor, kF32Factor * f32_err).
BOUND_FLOOR, BOUND_F32_FACTOR = 2e-5, 20.0


@contextlib.contextmanager
def exact_products():
    """F.linear and torch.bmm accumulated in float64 and rounded to float32 once (the bias included): a second
    float32 implementation of the same math, more accurate per product than PyTorch's own."""
    linear, bmm = F.linear, torch.bmm

    def linear64(a, w, b=None):
        y = linear(a.double(), w.double(), None if b is None else b.double())
        return y.to(a.dtype)

    def bmm64(a, b):
        return bmm(a.double(), b.double()).to(a.dtype)

    F.linear, torch.bmm = linear64, bmm64
    try:
        yield
    finally:
        F.linear, torch.bmm = linear, bmm


def well_conditioned(c, case, params, x, ref, f32):
    """None when the float32 implementation of exact_products() meets, on every tensor, the bound the test holds
    tfm to (derived from PyTorch's own float32 error, f32); else the first tensor where it does not, with that run's
    error and the bound. A draw it fails is ill-conditioned: float32 rounding anywhere moves the result by more than PyTorch's
    float32 run happened to, so the bound says nothing about an implementation there."""
    with exact_products():
        other = run_path("fn", c, case, params, x, torch.float32)
    for k in ref:
        bound = max(BOUND_FLOOR, BOUND_F32_FACTOR * rel_err(f32[k], ref[k]))
        if rel_err(other[k], ref[k]) > bound:
            return f"{k}: {rel_err(other[k], ref[k]):.2e} with exact products, bound {bound:.2e}"
    return None


def generate(case, out_dir, seed):
    cfg = dict(case.config)
    c = full_config(cfg)
    assert c["module"] in MODULES, c["module"]
    assert c["module"] == "MultiheadAttention" or c["activation"] in ACTIVATIONS, c["activation"]
    rng = np.random.default_rng([seed, zlib.crc32(case.name.encode())])
    why = None
    for _ in range(20 if case.conditioned else 1):
        params, x, ref, f32, exact, checked = draw_case(case, c, rng)
        why = well_conditioned(c, case, params, x, ref, f32) if case.conditioned else None
        if why is None:
            break
    else:
        raise RuntimeError(f"{case.name}: 20 draws, none well-conditioned (last: {why})")
    meta = {"format": FORMAT, "version": VERSION, "case": case.name, "reference": "torch.nn" if exact else
            "functional re-statement", "checked_against": checked, "torch_version": torch.__version__}
    if case.note:
        meta["note"] = case.note
    for k in ref:
        meta["f32_err." + k] = repr(rel_err(f32[k], ref[k]))

    d = os.path.join(out_dir, case.name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    st.save(os.path.join(d, "weights.safetensors"), params)
    # 4-byte tensors first, then the 1-byte masks and flags, so every F32 tensor starts 4-byte aligned.
    st.save(os.path.join(d, "inputs.safetensors"), sorted(x.items(), key=lambda kv: -kv[1].dtype.itemsize))
    st.save(os.path.join(d, "expected.safetensors"), {k: v.astype(np.float64) for k, v in ref.items()}, meta)
    return meta


def draw_case(case, c, rng):
    """One draw of the case's weights and inputs from rng, their float64 reference (checked against torch.nn where
    it can be) and PyTorch's float32 run: (params, inputs, ref, f32, exact, checked)."""
    params = random_params(c, rng)
    for attempt in range(200):
        # Redraw with ever sparser masks: short key lengths under several masks need it.
        x = make_inputs(case, c, rng, p_block=0.25 * 0.95 ** attempt)
        if case.safe:
            force_dead_rows(case, c, x)
            break
        if no_dead_rows(c, params, x):
            break
    else:
        raise RuntimeError(f"{case.name}: could not draw masks without fully-masked rows")
    if case.grad:
        probe = run_path("fn", c, case, params, x, torch.float64)
        x["grad_output"] = rng.standard_normal(probe["output"].shape).astype(np.float32)

    # The reference, and the functional version checked against torch.nn.
    exact = nn_exact(c, case)
    ref_path = "nn" if exact else "fn"
    ref = run_path(ref_path, c, case, params, x, torch.float64)
    for k, v in ref.items():
        assert np.all(np.isfinite(v)), f"{case.name}: reference {k} is not finite"
    fn64 = ref if ref_path == "fn" else run_path("fn", c, case, params, x, torch.float64)
    checked = "torch.nn" if exact else "none"
    if exact:
        check_close(f"{case.name}: functional vs torch.nn", fn64, ref)
    elif case.safe:
        nn_raw = run_path("nn", c, case, params, x, torch.float64)["output"]
        assert np.isnan(nn_raw).any(), f"{case.name}: expected torch.nn to give NaN on fully-masked rows"
        checked = "torch.nn gives NaN on the fully-masked rows (tfm and this reference: zero attention weights)"
    elif nn_twin_possible(c):
        twin = run_path("nn_folded", c, case, params, x, torch.float64)
        check_close(f"{case.name}: functional vs torch.nn twin", fn64, twin)
        checked = "torch.nn twin (zeroed biases, masks folded into one float attn_mask)"
        if c.get("share_layers"):
            checked += "; the shared layer loaded into every nn layer, gradients summed"
    if c.get("norm_type") == "rms_norm":
        for name in FLOAT_INPUTS:
            if name in x:
                check_rms_norm(torch.from_numpy(x[name]).double(), c["layer_norm_eps"])
        checked = "rms_norm: fn_norm against F.layer_norm of [x, -x] on the inputs (no nn.RMSNorm in 1.13)"
    # Sanity: the folded twin also equals nn on raw masks when both apply.
    if exact and not case.safe:
        check_close(f"{case.name}: folded vs raw masks", run_path("nn_folded", c, case, params, x, torch.float64),
                    ref)

    f32 = run_path(ref_path, c, case, params, x, torch.float32)
    return params, x, ref, f32, exact, checked


def layer(module, d=8, h=2, f=16, act="relu", nf=False, bf=False, bias=True, eps=None, dropout=0.1, **extra):
    cfg = {"module": module, "d_model": d, "nhead": h, "dim_feedforward": f, "dropout": dropout,
           "activation": act, "batch_first": bf, "norm_first": nf, "bias": bias}
    if eps is not None:
        cfg["layer_norm_eps"] = eps
    cfg.update(extra)
    return cfg


def mha(e=8, h=2, bias=True, bf=False, **extra):
    cfg = {"module": "MultiheadAttention", "embed_dim": e, "num_heads": h, "bias": bias, "batch_first": bf}
    cfg.update(extra)
    return cfg


def fixed_cases():
    E, ED, DL, D, T = ("TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
                       "TransformerDecoder", "Transformer")
    cs = [
        # ---- MultiheadAttention
        Case("mha_basic", mha()),
        Case("mha_batch_first_nobias", mha(e=12, h=3, bias=False, bf=True), B=3, L=4, S=6),
        Case("mha_qkv_same", mha(e=8, h=2), L=6, S=6, same_qkv=True,
             note="query, key, value hold equal values; each gets its own gradient"),
        Case("mha_kdim_vdim", mha(e=8, h=4, kdim=8, vdim=8, dropout=0.1), B=1, L=3, S=4),
        Case("mha_kdim_vdim_separate", mha(e=8, h=2, kdim=5, vdim=11), L=4, S=6,
             note="separate q/k/v projections: q_proj_weight (8, 8), k_proj_weight (8, 5), v_proj_weight (8, 11)"),
        Case("mha_kdim_only_bf_nobias_kpm", mha(e=6, h=3, bias=False, bf=True, kdim=4), B=3,
             masks={"key_padding_mask": "bool", "attn_mask": "float"}),
        Case("mha_vdim_only_head_dim", mha(e=8, h=2, vdim=3, head_dim=3, v_head_dim=5), L=3, S=5,
             note="separate projections with tfm's head widths: q_proj (6, 8), k_proj (6, 8), v_proj (10, 3)"),
        Case("mha_add_bias_kv", mha(e=8, h=2, add_bias_kv=True), L=4, S=6,
             masks={"attn_mask": "float", "key_padding_mask": "bool"},
             note="bias_k (1, 1, 8), bias_v (1, 1, 8) appended to every row's keys and values; the masks padded"),
        Case("mha_add_zero_attn_bf_nobias", mha(e=6, h=3, bias=False, bf=True, add_zero_attn=True), B=3, L=5, S=4,
             masks={"attn_mask": "bool3d", "key_padding_mask": "bool"}),
        Case("mha_add_bias_kv_zero_attn_causal", mha(e=8, h=2, add_bias_kv=True, add_zero_attn=True), L=5, S=5,
             masks={"key_padding_mask": "float"}, causal={"is_causal": True},
             note="both added positions; is_causal hides only the S keys beyond each query"),
        Case("mha_add_bias_kv_head_dim", mha(e=8, h=2, add_bias_kv=True, head_dim=3, v_head_dim=5), L=3, S=4,
             masks={"attn_mask": "bool"}, note="tfm's head widths: bias_k (1, 1, 6), bias_v (1, 1, 10)"),
        Case("mha_mask_bool2d", mha(), masks={"attn_mask": "bool"}),
        Case("mha_mask_float2d", mha(bf=True), masks={"attn_mask": "float"}),
        Case("mha_mask_bool3d", mha(e=12, h=3), masks={"attn_mask": "bool3d"}),
        Case("mha_mask_float3d", mha(bias=False), masks={"attn_mask": "float3d"}),
        Case("mha_kpm_bool", mha(), B=3, masks={"key_padding_mask": "bool"}),
        Case("mha_kpm_float", mha(bf=True), B=3, masks={"key_padding_mask": "float"}),
        Case("mha_kpm_bool_mask_float3d", mha(), masks={"key_padding_mask": "bool", "attn_mask": "float3d"}),
        Case("mha_kpm_float_mask_float", mha(), masks={"key_padding_mask": "float", "attn_mask": "float"}),
        Case("mha_kpm_float_mask_bool", mha(bf=True), masks={"key_padding_mask": "float", "attn_mask": "bool"}),
        Case("mha_causal", mha(), L=6, S=6, causal={"is_causal": True}),
        Case("mha_causal_rect", mha(bf=True), L=5, S=7, causal={"is_causal": True},
             note="causal on a rectangular (L, S): key j > query i blocked"),
        Case("mha_causal_kpm", mha(), L=6, S=6, masks={"key_padding_mask": "bool"}, causal={"is_causal": True}),
        Case("mha_causal_mask_float", mha(), L=6, S=6, masks={"attn_mask": "float"}, causal={"is_causal": True}),
        Case("mha_not_causal_flag", mha(), masks={"attn_mask": "bool"}, causal={"is_causal": False}),
        Case("mha_head_width1", mha(e=4, h=4), L=3, S=5),
        Case("mha_single_token", mha(), B=2, L=1, S=1),
        Case("mha_long", mha(e=24, h=3), B=1, L=17, S=19, masks={"key_padding_mask": "bool"}),
        Case("mha_no_grad", mha(e=16, h=4), grad=False),
        Case("mha_fully_masked_rows", mha(), B=3, L=4, S=5, masks={"attn_mask": "bool", "key_padding_mask": "bool"},
             safe=True, note="query 0 of batch 0 and every query of batch 2 have all keys masked: tfm gives "
             "zero attention (output row = out_proj.bias); reference = attention weights of those rows zeroed"),
        # ---- TransformerEncoderLayer: activations x norm placement x layout x bias
        Case("enc_layer_relu_post", layer(E, act="relu")),
        Case("enc_layer_gelu_pre_bf", layer(E, act="gelu", nf=True, bf=True)),
        Case("enc_layer_gelu_tanh_post_bf", layer(E, act="gelu_tanh", bf=True)),
        Case("enc_layer_glu_pre", layer(E, act="glu", nf=True)),
        Case("enc_layer_geglu_post_nobias", layer(E, act="geglu", bias=False)),
        Case("enc_layer_swiglu_pre_bf_nobias", layer(E, act="swiglu", nf=True, bf=True, bias=False)),
        Case("enc_layer_relu_pre_nobias", layer(E, d=12, h=3, act="relu", nf=True, bias=False)),
        Case("enc_layer_gelu_tanh_pre_nobias", layer(E, act="gelu_tanh", nf=True, bias=False), B=1),
        Case("enc_layer_eps", layer(E, act="gelu", eps=1e-2), note="non-default layer_norm_eps"),
        Case("enc_layer_masks_bool", layer(E, bf=True), B=3, masks={"src_mask": "bool",
                                                                    "src_key_padding_mask": "bool"}),
        Case("enc_layer_masks_float", layer(E, nf=True), masks={"src_mask": "float", "src_key_padding_mask": "float"}),
        Case("enc_layer_mask3d", layer(E, act="gelu"), masks={"src_mask": "bool3d"}),
        Case("enc_layer_causal", layer(E, nf=True, bf=True), L=7, causal={"is_causal": True}),
        Case("enc_layer_causal_kpm", layer(E, act="swiglu"), L=6, masks={"src_key_padding_mask": "bool"},
             causal={"is_causal": True}),
        Case("enc_layer_head_width1", layer(E, d=6, h=6, f=12, nf=True), L=4),
        Case("enc_layer_single_token", layer(E, act="gelu"), B=3, L=1),
        Case("enc_layer_long", layer(E, d=16, h=4, f=24, act="gelu", bf=True), B=1, L=17,
             masks={"src_key_padding_mask": "bool"}),
        Case("enc_layer_defaults", {"module": E, "d_model": 8, "nhead": 2}, B=2, L=3, grad=False,
             note="every other argument at PyTorch's default (dim_feedforward 2048, relu, post-norm, seq-first)"),
        Case("enc_layer_no_grad_pre", layer(E, d=16, h=2, f=32, act="geglu", nf=True), grad=False),
        # ---- TransformerEncoder
        Case("notebook_encoder", layer(ED, d=4, h=2, f=64, act="gelu", nf=True, bf=True, dropout=0.2, num_layers=3,
                                       norm=False), B=2, L=5,
             note="the test notebook's model: 3-layer pre-norm encoder, d_model 4, 2 heads, FFN 64, GELU, dropout "
             "0.2 (eval)"),
        Case("encoder_norm_post", layer(ED, num_layers=2, norm=True), L=6, masks={"mask": "float",
                                                                                 "src_key_padding_mask": "bool"}),
        Case("encoder_nonorm_pre_bf", layer(ED, act="gelu_tanh", nf=True, bf=True, num_layers=2, norm=False)),
        Case("encoder_norm_nobias_swiglu", layer(ED, act="swiglu", nf=True, bias=False, num_layers=2, norm=True),
             masks={"src_key_padding_mask": "float"}),
        Case("encoder_causal_glu", layer(ED, d=12, h=2, act="glu", bf=True, num_layers=3, norm=True), L=6,
             causal={"is_causal": True}, masks={"mask": "bool"}),
        Case("encoder_eps_no_grad", layer(ED, act="relu", nf=True, eps=1e-3, num_layers=2, norm=True), grad=False),
        # ---- TransformerDecoderLayer
        Case("dec_layer_relu_post", layer(DL, act="relu")),
        Case("dec_layer_gelu_pre_bf", layer(DL, act="gelu", nf=True, bf=True), L=4, S=6),
        Case("dec_layer_masks", layer(DL, act="gelu_tanh"), B=3, L=5, S=6,
             masks={"tgt_mask": "float", "memory_mask": "bool", "tgt_key_padding_mask": "bool",
                    "memory_key_padding_mask": "bool"}),
        Case("dec_layer_masks_float_kpm", layer(DL, nf=True, bf=True), L=5, S=6,
             masks={"tgt_mask": "bool3d", "memory_mask": "float3d", "tgt_key_padding_mask": "float",
                    "memory_key_padding_mask": "float"}),
        Case("dec_layer_tgt_causal", layer(DL, act="geglu", nf=True), L=6, S=4, masks={"tgt_key_padding_mask": "bool"},
             causal={"tgt_is_causal": True, "memory_is_causal": False}),
        Case("dec_layer_memory_causal", layer(DL, bf=True, bias=False), L=5, S=5,
             causal={"tgt_is_causal": True, "memory_is_causal": True}),
        Case("dec_layer_nobias_swiglu", layer(DL, act="swiglu", bias=False), L=3, S=8),
        Case("dec_layer_head_width1_single", layer(DL, d=4, h=4, f=8, nf=True), B=2, L=1, S=1),
        Case("dec_layer_eps_glu", layer(DL, act="glu", eps=1e-3, nf=True, bias=False), L=4, S=3),
        # ---- TransformerDecoder
        Case("decoder_norm_pre", layer(D, nf=True, num_layers=2, norm=True), L=4, S=6,
             masks={"memory_key_padding_mask": "bool"}),
        Case("decoder_nonorm_post_bf", layer(D, act="gelu", bf=True, num_layers=2, norm=False), L=5, S=3,
             masks={"tgt_mask": "bool"}),
        Case("decoder_causal_nobias", layer(D, act="gelu_tanh", nf=True, bias=False, num_layers=2, norm=True),
             L=6, S=5, masks={"tgt_key_padding_mask": "bool"}, causal={"tgt_is_causal": True}),
        # ---- Transformer
        Case("transformer_post", layer(T, num_encoder_layers=2, num_decoder_layers=2), B=2, L=4, S=6),
        Case("transformer_pre_bf_masks", layer(T, d=12, h=3, f=20, act="gelu", nf=True, bf=True,
                                               num_encoder_layers=1, num_decoder_layers=2), B=3, L=5, S=7,
             masks={"src_mask": "float", "tgt_mask": "bool", "memory_mask": "float",
                    "src_key_padding_mask": "bool", "tgt_key_padding_mask": "bool",
                    "memory_key_padding_mask": "bool"}),
        Case("transformer_nobias_geglu_causal", layer(T, act="geglu", nf=True, bias=False, num_encoder_layers=2,
                                                      num_decoder_layers=1), L=6, S=5,
             masks={"src_key_padding_mask": "bool"}, causal={"src_is_causal": False, "tgt_is_causal": True}),
        Case("transformer_src_causal_eps", layer(T, act="gelu_tanh", eps=1e-4, num_encoder_layers=1,
                                                 num_decoder_layers=1), L=3, S=6,
             causal={"src_is_causal": True, "memory_is_causal": True}),
        Case("transformer_no_grad", layer(T, d=16, h=4, f=24, act="swiglu", bf=True, num_encoder_layers=1,
                                          num_decoder_layers=1), grad=False, L=9, S=9,
             masks={"tgt_mask": "float", "memory_key_padding_mask": "float"}),
        # ---- attention variants (head widths independent of d_model, bias switches, scale): functional reference
        Case("enc_layer_head_dim16_post_noqkvbias", layer(E, d=16, h=4, f=32, head_dim=16, qkv_bias=False,
                                                          out_bias=False), L=6,
             note="inner width 64 on d_model 16; biased FFN and norms"),
        Case("enc_layer_head_dim16_pre_noqkvbias", layer(E, d=16, h=4, f=32, act="gelu", nf=True, bf=True,
                                                         head_dim=16, qkv_bias=False, out_bias=False), L=6,
             masks={"src_key_padding_mask": "bool"}),
        Case("dec_layer_v_head_dim_scale_masks", layer(DL, d=8, h=2, f=16, head_dim=3, v_head_dim=5, attn_scale=0.3),
             B=3, L=5, S=6, masks={"tgt_mask": "bool", "memory_mask": "float", "tgt_key_padding_mask": "bool",
                                   "memory_key_padding_mask": "bool"}),
        Case("dec_layer_v_head_dim_scale_causal_pre", layer(DL, d=8, h=2, f=16, nf=True, head_dim=6, v_head_dim=2,
                                                            attn_scale=0.7, out_bias=False), L=6, S=4,
             masks={"memory_key_padding_mask": "bool"}, causal={"tgt_is_causal": True}),
        Case("mha_head_dim", mha(e=8, h=2, head_dim=6), masks={"attn_mask": "bool", "key_padding_mask": "bool"}),
        Case("mha_head_dim_v_head_dim_out_bias_only", mha(e=8, h=2, bias=False, bf=True, head_dim=5, v_head_dim=7,
                                                          out_bias=True, attn_scale=0.25), L=6, S=6, same_qkv=True,
             causal={"is_causal": True}),
        # ---- layer variants: RMSNorm (functional reference), bias switches and shared layers (torch.nn twin),
        # drop_path (the identity in eval: torch.nn itself where nothing else is a variant)
        Case("enc_layer_rms_post", layer(E, norm_type="rms_norm"), masks={"src_key_padding_mask": "bool"}),
        Case("enc_layer_rms_pre_bf_eps", layer(E, act="gelu", nf=True, bf=True, eps=1e-3, norm_type="rms_norm"),
             masks={"src_mask": "float"}),
        Case("dec_layer_rms_pre_masks", layer(DL, act="gelu", nf=True, norm_type="rms_norm"), B=3, L=5, S=6,
             masks={"tgt_mask": "bool", "memory_key_padding_mask": "bool"}),
        Case("dec_layer_rms_post_nobias_causal", layer(DL, bf=True, bias=False, norm_type="rms_norm"), L=6, S=4,
             causal={"tgt_is_causal": True}),
        Case("encoder_rms_pre_final_norm", layer(ED, act="swiglu", nf=True, norm_type="rms_norm", num_layers=2,
                                                 norm=True), masks={"src_key_padding_mask": "bool"}),
        Case("decoder_rms_post_final_norm", layer(D, norm_type="rms_norm", num_layers=2, norm=True), L=4, S=6,
             masks={"memory_key_padding_mask": "bool"}, causal={"tgt_is_causal": True}),
        Case("transformer_rms_pre", layer(T, act="gelu", nf=True, bf=True, norm_type="rms_norm",
                                          num_encoder_layers=1, num_decoder_layers=1), L=4, S=5,
             causal={"tgt_is_causal": True}),
        Case("enc_layer_no_norm_bias", layer(E, act="gelu", norm_bias=False), masks={"src_mask": "bool"}),
        Case("enc_layer_no_ffn_bias_pre_bf", layer(E, nf=True, bf=True, ffn_bias=False)),
        Case("dec_layer_ffn_bias_only", layer(DL, act="gelu", bias=False, ffn_bias=True), L=4, S=6,
             masks={"memory_mask": "float"}),
        Case("dec_layer_norm_bias_only_pre", layer(DL, nf=True, bias=False, norm_bias=True, qkv_bias=False,
                                                   out_bias=True), L=5, S=3),
        Case("notebook_encoder_shared", layer(ED, d=4, h=2, f=64, act="gelu", nf=True, bf=True, dropout=0.2,
                                              num_layers=3, norm=True, share_layers=True), B=2, L=5,
             masks={"src_key_padding_mask": "bool"},
             note="one pre-norm layer (d_model 4, 2 heads, FFN 64, GELU) applied 3 times, final norm"),
        Case("encoder_shared_post_causal", layer(ED, num_layers=2, norm=False, share_layers=True), L=6,
             causal={"is_causal": True}),
        Case("decoder_shared_rms_masks", layer(D, act="gelu_tanh", nf=True, norm_type="rms_norm", num_layers=3,
                                               norm=True, share_layers=True), L=5, S=4,
             masks={"tgt_key_padding_mask": "bool", "memory_mask": "bool"}),
        Case("transformer_shared_post", layer(T, num_encoder_layers=2, num_decoder_layers=3, share_layers=True),
             L=4, S=5, masks={"src_key_padding_mask": "bool"}),
        Case("transformer_shared_rms_nobias_pre", layer(T, act="geglu", nf=True, bias=False, ffn_bias=True,
                                                        norm_type="rms_norm", num_encoder_layers=2,
                                                        num_decoder_layers=2, share_layers=True), L=5, S=4,
             causal={"tgt_is_causal": True}),
        Case("enc_layer_drop_path_eval", layer(E, act="gelu", nf=True, drop_path=0.3),
             masks={"src_key_padding_mask": "bool"}, note="drop_path is training-only: the identity in eval"),
        Case("decoder_drop_path_eval_shared", layer(D, bf=True, drop_path=0.1, num_layers=2, norm=True,
                                                    share_layers=True), L=4, S=5),
    ]
    names = [c.name for c in cs]
    assert len(names) == len(set(names))
    return cs


def sample_cases(k, seed):
    """k random cases over the option space (for the live check in CI)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(k):
        m = MODULES[rng.integers(len(MODULES))]
        h = int(rng.choice([1, 2, 3, 4]))
        dh = int(rng.choice([1, 2, 3, 4, 5, 8]))
        d = h * dh
        if m != "MultiheadAttention" and d <= 2:
            # A LayerNorm over one feature outputs its bias whatever its input, over two features ±1 up to
            # O(eps / variance): every gradient before it is then rounding noise, or of the order of eps, which
            # two correct float64 paths need not agree on to 1e-9. Widen to 3 or 4 without a draw, so the draws
            # below keep their meaning.
            dh = 3 if h == 1 else 2
            d = h * dh
        bf, bias = bool(rng.integers(2)), bool(rng.integers(2))
        B, L, S = int(rng.integers(1, 4)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
        if m == "MultiheadAttention":
            cfg = mha(e=d, h=h, bias=bias, bf=bf)
        else:
            extra = {}
            if m in ("TransformerEncoder", "TransformerDecoder"):
                extra = dict(num_layers=int(rng.integers(1, 4)), norm=bool(rng.integers(2)))
            if m == "Transformer":
                extra = dict(num_encoder_layers=int(rng.integers(1, 3)), num_decoder_layers=int(rng.integers(1, 3)))
            cfg = layer(m, d=d, h=h, f=int(rng.integers(1, 25)), act=ACTIVATIONS[rng.integers(len(ACTIVATIONS))],
                        nf=bool(rng.integers(2)), bf=bf, bias=bias,
                        eps=float(rng.choice([1e-5, 1e-3])), **extra)
        masks = {}
        for name, (role, *_) in MASKS[m].items():
            r = rng.random()
            if r < 0.35:
                kinds = ["bool", "float"] + (["bool3d", "float3d"] if role == "attn" else [])
                masks[name] = kinds[rng.integers(len(kinds))]
        causal = {}
        for name in CAUSAL[m]:
            if rng.random() < 0.3:
                causal[name] = bool(rng.random() < 0.8)
        same = m == "MultiheadAttention" and rng.random() < 0.2
        if same:
            S = L
        # The attention variants, drawn last so the draws above keep their meaning.
        if m == "MultiheadAttention" and not same and rng.random() < 0.2:
            cfg["kdim"], cfg["vdim"] = int(rng.integers(1, 10)), int(rng.integers(1, 10))
        if rng.random() < 0.3:
            cfg["head_dim"] = int(rng.choice([1, 2, 3, 5, 8]))
        if rng.random() < 0.2:
            cfg["v_head_dim"] = int(rng.choice([1, 2, 3, 5, 8]))
        if rng.random() < 0.2:
            cfg["attn_scale"] = float(rng.uniform(0.1, 1.0))
        for key in ("qkv_bias", "out_bias"):
            if rng.random() < 0.2:
                cfg[key] = bool(rng.integers(2))
        # The layer variants, after the attention variants for the same reason.
        if m != "MultiheadAttention":
            if rng.random() < 0.3:
                cfg["norm_type"] = "rms_norm"
            if rng.random() < 0.2:
                cfg["ffn_bias"] = bool(rng.integers(2))
            if rng.random() < 0.2:
                cfg["norm_bias"] = bool(rng.integers(2)) and cfg.get("norm_type") != "rms_norm"
            if m in ("TransformerEncoder", "TransformerDecoder", "Transformer") and rng.random() < 0.3:
                cfg["share_layers"] = True
            if rng.random() < 0.2:
                cfg["drop_path"] = float(rng.uniform(0.0, 0.5))
        # add_bias_kv / add_zero_attn, drawn after everything else.
        if m == "MultiheadAttention" and rng.random() < 0.2:
            cfg["add_bias_kv"] = bool(rng.integers(2))
            cfg["add_zero_attn"] = not cfg["add_bias_kv"] or bool(rng.integers(2))
        out.append(Case(f"sample_{seed}_{i:03d}", cfg, B=B, L=L, S=S, masks=masks, causal=causal,
                        grad=bool(rng.random() < 0.85), same_qkv=same, conditioned=True))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (one subdirectory per case)")
    ap.add_argument("--seed", type=int, default=0, help="base seed (fixed list: 0)")
    ap.add_argument("--sample", type=int, default=0, help="instead of the fixed list, K random cases")
    ap.add_argument("--only", default="", help="comma-separated case names (fixed list only)")
    ap.add_argument("--clean", action="store_true", help="remove case directories not generated by this run")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cases = sample_cases(a.sample, a.seed) if a.sample else fixed_cases()
    if a.only:
        keep = set(a.only.split(","))
        cases = [c for c in cases if c.name in keep]
    os.makedirs(a.out, exist_ok=True)
    worst = []
    for case in cases:
        meta = generate(case, a.out, a.seed)
        errs = {k[8:]: float(v) for k, v in meta.items() if k.startswith("f32_err.")}
        top = max(errs, key=errs.get)
        worst.append((errs[top], case.name, top))
        print(f"{case.name:40s} ref={meta['reference'][:8]:8s} tensors={len(errs):3d} "
              f"max f32_err={errs[top]:.2e} ({top})")
    if a.clean:
        names = {c.name for c in cases}
        for entry in os.listdir(a.out):
            if entry not in names and os.path.isdir(os.path.join(a.out, entry)):
                shutil.rmtree(os.path.join(a.out, entry))
    print(f"wrote {len(cases)} cases to {a.out}")


if __name__ == "__main__":
    main()
