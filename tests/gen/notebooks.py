#!/usr/bin/env python3
"""notebooks.py — PyTorch re-statements of the five notebook Transformers of issue 17, written from their descriptions
(their code is not part of this repository). Attribute names are what such notebooks usually call things, and they
give the state_dict keys that tools/import_maps/<name>.json maps into tfm:

  nb1_transformer_layer  "Transformer Layer": a hand-written encoder layer around nn.MultiheadAttention.
      NB1EncoderLayer     block1.0.mha.{in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias}
                          (block1 = [SelfAttention wrapper, Dropout]); block2.0.{weight,bias}, block2.3.{weight,bias}
                          (block2 = Linear(D, F), activation, Dropout, Linear(F, D), Dropout); norm1.*, norm2.*
                          (nn.LayerNorm); pre- or post-norm (norm_first).
      NB1Encoder          layers.{i}.* repeating ONE layer instance num_layers times (nn.ModuleList([layer] * n):
                          every index aliases the same tensors, so the weights are shared and their gradients add
                          up); optional final norm `norm.*`.
  nb2_deeper_look        "A deeper look": post-norm encoder layer.
      NB2EncoderLayer     self_attn.* (nn.MultiheadAttention, batch_first); feed_forward.0 = Linear(D, 2F),
                          feed_forward.1 = nn.GLU (first half · sigmoid(second half)), feed_forward.2 = Linear(F, D),
                          feed_forward.3 = Dropout; norm1.*, norm2.*.
  nb3_vit_block          "Lab-1" ViT block: pre-norm.
      NB3Block            norm1.*, attn.qkv.weight (Linear(D, 3D), bias only with qkv_bias), attn.proj.{weight,bias},
                          norm2.*, mlp.fc1.*, mlp.fc2.* (D → 4D → D, GELU); softmax scale qk_scale or Dh^-0.5;
                          attention, projection and MLP dropouts; drop_path (stochastic depth, training only).
  nb4_reverse            "Transformer implementation" (reverse a sequence).
      NB4MultiHeadAttention  Wq, Wk (H, D, Dk), Wv (H, D, Dv), Wo (H·Dv, D), no biases, scale 1/sqrt(Dk):
                          q = einsum("btd,hdk->bhtk", x, Wq), ..., out = concat_h(o_h) @ Wo.
      NB4EncoderLayer     attn.*, norm1.{gamma,beta}, ffn.0.* (Linear D→F), ffn.1 Dropout, ffn.2 ReLU,
                          ffn.3.* (Linear F→D), ffn.4 Dropout, norm2.{gamma,beta}; post-norm.
      NB4Model            embedding.weight (unscaled) + sinusoidal table (not in the state_dict) → layers.{i}.* →
                          head.{weight,bias} (Linear(D, V)); mask: (B, S) bool, True = padding.
  nb5_build_transformer  "build_transformer" (annotated-Transformer style).
      NB5MultiHeadAttention  w_q, w_k, w_v, w_o (Linear(D, D), no bias).
      LayerNormalization  alpha (1,), bias (1,), eps 1e-6: one scalar gain and shift. The formula here is the standard
                          LayerNorm, alpha · (x − mean) / sqrt(var + eps) + bias (biased variance). The notebook's own
                          formula divides by the variance instead, contradicting its text and the paper; tfm uses the
                          standard one, and the importer broadcasts the scalars to the width.
      NB5Model            src_embed.embedding.weight, tgt_embed.embedding.weight (× sqrt(D)); src_pos.pe, tgt_pos.pe
                          (persistent sinusoidal buffers (1, max_len, D)); encoder.layers.{i}.self_attention_block.*,
                          .feed_forward_block.linear1.*, .linear2.* (with bias), .residual_connections.{0,1}.norm.*;
                          encoder.norm.*; decoder.layers.{i}.self_attention_block.*, .cross_attention_block.*,
                          .feed_forward_block.*, .residual_connections.{0,1,2}.norm.*; decoder.norm.*;
                          projection_layer.proj.{weight,bias} (log-softmax in project()); pre-norm residual blocks
                          x + dropout(sublayer(norm(x))); Xavier-uniform init of every matrix.

Masks follow each notebook's convention: nn.MultiheadAttention's (attn_mask True/−inf = blocked, key_padding_mask
True = padding) for nb1/nb2; nb4's (B, S) padding mask; nb5's 0/1 "keep" masks broadcast to (B, 1, Tq, Tk)
(0 = blocked), as the annotated Transformer does.

Also: the sinusoidal table (same float64 formula as tfm's PositionalEncoding, rounded once) and reference
LayerNorm/encoder layers in torch.nn for the nb1 check (the re-statement against nn.TransformerEncoder).
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
import torch_models  # noqa: E402


def sinusoidal_table(max_len, d_model):
    """The sinusoidal table of "Attention Is All You Need" (max_len, D), as tfm computes it."""
    return torch.from_numpy(torch_models.sinusoidal_table(max_len, d_model))


# ---------------------------------------------------------------------------------------------------------------
# 1. "Transformer Layer"

class NB1SelfAttention(nn.Module):
    def __init__(self, d_model, nhead, dropout, batch_first):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first)

    def forward(self, x, attn_mask=None, key_padding_mask=None):
        return self.mha(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False)[0]


class NB1EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, activation="gelu", batch_first=True,
                 norm_first=True, layer_norm_eps=1e-5):
        super().__init__()
        act = {"gelu": nn.GELU, "relu": nn.ReLU}[activation]
        self.norm_first = norm_first
        self.block1 = nn.ModuleList([NB1SelfAttention(d_model, nhead, dropout, batch_first), nn.Dropout(dropout)])
        self.block2 = nn.Sequential(nn.Linear(d_model, dim_feedforward), act(), nn.Dropout(dropout),
                                    nn.Linear(dim_feedforward, d_model), nn.Dropout(dropout))
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)

    def _sa(self, x, mask, kpm):
        return self.block1[1](self.block1[0](x, mask, kpm))

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        x = src
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self.block2(self.norm2(x))
        x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self.block2(x))


class NB1Encoder(nn.Module):
    """One layer instance repeated: nn.ModuleList([layer] * n) registers the same module under every index."""

    def __init__(self, encoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = nn.ModuleList([encoder_layer for _ in range(num_layers)])
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None):
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask)
        return self.norm(x) if self.norm is not None else x


# ---------------------------------------------------------------------------------------------------------------
# 2. "A deeper look"

class NB2EncoderLayer(nn.Module):
    def __init__(self, d_model=512, nhead=1, dim_feedforward=1024, dropout=0.1, layer_norm_eps=1e-5):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, 2 * dim_feedforward), nn.GLU(dim=-1),
                                          nn.Linear(dim_feedforward, d_model), nn.Dropout(dropout))
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        a = self.self_attn(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                           need_weights=False)[0]
        x = self.norm1(src + self.dropout(a))
        return self.norm2(x + self.feed_forward(x))


# ---------------------------------------------------------------------------------------------------------------
# 3. "Lab-1" ViT block

class NB3DropPath(nn.Module):
    """Stochastic depth: in training, each sample's branch is zeroed with probability p, else scaled by 1/(1−p)."""

    def __init__(self, p=0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = (torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), dtype=x.dtype) >= self.p).to(x.dtype)
        return x * keep / (1.0 - self.p)


