#!/usr/bin/env python3
"""torch_models.py — the PyTorch twins of tfm's three sequence models (include/tfm/models/config.h), with the same
attribute names and therefore the same state_dict keys, plus helpers to load a tfm model directory into them.

    import sys; sys.path.insert(0, "tools")
    import torch_models as tm
    model, cfg = tm.load_tfm_model("runs/reverse")       # config.json + model.safetensors
    logits = model(src_ids)                              # arch "encoder": (B, S, V)
    logits = model(src_ids, tgt_in_ids)                  # arch "seq2seq": (B, T, V)
    logits = model(ids)                                  # arch "decoder": (B, T, V), next-token logits

Architectures (tfm's include/tfm/models/config.h and the family files src/models/*_model.cc explain the choices):
  encoder  — embedding → + positions → dropout → nn.TransformerEncoder (final norm only with norm_first)
             → generator Linear. No √D scaling unless scale_embeddings.
  seq2seq  — src/tgt embeddings · √D → + positions → dropout → nn.Transformer (both final norms; causal target mask;
             padding masks) → generator Linear (optionally tied to tgt_embedding.weight); xavier_uniform_ on every
             parameter with more than one dimension.
  decoder  — a GPT-style language model: embedding → + positions → dropout → nn.TransformerEncoder with the causal
             mask and a final norm (key prefix decoder.) → generator Linear without bias (tied to embedding.weight
             unless tie_embeddings is false); GPT-2 initialisation: N(0, 0.02) for every matrix, N(0, 0.02/√(2·L))
             for out_proj.weight and linear2.weight, zero biases.
Architecture-dependent defaults (None in a config: the architecture's, as tfm's ModelConfig): norm_first, activation,
positional, scale_embeddings and tie_embeddings (arch_defaults below).
Positions: positional "sinusoidal" (a buffer), "learned" (nn.Embedding(max_len, D) tables pos_embedding, or
src_pos_embedding and tgt_pos_embedding, created after the xavier loop and initialised N(0, 0.02) as in tfm), "none".
Layer variants (head_dim, v_head_dim, bias, qkv_bias, out_bias, ffn_bias, norm_bias, attn_scale, norm_type rms_norm,
share_layers, drop_path): torch 1.13's nn.Transformer* classes have none of them, so a config that sets any runs
functional re-statements of the same layers (Attention, Norm, EncoderLayer, DecoderLayer, Encoder, Decoder,
Transformer below) with the same attribute names, hence the same state_dict keys; with every variant at its default
the torch.nn classes themselves run.
Activations: relu, gelu, gelu_tanh, and tfm's gated glu, geglu and swiglu (linear1 2F wide, [a | b] → a·g(b), GATED
below), which torch.nn 1.13's layers lack: a model with a gated activation runs the functional re-statements.

GPT-2 (Gpt2, Gpt2LMHead below): a twin in Hugging Face's key names and Conv1D layout, for tfm's GPT-2 import and
export (include/tfm/models/gpt2.h): load_gpt2(HF_DIR), and as scripts `torch_models.py gpt2-make DIR ...` (a random
GPT-2 folder with a synthetic tokenizer of GPT-2's format) and `torch_models.py gpt2-grads DIR` (grads() for it).

Run as a script, `torch_models.py train DIR` is PyTorch's side of the training-curve checks
(tests/models/model_test.cc): it loads DIR/config.json + DIR/model.safetensors (initial weights, dropout 0) and
DIR/batches.safetensors (src (steps, B, S), tgt_out (steps, B, S or T), tgt_in (steps, B, T) for seq2seq: ids; the
metadata "lr" and, optionally, "optimizer" (adam | adamw), "beta1", "beta2", "weight_decay" and "decay_params"
(all | matrices: weight decay only on parameters of two or more dimensions, a second parameter group with weight
decay 0)), trains with torch.optim.Adam / AdamW (hyper-parameters rounded to float32, like tfm's float arguments) on
every batch in turn, in float32 and in float64 from the same start, and writes DIR/torch_losses.json =
{"float32": [...], "float64": [...]}. `torch_models.py grads DIR` computes the gradients of the first batch instead
(grads() says what it writes).
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfm_safetensors  # noqa: E402

def _load_torch_import():
    """python/tfm/torch_import.py, loaded by path (it needs neither the built package nor torch): its tables of
    tfm's config defaults are the one copy of them in Python."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python", "tfm", "torch_import.py")
    spec = importlib.util.spec_from_file_location("tfm_torch_import", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_TI = _load_torch_import()

# tfm's ModelConfig defaults (include/tfm/models/config.h). None for activation, norm_first, positional,
# scale_embeddings and tie_embeddings: the architecture's choice (arch_defaults); None for the attention variants:
# derived from the others.
DEFAULTS = {"src_vocab_size": 0, "tgt_vocab_size": 0, **_TI._MODEL_DEFAULTS, **_TI._LAYER_DEFAULTS,
            **dict.fromkeys(_TI._FAMILY_DEFAULTS["encoder"]),
            **dict.fromkeys(("head_dim", "v_head_dim", "qkv_bias", "out_bias", "ffn_bias", "norm_bias", "attn_scale"))}

# The layer variants and the value of each that is torch.nn's layer (None: derived from the others).
VARIANTS = {"head_dim": None, "v_head_dim": None, "bias": True, "qkv_bias": None, "out_bias": None,
            "ffn_bias": None, "norm_bias": None, "attn_scale": None, "norm_type": "layer_norm",
            "share_layers": False, "drop_path": 0.0}


def arch_defaults(c):
    """A config with the architecture-dependent fields left None resolved as tfm's ModelConfig does."""
    c = dict(c)
    for key, value in _TI._FAMILY_DEFAULTS[c["arch"]].items():
        if c[key] is None:
            c[key] = value
    return c


def lm_layers(c):
    """A language model's (arch decoder) stack size: num_decoder_layers, or in config.json files written before
    tfm sized that stack by num_decoder_layers, their num_encoder_layers (>= 1 there, 0 in files written since)."""
    return c["num_encoder_layers"] if c["num_encoder_layers"] > 0 else c["num_decoder_layers"]


# The gated activations (include/tfm/ops/activation.h): x (..., 2F) = [a | b] → a · g(b) (..., F), F.glu's convention
# (the gate is the second half); linear1 is then 2F wide. torch.nn's layers have none: such models take the functional
# path.
GATED = {"glu": torch.sigmoid, "geglu": F.gelu, "swiglu": F.silu}


def _activation(name):
    if name in ("relu", "gelu"):
        return name
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name in GATED:
        gate = GATED[name]
        return lambda x: (lambda a, b: a * gate(b))(*x.chunk(2, dim=-1))
    raise ValueError(f"activation '{name}' has no torch.nn 1.13 equivalent here")


# ---- functional re-statements of the layers, for the variants torch.nn 1.13 lacks ------------------------------------
# Shapes: B batch, T query length, S key length, D width, H heads, Dh query/key head width, Dv value head width,
# A = H·Dh, Av = H·Dv. batch_first throughout (the models' layout).

def layer_variant(c):
    """The resolved layer options of a model config: every variant with its default filled in."""
    v = {k: c[k] for k in VARIANTS}
    h = c["nhead"]
    if v["head_dim"] is None:
        if c["d_model"] % h:
            raise ValueError(f"d_model {c['d_model']} not divisible by nhead {h} (and no head_dim)")
        v["head_dim"] = c["d_model"] // h
    if v["v_head_dim"] is None:
        v["v_head_dim"] = v["head_dim"]
    for k in ("qkv_bias", "out_bias", "ffn_bias"):
        if v[k] is None:
            v[k] = v["bias"]
    if v["norm_bias"] is None:
        v["norm_bias"] = v["bias"] and v["norm_type"] == "layer_norm"
    if v["norm_type"] == "rms_norm" and v["norm_bias"]:
        raise ValueError("norm_bias true with norm_type rms_norm")
    if v["attn_scale"] is None:
        v["attn_scale"] = 1.0 / math.sqrt(v["head_dim"])
    return v


def uses_variants(c):
    return any(c[k] != d for k, d in VARIANTS.items()) or c["activation"] in GATED


class Attention(nn.Module):
    """nn.MultiheadAttention's keys and numbers (need_weights=False) with independent head widths, bias switches
    and scale: in_proj_weight (2A + Av, D) with the q, k, v rows in that order, in_proj_bias, out_proj (D, Av)."""

    def __init__(self, d, h, dh, dv, dropout, qkv_bias, out_bias, scale):
        super().__init__()
        self.h, self.dh, self.dv, self.p, self.scale = h, dh, dv, dropout, scale
        self.in_proj_weight = nn.Parameter(torch.empty(2 * h * dh + h * dv, d))
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.in_proj_bias = nn.Parameter(torch.zeros(2 * h * dh + h * dv)) if qkv_bias else None
        self.out_proj = nn.Linear(h * dv, d, bias=out_bias)
        if out_bias:
            nn.init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        """query (B, T, D), key/value (B, S, D); attn_mask (T, S) additive; key_padding_mask (B, S) bool."""
        b, t, _ = query.shape
        s = key.shape[1]
        a = self.h * self.dh
        w, bias = self.in_proj_weight, self.in_proj_bias
        bq, bk, bv = (bias[:a], bias[a:2 * a], bias[2 * a:]) if bias is not None else (None, None, None)
        q = F.linear(query, w[:a], bq).reshape(b, t, self.h, self.dh).transpose(1, 2)  # (B, H, T, Dh)
        k = F.linear(key, w[a:2 * a], bk).reshape(b, s, self.h, self.dh).transpose(1, 2)  # (B, H, S, Dh)
        v = F.linear(value, w[2 * a:], bv).reshape(b, s, self.h, self.dv).transpose(1, 2)  # (B, H, S, Dv)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # (B, H, T, S)
        if attn_mask is not None:
            scores = scores + attn_mask.to(scores.dtype)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        probs = F.dropout(torch.softmax(scores, dim=-1), self.p, self.training)
        o = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, self.h * self.dv)  # (B, T, Av)
        return self.out_proj(o)


