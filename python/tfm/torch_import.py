"""tfm.torch_import — the key and config mapping of hand-written PyTorch modules into tfm, and back: the code of
tools/import_torch.py (which loads this file by path and documents the mapping format and its command line),
used by tfm.from_torch(module, mapping=...). torch is not needed; numpy is.
"""

import argparse
import collections
import errno
import fnmatch
import itertools
import json
import math
import os
import re
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
# The shipped mappings: beside this file in an installed or built package (copied there by python/CMakeLists.txt),
# else in the source tree's tools/import_maps.
MAPS_DIR = next((d for d in (os.path.join(_HERE, "import_maps"),
                             os.path.join(_HERE, os.pardir, os.pardir, "tools", "import_maps")) if os.path.isdir(d)),
                os.path.join(_HERE, "import_maps"))


class _SafeTensors:
    """tools/tfm_safetensors.py (numpy only), found when first used: on sys.path (the tools put tools/ there),
    else in the source tree beside this package. Only the file-reading and -writing functions need it."""

    def __getattr__(self, name):
        try:
            import tfm_safetensors as mod
        except ImportError:
            import importlib.util
            path = os.path.join(_HERE, os.pardir, os.pardir, "tools", "tfm_safetensors.py")
            if not os.path.exists(path):
                raise ImportError("reading or writing safetensors files here needs tools/tfm_safetensors.py "
                                  "(tfm's source tree); use tfm.load_module for files") from None
            spec = importlib.util.spec_from_file_location("tfm_safetensors", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        return getattr(mod, name)


st = _SafeTensors()

# tfm's defaults of the config keys (a key absent or null takes its default): ModelConfig's for a model directory
# (include/tfm/models/config.h, with the family table there), `tfm forward`'s module config's otherwise
# (include/tfm/models/forward.h: PyTorch's constructor defaults), and the layer options both share
# (LayerOptions, tfm/modules/transformer.h). The attention variants left unset are derived (_resolved). A config key
# missing here is compared as written (absent = null), so a new config field needs its default here (the one copy in
# Python: tools/torch_models.py builds its DEFAULTS and arch_defaults from these tables).
_LAYER_DEFAULTS = {"dropout": 0.1, "layer_norm_eps": 1e-5, "bias": True, "norm_type": "layer_norm",
                   "share_layers": False, "drop_path": 0.0}
_MODEL_DEFAULTS = {"d_model": 64, "nhead": 4, "dim_feedforward": 256, "num_encoder_layers": 2, "num_decoder_layers": 2,
                   "max_len": 512, "arch": "encoder", "share_embeddings": False, "pad_id": 0, "bos_id": 1, "eos_id": 2}
_FAMILY_DEFAULTS = {  # ModelConfig's optional fields, unset: the family's (FamilyDefaults, src/models/family.cc)
    "encoder": {"norm_first": False, "activation": "relu", "positional": "sinusoidal", "scale_embeddings": False,
                "tie_embeddings": False},
    "seq2seq": {"norm_first": False, "activation": "relu", "positional": "sinusoidal", "scale_embeddings": True,
                "tie_embeddings": False},
    "decoder": {"norm_first": True, "activation": "gelu", "positional": "learned", "scale_embeddings": False,
                "tie_embeddings": True},
}
_FORWARD_DEFAULTS = {"d_model": 512, "nhead": 8, "dim_feedforward": 2048, "num_encoder_layers": 6,
                     "num_decoder_layers": 6, "activation": "relu", "norm_first": False, "batch_first": False,
                     "norm": False, "enable_nested_tensor": True, "mask_check": True}
# The config keys reverse does not compare, because they do not change what the module computes from its
# state_dict: dropout and drop_path act in training only; batch_first is the inputs' layout; bos_id and eos_id are
# decoding's; max_len bounds the length (a learned table's length is its tensor's shape, a stored sinusoidal table's
# is written from it); enable_nested_tensor and mask_check choose which of PyTorch's calls tfm reproduces; bias is
# the default of qkv_bias, out_bias, ffn_bias and norm_bias, which are compared resolved.
_UNCOMPARED = {"dropout", "drop_path", "batch_first", "bos_id", "eos_id", "max_len", "enable_nested_tensor",
               "mask_check", "bias"}


class MappingError(ValueError):
    """A mapping or tensor problem; main() prints it as one line."""


def fail(msg):
    raise MappingError(msg)


# ---------------------------------------------------------------------------------------------------------------
# Reading and writing

def load_mapping(name_or_path):
    """A mapping by its name in tools/import_maps or by its file's path (str or os.PathLike)."""
    name_or_path = os.fspath(name_or_path)
    path = name_or_path
    if not os.path.exists(path):
        path = os.path.join(MAPS_DIR, name_or_path + ("" if name_or_path.endswith(".json") else ".json"))
    if not os.path.exists(path):
        if os.sep in name_or_path or name_or_path.endswith(".json"):  # a file's path: the file is missing
            raise FileNotFoundError(errno.ENOENT, f"mapping '{name_or_path}': no such file", name_or_path)
        fail(f"mapping '{name_or_path}': no such mapping (a file's path, or a name in {MAPS_DIR})")
    with open(path, "rb") as f:
        try:
            m = json.loads(f.read())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:  # said of the file, as load_module says it
            fail(f"{path}: not valid JSON: {e}")
    if not isinstance(m, dict):
        fail(f"{path}: a mapping is a JSON object, got {type(m).__name__}")
    if not isinstance(m.get("targets"), dict) or not m["targets"]:
        fail(f"{path}: a mapping needs a non-empty \"targets\" object")
    m.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    m.setdefault("groups", {})
    return m


def _to_numpy(v):
    if hasattr(v, "detach"):
        v = v.detach().cpu()
        if str(v.dtype) == "torch.bfloat16":
            v = v.float()
        return v.numpy()
    return np.asarray(v)


def load_state(path):
    """A state_dict from torch.save or safetensors, as {key: numpy array}."""
    if not os.path.exists(path):
        fail(f"{path}: no such file")
    if path.endswith(".safetensors"):
        tensors, _ = st.load(path)
        return dict(tensors)
    import torch
    obj = torch.load(path, map_location="cpu")
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        obj = obj.state_dict()
    if isinstance(obj, dict):
        for k in ("state_dict", "model_state_dict", "model"):
            if k in obj and isinstance(obj[k], dict):
                obj = obj[k]
                break
    if not isinstance(obj, dict) or not all(hasattr(v, "shape") for v in obj.values()):
        fail(f"{path}: not a state_dict (a dict of tensors)")
    return {k: _to_numpy(v) for k, v in obj.items()}


def save_state(path, tensors):
    if path.endswith((".pt", ".pth", ".bin")):
        import torch
        torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}, path)
    else:
        st.save(path, [(k, np.ascontiguousarray(v)) for k, v in tensors.items()],
                {"format": "pt", "exported_by": "tfm tools/import_torch.py reverse"})


