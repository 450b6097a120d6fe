#!/usr/bin/env python3
"""torch_models.py — the PyTorch twins of tfm's two sequence models (include/tfm/models/seq2seq.h), with the same
attribute names and therefore the same state_dict keys, plus helpers to load a tfm model directory into them.

    import sys; sys.path.insert(0, "tools")
    import torch_models as tm
    model, cfg = tm.load_tfm_model("runs/reverse")       # config.json + model.safetensors
    logits = model(src_ids)                              # arch "encoder": (B, S, V)
    logits = model(src_ids, tgt_in_ids)                  # arch "seq2seq": (B, T, V)

Architectures (tfm's src/models/seq2seq.cc explains the choices):
  encoder  — embedding → + sinusoidal table → dropout → nn.TransformerEncoder (final norm only with norm_first)
             → generator Linear. No √D scaling.
  seq2seq  — src/tgt embeddings · √D → + table → dropout → nn.Transformer (both final norms; causal target mask;
             padding masks) → generator Linear (optionally tied to tgt_embedding.weight); xavier_uniform_ on every
             parameter with more than one dimension.
Activations: relu, gelu, gelu_tanh (tfm's gated ones have no torch.nn 1.13 counterpart and are refused here).

Run as a script, `torch_models.py train DIR` is PyTorch's side of the training-curve checks
(tests/models/model_test.cc): it loads DIR/config.json + DIR/model.safetensors (initial weights, dropout 0) and
DIR/batches.safetensors (src (steps, B, S), tgt_out (steps, B, S or T), tgt_in (steps, B, T) for seq2seq: ids; the
metadata "lr"), trains with Adam (lr rounded to float32, like tfm's float argument) on every batch in turn, in
float32 and in float64 from the same start, and writes DIR/torch_losses.json = {"float32": [...], "float64": [...]}.
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

# tfm's ModelConfig defaults (include/tfm/models/config.h). scale_embeddings None: the architecture's
# choice (seq2seq scales by sqrt(D), encoder does not).
DEFAULTS = {
    "arch": "encoder", "src_vocab_size": 0, "tgt_vocab_size": 0, "d_model": 64, "nhead": 4,
    "num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": 256, "dropout": 0.1,
    "activation": "relu", "norm_first": False, "norm_type": "layer_norm", "layer_norm_eps": 1e-5,
    "positional": "sinusoidal", "scale_embeddings": None, "tie_embeddings": False,
    "max_len": 512, "pad_id": 0, "bos_id": 1, "eos_id": 2,
}


def _activation(name):
    if name in ("relu", "gelu"):
        return name
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    raise ValueError(f"activation '{name}' has no torch.nn 1.13 equivalent here")


class PositionalEncoding(nn.Module):
    """pe[t, 2i] = sin(t·10000^(−2i/D)), pe[t, 2i+1] = cos(...), computed in float64 in the same order as tfm's
    PositionalEncoding and rounded once. A non-persistent buffer: not in the state_dict, like tfm's."""

    def __init__(self, d_model, max_len):
        super().__init__()
        t = np.arange(max_len, dtype=np.float64)[:, None]
        i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
        angle = t * np.exp(-math.log(10000.0) * i / float(d_model))
        pe = np.zeros((max_len, d_model), dtype=np.float64)
        pe[:, 0::2] = np.sin(angle)
        pe[:, 1::2] = np.cos(angle)[:, : d_model // 2]
        self.register_buffer("table", torch.from_numpy(pe.astype(np.float32)), persistent=False)

    def forward(self, x):  # x (B, T, D)
        return x + self.table[: x.size(1)].to(x.dtype)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = {**DEFAULTS, **cfg}
        if c["norm_type"] != "layer_norm" or c["positional"] != "sinusoidal":
            raise ValueError(f"unsupported norm_type {c['norm_type']!r} or positional {c['positional']!r}")
        if c["scale_embeddings"] is None:
            c["scale_embeddings"] = c["arch"] == "seq2seq"
        self.cfg = c
        D = c["d_model"]
        common = dict(d_model=D, nhead=c["nhead"], dim_feedforward=c["dim_feedforward"], dropout=c["dropout"],
                      activation=_activation(c["activation"]), layer_norm_eps=c["layer_norm_eps"], batch_first=True,
                      norm_first=c["norm_first"])
        if c["arch"] == "encoder":
            self.embedding = nn.Embedding(c["src_vocab_size"], D)
            layer = nn.TransformerEncoderLayer(**common)
            norm = nn.LayerNorm(D, eps=c["layer_norm_eps"]) if c["norm_first"] else None
            self.encoder = nn.TransformerEncoder(layer, c["num_encoder_layers"], norm=norm, enable_nested_tensor=False)
            self.generator = nn.Linear(D, c["tgt_vocab_size"])
        elif c["arch"] == "seq2seq":
            self.transformer = nn.Transformer(num_encoder_layers=c["num_encoder_layers"],
                                              num_decoder_layers=c["num_decoder_layers"], **common)
            self.src_embedding = nn.Embedding(c["src_vocab_size"], D)
            self.tgt_embedding = nn.Embedding(c["tgt_vocab_size"], D)
            self.generator = nn.Linear(D, c["tgt_vocab_size"])
            if c["tie_embeddings"]:
                self.generator.weight = self.tgt_embedding.weight
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
        else:
            raise ValueError(f"unknown arch {c['arch']!r}")
        self.positional_encoding = PositionalEncoding(D, c["max_len"])
        self.dropout = nn.Dropout(c["dropout"])

    def _embed(self, emb, ids, scale):
        x = emb(ids)
        if scale:
            x = x * math.sqrt(self.cfg["d_model"])
        return self.dropout(self.positional_encoding(x))

    def forward(self, src, tgt_in=None):
        """src (B, S), tgt_in (B, T) int64 ids → logits (B, S, V) for encoder, (B, T, V) for seq2seq."""
        pad = self.cfg["pad_id"]
        src_kpm = src == pad
        if self.cfg["arch"] == "encoder":
            h = self.encoder(self._embed(self.embedding, src, self.cfg["scale_embeddings"]), src_key_padding_mask=src_kpm)
            return self.generator(h)
        T = tgt_in.size(1)
        causal = torch.triu(torch.full((T, T), float("-inf"), dtype=self.generator.bias.dtype), diagonal=1)
        scale = self.cfg["scale_embeddings"]
        h = self.transformer(self._embed(self.src_embedding, src, scale), self._embed(self.tgt_embedding, tgt_in, scale),
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
    return {**DEFAULTS, **j}


def load_tfm_model(model_dir, dtype=torch.float32):
    """Builds the twin of a tfm model directory and loads its weights strictly (only generator.weight may be absent,
    and only when tied). Returns (model in eval mode, config dict)."""
    cfg = read_model_config(model_dir)
    model = Model(cfg)
    tensors, _ = tfm_safetensors.load(os.path.join(model_dir, "model.safetensors"))
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
    curves = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        model, cfg = load_tfm_model(out_dir, dtype)
        if cfg["dropout"] != 0:
            raise ValueError("train needs dropout 0")
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=float(np.float32(lr)))
        losses = []
        for s in range(ids["src"].size(0)):
            opt.zero_grad(set_to_none=True)
            if cfg["arch"] == "encoder":
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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "train":
        train(sys.argv[2])
    else:
        sys.exit("usage: torch_models.py train DIR")
