"""tfm_safetensors.py — read and write safetensors files with numpy only (no `safetensors` package).

The format (https://github.com/huggingface/safetensors, restated here so this file is the spec we rely on):
    bytes [0, 8)          N = header length, unsigned 64-bit little-endian
    bytes [8, 8+N)        UTF-8 JSON object: {name: {"dtype": D, "shape": [..], "data_offsets": [begin, end]},
                          optional "__metadata__": {str: str}}; may be right-padded with spaces
    bytes [8+N, EOF)      the data buffer; each tensor's bytes are buffer[begin:end], row-major, little-endian
Dtypes handled: the C++ reader's (src/io/safetensors.cc): F32 F16 BF16 F64 I8 I16 I32 I64 U8 U16 U32 U64 BOOL.
BF16 has no numpy dtype: it is read by widening the 16 stored bits to the top half of a float32, and written by
rounding float32 to nearest-even. Every other dtype is read as its numpy dtype (the C++ reader converts all but I8
and BOOL to Float32, and refuses the values that conversion cannot keep: load() refuses those too).
The format forbids holes and overlaps: the tensors' byte ranges tile the data buffer exactly, in any order.

To add a dtype: add it to _DTYPES (numpy dtype, item size) and, if numpy lacks it, a case in
_decode/_encode like BF16's.
"""

import json
import math
import os
import struct

import numpy as np

_DTYPES = {  # in the C++ reader's order (its "supported:" list)
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),  # raw bits; see _decode/_encode
    "F64": (np.dtype("<f8"), 8),
    "I8": (np.dtype("i1"), 1),  # int8 model directories (tfm quantize)
    "I16": (np.dtype("<i2"), 2),
    "I32": (np.dtype("<i4"), 4),
    "I64": (np.dtype("<i8"), 8),
    "U8": (np.dtype("u1"), 1),
    "U16": (np.dtype("<u2"), 2),
    "U32": (np.dtype("<u4"), 4),
    "U64": (np.dtype("<u8"), 8),
    "BOOL": (np.dtype("u1"), 1),
}
_NUMPY_TO_ST = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("bool"): "BOOL",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int16"): "I16",
    np.dtype("int8"): "I8",
    np.dtype("uint64"): "U64",
    np.dtype("uint32"): "U32",
    np.dtype("uint16"): "U16",
    np.dtype("uint8"): "U8",
}


def _decode(arr, dtype):
    """The array load() returns for the raw little-endian array `arr` of a tensor (values checked already)."""
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    if dtype == "BOOL":
        return arr.astype(bool)
    return arr.copy()


def _encode(arr, dtype):
    if dtype == "BF16":
        bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
        # round to nearest even on the 16 dropped bits
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype("<u2").tobytes()
    np_dtype, _ = _DTYPES[dtype]
    return np.ascontiguousarray(arr).astype(np_dtype, copy=False).tobytes()


# ---- reading ----------------------------------------------------------------------------------------------------
# load() refuses every file tfm's C++ reader (src/io/safetensors.cc) refuses, with its messages ("<path>: ..."), in
# its order: (1) the length prefix and the JSON header (UTF-8, no NUL byte, no duplicate key in any object, nested
# at most _MAX_JSON_DEPTH levels); (2) each entry on its own (dtype, shape, data_offsets inside the buffer and sized
# for the shape), "__metadata__" an object of str -> str; (3) all byte ranges together, which must tile the data
# buffer exactly (no overlap, no hole, no trailing byte; a zero-size tensor too must sit at a boundary); (4) the
# values: BOOL bytes 0 or 1, integers exactly representable in Float32 (|v| <= 2^24) and F64 values within its
# range, as the C++ reader converts every dtype but I8 and BOOL to Float32. Arrays keep the file's dtype (BF16:
# float32).

_MAX_HEADER_BYTES = 100_000_000  # the reference implementation's limit
_MAX_JSON_DEPTH = 4  # legit headers reach depth 3: {} -> entry {} -> shape [] -> dim
_MAX_RANK = 64
_MAX_QUOTED = 200  # bytes of a name copied into a message
_INT64_MAX = (1 << 63) - 1
_MAX_EXACT_INT = 1 << 24  # Float32 has a 24-bit significand
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT_DTYPES = ("I16", "I32", "I64", "U16", "U32", "U64")  # checked against 2^24 (I8 and U8 always fit)
_TOO_DEEP = (f"header is nested deeper than {_MAX_JSON_DEPTH} levels; a safetensors header is "
             "{name: {dtype, shape: [..], data_offsets}}")