class Norm(nn.Module):
    """layer_norm: nn.LayerNorm (weight, optional bias); rms_norm: y = x / sqrt(mean(x²) + eps) · weight."""

    def __init__(self, d, eps, norm_type, bias):
        super().__init__()
        self.eps, self.norm_type = eps, norm_type
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x):
        if self.norm_type == "layer_norm":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def drop_path(x, p, training):
    """Stochastic depth: each sample's branch (B, ...) kept with probability 1 − p and scaled by 1/(1 − p)."""
    if not training or p == 0:
        return x
    keep = (torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), dtype=x.dtype) >= p).to(x.dtype)
    return x * keep / (1 - p)


class _Layer(nn.Module):
    def _build(self, c, v, attn_names, norms):
        d, h = c["d_model"], c["nhead"]
        for name in attn_names:
            setattr(self, name, Attention(d, h, v["head_dim"], v["v_head_dim"], c["dropout"], v["qkv_bias"],
                                          v["out_bias"], v["attn_scale"]))
        gated = 2 if c["activation"] in GATED else 1  # [a | b] for a gated activation
        self.linear1 = nn.Linear(d, gated * c["dim_feedforward"], bias=v["ffn_bias"])
        self.dropout = nn.Dropout(c["dropout"])
        self.linear2 = nn.Linear(c["dim_feedforward"], d, bias=v["ffn_bias"])
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", Norm(d, c["layer_norm_eps"], v["norm_type"], v["norm_bias"]))
            setattr(self, f"dropout{i}", nn.Dropout(c["dropout"]))
        self.act = _activation(c["activation"])
        self.norm_first, self.p_path = c["norm_first"], v["drop_path"]

    def _ff(self, x):
        act = self.act if callable(self.act) else getattr(F, self.act)
        return self.linear2(self.dropout(act(self.linear1(x))))

    def _residual(self, x, i, branch):
        """Post-norm: norm_i(x + path(drop_i(f(x)))); pre-norm: x + path(drop_i(f(norm_i(x))))."""
        norm, drop = getattr(self, f"norm{i}"), getattr(self, f"dropout{i}")
        if self.norm_first:
            return x + drop_path(drop(branch(norm(x))), self.p_path, self.training)
        return norm(x + drop_path(drop(branch(x)), self.p_path, self.training))


