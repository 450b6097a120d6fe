#!/usr/bin/env python3
"""Writes the small seed corpora of the fuzz targets (fuzz/corpus/<target>/). Run from anywhere:
    python3 fuzz/make_seeds.py
Uses only the standard library; the safetensors files are laid out by hand (8-byte little-endian
header length, JSON header, data), valid ones and a few near-misses that reach deep checks.
To add a seed: append to SAFETENSORS, CONFIGS, TRAIN_CONFIGS, TSV or BPE below and re-run."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def st(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


SAFETENSORS = {
    "empty_header": st({}),
    "one_f32": st({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32(1, 2, 3, 4)),
    "scalar_bool_meta": st({"__metadata__": {"format": "pt"},
                            "is_causal": {"dtype": "BOOL", "shape": [], "data_offsets": [0, 1]}}, b"\x01"),
    "mixed_dtypes": st({
        "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
        "b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]},
        "c": {"dtype": "F64", "shape": [1], "data_offsets": [8, 16]},
        "d": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]},
        "e": {"dtype": "I32", "shape": [1], "data_offsets": [24, 28]},
        "f": {"dtype": "U8", "shape": [2], "data_offsets": [28, 30]},
        "g": {"dtype": "BOOL", "shape": [2], "data_offsets": [30, 32]},
    }, b"\x00\x3c\x00\xc0" + b"\x80\x3f\x00\x40" + struct.pack("<d", 0.5) + struct.pack("<q", -3)
       + struct.pack("<i", 7) + b"\x01\xff" + b"\x00\x01"),
    "empty_dim": st({"z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}}),
    "offsets_out_of_range": st({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}}, f32(1, 2, 3, 4)),
    "overlap": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(1, 2, 3)),
    # int8 model directories' weights (tfm quantize): I8 matrices with F32 per-row scales, and near-misses.
    "quantized": st({"__metadata__": {"tfm.quantization": "int8-per-row"},
                     "w.scale": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
                     "w": {"dtype": "I8", "shape": [2, 3], "data_offsets": [16, 22]}},
                    f32(0.5, 0.25, 1, -1) + bytes([127, 0, 0x81, 3, 0xFF, 127])),
    "quantized_bad_scale": st({"__metadata__": {"tfm.quantization": "int8-per-row"},
                               "w.scale": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                               "w": {"dtype": "I8", "shape": [2, 3], "data_offsets": [12, 18]}},
                              f32(0.5, 0.25, 1) + bytes(6)),
    "quantized_i8_vector": st({"__metadata__": {"tfm.quantization": "int8-per-row"},
                               "b.scale": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]},
                               "b": {"dtype": "I8", "shape": [2], "data_offsets": [2, 4]}}, bytes(4)),
    "truncated": st({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32(1, 2, 3, 4))[:-5],
}

CONFIGS = {
    "mha": {"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "bias": False, "batch_first": True},
    "enc_layer": {"module": "TransformerEncoderLayer", "d_model": 4, "nhead": 2, "dim_feedforward": 8,
                  "activation": "gelu", "norm_first": True},
    "encoder": {"module": "TransformerEncoder", "d_model": 4, "nhead": 2, "dim_feedforward": 16,
                "num_layers": 3, "norm": True, "activation": "swiglu", "dropout": 0.2},
    "dec_layer": {"module": "TransformerDecoderLayer", "d_model": 6, "nhead": 3, "dim_feedforward": 5,
                  "activation": "geglu", "layer_norm_eps": 1e-6, "bias": False},
    "decoder": {"module": "TransformerDecoder", "d_model": 4, "nhead": 1, "num_layers": 2,
                "dim_feedforward": 4, "activation": "glu"},
    "transformer": {"module": "Transformer", "d_model": 8, "nhead": 2, "num_encoder_layers": 1,
                    "num_decoder_layers": 1, "dim_feedforward": 8, "activation": "gelu_tanh"},
    "bad_divisible": {"module": "TransformerEncoderLayer", "d_model": 5, "nhead": 2},
}

# The "train" section of a run directory's config.json, with its "model" (fuzz_train_config).
TRAIN_CONFIGS = {
    "task_seq2seq": {"task": "reverse", "out_dir": "run", "max_steps": 40, "eval_every": 10, "lr": 0.003, "warmup": 5,
                     "clip_norm": 1.0, "batch_size": 32, "seed": 5,
                     "model": {"arch": "seq2seq", "d_model": 16, "nhead": 2, "num_encoder_layers": 1,
                               "num_decoder_layers": 1, "dim_feedforward": 32, "dropout": 0.1}},
    "lm_text": {"task": None, "out_dir": "run", "text_path": "t.txt", "src_tokens": "char", "tgt_tokens": "char", "block_size": 64,
                "valid_fraction": 0.1, "max_steps": 2000, "optimizer": "adamw", "lr": 0.001, "warmup": 100,
                "schedule": "auto", "weight_decay": 0.1, "decay_params": "matrices", "beta2": 0.99,
                "min_lr": 0.0001, "batch_size": 12, "eval_every": 250, "dtype": "bf16", "ema": 0.999,
                "model": {"arch": "decoder", "d_model": 128, "nhead": 4, "num_decoder_layers": 4,
                          "dim_feedforward": 512, "bias": False, "activation": "gelu", "norm_first": True,
                          "positional": "learned", "tie_embeddings": True, "max_len": 64, "head_dim": 32,
                          "norm_type": "rms_norm", "drop_path": 0.1}},
    "tsv_subwords": {"out_dir": "run", "train_path": "train.tsv", "valid_path": "valid.tsv", "src_tokens": "spm", "tgt_tokens": "spm",
                     "vocab_size": 800, "joint_vocab": True, "spm_type": "bpe", "batch_tokens": 4096,
                     "batch_size": 0, "time_budget": 300.0, "label_smoothing": 0.1, "keep_best": True,
                     "patience": 3, "model": {"arch": "seq2seq", "share_embeddings": True}},
    "bad_text_and_task": {"task": "copy", "text_path": "t.txt"},
}


# First byte: option bits for fuzz_tsv (1 source SPACE, 2 target SPACE, 4 strict, 8 equal
# lengths, high nibble max_tokens - 1); the rest is the file.
TSV = {
    "reverse_char": b"\xf8" + b"abc\tcba\nhello\tolleh\n",
    "words_crlf": b"\xf3" + b"the cat sat\tle chat\r\n\nno tab here\nx\ty\tz\n",
    "utf8_strict": b"\xf4" + "héllo\twörld\n\u00e9\t\u00e8".encode() + b"\n\xff\xfe\tbad\n",
    "overlong": b"\x18" + b"abcdefgh\tabcdefgh\nab\tba",
}

# fuzz_bpe: first byte the mode (even: vocabulary JSON \0 merges \0 text; odd: merges \0 text, the
# vocabulary built by the target from the merges). GPT-2's bytes_to_unicode spells the byte tokens.
def byte_symbol(b):
    printable = 33 <= b <= 126 or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
    return chr(b) if printable else chr(256 + sum(1 for c in range(b) if not (33 <= c <= 126 or 0xA1 <= c <= 0xAC
                                                                           or 0xAE <= c <= 0xFF)))


BPE_MERGES = [("l", "o"), ("lo", "w"), ("e", "r"), ("\u0120", "low"), ("a", "a"), ("aa", "aa"), ("b", "c"),
              ("a", "b"), ("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("\u00c3", "\u00a9"), ("\u010a", "\u010a")]
BPE_TEXT = "low lower aaaaa abc the caf\u00e9 I'm  x \n\n\ty 123 \U0001F44D\U0001F3FD \u00a0\u180e end   "


def bpe_vocab(merges, extra=()):
    v = {}
    for t in [byte_symbol(b) for b in range(256)] + [a + b for a, b in merges] + list(extra):
        v.setdefault(t, len(v))
    return v


def bpe_merges(merges, header=True):
    return ("#version: 0.2\n" if header else "") + "".join(a + " " + b + "\n" for a, b in merges)


BPE = {
    "hand_made": b"\x00" + json.dumps(bpe_vocab(BPE_MERGES, ["<|endoftext|>"])).encode() + b"\0"
                 + bpe_merges(BPE_MERGES).encode() + b"\0" + BPE_TEXT.encode(),
    "built_vocab": b"\x01" + bpe_merges(BPE_MERGES, header=False).encode() + b"\0" + BPE_TEXT.encode(),
    "bad_merge": b"\x00" + json.dumps(bpe_vocab(BPE_MERGES)).encode() + b"\0" + b"l o\nx y\n\0low",
    "bad_ids": b"\x00" + b'{"a": 0, "b": 2}\0a b\n\0ab',
    "invalid_utf8": b"\x01" + b"a b\r\n\0ab \xc3( \xff",
}


def main():
    for name, blob in BPE.items():
        d = os.path.join(HERE, "corpus", "bpe")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".bin"), "wb") as f:
            f.write(blob)
    for name, blob in TSV.items():
        d = os.path.join(HERE, "corpus", "tsv")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".tsv"), "wb") as f:
            f.write(blob)
    for name, blob in SAFETENSORS.items():
        d = os.path.join(HERE, "corpus", "safetensors")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".safetensors"), "wb") as f:
            f.write(blob)
    for name, cfg in CONFIGS.items():
        d = os.path.join(HERE, "corpus", "config")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(cfg, f)
    for name, cfg in TRAIN_CONFIGS.items():
        d = os.path.join(HERE, "corpus", "train_config")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(cfg, f)
    with open(os.path.join(HERE, "corpus", "config", "not_json.json"), "w") as f:
        f.write('{"module": "TransformerEncoderLayer", "d_model": 4,')


if __name__ == "__main__":
    main()
