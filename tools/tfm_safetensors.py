"""tfm_safetensors.py — read and write safetensors files with numpy only (no `safetensors` package).

The format (https://github.com/huggingface/safetensors, restated here so this file is the spec we rely on):
    bytes [0, 8)          N = header length, unsigned 64-bit little-endian
    bytes [8, 8+N)        UTF-8 JSON object: {name: {"dtype": D, "shape": [..], "data_offsets": [begin, end]},
                          optional "__metadata__": {str: str}}; may be right-padded with spaces
    bytes [8+N, EOF)      the data buffer; each tensor's bytes are buffer[begin:end], row-major, little-endian
Dtypes handled: F64 F32 F16 BF16 BOOL I64 I32 U8. BF16 has no numpy dtype: it is read by widening the
16 stored bits to the top half of a float32, and written by rounding float32 to nearest-even.

To add a dtype: add it to _DTYPES (numpy dtype, item size) and, if numpy lacks it, a case in
_decode/_encode like BF16's.
"""

import json
import struct

import numpy as np

_DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),  # raw bits; see _decode/_encode
    "BOOL": (np.dtype("u1"), 1),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "U8": (np.dtype("u1"), 1),
    "I8": (np.dtype("i1"), 1),  # int8 model directories (tfm quantize)
}
_NUMPY_TO_ST = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("bool"): "BOOL",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("uint8"): "U8",
    np.dtype("int8"): "I8",
}


def _decode(raw, dtype, shape):
    np_dtype, _ = _DTYPES[dtype]
    arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape)
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    if dtype == "BOOL":
        if arr.size and arr.max() > 1:
            raise ValueError("BOOL tensor holds a byte other than 0 or 1")
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


def load(path):
    """Returns (tensors: dict name -> numpy array, metadata: dict str -> str). Validates offsets and sizes."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} exceeds file size {len(blob)}")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {dtype}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != count * _DTYPES[dtype][1]:
            raise ValueError(f"{path}: tensor '{name}' data_offsets {begin},{end} do not fit shape {shape} {dtype}")
        tensors[name] = _decode(data[begin:end], dtype, shape)
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
