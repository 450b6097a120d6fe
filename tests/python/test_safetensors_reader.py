"""tools/tfm_safetensors.py's reader (numpy only; the tools and tools/import_torch.py read with it) against tfm's own
C++ reader (src/io/safetensors.cc, reached through tfm.load_module): every malformed file one refuses, the other
refuses, with the same one-line message naming the file and the tensor (the JSON parsers' own texts aside); every
file one accepts, the other accepts. And import_torch.py refuses such a file instead of importing wrong weights."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import tfm
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
import tfm_safetensors as st  # noqa: E402

# A MultiheadAttention(4, 1): the weights the valid file holds, in this order in its buffer.
CONFIG = {"module": "MultiheadAttention", "embed_dim": 4, "num_heads": 1, "batch_first": True}
RNG = np.random.default_rng(3)
WEIGHTS = {"in_proj_weight": RNG.standard_normal((12, 4)).astype(np.float32),
           "in_proj_bias": RNG.standard_normal(12).astype(np.float32),
           "out_proj.weight": RNG.standard_normal((4, 4)).astype(np.float32),
           "out_proj.bias": RNG.standard_normal(4).astype(np.float32)}


def entries(tensors, dtype="F32"):
    """{name: entry} and the data buffer of tensors written back to back, in their order."""
    header, chunks, offset = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": st._NUMPY_TO_ST[a.dtype] if dtype is None else dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    return header, b"".join(chunks)


def write(path, head, data, length=None):
    """A file of header bytes (or a JSON-able header) and data; length: the prefix, if not the header's size."""
    if not isinstance(head, bytes):
        head = json.dumps(head).encode()
        head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head) if length is None else length) + head + data)
    return str(path)


def cpp_reader_error(path, cfg_path):
    """The C++ reader's message for the file, or None when it reads it (a key or dtype error of the module is a
    ValueError, raised after reading: the file was read)."""
    try:
        tfm.load_module(cfg_path, path)
    except ValueError:
        return None
    except OSError as e:
        return str(e)
    return None


def raw_header(edit):
    """The valid file's header text, edited as bytes."""
    header, data = entries(WEIGHTS)
    return edit(json.dumps(header).encode()), data