class NB3Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):  # x (B, N, C)
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, N, Dh)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(x))


class NB3Mlp(nn.Module):
    def __init__(self, in_features, hidden_features, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class NB3Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False, qk_scale=None, drop=0.0, attn_drop=0.0,
                 drop_path=0.0, layer_norm_eps=1e-5):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.attn = NB3Attention(dim, num_heads, qkv_bias, qk_scale, attn_drop, drop)
        self.drop_path = NB3DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.mlp = NB3Mlp(dim, int(dim * mlp_ratio), drop)

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


# ---------------------------------------------------------------------------------------------------------------
# 4. "Transformer implementation" (reverse a sequence)

class NB4LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class NB4MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_k, d_v):
        super().__init__()
        self.d_k = d_k
        self.Wq = nn.Parameter(torch.empty(num_heads, d_model, d_k))
        self.Wk = nn.Parameter(torch.empty(num_heads, d_model, d_k))
        self.Wv = nn.Parameter(torch.empty(num_heads, d_model, d_v))
        self.Wo = nn.Parameter(torch.empty(num_heads * d_v, d_model))
        for w in (self.Wq, self.Wk, self.Wv, self.Wo):
            nn.init.xavier_uniform_(w)

    def forward(self, x, mask=None):  # x (B, T, D); mask (B, T) True = padding
        q = torch.einsum("btd,hdk->bhtk", x, self.Wq)
        k = torch.einsum("btd,hdk->bhtk", x, self.Wk)
        v = torch.einsum("btd,hdv->bhtv", x, self.Wv)
        scores = torch.einsum("bhqk,bhsk->bhqs", q, k) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
        o = torch.einsum("bhqs,bhsv->bqhv", scores.softmax(dim=-1), v)
        return o.reshape(x.shape[0], x.shape[1], -1) @ self.Wo