class EncoderLayer(_Layer):
    def __init__(self, c, v):
        super().__init__()
        self._build(c, v, ["self_attn"], 2)

    def forward(self, x, mask=None, key_padding_mask=None):
        x = self._residual(x, 1, lambda y: self.self_attn(y, y, y, mask, key_padding_mask))
        return self._residual(x, 2, self._ff)


class DecoderLayer(_Layer):
    def __init__(self, c, v):
        super().__init__()
        self._build(c, v, ["self_attn", "multihead_attn"], 3)

    def forward(self, x, mem, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        x = self._residual(x, 1, lambda y: self.self_attn(y, y, y, tgt_mask, tgt_key_padding_mask))
        x = self._residual(x, 2, lambda y: self.multihead_attn(y, mem, mem, None, memory_key_padding_mask))
        return self._residual(x, 3, self._ff)


class _Stack(nn.Module):
    """layers.0 .. layers.L−1, or with share_layers one layer (keys under layers.0.) run L times; optional norm."""

    def __init__(self, layer_cls, c, v, num_layers, final_norm):
        super().__init__()
        self.num_layers = num_layers
        self.layers = nn.ModuleList([layer_cls(c, v) for _ in range(1 if v["share_layers"] else num_layers)])
        self.norm = Norm(c["d_model"], c["layer_norm_eps"], v["norm_type"], v["norm_bias"]) if final_norm else None

    def _run(self, x, *args):
        for i in range(self.num_layers):
            x = self.layers[i % len(self.layers)](x, *args)
        return self.norm(x) if self.norm is not None else x


class Encoder(_Stack):
    def __init__(self, c, v, num_layers, final_norm):
        super().__init__(EncoderLayer, c, v, num_layers, final_norm)

    def forward(self, x, mask=None, src_key_padding_mask=None):
        return self._run(x, mask, src_key_padding_mask)


class Decoder(_Stack):
    def __init__(self, c, v, num_layers, final_norm):
        super().__init__(DecoderLayer, c, v, num_layers, final_norm)

    def forward(self, x, mem, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        return self._run(x, mem, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)


class Transformer(nn.Module):
    """nn.Transformer's encoder.* and decoder.*, both final norms, batch_first."""

    def __init__(self, c, v):
        super().__init__()
        self.encoder = Encoder(c, v, c["num_encoder_layers"], True)
        self.decoder = Decoder(c, v, c["num_decoder_layers"], True)

    def forward(self, src, tgt, tgt_mask=None, src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        mem = self.encoder(src, None, src_key_padding_mask)
        return self.decoder(tgt, mem, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)


def sinusoidal_table(max_len, d_model):
    """tfm's PositionalEncoding table (max_len, D) as float32: pe[t, 2i] = sin(t·10000^(−2i/D)),
    pe[t, 2i+1] = cos(...), computed in float64 in the same order as tfm and rounded once."""
    t = np.arange(max_len, dtype=np.float64)[:, None]
    i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angle = t * np.exp(-math.log(10000.0) * i / float(d_model))
    pe = np.zeros((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)[:, : d_model // 2]
    return pe.astype(np.float32)


class PositionalEncoding(nn.Module):
    """pe[t, 2i] = sin(t·10000^(−2i/D)), pe[t, 2i+1] = cos(...), computed in float64 in the same order as tfm's
    PositionalEncoding and rounded once. A non-persistent buffer: not in the state_dict, like tfm's."""

    def __init__(self, d_model, max_len):
        super().__init__()
        self.register_buffer("table", torch.from_numpy(sinusoidal_table(max_len, d_model)), persistent=False)

    def forward(self, x):  # x (B, T, D)
        return x + self.table[: x.size(1)].to(x.dtype)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = arch_defaults({**DEFAULTS, **cfg})
        if c["norm_type"] not in ("layer_norm", "rms_norm") or c["positional"] not in ("sinusoidal", "learned", "none"):
            raise ValueError(f"unsupported norm_type {c['norm_type']!r} or positional {c['positional']!r}")
        self.cfg = c
        D = c["d_model"]
        common = dict(d_model=D, nhead=c["nhead"], dim_feedforward=c["dim_feedforward"], dropout=c["dropout"],
                      activation=_activation(c["activation"]), layer_norm_eps=c["layer_norm_eps"], batch_first=True,
                      norm_first=c["norm_first"])
        functional = uses_variants(c)
        v = layer_variant(c)
        if c["arch"] == "encoder":
            self.embedding = nn.Embedding(c["src_vocab_size"], D)
            if functional:
                self.encoder = Encoder(c, v, c["num_encoder_layers"], c["norm_first"])
            else:
                layer = nn.TransformerEncoderLayer(**common)
                norm = nn.LayerNorm(D, eps=c["layer_norm_eps"]) if c["norm_first"] else None
                self.encoder = nn.TransformerEncoder(layer, c["num_encoder_layers"], norm=norm,
                                                     enable_nested_tensor=False)
            self.generator = nn.Linear(D, c["tgt_vocab_size"])
        elif c["arch"] == "seq2seq":
            if functional:
                self.transformer = Transformer(c, v)
            else:
                self.transformer = nn.Transformer(num_encoder_layers=c["num_encoder_layers"],
                                                  num_decoder_layers=c["num_decoder_layers"], **common)
            if not c["share_embeddings"]:  # shared: the encoder reads tgt_embedding (fairseq's share-all-embeddings)
                self.src_embedding = nn.Embedding(c["src_vocab_size"], D)
            self.tgt_embedding = nn.Embedding(c["tgt_vocab_size"], D)
            self.generator = nn.Linear(D, c["tgt_vocab_size"])
            if c["tie_embeddings"]:
                self.generator.weight = self.tgt_embedding.weight
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
        elif c["arch"] == "decoder":
            self.embedding = nn.Embedding(c["tgt_vocab_size"], D)
            if functional:
                self.decoder = Encoder(c, v, lm_layers(c), True)
            else:
                layer = nn.TransformerEncoderLayer(**common)
                self.decoder = nn.TransformerEncoder(layer, lm_layers(c),
                                                     norm=nn.LayerNorm(D, eps=c["layer_norm_eps"]),
                                                     enable_nested_tensor=False)
            self.generator = nn.Linear(D, c["tgt_vocab_size"], bias=False)
            if c["tie_embeddings"]:
                self.generator.weight = self.embedding.weight
        else:
            raise ValueError(f"unknown arch {c['arch']!r}")
        if c["positional"] == "learned":  # after the xavier loop, N(0, 0.02) (tfm's ModelConfig documents why)
            names = ["src_pos_embedding", "tgt_pos_embedding"] if c["arch"] == "seq2seq" else ["pos_embedding"]
            for name in names:
                setattr(self, name, nn.Embedding(c["max_len"], D))
                nn.init.normal_(getattr(self, name).weight, std=0.02)
        if c["arch"] == "decoder":  # GPT-2 / nanoGPT
            residual_std = 0.02 / math.sqrt(2 * lm_layers(c))
            for name, p in self.named_parameters():
                if p.dim() > 1:
                    residual = name.endswith("out_proj.weight") or name.endswith("linear2.weight")
                    nn.init.normal_(p, std=residual_std if residual else 0.02)
                elif name.endswith("bias") and "norm" not in name:
                    nn.init.zeros_(p)
        if c["positional"] == "sinusoidal":
            self.positional_encoding = PositionalEncoding(D, c["max_len"])
        self.dropout = nn.Dropout(c["dropout"])

    def _embed(self, emb, ids, scale, pos=None):
        """ids (B, T) → dropout(emb(ids)·scale + positions) (B, T, D); pos: the learned table, when learned."""
        x = emb(ids)
        if scale:
            x = x * math.sqrt(self.cfg["d_model"])
        if self.cfg["positional"] == "sinusoidal":
            x = self.positional_encoding(x)
        elif self.cfg["positional"] == "learned":
            x = x + pos(torch.arange(ids.size(1)))[None]
        return self.dropout(x)

    def forward(self, src, tgt_in=None):
        """src (B, S), tgt_in (B, T) int64 ids → logits (B, S, V) for encoder and decoder, (B, T, V) for seq2seq."""
        pad = self.cfg["pad_id"]
        src_kpm = src == pad
        if self.cfg["arch"] == "decoder":  # causal, no padding mask (language-model windows hold text only)
            T = src.size(1)
            causal = torch.triu(torch.full((T, T), float("-inf"), dtype=self.generator.weight.dtype), diagonal=1)
            x = self._embed(self.embedding, src, self.cfg["scale_embeddings"], getattr(self, "pos_embedding", None))
            return self.generator(self.decoder(x, mask=causal))
        if self.cfg["arch"] == "encoder":
            x = self._embed(self.embedding, src, self.cfg["scale_embeddings"], getattr(self, "pos_embedding", None))
            h = self.encoder(x, src_key_padding_mask=src_kpm)
            return self.generator(h)
        T = tgt_in.size(1)
        causal = torch.triu(torch.full((T, T), float("-inf"), dtype=self.generator.bias.dtype), diagonal=1)
        scale = self.cfg["scale_embeddings"]
        src_embedding = self.tgt_embedding if self.cfg["share_embeddings"] else self.src_embedding
        h = self.transformer(self._embed(src_embedding, src, scale, getattr(self, "src_pos_embedding", None)),
                             self._embed(self.tgt_embedding, tgt_in, scale, getattr(self, "tgt_pos_embedding", None)),
                             tgt_mask=causal, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_in == pad,
                             memory_key_padding_mask=src_kpm)
        return self.generator(h)

    def loss(self, logits, tgt_out, label_smoothing=0.0):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                               ignore_index=self.cfg["pad_id"], label_smoothing=label_smoothing)


def read_model_config(model_dir):
    """config.json is either a bare ModelConfig object or tfm train's {"format": "tfm-train", "model": {...}}."""
    with open(os.path.join(model_dir, "config.json")) as f:
        j = json.load(f)
    if "model" in j and isinstance(j["model"], dict):
        j = j["model"]
    unknown = set(j) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"{model_dir}/config.json: unknown model keys {sorted(unknown)}")
    return arch_defaults({**DEFAULTS, **j})


def load_tfm_model(model_dir, dtype=torch.float32):
    """Builds the twin of a tfm model directory and loads its weights strictly (only generator.weight may be absent,
    and only when tied). Returns (model in eval mode, config dict)."""
    cfg = read_model_config(model_dir)
    model = Model(cfg)
    tensors, meta = tfm_safetensors.load(os.path.join(model_dir, "model.safetensors"))
    if "tfm.quantization" in meta:  # tfm quantize's int8 copy: its I8 codes are no weights (include/tfm/models/quantize.h)
        raise ValueError(f"{model_dir} is an int8-quantized model directory (tfm quantize, {meta['tfm.quantization']}): "
                         "load the float32 directory it was made from")
    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed = {"generator.weight"} if cfg["tie_embeddings"] else set()
    if set(missing) - allowed or unexpected:
        raise ValueError(f"{model_dir}: missing keys {sorted(set(missing) - allowed)}, unexpected {sorted(unexpected)}")
    return model.to(dtype).eval(), cfg


def train(out_dir):
    """See the module docstring. Dropout must be 0 in the config (the two sides draw different random numbers)."""
    tensors, meta = tfm_safetensors.load(os.path.join(out_dir, "batches.safetensors"))
    ids = {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in tensors.items()}
    lr = float(meta.get("lr", "5e-4"))
    f32 = lambda key, default: float(np.float32(float(meta.get(key, default))))  # noqa: E731
    betas, wd = (f32("beta1", "0.9"), f32("beta2", "0.999")), f32("weight_decay", "0")
    opt_cls = torch.optim.AdamW if meta.get("optimizer", "adam") == "adamw" else torch.optim.Adam
    curves = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        model, cfg = load_tfm_model(out_dir, dtype)
        if cfg["dropout"] != 0 or cfg["drop_path"] != 0:
            raise ValueError("train needs dropout 0 and drop_path 0")
        model.train()
        if meta.get("decay_params", "all") == "matrices":
            params = [p for p in model.parameters()]  # the tied matrix once
            groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        else:
            groups = [{"params": list(model.parameters()), "weight_decay": wd}]
        opt = opt_cls(groups, lr=float(np.float32(lr)), betas=betas)
        losses = []
        for s in range(ids["src"].size(0)):
            opt.zero_grad(set_to_none=True)
            if cfg["arch"] in ("encoder", "decoder"):
                logits = model(ids["src"][s])
            else:
                logits = model(ids["src"][s], ids["tgt_in"][s])
            loss = model.loss(logits, ids["tgt_out"][s])
            loss.backward()
            opt.step()
            losses.append(float(loss))
        curves[name] = losses
    with open(os.path.join(out_dir, "torch_losses.json"), "w") as f:
        json.dump(curves, f)


def grads(out_dir):
    """PyTorch's side of the gradient checks: the loss of the first batch of DIR/batches.safetensors (as train reads
    it) on DIR's model, in float64 and float32 (dropout 0, training mode), backward. Writes
    DIR/torch_grads.safetensors: every parameter's float64 gradient (rounded to float32) under its key (a tied matrix
    once, under its embedding's key), and in the metadata "loss" (float64) and "f32_err" (JSON: per key, the float32
    gradient's max|g32 − g64| / max|g64|)."""
    tensors, _ = tfm_safetensors.load(os.path.join(out_dir, "batches.safetensors"))
    ids = {k: torch.from_numpy(np.asarray(v).astype(np.int64))[0] for k, v in tensors.items()}
    result = {}
    for dtype in (torch.float64, torch.float32):
        model, cfg = load_tfm_model(out_dir, dtype)
        if cfg["dropout"] != 0 or cfg["drop_path"] != 0:
            raise ValueError("grads needs dropout 0 and drop_path 0")
        model.train()
        logits = model(ids["src"], ids["tgt_in"]) if cfg["arch"] == "seq2seq" else model(ids["src"])
        loss = model.loss(logits, ids["tgt_out"])
        loss.backward()
        result[dtype] = (float(loss), {k: p.grad.detach().double().numpy() for k, p in model.named_parameters()})
    loss64, g64 = result[torch.float64]
    _, g32 = result[torch.float32]
    err = {k: float(np.abs(g32[k] - g).max() / max(np.abs(g).max(), 1e-30)) for k, g in g64.items()}
    tfm_safetensors.save(os.path.join(out_dir, "torch_grads.safetensors"),
                         {k: g.astype(np.float32) for k, g in g64.items()},
                         {"loss": repr(loss64), "f32_err": json.dumps(err)})


# ---- GPT-2 in Hugging Face's layout (tfm/models/gpt2.h imports and exports it) ---------------------------------------
# Written from GPT-2's definition, not from transformers: Conv1D layers y = x·W + b with W (in, out); pre-norm blocks
# x + attn(ln_1(x)), x + mlp(ln_2(x)); causal attention with scale 1/√Dh; gelu_new (tanh) by default; final ln_f; the
# output head tied to wte. Attribute names give Hugging Face's keys: wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj,
# ln_2, mlp.c_fc, mlp.c_proj}, ln_f — under "transformer." inside Gpt2LMHead, which adds lm_head.


def bytes_to_unicode():
    """GPT-2's byte → printable character table: the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves,
    the 68 others map to U+0100 onwards in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def write_synthetic_gpt2_tokenizer(out_dir, vocab_size=50257):
    """A GPT-2-format tokenizer of vocab_size tokens (vocab.json + merges.txt): the 256 byte symbols, then
    vocab_size − 257 merges of two byte symbols (pairs in byte order of both, so every ASCII pair is there), then
    <|endoftext|>. Not GPT-2's merges, but the same files, rules and size: what a test of the format needs."""
    sym = bytes_to_unicode()
    tokens = [sym[b] for b in range(256)]
    merges = []
    for a in range(256):
        for b in range(256):
            if len(merges) == vocab_size - 257:
                break
            merges.append((sym[a], sym[b]))
    tokens += [a + b for a, b in merges] + ["<|endoftext|>"]
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight (in, out), y = x·W + b."""

    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class Gpt2Attention(nn.Module):
    def __init__(self, g):
        super().__init__()
        D = g["n_embd"]
        self.n_head = g["n_head"]
        self.c_attn = Conv1D(D, 3 * D, g["bias"])
        self.c_proj = Conv1D(D, D, g["bias"])

    def forward(self, x):  # (B, T, D), causal
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(B, T, self.n_head, D // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.n_head)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        return self.c_proj(y)


class Gpt2Block(nn.Module):
    def __init__(self, g):
        super().__init__()
        D, eps = g["n_embd"], g["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(D, eps=eps, elementwise_affine=True)
        self.attn = Gpt2Attention(g)
        self.ln_2 = nn.LayerNorm(D, eps=eps)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(D, g["n_inner"] or 4 * D, g["bias"])
        self.mlp.c_proj = Conv1D(g["n_inner"] or 4 * D, D, g["bias"])
        if not g["bias"]:
            self.ln_1.bias = self.ln_2.bias = None
        self.act = {"gelu_new": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu}[g["activation_function"]]

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(self.act(self.mlp.c_fc(self.ln_2(x))))


class Gpt2(nn.Module):
    """GPT2Model's parameters (unprefixed keys: the hub's gpt2 checkpoint)."""

    def __init__(self, g):
        super().__init__()
        self.wte = nn.Embedding(g["vocab_size"], g["n_embd"])
        self.wpe = nn.Embedding(g["n_positions"], g["n_embd"])
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList(Gpt2Block(g) for _ in range(g["n_layer"]))
        self.ln_f = nn.LayerNorm(g["n_embd"], eps=g["layer_norm_epsilon"])
        if not g["bias"]:
            self.ln_f.bias = None

    def forward(self, ids):  # (B, T) → next-token logits (B, T, V), the head tied to wte
        x = self.wte(ids) + self.wpe(torch.arange(ids.size(1)))[None]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class Gpt2LMHead(nn.Module):
    """GPT2LMHeadModel's layout: transformer.* and lm_head.weight (the same tensor as transformer.wte.weight)."""

    def __init__(self, g):
        super().__init__()
        self.transformer = Gpt2(g)
        self.lm_head = nn.Linear(g["n_embd"], g["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids):
        return self.transformer(ids)


GPT2_DEFAULTS = {"layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "n_inner": None, "bias": True}


def read_gpt2_config(hf_dir):
    with open(os.path.join(hf_dir, "config.json")) as f:
        return {**GPT2_DEFAULTS, **json.load(f)}


def is_gpt2_dir(model_dir):
    """A Hugging Face GPT-2 folder (config.json with n_embd) rather than a tfm model directory."""
    try:
        return "n_embd" in read_gpt2_config(model_dir)
    except (OSError, ValueError):
        return False


def load_gpt2(hf_dir, dtype=torch.float32):
    """The twin of a Hugging Face GPT-2 folder, either key layout (the causal-mask buffers skipped). Returns (Gpt2 in
    eval mode, config dict)."""
    g = read_gpt2_config(hf_dir)
    model = Gpt2(g)
    tensors, _ = tfm_safetensors.load(os.path.join(hf_dir, "model.safetensors"))
    state = {}
    for k, v in tensors.items():
        k = k[len("transformer."):] if k.startswith("transformer.") else k
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias") or k == "lm_head.weight":
            continue
        state[k] = torch.from_numpy(np.asarray(v, dtype=np.float32))
    model.load_state_dict(state, strict=True)
    return model.to(dtype).eval(), g


def make_gpt2(out_dir, n_layer, n_head, n_embd, vocab_size, n_positions, seed, prefixed):
    """A random GPT-2 folder: config.json, model.safetensors (prefixed: GPT2LMHeadModel's keys with lm_head.weight and
    the older checkpoints' attn.bias (BOOL) / attn.masked_bias buffers; else the hub's unprefixed keys) and the
    synthetic tokenizer. Biases and norm gains are drawn too, so that every tensor is checked."""
    torch.manual_seed(seed)
    g = {**GPT2_DEFAULTS, "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "vocab_size": vocab_size,
         "n_positions": n_positions, "model_type": "gpt2", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    os.makedirs(out_dir, exist_ok=True)
    model = Gpt2LMHead(g) if prefixed else Gpt2(g)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                                                     or name.endswith("ln_f.weight") else 0.0))
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if prefixed:
        for n in range(n_layer):
            state[f"transformer.h.{n}.attn.bias"] = np.tril(np.ones((n_positions, n_positions), dtype=bool))[None, None]
            state[f"transformer.h.{n}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    tfm_safetensors.save(os.path.join(out_dir, "model.safetensors"), state, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(g, f, indent=2)
    write_synthetic_gpt2_tokenizer(out_dir, vocab_size)


def gpt2_grads(hf_dir):
    """grads() for a GPT-2 folder: DIR/batches.safetensors' first batch ("src", "tgt_out"), the mean cross-entropy of
    the twin's logits in float64 and float32, backward. Writes DIR/torch_grads.safetensors: every parameter's float64
    gradient (rounded to float32) under its unprefixed Hugging Face key, "logits" (float64), and in the metadata
    "loss" and "f32_err" (per key, and "logits": max|x32 − x64| / max|x64|)."""
    tensors, _ = tfm_safetensors.load(os.path.join(hf_dir, "batches.safetensors"))
    ids = {k: torch.from_numpy(np.asarray(v).astype(np.int64))[0] for k, v in tensors.items()}
    result = {}
    for dtype in (torch.float64, torch.float32):
        model, _ = load_gpt2(hf_dir, dtype)
        model.train()
        logits = model(ids["src"])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids["tgt_out"].reshape(-1))
        loss.backward()
        grads_ = {k: p.grad.detach().double().numpy() for k, p in model.named_parameters()}
        grads_["logits"] = logits.detach().double().numpy()
        result[dtype] = (float(loss), grads_)
    loss64, g64 = result[torch.float64]
    _, g32 = result[torch.float32]
    err = {k: float(np.abs(g32[k] - g).max() / max(np.abs(g).max(), 1e-30)) for k, g in g64.items()}
    out = {k: g.astype(np.float32) for k, g in g64.items() if k != "logits"}
    out["logits"] = g64["logits"]
    tfm_safetensors.save(os.path.join(hf_dir, "torch_grads.safetensors"), out,
                         {"loss": repr(loss64), "f32_err": json.dumps(err)})


def _main(argv):
    if len(argv) == 3 and argv[1] in ("train", "grads", "gpt2-grads"):
        {"train": train, "grads": grads, "gpt2-grads": gpt2_grads}[argv[1]](argv[2])
        return 0
    if len(argv) >= 3 and argv[1] == "gpt2-make":
        import argparse
        ap = argparse.ArgumentParser(prog="torch_models.py gpt2-make")
        ap.add_argument("dir")
        ap.add_argument("--layers", type=int, default=2)
        ap.add_argument("--heads", type=int, default=4)
        ap.add_argument("--d", type=int, default=64)
        ap.add_argument("--vocab", type=int, default=50257)
        ap.add_argument("--positions", type=int, default=64)
        ap.add_argument("--seed", type=int, default=0)
        ap.add_argument("--prefixed", action="store_true")
        a = ap.parse_args(argv[2:])
        make_gpt2(a.dir, a.layers, a.heads, a.d, a.vocab, a.positions, a.seed, a.prefixed)
        return 0
    sys.exit("usage: torch_models.py train|grads|gpt2-grads DIR, or gpt2-make DIR [--layers N --heads H --d D "
             "--vocab V --positions P --seed S --prefixed]")


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