def malformed(tmp):
    """(name, path, whether the messages are the JSON parsers' own) of files tfm's reader refuses."""
    header, data = entries(WEIGHTS)
    b = header["in_proj_bias"]["data_offsets"]
    out = []

    def case(name, head, data=data, parser=False, length=None):
        out.append((name, write(tmp / f"{name}.safetensors", head, data, length), parser))

    def edited(change):
        h = json.loads(json.dumps(header))
        change(h)
        return h

    # A tensor's offsets aliasing another's bytes, and a name given twice, its second entry pointing at other bytes
    # (json.loads kept the last: wrong weights).
    case("alias", edited(lambda h: h["out_proj.bias"].update(data_offsets=[b[0], b[0] + 16])))
    text = json.dumps(header)
    dup = text[:-1] + ', "in_proj_weight": ' + json.dumps({"dtype": "F32", "shape": [12, 4],
                                                           "data_offsets": [0, 192]}) + "}"
    case("dup_name", dup.encode() + b" " * (-len(dup) % 8))
    case("overlap", edited(lambda h: h["in_proj_bias"].update(data_offsets=[b[0] - 16, b[1] - 16])))
    case("trailing", header, data + b"\0" * 8)
    case("zero_inside", {**header, "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [8, 8]}})
    case("meta_int", {"__metadata__": {"n": 5}, **header})
    case("meta_null", {"__metadata__": None, **header})
    case("meta_list", {**header, "__metadata__": ["a"]})
    case("nul_pad", *raw_header(lambda t: t + b"\0" * (-len(t) % 8 or 8)))
    case("nonutf8_name", *raw_header(lambda t: t.replace(b'"in_proj_bias"', b'"in_proj_b\xffas"')), parser=True)
    case("not_json", *raw_header(lambda t: t[:-3]), parser=True)
    case("nan", *raw_header(lambda t: t.replace(b"[12, 4]", b"[NaN, 4]")), parser=True)
    case("huge_number", *raw_header(lambda t: t.replace(b"[12, 4]", b"[1e400, 4]")), parser=True)
    case("nested", {**header, "x": {"a": {"b": {"c": [1]}}}})
    case("dup_field", *raw_header(lambda t: t.replace(b'"dtype": "F32", "shape": [12]',
                                                      b'"dtype": "F32", "dtype": "F16", "shape": [12]')))
    case("not_object", b"[1, 2]   ", data)
    case("entry_not_object", {**header, "x": 3})
    case("missing_field", edited(lambda h: h["in_proj_bias"].pop("shape")))
    case("dtype_unknown", edited(lambda h: h["in_proj_bias"].update(dtype="F8")))
    case("dtype_not_string", edited(lambda h: h["in_proj_bias"].update(dtype=4)))
    case("shape_not_array", edited(lambda h: h["in_proj_bias"].update(shape=12)))
    case("shape_negative", edited(lambda h: h["in_proj_bias"].update(shape=[-12])))
    case("shape_float", edited(lambda h: h["in_proj_bias"].update(shape=[12.0])))
    case("shape_bool", edited(lambda h: h["in_proj_bias"].update(shape=[True])))
    case("shape_rank", edited(lambda h: h["in_proj_bias"].update(shape=[1] * 65)))
    case("shape_overflow", edited(lambda h: h["in_proj_bias"].update(shape=[1 << 40, 1 << 40])))
    case("shape_too_big", edited(lambda h: h["in_proj_bias"].update(shape=[1 << 63])))
    case("offsets_not_pair", edited(lambda h: h["in_proj_bias"].update(data_offsets=[b[0]])))
    case("offsets_reversed", edited(lambda h: h["in_proj_bias"].update(data_offsets=[b[1], b[0]])))
    case("offsets_past_end", edited(lambda h: h["in_proj_bias"].update(data_offsets=[b[0] + 1000, b[1] + 1000])))
    case("offsets_size", edited(lambda h: h["in_proj_bias"].update(data_offsets=[b[0], b[1] - 4])))
    (tmp / "short.safetensors").write_bytes(b"\x05\x00\x00")
    out.append(("short_file", str(tmp / "short.safetensors"), False))
    case("header_limit", header, length=100_000_001)
    case("header_past_file", header, length=1 << 20)
    # Values the C++ reader's conversion to Float32 cannot keep.
    for name, dtype, values in (("bool_byte", "BOOL", np.array([0, 2, 1, 0], np.uint8)),
                                ("i64_beyond_2_24", "I64", np.array([1, (1 << 24) + 1, 0, 0], np.int64)),
                                ("u32_beyond_2_24", "U32", np.array([0, 0, 0, (1 << 24) + 1], np.uint32)),
                                ("f64_beyond_f32", "F64", np.array([0.5, -1e39, 0, 0], np.float64))):
        h, d = entries({**WEIGHTS, "out_proj.bias": values}, dtype=None)
        h["out_proj.bias"]["dtype"] = dtype
        case(name, h, d)
    return out


def test_reader_refuses_what_tfm_refuses_with_its_message(tmp_path):
    cfg = tmp_path / "mha.json"
    cfg.write_text(json.dumps(CONFIG))
    for name, path, parser in malformed(tmp_path):
        want = cpp_reader_error(path, str(cfg))
        assert want is not None, f"{name}: tfm's reader read it (the case is wrong)"
        with pytest.raises(ValueError) as e:
            st.load(path)
        got = str(e.value)
        assert "\n" not in got, name
        if parser:  # the parsers word their own errors
            prefix = f"{path}: header is not valid JSON: "
            assert got.startswith(prefix) and want.startswith(prefix), (name, got, want)
        else:
            assert got == want, name


def test_reader_accepts_what_tfm_accepts(tmp_path):
    cfg = tmp_path / "mha.json"
    cfg.write_text(json.dumps(CONFIG))
    header, data = entries(WEIGHTS)
    reordered = dict(reversed(list(header.items())))  # the header's order need not be the buffer's
    files = {
        "plain": write(tmp_path / "plain.safetensors", header, data),
        "header_order": write(tmp_path / "order.safetensors", reordered, data),
        "no_padding": write(tmp_path / "nopad.safetensors", json.dumps(header).encode(), data),
        "bom_newlines": write(tmp_path / "bom.safetensors", b"\xef\xbb\xbf" + json.dumps(header).encode() + b"\n\n",
                              data),
        "metadata": write(tmp_path / "meta.safetensors", {"__metadata__": {"format": "pt"}, **header}, data),
        "extra_fields": write(tmp_path / "extra.safetensors",
                              {k: {**v, "note": [1, {}]} for k, v in header.items()}, data),
        # zero-size tensors at a boundary: the start, between two tensors, the end
        "zero_size": write(tmp_path / "zero.safetensors",
                           {"z0": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                            "z1": {"dtype": "BOOL", "shape": [3, 0], "data_offsets": [192, 192]},
                            "z2": {"dtype": "F16", "shape": [0, 1 << 40], "data_offsets": [len(data), len(data)]},
                            **header}, data),
    }
    for name, path in files.items():
        assert cpp_reader_error(path, str(cfg)) is None, name
        tensors, meta = st.load(path)
        for k, v in WEIGHTS.items():
            np.testing.assert_array_equal(tensors[k], v, err_msg=name)
    assert st.load(files["metadata"])[1] == {"format": "pt"}
    assert st.load(files["zero_size"])[0]["z2"].shape == (0, 1 << 40)
    # Integer and F64 values within Float32's reach are read, as the C++ reader reads them.
    h, d = entries({"i": np.array([-(1 << 24), 1 << 24], np.int64), "f": np.array([3.4e38, -1e-300], np.float64)},
                   dtype=None)
    tensors, _ = st.load(write(tmp_path / "ok.safetensors", h, d))
    assert tensors["i"].tolist() == [-(1 << 24), 1 << 24] and tensors["f"].dtype == np.float64


def test_import_torch_refuses_a_malformed_source_naming_file_and_tensor(tmp_path):
    # tools/import_torch.py read these with json.loads and no tiling check, and imported other tensors' values.
    rng = np.random.default_rng(5)
    d, f = 8, 32
    sd = {"norm1.weight": 1 + rng.standard_normal(d), "norm1.bias": rng.standard_normal(d),
          "attn.qkv.weight": rng.standard_normal((3 * d, d)), "attn.proj.weight": rng.standard_normal((d, d)),
          "attn.proj.bias": rng.standard_normal(d), "norm2.weight": 1 + rng.standard_normal(d),
          "norm2.bias": rng.standard_normal(d), "mlp.fc1.weight": rng.standard_normal((f, d)),
          "mlp.fc1.bias": rng.standard_normal(f), "mlp.fc2.weight": rng.standard_normal((d, f)),
          "mlp.fc2.bias": rng.standard_normal(d)}
    sd = {k: v.astype(np.float32) for k, v in sd.items()}
    header, data = entries(sd)
    text = json.dumps(header)
    second = json.dumps({**header["norm2.weight"]})
    files = {
        "dup": (text[:-1] + f', "norm1.weight": {second}}}').encode(),
        "alias": json.dumps({**header, "norm1.bias": header["norm2.bias"]}).encode(),
        "meta": json.dumps({"__metadata__": {"n": 5}, **header}).encode(),
    }
    needles = {"dup": "duplicate tensor name 'norm1.weight' in header",
               "alias": "data buffer bytes [32, 64) belong to no tensor (hole before tensor 'attn.qkv.weight'",
               "meta": "__metadata__ key 'n': value must be a string, got integer 5"}
    tool = os.path.join(ROOT, "tools", "import_torch.py")
    ok = write(tmp_path / "ok.safetensors", header, data)
    r = subprocess.run([sys.executable, tool, "import", "--map", "nb3_vit_block", "--input", ok, "--set", "nhead=2",
                        "--out", str(tmp_path / "ok")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for name, head in files.items():
        path = write(tmp_path / f"{name}.safetensors", head + b" " * (-len(head) % 8), data)
        r = subprocess.run([sys.executable, tool, "import", "--map", "nb3_vit_block", "--input", path, "--set",
                            "nhead=2", "--out", str(tmp_path / name)], capture_output=True, text=True)
        assert r.returncode == 1 and not os.path.exists(tmp_path / f"{name}.json"), (name, r.stdout, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"import_torch.py: error: {path}: "), (name, r.stderr)
        assert needles[name] in lines[0], (name, lines[0])