class NB4EncoderLayer(nn.Module):
    def __init__(self, d_model=16, num_heads=4, d_k=16, d_v=16, d_ff=512, dropout=0.1, eps=1e-5):
        super().__init__()
        self.attn = NB4MultiHeadAttention(d_model, num_heads, d_k, d_v)
        self.norm1 = NB4LayerNorm(d_model, eps)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.Dropout(dropout), nn.ReLU(), nn.Linear(d_ff, d_model),
                                 nn.Dropout(dropout))
        self.norm2 = NB4LayerNorm(d_model, eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.attn(x, mask)))
        return self.norm2(x + self.ffn(x))


class NB4Encoder(nn.Module):
    """The layers alone (keys layers.{i}.*), for tfm forward's TransformerEncoder."""

    def __init__(self, num_layers=4, **kw):
        super().__init__()
        self.layers = nn.ModuleList([NB4EncoderLayer(**kw) for _ in range(num_layers)])

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class NB4Model(nn.Module):
    def __init__(self, vocab_size=20, d_model=16, num_heads=4, d_k=16, d_v=16, d_ff=512, num_layers=4, dropout=0.1,
                 max_len=64):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pe = sinusoidal_table(max_len, d_model)  # a plain attribute: not in the state_dict
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList([NB4EncoderLayer(d_model, num_heads, d_k, d_v, d_ff, dropout)
                                     for _ in range(num_layers)])
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, src, mask=None):  # src (B, S) ids → logits (B, S, V)
        x = self.dropout(self.embedding(src) + self.pe[: src.shape[1]].to(self.head.weight.dtype))
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(x)


# ---------------------------------------------------------------------------------------------------------------
# 5. "build_transformer"

class LayerNormalization(nn.Module):
    """One scalar gain `alpha` and shift `bias` (shape (1,)), eps 1e-6; standard LayerNorm formula (see the module
    docstring for the notebook's own)."""

    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.alpha = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.alpha * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class NB5FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class NB5MultiHeadAttention(nn.Module):
    def __init__(self, d_model, h, dropout):
        super().__init__()
        self.h, self.d_k = h, d_model // h
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask):  # mask broadcastable to (B, H, Tq, Tk), 0 = blocked
        b = q.shape[0]
        q = self.w_q(q).view(b, -1, self.h, self.d_k).transpose(1, 2)
        k = self.w_k(k).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v = self.w_v(v).view(b, -1, self.h, self.d_k).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        x = self.dropout(scores.softmax(dim=-1)) @ v
        return self.w_o(x.transpose(1, 2).contiguous().view(b, -1, self.h * self.d_k))