def _escape(s, limit):
    """src/quote.h's escape_text: control characters, DEL and the line breaks beyond ASCII as \\xHH of their UTF-8
    bytes, cut after `limit` bytes with "..."."""
    out, used = [], 0
    for ch in s:
        b = ch.encode("utf-8", "surrogatepass")
        if used + len(b) > limit:
            return "".join(out) + "..."
        used += len(b)
        out.append("".join(f"\\x{c:02x}" for c in b)
                   if ord(ch) < 0x20 or ch in "\x7f\x85\u2028\u2029" or 0xD800 <= ord(ch) < 0xE000 else ch)
    return "".join(out)


def _quote(s):
    return "'" + _escape(s, _MAX_QUOTED) + "'"


def _shape_str(shape):
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _snippet(v):
    s = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return s[:_MAX_QUOTED] + "..." if len(s) > _MAX_QUOTED else s


def _kind(v):
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "non-integer number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(v), type(v).__name__)


class _Pairs(list):
    """A JSON object as parsed: its (key, value) pairs in order, duplicates kept for _objects to find."""


def _not_json(what):
    def refuse(s):
        raise ValueError(f"{s} is {what}")
    return refuse


def _finite(s):
    v = float(s)
    if math.isinf(v):
        raise ValueError(f"number {s} is out of range")
    return v


class _NegativeZero(int):
    """"-0", which the C++ parser holds as a signed integer: refused where a count is read, as it refuses it."""


def _integer(s):
    """An integer as the C++ parser (nlohmann) holds it: one beyond [-2^63, 2^64) as a float."""
    if s == "-0":
        return _NegativeZero(0)
    if len(s) <= 20:
        v = int(s)
        if -(1 << 63) <= v < (1 << 64):
            return v
    return _finite(s)


def _objects(path, v, keys, depth):
    """v with its objects as dicts, refusing a key repeated in one object and nesting deeper than
    _MAX_JSON_DEPTH, in document order, with the C++ reader's messages (keys: the keys of the objects around v)."""
    inner = depth + 1  # the depth of v's keys or elements (an empty container has none)
    if isinstance(v, (_Pairs, list)) and v and inner > _MAX_JSON_DEPTH or depth > _MAX_JSON_DEPTH:
        raise ValueError(f"{path}: {_TOO_DEEP}")
    if isinstance(v, _Pairs):
        out = {}
        for k, item in v:
            if k in out:
                if not keys:
                    raise ValueError(f"{path}: duplicate tensor name {_quote(k)} in header")
                raise ValueError(f"{path}: entry {_quote('.'.join(keys))}: duplicate key {_quote(k)}")
            out[k] = _objects(path, item, keys + [k], inner)
        return out
    if isinstance(v, list):
        return [_objects(path, item, keys, inner) for item in v]
    return v