# ---------------------------------------------------------------------------------------------------------------
# Rules

def _prefix_regex(prefix):
    return re.compile("^" + re.escape(prefix).replace(re.escape("{i}"), r"(\d+)"))


def _indices(prefix, keys):
    rx = _prefix_regex(prefix)
    return sorted({int(m.group(1)) for k in keys for m in [rx.match(k)] if m})


def _expand(rules, groups, from_prefix="", to_prefix="", shared=None, where="rules"):
    """Flattens group applications into plain rules with full keys. Prefixes may hold "{i}"; a rule keeps the
    unexpanded prefix pair and the shared config key so that indices are resolved against the tensors."""
    out = []
    for r in rules:
        if "group" in r:
            g = r["group"]
            if g not in groups:
                fail(f"{where}: unknown group '{g}'")
            out += _expand(groups[g], groups, from_prefix + r.get("from_prefix", ""), to_prefix + r.get("to_prefix", ""),
                           r.get("shared", shared), f"group '{g}'")
            continue
        r = dict(r)
        r["_fp"], r["_tp"], r["_shared"] = from_prefix, to_prefix, shared
        kinds = [k for k in ("from", "qkv", "heads") if k in r]
        if len(kinds) != 1:
            fail(f"{where}: a rule needs exactly one of from / qkv / heads: {json.dumps(r)}")
        if "to" not in r and "sinusoidal" not in r:
            fail(f"{where}: a rule without \"to\" must be a sinusoidal table: {json.dumps(r)}")
        out.append(r)
    return out


def _sources(r):
    return list(r["qkv"]) if "qkv" in r else list(r["heads"]) if "heads" in r else [r["from"]]


def _attn_sizes(config):
    """(A, A, Av): the q, k, v row counts of in_proj_weight (A = H·Dh, Av = H·Dv)."""
    d = config.get("d_model", config.get("embed_dim"))
    h = config.get("nhead", config.get("num_heads"))
    dh = config.get("head_dim") or d // h
    dv = config.get("v_head_dim") or dh
    return h * dh, h * dh, h * dv


def _width(config):
    return config.get("d_model", config.get("embed_dim"))


def _shape(a):
    return _shape_text(a.shape)