class NB5ResidualConnection(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.norm = LayerNormalization()

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class NB5EncoderBlock(nn.Module):
    def __init__(self, self_attention_block, feed_forward_block, dropout):
        super().__init__()
        self.self_attention_block = self_attention_block
        self.feed_forward_block = feed_forward_block
        self.residual_connections = nn.ModuleList([NB5ResidualConnection(dropout) for _ in range(2)])

    def forward(self, x, src_mask):
        x = self.residual_connections[0](x, lambda y: self.self_attention_block(y, y, y, src_mask))
        return self.residual_connections[1](x, self.feed_forward_block)


class NB5DecoderBlock(nn.Module):
    def __init__(self, self_attention_block, cross_attention_block, feed_forward_block, dropout):
        super().__init__()
        self.self_attention_block = self_attention_block
        self.cross_attention_block = cross_attention_block
        self.feed_forward_block = feed_forward_block
        self.residual_connections = nn.ModuleList([NB5ResidualConnection(dropout) for _ in range(3)])

    def forward(self, x, encoder_output, src_mask, tgt_mask):
        x = self.residual_connections[0](x, lambda y: self.self_attention_block(y, y, y, tgt_mask))
        x = self.residual_connections[1](
            x, lambda y: self.cross_attention_block(y, encoder_output, encoder_output, src_mask))
        return self.residual_connections[2](x, self.feed_forward_block)


class NB5Encoder(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers
        self.norm = LayerNormalization()

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class NB5Decoder(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers
        self.norm = LayerNormalization()

    def forward(self, x, encoder_output, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, encoder_output, src_mask, tgt_mask)
        return self.norm(x)


class NB5InputEmbeddings(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, x):
        return self.embedding(x) * math.sqrt(self.d_model)


class NB5PositionalEncoding(nn.Module):
    def __init__(self, d_model, seq_len, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_table(seq_len, d_model).unsqueeze(0))  # (1, max_len, D), persistent

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.shape[1]].to(x.dtype))


class NB5ProjectionLayer(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        return torch.log_softmax(self.proj(x), dim=-1)


class NB5Transformer(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, src_pos, tgt_pos, projection_layer):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_embed, self.tgt_embed = src_embed, tgt_embed
        self.src_pos, self.tgt_pos = src_pos, tgt_pos
        self.projection_layer = projection_layer

    def encode(self, src, src_mask):
        return self.encoder(self.src_pos(self.src_embed(src)), src_mask)

    def decode(self, encoder_output, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_pos(self.tgt_embed(tgt)), encoder_output, src_mask, tgt_mask)

    def project(self, x):
        return self.projection_layer(x)

    def forward(self, src, tgt, src_mask, tgt_mask):  # → log-probabilities (B, T, V)
        return self.project(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))


def build_transformer(src_vocab_size, tgt_vocab_size, src_seq_len, tgt_seq_len, d_model=512, N=6, h=8,
                      dropout=0.1, d_ff=2048):
    src_embed, tgt_embed = NB5InputEmbeddings(d_model, src_vocab_size), NB5InputEmbeddings(d_model, tgt_vocab_size)
    src_pos = NB5PositionalEncoding(d_model, src_seq_len, dropout)
    tgt_pos = NB5PositionalEncoding(d_model, tgt_seq_len, dropout)
    enc = nn.ModuleList([NB5EncoderBlock(NB5MultiHeadAttention(d_model, h, dropout),
                                         NB5FeedForward(d_model, d_ff, dropout), dropout) for _ in range(N)])
    dec = nn.ModuleList([NB5DecoderBlock(NB5MultiHeadAttention(d_model, h, dropout),
                                         NB5MultiHeadAttention(d_model, h, dropout),
                                         NB5FeedForward(d_model, d_ff, dropout), dropout) for _ in range(N)])
    model = NB5Transformer(NB5Encoder(enc), NB5Decoder(dec), src_embed, tgt_embed, src_pos, tgt_pos,
                           NB5ProjectionLayer(d_model, tgt_vocab_size))
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def nb5_masks(src, tgt, pad_id):
    """The annotated Transformer's masks: src (B, 1, 1, S) keep = not pad; tgt (B, 1, T, T) keep = not pad (key)
    and causal."""
    src_mask = (src != pad_id)[:, None, None, :].int()
    t = tgt.shape[1]
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    tgt_mask = ((tgt != pad_id)[:, None, None, :] & causal[None, None]).int()
    return src_mask, tgt_mask