def _count(path, what, v):
    """A non-negative JSON integer that fits int64 (read_count)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{path}: {what} must be a non-negative integer, got {_kind(v)} {_snippet(v)}")
    if v < 0 or isinstance(v, _NegativeZero):
        raise ValueError(f"{path}: {what} must be non-negative, got {v}")
    if v > _INT64_MAX:
        raise ValueError(f"{path}: {what} = {v} exceeds 2^63 - 1")
    return v


def _entry(path, name, j, buffer_size):
    """(dtype, shape, begin, end) of one header entry, checked on its own (parse_entry)."""
    who = f"tensor {_quote(name)}"
    if not isinstance(j, dict):
        raise ValueError(f"{path}: {who}: entry must be an object {{dtype, shape, data_offsets}}, got {_kind(j)} "
                         f"{_snippet(j)}")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in j:
            raise ValueError(f"{path}: {who}: missing \"{key}\" in {_snippet(j)}")
    dtype = j["dtype"]
    if not isinstance(dtype, str):
        raise ValueError(f"{path}: {who}: dtype must be a string, got {_snippet(dtype)}")
    if dtype not in _DTYPES:
        raise ValueError(f"{path}: {who}: unsupported dtype {_quote(dtype)} (supported: {', '.join(_DTYPES)})")
    js = j["shape"]
    if not isinstance(js, list):
        raise ValueError(f"{path}: {who}: shape must be an array, got {_snippet(js)}")
    if len(js) > _MAX_RANK:
        raise ValueError(f"{path}: {who}: shape has {len(js)} dimensions, more than {_MAX_RANK}")
    shape = [_count(path, f"{who}: shape[{d}]", n) for d, n in enumerate(js)]
    numel = 0 if 0 in shape else math.prod(shape)
    nbytes = numel * _DTYPES[dtype][1]
    if numel > _INT64_MAX or nbytes > _INT64_MAX:
        raise ValueError(f"{path}: {who}: shape {_snippet(js)} overflows: its {dtype} byte size does not fit in 63 "
                         "bits")
    jo = j["data_offsets"]
    if not isinstance(jo, list) or len(jo) != 2:
        raise ValueError(f"{path}: {who}: data_offsets must be [begin, end], got {_snippet(jo)}")
    begin = _count(path, f"{who}: data_offsets[0]", jo[0])
    end = _count(path, f"{who}: data_offsets[1]", jo[1])
    if begin > end:
        raise ValueError(f"{path}: {who}: data_offsets [{begin}, {end}] have begin > end")
    if end > buffer_size:
        raise ValueError(f"{path}: {who}: data_offsets [{begin}, {end}] end past the data buffer, which holds "
                         f"{buffer_size} bytes")
    if end - begin != nbytes:
        raise ValueError(f"{path}: {who}: data_offsets [{begin}, {end}] give {end - begin} bytes, expected {nbytes} "
                         f"({dtype} × {_shape_str(shape)})")
    return dtype, shape, begin, end


def _check_tiling(path, entries, buffer_size):
    """The byte ranges must tile [0, buffer_size): sorted by (begin, end), each starts where the previous ended
    (check_tiling). entries: [(name, begin, end)]."""
    cursor, prev = 0, None
    for name, begin, end in sorted(entries, key=lambda e: (e[1], e[2])):
        if begin < cursor:
            raise ValueError(f"{path}: tensor {_quote(name)}: data_offsets [{begin}, {end}] overlap tensor "
                             f"{_quote(prev[0])} [{prev[1]}, {prev[2]}]")
        if begin > cursor:
            raise ValueError(f"{path}: data buffer bytes [{cursor}, {begin}) belong to no tensor (hole before tensor "
                             f"{_quote(name)} [{begin}, {end}])")
        cursor, prev = end, (name, begin, end)
    if cursor != buffer_size:
        raise ValueError(f"{path}: data buffer holds {buffer_size} bytes but the tensors cover {cursor} "
                         f"({buffer_size - cursor} trailing bytes belong to no tensor)")


def _check_values(path, name, dtype, shape, arr):
    """The values the C++ reader's converters refuse: the first one named by its flat index."""
    bad, text = None, None
    if dtype == "BOOL" and arr.size:
        raw = arr.reshape(-1).view(np.uint8)
        if raw.max() > 1:
            bad = int(np.argmax(raw > 1))
            text = f"byte {int(raw[bad])}, expected 0 or 1"
    elif dtype in _INT_DTYPES and arr.size:
        flat = arr.reshape(-1)
        over = flat > _MAX_EXACT_INT
        if dtype.startswith("I"):
            over |= flat < -_MAX_EXACT_INT
        if over.any():
            bad = int(np.argmax(over))
            text = f"{int(flat[bad])}, not exactly representable in Float32 (|v| > 2^24)"
    elif dtype == "F64" and arr.size:
        flat = arr.reshape(-1)
        over = np.isfinite(flat) & (np.abs(flat) > _FLOAT32_MAX)
        if over.any():
            with np.errstate(over="ignore"):
                over &= np.isinf(flat.astype(np.float32))  # beyond FLT_MAX but rounding to it is fine
        if over.any():
            bad = int(np.argmax(over))
            text = f"{float(flat[bad]):.17g}, beyond the Float32 range (±3.4028235e+38)"
    if bad is not None:
        raise ValueError(f"{path}: tensor {_quote(name)}: element {bad} of {dtype} {_shape_str(shape)} is {text}")