def _shape_text(shape):
    """A shape as tfm's messages write it, "(16, 64)", "(8,)"; an unknown dimension (None) as "?"."""
    return "(" + ", ".join("?" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


# ---------------------------------------------------------------------------------------------------------------
# The shapes tfm gives its tensors, and those a rule therefore expects of its source tensors

_Dim = collections.namedtuple("_Dim", "value key factor uses")
_Dim.__doc__ = """One dimension of an expected shape: value (None where the config cannot say, e.g. d_model not
divisible by nhead: tfm refuses that config itself), key and factor (value = factor · config[key] when the dimension
carries one config key: a source tensor's dimension there says that key's value, which _settle_inferred compares
across the tensors), and uses (the config keys the value derives from, named in a shape error)."""


def _dim(value, key=None, factor=1, uses=None):
    return _Dim(value, key, factor, tuple(uses if uses is not None else ([key] if key else [])))


_GATED = ("glu", "geglu", "swiglu")  # gated activations (include/tfm/ops/activation.h): linear1 is 2F wide


def _int_of(c, key):
    v = c.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _attn_dims(c):
    """(D, H, Dh, Dv, A, Av) of the resolved config c as _Dims: the width, the heads, their query/key and value
    widths, A = H·Dh and Av = H·Dv (a module config of a MultiheadAttention names the first two embed_dim and
    num_heads)."""
    wk = "embed_dim" if "embed_dim" in c else "d_model"
    hk = "num_heads" if "num_heads" in c else "nhead"
    h, dh, dv = _int_of(c, hk), _int_of(c, "head_dim"), _int_of(c, "v_head_dim")
    a = h * dh if h is not None and dh is not None else None
    av = h * dv if h is not None and dv is not None else None
    # A and Av carry head_dim and v_head_dim H times (once H is known)
    return (_dim(_int_of(c, wk), wk), _dim(h, hk), _dim(dh, "head_dim"), _dim(dv, "v_head_dim"),
            _dim(a, "head_dim" if h else None, h or 1, (hk, "head_dim")),
            _dim(av, "v_head_dim" if h else None, h or 1, (hk, "v_head_dim")))


def _tfm_shape(key, c, model_dir):
    """The shape (_Dims) tfm gives its tensor `key` under the resolved config c (_resolved): the layers' tensors
    (include/tfm/modules/transformer.h, attention.h) under any prefix, and a model directory's embeddings, positions
    and generator (include/tfm/models/config.h); None for a key no tfm module holds."""
    d, _, _, _, a, av = _attn_dims(c)
    rows = _dim(2 * a.value + av.value if a.value is not None and av.value is not None else None,
                uses=a.uses + ("v_head_dim",))
    gate = 2 if c.get("activation") in _GATED else 1
    f = _int_of(c, "dim_feedforward")
    ff = _dim(f, "dim_feedforward")
    ff_in = _dim(None if f is None else gate * f, "dim_feedforward", gate,
                 ("dim_feedforward", "activation") if gate == 2 else ("dim_feedforward",))
    parts = key.split(".")
    leaf, owner = parts[-1], parts[-2] if len(parts) > 1 else ""
    if leaf == "in_proj_weight":
        return (rows, d)
    if leaf == "in_proj_bias":
        return (rows,)
    if leaf not in ("weight", "bias"):
        return None
    linear = {"out_proj": ((d, av), (d,)), "linear1": ((ff_in, d), (ff_in,)), "linear2": ((d, ff), (d,))}
    if owner in linear:
        return linear[owner][leaf == "bias"]
    if re.fullmatch(r"norm\d*", owner):
        return (d,)
    if model_dir and len(parts) == 2:
        src_v, tgt_v = _dim(_int_of(c, "src_vocab_size"), "src_vocab_size"), _dim(_int_of(c, "tgt_vocab_size"),
                                                                                     "tgt_vocab_size")
        length = _dim(_int_of(c, "max_len"), "max_len")
        rows_of = {"embedding": src_v if c.get("arch") == "encoder" else tgt_v, "src_embedding": src_v,
                   "tgt_embedding": tgt_v, "generator": tgt_v, "pos_embedding": length, "src_pos_embedding": length,
                   "tgt_pos_embedding": length}
        if owner in rows_of and leaf == "weight":
            return (rows_of[owner], d)
        if owner == "generator":
            return (tgt_v,)
    return None


def _source_shapes(r, names, to, c, model_dir):
    """[(source name, expected shape as _Dims)] of a rule's source tensors under the resolved config c, as the
    rule maps them onto the shape tfm gives `to` (a sinusoidal table: its (1, L, D) or (L, D)); None when `to` is
    no tfm tensor."""
    d, h, dh, dv, a, av = _attn_dims(c)
    if "sinusoidal" in r:
        length = _dim(_int_of(c, r["sinusoidal"]), r["sinusoidal"])
        return [(names[0], (length, d) if r.get("no_batch_dim") else (_dim(1), length, d))]
    want = _tfm_shape(to, c, model_dir)
    if want is None:
        return None
    if "qkv" in r:  # in_proj's rows q, k, v: (A, ...), (A, ...), (Av, ...)
        return [(n, (rows,) + tuple(want[1:])) for n, rows in zip(names, (a, a, av))]
    if "heads" in r:  # (H, D, Dh) each, Wv (H, D, Dv)
        return [(n, (h, d, w)) for n, w in zip(names, (dh, dh, dv))]
    if r.get("broadcast"):
        return [(names[0], (_dim(1),))]
    if r.get("transpose"):
        return [(names[0], tuple(reversed(want)))]
    return [(names[0], want)]


def _fits(shape, dims):
    return len(shape) == len(dims) and all(d.value is None or d.value == s for s, d in zip(shape, dims))


_ST_DTYPES = {"int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8", "uint16": "U16",
              "uint32": "U32", "uint64": "U64", "bool": "BOOL"}  # safetensors' names, as tfm's messages say them


def _float32(name, v):
    """A source tensor as float32, refused as `tfm forward` refuses a weight: an integer or bool dtype ("must be
    floating point, got I64"), an F64 value beyond the Float32 range (which the cast would make infinite)."""
    arr = np.asarray(v)
    if arr.dtype.kind != "f":
        fail(f"source tensor '{name}' must be floating point, got {_ST_DTYPES.get(arr.dtype.name, arr.dtype.name)}")
    if arr.dtype.itemsize > 4:
        flat = arr.reshape(-1)
        with np.errstate(over="ignore"):
            out = flat.astype(np.float32)
        bad = np.isinf(out) & np.isfinite(flat)
        if bad.any():
            i = int(np.argmax(bad))
            dtype = "F64" if arr.dtype == np.float64 else arr.dtype.name
            fail(f"source tensor '{name}': element {i} of {dtype} {_shape(arr)} is {float(flat[i]):.17g}, beyond the "
                 "Float32 range (±3.4028235e+38)")
        return out.reshape(arr.shape)
    return arr.astype(np.float32, copy=False)


def _forward_rule(r, src, config, fkey, tkey, model_dir=False, why=None):
    """One rule on one layer index: source tensors → (tfm key, tensor) or None for a checked table. Every source
    tensor's shape is checked against the one the config gives its tfm tensor (_source_shapes); why: the notes
    _settle_inferred gives of inferred config keys, said beside them."""
    names = [fkey(s) for s in _sources(r)]
    for n in names:
        if n not in src:
            fail(f"source has no tensor '{n}' (needed for tfm '{tkey(r['to'])}')" if "to" in r
                 else f"source has no tensor '{n}'")
    to = tkey(r["to"]) if "to" in r else None
    c = _resolved(config, model_dir)
    expected = _source_shapes(r, names, to, c, model_dir)
    if expected is None:
        fail(f"tfm '{to}' (from source '{names[0]}') is no tensor of a tfm module: the mapping's \"to\" names a key "
             "tfm does not have")
    if r.get("transpose") and len(expected[0][1]) != 2:
        fail(f"tfm '{to}' is not a matrix: \"transpose\" (for source '{names[0]}') applies to matrices only")
    ts = [_float32(n, src[n]) for n in names]
    for n, t, dims in zip(names, ts, (dims for _, dims in expected)):
        if not _fits(t.shape, dims):
            uses = list(dict.fromkeys(k for dim in dims for k in dim.uses))
            noted = [k for k in uses if k in (why or {}) and (why[k][1] or why[k][2] - {n})]
            said = ("; " if noted else ", ").join(f"{k} {_value(c.get(k))}" + (f", {why[k][0]}" if k in noted else "")
                                                  for k in uses)
            fail(f"source '{n}' ({'a sinusoidal table' if to is None else f'for tfm {to!r}'}): shape {_shape(t)}, "
                 f"expected {_shape_text([dim.value for dim in dims])}" + (f" ({said})" if said else ""))
    if "sinusoidal" in r:
        a = ts[0]
        length, d = (dim.value for dim in expected[0][1][-2:])
        if length is None or d is None:
            fail(f"source '{names[0]}' (a sinusoidal table): the config gives no integer {r['sinusoidal']} and width "
                 f"to compare it with ({r['sinusoidal']} {_value(c.get(r['sinusoidal']))})")
        from torch_models import sinusoidal_table  # tfm's table; imports torch
        want = sinusoidal_table(length, d)
        err = float(np.max(np.abs(a.reshape(want.shape) - want))) if a.size else 0.0
        if err > 1e-5:
            fail(f"source '{names[0]}' is not the sinusoidal table tfm computes (max difference {err:.3g})")
        return None
    want = _tfm_shape(to, c, model_dir)
    a = ts[0]
    if "qkv" in r:
        a = np.concatenate(ts, axis=0)
    elif "heads" in r:
        # einsum("btd,hdk->bhtk", x, W): head h's output unit j is x · W[h, :, j], i.e. row h·Dh + j of a Linear
        # weight (out, in) is W[h, :, j]: W.permute(0, 2, 1).reshape(H·Dh, D).
        a = np.concatenate([t.transpose(0, 2, 1).reshape(-1, t.shape[1]) for t in ts], axis=0)
    elif r.get("transpose"):
        a = np.ascontiguousarray(a.T)
    elif r.get("broadcast"):
        if len(want) != 1 or want[0].value is None:
            fail(f"tfm '{to}' is no vector of a known width: \"broadcast\" (for source '{names[0]}') fills one")
        a = np.full((want[0].value,), a[0], dtype=np.float32)
    if not _fits(a.shape, want):  # the sources fit, but the rule does not make this tensor of them
        fail(f"tfm '{to}': the rule makes shape {_shape(a)} of source {', '.join(repr(n) for n in names)}, expected "
             f"{_shape_text([dim.value for dim in want])}: the mapping's rule does not fit this tensor")
    return to, a


def _reverse_rule(r, tfm, config, fkey, tkey, grad):
    """tfm tensor → [(module key, tensor)]."""
    to = tkey(r["to"]) if "to" in r else None
    names = [fkey(s) for s in _sources(r)]
    if "sinusoidal" in r:
        if grad:
            return []
        length = config.get(r["sinusoidal"])
        from torch_models import sinusoidal_table  # tfm's table; imports torch
        table = sinusoidal_table(length, _width(config))
        return [(names[0], table if r.get("no_batch_dim") else table[None])]
    if to not in tfm:
        fail(f"tfm weights have no tensor '{to}' (needed for '{names[0]}')")
    a = np.asarray(tfm[to], dtype=np.float32 if not grad else tfm[to].dtype)
    if "qkv" in r or "heads" in r:
        sizes = _attn_sizes(config)
        if a.shape[0] != sum(sizes):
            fail(f"tfm '{to}': shape {_shape(a)}, expected {sum(sizes)} rows (q, k, v: {list(sizes)})")
        parts = np.split(a, [sizes[0], sizes[0] + sizes[1]], axis=0)
        if "qkv" in r:
            return list(zip(names, parts))
        h = config.get("nhead", config.get("num_heads"))
        return [(n, np.ascontiguousarray(p.reshape(h, -1, p.shape[1]).transpose(0, 2, 1))) for n, p in zip(names, parts)]
    if r.get("transpose"):
        if a.ndim != 2:
            fail(f"tfm '{to}': shape {_shape(a)}, expected a matrix")
        return [(names[0], np.ascontiguousarray(a.T))]
    if r.get("broadcast"):
        if a.ndim != 1:
            fail(f"tfm '{to}': shape {_shape(a)}, expected (D,)")
        if grad:
            return [(names[0], np.array([a.sum()], dtype=a.dtype))]
        if a.size and not np.all(a == a[0]):
            fail(f"cannot write tfm '{to}' into '{names[0]}': the module holds one scalar (shape (1,)) but the "
                 f"values differ per feature (min {float(a.min()):.6g}, max {float(a.max()):.6g})")
        return [(names[0], a[:1].copy())]
    return [(names[0], a)]


# ---------------------------------------------------------------------------------------------------------------
# The two directions

def _target(mapping, target):
    targets = mapping["targets"]
    if target is None:
        if len(targets) != 1:
            fail(f"mapping '{mapping['name']}' has several targets ({', '.join(targets)}): choose one with --target")
        target = next(iter(targets))
    if target not in targets:
        fail(f"mapping '{mapping['name']}' has no target '{target}' (it has: {', '.join(targets)})")
    return target, targets[target]


def _infer(spec, src):
    if spec.startswith("count:"):
        return len(_indices(spec[6:], src))
    if spec.startswith("present:"):
        key = spec[8:]
        if "{i}" in key:
            idx = _indices(key.split("{i}")[0] + "{i}", src)
            key = key.replace("{i}", str(idx[0] if idx else 0))
        return key in src
    key, dim = _spec_tensor(spec, src)
    return int(np.shape(src[key])[dim])


def _spec_tensor(spec, src):
    """(source key, dimension) an infer spec "K:d" reads ({i} in K: the lowest index the source holds)."""
    key, _, dim = spec.rpartition(":")
    if "{i}" in key:
        idx = _indices(key.split("{i}")[0] + "{i}", src)
        if not idx:
            fail(f"source has no tensor matching '{key}'")
        key = key.replace("{i}", str(idx[0]))
    if key not in src:
        fail(f"source has no tensor '{key}'")
    shape = np.shape(src[key])
    if int(dim) >= len(shape):
        fail(f"source '{key}': shape {tuple(shape)} has no dimension {dim}")
    return key, int(dim)


def build_config(mapping, target, src, overrides=None):
    """The tfm config of the target: its "config" < what "infer" reads from the source tensors src < overrides.
    With src None (reverse: a module's config, no source tensors) the "infer" keys come from overrides."""
    name, t = _target(mapping, target)
    config = dict(t.get("config", {}))
    if src is not None:
        for key, spec in t.get("infer", {}).items():
            config[key] = _infer(spec, src)
    config.update(overrides or {})
    missing = [k for k in t.get("required", []) + ([] if src is not None else list(t.get("infer", {})))
               if k not in config]
    if missing:
        fail(f"mapping '{mapping['name']}' target '{name}': give " + " and ".join(missing) +
             " (not readable from the tensors): tools/import_torch.py " + " ".join(f"--set {k}=..." for k in missing) +
             ", tfm.from_torch overrides={" + ", ".join(f"'{k}': ..." for k in missing) + "}")
    return config


def _layer_indices(r, keys, prefix_key):
    prefix = r[prefix_key]
    if "{i}" not in prefix:
        return [None]
    return _indices(prefix, keys)


def _jobs(rules, src):
    """Each rule on each layer index the source holds: (rule, fkey, tkey, source names), optional rules whose
    tensors are absent left out."""
    jobs = []
    for r in rules:
        idx = _layer_indices(r, src, "_fp")
        if idx == [] and not r.get("optional"):
            fail(f"source has no tensor under '{r['_fp']}' (needed for tfm '{r['_tp']}{r.get('to', '')}')")
        for i in idx:
            fkey = (lambda s, r=r, i=i: (r["_fp"] if i is None else r["_fp"].replace("{i}", str(i))) + s)
            # shared: every index holds the same tensors; they are written once, under index 0
            ti = 0 if (r["_shared"] and i is not None) else i
            tkey = (lambda s, r=r, ti=ti: (r["_tp"] if ti is None else r["_tp"].replace("{i}", str(ti))) + s)
            names = [fkey(s) for s in _sources(r)]
            if r.get("optional") and any(n not in src for n in names):
                continue
            jobs.append((r, fkey, tkey, names))
    return jobs


def _misfits(jobs, src, config, model_dir):
    """The source tensors whose shape is not the one the config implies for them (_source_shapes)."""
    c = _resolved(config, model_dir)
    out = set()
    for r, _, tkey, names in jobs:
        if any(n not in src for n in names):
            continue
        for n, dims in _source_shapes(r, names, tkey(r["to"]) if "to" in r else None, c, model_dir) or []:
            if not _fits(np.shape(src[n]), dims):
                out.add(n)
    return out


def _settle_inferred(t, jobs, src, config, overrides, model_dir):
    """A config value "infer" reads off one tensor's dimension ("K:d") is carried by other source tensors too
    (d_model: every norm, bias and matrix of the width; dim_feedforward: linear1's rows and bias, linear2's columns;
    ...: the dimensions _source_shapes gives that key), each a witness of the value. When the witnesses disagree, the
    inferred keys take the values under which the most source tensors have the shapes the config implies (a tie: the
    values closest to the spec tensors' own), so that the misshapen or transposed tensor — the spec's own as much as
    any other — is the one whose shape check fails, against the shape the rest of the model implies. An import whose
    tensors agree is unchanged. Sets config in place; returns, for the keys whose witnesses disagreed, {key: (note,
    whether a shape error says it whatever the tensor: the value is not the spec tensor's, or a tie; the tensors
    that gave another value)}."""
    specs = [k for k, s in t.get("infer", {}).items()
             if k not in (overrides or {}) and not s.startswith(("count:", "present:"))]
    read = {k: config[k] for k in specs}  # the spec tensors' values
    witnesses = {k: {read[k]: [_spec_tensor(t["infer"][k], src)[0]]} for k in specs}  # key -> {value: [source]}
    c = _resolved(config, model_dir)
    for r, _, tkey, names in jobs:
        if any(n not in src for n in names):
            continue
        for n, dims in _source_shapes(r, names, tkey(r["to"]) if "to" in r else None, c, model_dir) or []:
            shape = np.shape(src[n])
            if len(shape) == len(dims):
                for s, dim in zip(shape, dims):
                    if dim.key in witnesses and s % dim.factor == 0:
                        w = witnesses[dim.key].setdefault(s // dim.factor, [])
                        if n not in w:
                            w.append(n)
    disputed = [k for k in specs if len(witnesses[k]) > 1]
    if not disputed:
        return {}
    # the candidates: each disputed key's values, most witnessed first, at most 256 configs to try
    values = [sorted(witnesses[k], key=lambda v, k=k: (-len(witnesses[k][v]), v != read[k])) for k in disputed]
    while math.prod(map(len, values)) > 256:
        longest = max(values, key=len)
        del longest[-1]
    scored = []
    for combo in itertools.product(*values):
        trial = {**config, **dict(zip(disputed, combo))}
        scored.append((len(_misfits(jobs, src, trial, model_dir)), -sum(v == read[k] for k, v in zip(disputed, combo)),
                       combo))
    scored.sort(key=lambda s: s[:2])
    best = scored[0]
    notes = {}
    for i, k in enumerate(disputed):
        v = best[2][i]
        config[k] = v
        who = witnesses[k][v] if v in witnesses[k] else []
        tie = any(s[0] == best[0] and s[2][i] != v for s in scored)
        text = "as " + ", ".join(f"'{n}'" for n in who[:3]) + (" and others" if len(who) > 3 else "") + \
            (" has" if len(who) == 1 else " have") + " it" if who else "as the other tensors imply"
        notes[k] = (text, v != read[k] or tie, {n for u, ns in witnesses[k].items() if u != v for n in ns})
    return notes


def import_state(mapping, target, src, overrides=None):
    """Source state_dict {key: array} → (tfm config dict, {tfm key: float32 array}). Every source tensor a rule maps
    is checked against the shape the config gives its tfm tensor, and every config value read off a tensor's shape
    against the other tensors that carry it (_settle_inferred): a misshapen or transposed tensor is a one-line error
    naming it, its tfm key, its shape and the one expected."""
    name, t = _target(mapping, target)
    config = build_config(mapping, target, src, overrides)
    model_dir = t.get("output", "forward") == "model_dir"
    rules = _expand(t["rules"], mapping["groups"], where=f"target '{name}'")
    jobs = _jobs(rules, src)
    notes = _settle_inferred(t, jobs, src, config, overrides, model_dir)
    out, used = {}, set()
    for r, fkey, tkey, names in jobs:
        res = _forward_rule(r, src, config, fkey, tkey, model_dir, notes)
        used.update(names)
        if res is None:
            continue
        key, val = res
        if key in out:
            if not r["_shared"]:
                fail(f"two rules write tfm '{key}'")
            if out[key].shape != val.shape or not np.array_equal(out[key], val):
                fail(f"source '{names[0]}' differs from index 0's: the mapping says the layers are shared "
                     f"(one instance repeated), but these tensors are not the same")
            continue
        out[key] = val
    ignore = t.get("ignore", [])
    left = [k for k in src if k not in used and not any(fnmatch.fnmatchcase(k, g) for g in ignore)]
    if left:
        fail(f"source tensor '{left[0]}' is not mapped by target '{name}'" +
             (f" (and {len(left) - 1} more)" if len(left) > 1 else ""))
    shared = [r for r in rules if r["_shared"]]
    if shared:
        key = shared[0]["_shared"]
        n = len(_indices(shared[0]["_fp"], src))
        if config.get(key) != n:
            fail(f"config '{key}' is {config.get(key)} but the source repeats its layer {n} times")
    return config, out


def _resolved(config, model_dir):
    """config as tfm reads it: every key the defaults above know (absent or null: its default), the family's
    defaults of a model directory, the attention's unset widths, biases and scale derived as AttentionVariant
    derives them (Dh = D/H, Dv = Dh, a bias switch from `bias`, scale 1/√Dh)."""
    c = {k: v for k, v in config.items() if v is not None}
    if model_dir:
        c = {**_LAYER_DEFAULTS, **_MODEL_DEFAULTS, **c}
        c = {**_FAMILY_DEFAULTS.get(c["arch"], {}), **c}
        if c["arch"] == "decoder" and isinstance(c["num_encoder_layers"], int) and c["num_encoder_layers"] > 0:
            # ModelConfig::from_json's rule of the files written before: that count sized the language model's stack
            c["num_decoder_layers"], c["num_encoder_layers"] = c["num_encoder_layers"], 0
        elif c["arch"] == "encoder":
            c["num_decoder_layers"] = 0
    else:
        c = {**_LAYER_DEFAULTS, **_FORWARD_DEFAULTS, **c}
    d = c["embed_dim"] if "embed_dim" in c else c.get("d_model")
    h = c["num_heads"] if "num_heads" in c else c.get("nhead")
    if "head_dim" not in c and isinstance(d, int) and isinstance(h, int) and h > 0 and d % h == 0:
        c["head_dim"] = d // h
    if "head_dim" in c:
        c.setdefault("v_head_dim", c["head_dim"])
        if isinstance(c["head_dim"], int) and c["head_dim"] > 0:
            c.setdefault("attn_scale", 1.0 / math.sqrt(c["head_dim"]))
    for k in ("qkv_bias", "out_bias", "ffn_bias"):
        c.setdefault(k, c["bias"])
    c.setdefault("norm_bias", c["bias"] and c["norm_type"] == "layer_norm")
    return c


def _same(a, b):
    """Config values equal as tfm holds them: a bool only to a bool, floats as float32."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not (isinstance(a, int) and isinstance(b, int)):
        return np.float32(a) == np.float32(b)
    return a == b


def _value(v):
    return f"{v:.6g}" if isinstance(v, float) else json.dumps(v)


def _check_config(mapping, name, t, rules, config, overrides, where):
    """Raises MappingError unless the module the target describes computes what the tfm module of `config` computes:
    the config import derives for this module (build_config: the target's "config" < the model's own values of the
    keys read from tensors or only --set can give < overrides) equals config, key by key, both read with tfm's
    defaults (_resolved), but for the keys in _UNCOMPARED. Shared layers are checked against the rules first."""
    model_dir = t.get("output", "forward") == "model_dir"
    have = _resolved(config, model_dir)
    for r in rules:
        if "{i}" not in r["_tp"]:
            continue
        if have["share_layers"] and not r["_shared"]:
            fail(f"{where}: share_layers is true (one layer's weights, under index 0, applied at every index), but "
                 f"target '{name}' of mapping '{mapping['name']}' maps each layer's own weights ('{r['_fp']}'): "
                 "its module cannot hold shared layers")
        if r["_shared"] and not have["share_layers"]:
            fail(f"{where}: share_layers is false, but target '{name}' of mapping '{mapping['name']}' maps one layer "
                 f"instance used at every index ('{r['_fp']}'): its module cannot hold separate layers")
    free = list(t.get("infer", {})) + t.get("required", [])  # read from the tensors or --set on import: the model's
    want = _resolved(build_config(mapping, name, None, {**{k: have.get(k) for k in free}, **(overrides or {})}),
                     model_dir)
    fixed = t.get("config", {})
    # Another model kind first (every other difference follows from it), the keys _resolved derives last (a
    # difference there follows from one in the keys they derive from, norm_bias from norm_type, ...).
    first, derived = ["arch", "module"], ["head_dim", "v_head_dim", "attn_scale", "qkv_bias", "out_bias", "ffn_bias",
                                          "norm_bias"]
    rest = sorted((set(have) | set(want)) - set(first) - set(derived) - _UNCOMPARED)
    for key in first + rest + derived:
        a, b = have.get(key), want.get(key)
        if _same(a, b):
            continue
        m = f"target '{name}' of mapping '{mapping['name']}'"
        if key in (overrides or {}):
            fail(f"{where}: {key} is {_value(a)}, but {key} {_value(b)} was given for the module of {m}")
        how = f"fixes {_value(b)}" if key in fixed else f"leaves {key} at tfm's default, {_value(b)}"
        fail(f"{where}: {key} is {_value(a)}, but {m} {how}: the module would compute other numbers "
             f"(--set {key}={a if isinstance(a, str) else _value(a)} if it is built with {_value(a)})")


def reverse_state(mapping, target, config, tfm, grad=False, overrides=None, where="config"):
    """tfm tensors {key: array} (or gradients with grad=True) of the tfm module `config` describes → the module's
    state_dict {key: array}. Refuses a config the module does not compute with (_check_config; overrides: the
    module's settings where they differ from the target's "config", as import's; where: the config's name in the
    message)."""
    name, t = _target(mapping, target)
    rules = _expand(t["rules"], mapping["groups"], where=f"target '{name}'")
    _check_config(mapping, name, t, rules, config, overrides, where)
    out, used = {}, set()
    for r in rules:
        if r["_shared"] and "{i}" in r["_fp"]:
            n = config.get(r["_shared"])
            if not isinstance(n, int) or n < 1:
                fail(f"config has no layer count '{r['_shared']}' for the shared layers")
            pairs = [(i, 0) for i in range(n)]
        else:
            pairs = [(i, i) for i in _layer_indices(r, tfm, "_tp")] if "to" in r else [(None, None)]
            if "to" not in r and "{i}" in r["_fp"]:
                fail(f"a sinusoidal table cannot sit under a layer index: {r['_fp']}")
        for i, ti in pairs:
            fkey = (lambda s, i=i: (r["_fp"] if i is None else r["_fp"].replace("{i}", str(i))) + s)
            tkey = (lambda s, ti=ti: (r["_tp"] if ti is None else r["_tp"].replace("{i}", str(ti))) + s)
            if "to" in r and tkey(r["to"]) not in tfm and r.get("optional"):
                continue
            for k, v in _reverse_rule(r, tfm, config, fkey, tkey, grad):
                out[k] = v
            if "to" in r:
                used.add(tkey(r["to"]))
    left = [k for k in tfm if k not in used]
    if left:
        fail(f"tfm tensor '{left[0]}' has no place in the module's state_dict (target '{name}')" +
             (f" (and {len(left) - 1} more)" if len(left) > 1 else ""))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Outputs

def write_forward(prefix, config, tensors):
    st.save(prefix + ".safetensors", list(tensors.items()), {"format": "pt", "exported_by": "tfm tools/import_torch.py"})
    with open(prefix + ".json", "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    return prefix + ".json", prefix + ".safetensors"


def _vocab_tokens(path, size, specials, config, which):
    if path:
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f]
        if tokens and tokens[-1] == "":
            tokens.pop()
        if len(tokens) != size:
            fail(f"{path}: {len(tokens)} tokens, but the {which} embedding has {size} rows")
        return tokens
    tokens = [str(i) for i in range(size)]
    for tok, key in specials.items():
        i = config.get(key)
        if not isinstance(i, int) or not 0 <= i < size:
            fail(f"vocab special '{tok}': config '{key}' = {i} is outside the {which} vocabulary [0, {size})")
        tokens[i] = tok
    return tokens


def write_model_dir(out_dir, mapping, target, config, tensors, src_vocab=None, tgt_vocab=None):
    _, t = _target(mapping, target)
    os.makedirs(out_dir, exist_ok=True)
    specials = t.get("vocab", {}).get("specials", {"<pad>": "pad_id"})
    cfg = {k: v for k, v in config.items()}
    for k in ("src_vocab_size", "tgt_vocab_size"):
        if k not in cfg:
            fail(f"model config has no '{k}': the mapping must infer it")
    if "nhead" not in cfg:  # no weight's shape says it, and a wrong count computes other numbers without an error
        fail("model config has no 'nhead': the mapping cannot infer the head count from the weights; give it "
             "(tools/import_torch.py --set nhead=H, tfm.from_torch overrides={'nhead': H})")
    # The keys tfm requires of a model directory, written out (the library's defaults where the mapping gives none).
    arch = cfg.get("arch", "encoder")
    for k, v in {"d_model": 64, "dim_feedforward": 256, "max_len": 512, "pad_id": 0, "bos_id": 1, "eos_id": 2,
                 "num_encoder_layers": 0 if arch == "decoder" else 2,
                 "num_decoder_layers": 0 if arch == "encoder" else 2}.items():
        cfg.setdefault(k, v)
    src = _vocab_tokens(src_vocab, cfg["src_vocab_size"], specials, {**_MODEL_DEFAULTS, "pad_id": 0, "bos_id": 1,
                                                                     "eos_id": 2, **cfg}, "source")
    tgt = _vocab_tokens(tgt_vocab, cfg["tgt_vocab_size"], specials, {"pad_id": 0, "bos_id": 1, "eos_id": 2, **cfg},
                        "target")
    for name, toks in (("src_vocab.txt", src), ("tgt_vocab.txt", tgt)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write("".join(tok + "\n" for tok in toks))
    st.save(os.path.join(out_dir, "model.safetensors"), list(tensors.items()),
            {"format": "pt", "exported_by": "tfm tools/import_torch.py"})
    doc = {"format": "tfm-train", "version": 1, "model": cfg, "train": t.get("train", {}),
           "vocab": {"src": "src_vocab.txt", "tgt": "tgt_vocab.txt", "src_size": len(src), "tgt_size": len(tgt),
                     "src_tokens": "space", "tgt_tokens": "space"}}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    return out_dir


def _parse_set(items):
    out = {}
    for s in items or []:
        k, eq, v = s.partition("=")
        if not eq or not k:
            fail(f"--set '{s}': expected KEY=VALUE")
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _read_tfm(a, t):
    """(config, tensors, the config file's path) of the tfm module to reverse."""
    if t.get("output") == "model_dir":
        if not a.model_dir:
            fail("this target is a model directory: give --model-dir")
        path = os.path.join(a.model_dir, "config.json")
        with open(path) as f:
            doc = json.load(f)
        config = {**_MODEL_DEFAULTS, **doc.get("model", doc)}
        tensors, meta = st.load(os.path.join(a.model_dir, "model.safetensors"))
        if "tfm.quantization" in meta:  # tfm quantize's int8 copy (include/tfm/models/quantize.h)
            fail(f"{a.model_dir} is an int8-quantized model directory (tfm quantize, {meta['tfm.quantization']}): "
                 "reverse the float32 directory it was made from")
        return config, tensors, path
    if not (a.config and a.weights):
        fail("give --config and --weights (the tfm forward module)")
    with open(a.config) as f:
        config = {**_FORWARD_DEFAULTS, **json.load(f)}
    tensors, meta = st.load(a.weights)
    if "tfm.quantization" in meta:
        fail(f"{a.weights} holds int8-quantized weights (tfm quantize): reverse the float32 weights")
    return config, tensors, a.config


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("import", help="module state_dict → tfm")
    pr = sub.add_parser("reverse", help="tfm → module state_dict")
    pt = sub.add_parser("targets", help="list a mapping's targets")
    for p in (pi, pr, pt):
        p.add_argument("--map", required=True, help="mapping file, or a name in tools/import_maps/")
    for p in (pi, pr):
        p.add_argument("--target", help="the mapping's target (needed when it has several)")
        p.add_argument("--out", required=True)
    pi.add_argument("--input", required=True, help="state_dict: torch.save file or .safetensors")
    pi.add_argument("--set", action="append", metavar="KEY=VALUE", help="config value (JSON), over inferred ones")
    pr.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="the module's setting (JSON) where it differs from the target's config, as on import")
    pi.add_argument("--src-vocab", help="model_dir: source vocabulary, one token per line")
    pi.add_argument("--tgt-vocab", help="model_dir: target vocabulary, one token per line")
    pr.add_argument("--config", help="tfm forward config JSON")
    pr.add_argument("--weights", help="tfm forward weights (.safetensors)")
    pr.add_argument("--model-dir", help="tfm model directory")
    a = ap.parse_args(argv)
    try:
        m = load_mapping(a.map)
        if a.cmd == "targets":
            for name, t in m["targets"].items():
                what = t.get("config", {}).get("module", t.get("config", {}).get("arch", ""))
                print(f"{name}: {t.get('output', 'forward')} {what}")
            return 0
        name, t = _target(m, a.target)
        if t.get("output", "forward") not in ("forward", "model_dir"):
            fail(f"target '{name}': output must be \"forward\" or \"model_dir\"")
        if a.cmd == "import":
            src = load_state(a.input)
            config, tensors = import_state(m, name, src, _parse_set(a.set))
            if t.get("output", "forward") == "model_dir":
                write_model_dir(a.out, m, name, config, tensors, a.src_vocab, a.tgt_vocab)
                print(f"wrote model directory {a.out} ({len(tensors)} tensors)")
            else:
                c, w = write_forward(a.out, config, tensors)
                print(f"wrote {c} and {w} ({len(tensors)} tensors)")
        else:
            config, tensors, where = _read_tfm(a, t)
            out = reverse_state(m, name, config, tensors, overrides=_parse_set(a.set), where=where)
            save_state(a.out, out)
            print(f"wrote {a.out} ({len(out)} tensors)")
        return 0
    except MappingError as e:
        print(f"import_torch.py: error: {e}", file=sys.stderr)
        return 1
    except (OSError, json.JSONDecodeError, ValueError) as e:
        print(f"import_torch.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
