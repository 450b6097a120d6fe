#!/usr/bin/python3
"""Writes the safetensors fixtures read by tests/io/safetensors_test.cc.

Run from anywhere:  /usr/bin/python3 tests/gen/gen_safetensors.py
Output: tests/fixtures/safetensors/
  dtypes.safetensors           one tensor per dtype tfm reads (F32 F16 BF16 F64 I8 I16 I32 I64 U8 U16
                               U32 U64 BOOL), a 0-dim and an empty tensor, and __metadata__; header keys
                               deliberately not sorted, so the test can check header order is kept.
  dtypes_expected.safetensors  the same names converted by torch/numpy to float32 (bool stays BOOL):
                               the values tfm must produce, bit for bit.
  reference_layout.safetensors F32 and BOOL tensors laid out by the reference implementation's rules
                               (dtype alignment descending, then name; "__metadata__" first; compact JSON;
                               header padded with spaces to 8 bytes). tfm's writer must reproduce it
                               byte for byte.

torch 1.13 has no safetensors module, so the format is written here by hand (it is tiny):
  u64 little-endian header length N | N bytes of JSON header | data buffer
with data_offsets relative to the data buffer. safetensors is an external format with no magic number or
version field of its own, so the fixtures carry none (the STYLE habit of a magic number applies to tfm's
own golden files). To add a dtype: add a tensor to dtypes() with its float32 expectation.
"""
import json
import os
import struct

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "safetensors")


def write_safetensors(path, entries, metadata=None, sort_like_reference=False):
    """entries: list of (name, dtype string, shape list, raw little-endian bytes), kept in that order
    unless sort_like_reference (then: element size descending, then name, as safetensors does)."""
    if sort_like_reference:
        size = {"F32": 4, "BOOL": 1}
        entries = sorted(entries, key=lambda e: (-size[e[1]], e[0]))
    header = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in entries:
            f.write(raw)


def le(a):
    """numpy array -> little-endian bytes"""
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def dtypes():
    """(name, dtype, source values as a torch or numpy array, float32/bool expectation)"""
    out = []
    f32 = np.array([[1.5, -2.0, 0.25], [3.0, -0.0, 1e-3]], dtype=np.float32)
    out.append(("f32", "F32", f32.shape, le(f32), f32))
    # F16: ±0, 1, max normal 65504, smallest subnormal 2^-24, a mid subnormal, ±inf, NaN, rounded 1/3.
    f16 = np.array([0.0, -0.0, 1.0, 65504.0, 2.0**-24, 3 * 2.0**-20, np.inf, -np.inf, np.nan, 1 / 3],
                   dtype=np.float16)
    out.append(("f16", "F16", f16.shape, le(f16), f16.astype(np.float32)))
    bf = torch.tensor([1.0, -3.140625, 1e30, -1e-30, 0.1], dtype=torch.bfloat16).reshape(5, 1)
    out.append(("bf16", "BF16", tuple(bf.shape), bf.view(torch.int16).numpy().tobytes(),
                bf.float().numpy()))
    # F64 rounds to nearest float32: 0.1, 1/3, FLT_MAX exactly, 1e-45 -> smallest float32 subnormal.
    f64 = np.array([0.1, 1 / 3, -2.5, 3.4028234663852886e38, 1e-45], dtype=np.float64)
    out.append(("f64", "F64", f64.shape, le(f64), torch.from_numpy(f64).float().numpy()))
    for name, dt, tdt, vals in [
        ("i8", "I8", np.int8, [-128, 127, 0, -1]),
        ("i16", "I16", np.int16, [-32768, 32767, 5]),
        ("i32", "I32", np.int32, [-(2**24), 2**24, 123456, -7]),
        ("i64", "I64", np.int64, [-(2**24), 2**24, 0, -1, 16777215, 42]),
        ("u8", "U8", np.uint8, [0, 255, 7]),
        ("u16", "U16", np.uint16, [0, 65535]),
        ("u32", "U32", np.uint32, [2**24, 9]),
        ("u64", "U64", np.uint64, [2**24, 0]),
    ]:
        a = np.array(vals, dtype=tdt)
        out.append((name, dt, a.shape, le(a), a.astype(np.float32)))
    i64m = torch.arange(6, dtype=torch.int64).reshape(2, 3)  # a torch-made integer matrix
    out.append(("i64_matrix", "I64", (2, 3), i64m.numpy().tobytes(), i64m.float().numpy()))
    b = torch.tensor([[True, False, True], [False, False, True]])
    out.append(("mask", "BOOL", (2, 3), b.numpy().tobytes(), b.numpy()))
    s = np.array(2.75, dtype=np.float32)  # 0-dim: shape [], one element
    out.append(("scalar", "F32", (), le(s), s))
    e = np.zeros((0, 3), dtype=np.float32)  # empty: data_offsets [k, k]
    out.append(("empty", "F32", (0, 3), b"", e))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = dtypes()
    # Header order deliberately scrambled (not sorted, not by dtype) to test that order is kept.
    order = ["mask", "f32", "u8", "bf16", "i64", "empty", "f16", "scalar", "f64", "i8", "i16", "i32",
             "u16", "u32", "u64", "i64_matrix"]
    assert sorted(order) == sorted(r[0] for r in rows)
    by_name = {r[0]: r for r in rows}
    meta = {"format": "pt", "source": "tests/gen/gen_safetensors.py"}
    write_safetensors(os.path.join(OUT, "dtypes.safetensors"),
                      [by_name[n][:4] for n in order], meta)
    expected = []
    for n in order:
        exp = by_name[n][4]
        if exp.dtype == np.bool_:
            expected.append((n, "BOOL", exp.shape, exp.tobytes()))
        else:
            expected.append((n, "F32", exp.shape, le(exp.astype(np.float32))))
    write_safetensors(os.path.join(OUT, "dtypes_expected.safetensors"), expected)

    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 3, generator=g)
    bias = torch.randn(4, generator=g)
    m = torch.rand(2, 5, generator=g) > 0.5
    ref = [("layers.1.weight", "F32", (4, 3), w.numpy().tobytes()),
           ("b_mask", "BOOL", (2, 5), m.numpy().tobytes()),
           ("layers.0.bias", "F32", (4,), bias.numpy().tobytes()),
           ("a_scalar", "F32", (), np.array(-1.25, dtype=np.float32).tobytes()),
           ("z_empty", "BOOL", (3, 0), b"")]
    write_safetensors(os.path.join(OUT, "reference_layout.safetensors"), ref,
                      {"format": "pt", "note": "ünïcode ok"}, sort_like_reference=True)


if __name__ == "__main__":
    main()