def load(path):
    """Returns (tensors: dict name -> numpy array, metadata: dict str -> str). Refuses, with a one-line ValueError
    naming the file (and the tensor), every file tfm's own reader refuses (see the notes above)."""
    with open(path, "rb") as f:
        blob = f.read()
    path = os.fsdecode(path)
    if len(blob) < 8:
        raise ValueError(f"{path}: file is {len(blob)} bytes, shorter than the 8-byte header length prefix")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > _MAX_HEADER_BYTES:
        raise ValueError(f"{path}: header length {n} exceeds the limit of {_MAX_HEADER_BYTES} bytes")
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the {len(blob) - 8} bytes after the length prefix "
                         "(truncated file?)")
    raw = blob[8:8 + n]
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{path}: header holds a NUL byte at offset {nul} of its {n}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: header is not valid JSON: not UTF-8 (byte 0x{raw[e.start]:02x} at offset "
                         f"{e.start})") from None
    if text.startswith("\ufeff"):  # a byte order mark, which the C++ parser skips
        text = text[1:]
    try:
        parsed = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_not_json("not a JSON number"),
                            parse_float=_finite, parse_int=_integer)
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")  # a lone surrogate (\ud800) is no UTF-8
    except RecursionError:
        raise ValueError(f"{path}: {_TOO_DEEP}") from None
    except UnicodeEncodeError:
        raise ValueError(f"{path}: header is not valid JSON: a \\u escape holds a lone surrogate") from None
    except ValueError as e:  # json.JSONDecodeError, and the refusals above
        raise ValueError(f"{path}: header is not valid JSON: {_escape(str(e), 1000)}") from None
    header = _objects(path, parsed, [], 0)
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header must be a JSON object, got {_kind(header)} {_snippet(header)}")
    buffer = blob[8 + n:]
    metadata, entries = {}, []
    for name, j in header.items():
        if name == "__metadata__":
            if not isinstance(j, dict):
                raise ValueError(f"{path}: __metadata__ must be an object {{str: str}}, got {_kind(j)} {_snippet(j)}")
            for k, v in j.items():
                if not isinstance(v, str):
                    raise ValueError(f"{path}: __metadata__ key {_quote(k)}: value must be a string, got {_kind(v)} "
                                     f"{_snippet(v)}")
                metadata[k] = v
            continue
        entries.append((name,) + _entry(path, name, j, len(buffer)))
    _check_tiling(path, [(name, begin, end) for name, _, _, begin, end in entries], len(buffer))
    tensors = {}
    for name, dtype, shape, begin, end in entries:
        np_dtype, _ = _DTYPES[dtype]
        try:
            arr = np.frombuffer(buffer[begin:end], dtype=np_dtype).reshape(shape)
        except ValueError as e:  # an empty tensor whose other dimensions numpy cannot size (tfm reads it)
            raise ValueError(f"{path}: tensor {_quote(name)}: numpy cannot hold shape {_shape_str(shape)}: "
                             f"{e}") from None
        _check_values(path, name, dtype, shape, arr)
        tensors[name] = _decode(arr, dtype)
    return tensors, metadata


def save(path, tensors, metadata=None, dtypes=None):
    """tensors: dict (or list of pairs) name -> numpy array (or torch tensor). dtypes: optional name -> st dtype
    override (e.g. "BF16"); otherwise the dtype follows the array's numpy dtype. Tensors are stored in the given
    order, back to back: the format forbids holes in the buffer. The header is padded with spaces to a multiple
    of 8 bytes so the buffer starts aligned."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    dtypes = dtypes or {}
    header, chunks, offset = {}, [], 0
    for name, arr in items:
        if hasattr(arr, "detach"):  # torch.Tensor
            arr = arr.detach().cpu().numpy()
        arr = np.asarray(arr)
        dtype = dtypes.get(name) or _NUMPY_TO_ST.get(arr.dtype)
        if dtype is None:
            raise ValueError(f"tensor '{name}': numpy dtype {arr.dtype} has no safetensors dtype")
        raw = _encode(arr, dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * ((-(len(head) + 8)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)
