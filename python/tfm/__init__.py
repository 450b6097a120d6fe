"""PyTorch-exact Transformer modules on the CPU, from Python.

    import torch, tfm
    layer = torch.nn.TransformerEncoderLayer(64, 4, batch_first=True).eval()
    fast = tfm.from_torch(layer)                 # the same module, run by tfm
    y = fast(torch.randn(2, 10, 64))             # torch in, torch out (numpy in, numpy out)

    m = tfm.load("runs/lm")                      # a directory written by `tfm train` or tfm.train
    print(m.generate("To delete a word", max_new_tokens=100, temperature=0.8, seed=1))
    tfm.train(out="runs/lm", text="t.txt", preset="nanogpt-baby", max_steps=500)

Arrays: inputs are numpy arrays or CPU torch tensors. A C-contiguous float32 array (or torch tensor) is used in
place, without a copy; every other layout or float dtype is converted with one copy; masks are bool (True =
blocked) or float (added); an integer array is refused (ValueError), as PyTorch 2 refuses it (1.13 still took a
uint8 attn_mask as bool, deprecated). Outputs are numpy arrays over memory tfm allocated for that call (or torch
tensors sharing it, when the inputs were torch tensors): the caller's, no later call reuses it. A read-only input
array stays read-only through tfm (np.asarray(tfm.tensor(a)) is read-only too). An array shared with tfm must not
be written from another thread while a call runs.

Threads: tfm computes with OpenMP; set_num_threads(n) sets the thread count of every later tfm call, from any
Python thread (before it: OMP_NUM_THREADS, else every core). Results are bitwise the same for every count. Debian's
torch links the same OpenMP runtime and oneDNN as tfm, so until set_num_threads is called, torch.set_num_threads
changes tfm's count too; after it, each keeps its own (a tfm call puts the thread's OpenMP setting back as it
found it). A pip wheel of torch bundles its own runtime, and the two pools together should not exceed the cores.
A process forked from one that uses tfm (multiprocessing's "fork" context, Linux's default) computes on one thread:
OpenMP's thread pool does not survive fork(). Use the "spawn" or "forkserver" context for children that compute on
several.

Errors: a bad argument, option, shape or value raises ValueError with the library's message, a missing or
unreadable file FileNotFoundError / OSError, anything else RuntimeError. Every computing call releases the GIL.
At interpreter exit tfm stops what daemon threads still run in it (generation at its next token, training at its
next step, writing its checkpoint) and waits for it, so that no thread is inside tfm when Python finalizes; a call
started after that (from an atexit handler registered before `import tfm`) raises RuntimeError. A non-daemon
thread is one Python itself waits for before exiting: its call runs to its end, as any of its work would.
Training under MPI (mpirun) is not available from Python: use `tfm train`.
"""

import atexit as _atexit
import json as _json
import operator as _operator
import os as _os
import queue as _queue
import sys as _sys
import threading as _threading
import warnings as _warnings
import weakref as _weakref
from collections.abc import Mapping as _Mapping

import numpy as _np

from . import _core
from ._core import Tensor

__all__ = ["Tensor", "tensor", "set_num_threads", "get_num_threads", "from_torch", "load_module", "Module",
           "load", "Model", "train", "train_options", "MODULES"]

MODULES = ("MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerDecoder", "Transformer")


# The library's defaults of the trained-model calls (tfm::DecodeOptions, GenerateOptions, kDecodeBatchSize,
# kScoreBatchSize): the signatures below show them, and tfm translate / eval / generate use the same.
_D = _core.DEFAULTS

_exiting = False  # set by _at_exit: a stream's worker stops offering pieces no one will take


def _at_exit():
    global _exiting
    _exiting = True
    # The calls stop_calls() ends raise _core.InterpreterExiting in their threads: the exit's doing, not an error
    # for threading.excepthook to print (from a daemon thread, half a traceback while Python finalizes).
    hook = _threading.excepthook

    def excepthook(args):
        if not isinstance(args.exc_value, _core.InterpreterExiting):
            hook(args)
    _threading.excepthook = excepthook
    _core.stop_calls()


_atexit.register(_at_exit)

_DTYPES = ("f32", "bf16", "int8")


def _dtype(dtype):
    if not isinstance(dtype, str):
        raise ValueError(f"dtype must be one of {', '.join(map(repr, _DTYPES))}, got {dtype!r}")
    return dtype


def _int(name, value, lo, hi):
    """An integer argument within [lo, hi] (the native type's range), else ValueError naming it."""
    v = _operator.index(value)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _path(name, path):
    """A file or directory argument as the native module takes it: its bytes (os.fsencode). A NUL in it is a
    ValueError, as Python's open() says it: the C calls would read the path only up to the NUL."""
    b = _os.fsencode(path)
    if b"\0" in b:
        raise ValueError(f"{name}: embedded null byte")
    return b


_INT32, _INT64, _UINT64 = (-(1 << 31), (1 << 31) - 1), (-(1 << 63), (1 << 63) - 1), (0, (1 << 64) - 1)


def _is_torch(x):
    """Whether x is a torch tensor (a subclass too: MONAI's MetaTensor). torch is never imported here: a tensor
    means its module is loaded already."""
    torch = _sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _ndim(x):
    """The number of axes of an array-like that has a shape (numpy, torch, tfm.Tensor), else None."""
    shape = getattr(x, "shape", None)
    return None if shape is None else len(shape)


def _as_numpy(x):
    """A numpy view of x: a CPU torch tensor shares its memory (detached); anything else goes through
    np.asarray (no copy for an ndarray)."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(f"tfm runs on the CPU; got a tensor on {x.device}")
        x = x.detach()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return _np.asarray(x)


def tensor(a):
    """A tfm.Tensor from a numpy array or a CPU torch tensor.

    A C-contiguous float32 array (4-byte aligned, as numpy and torch allocate) is shared, not copied: the
    Tensor keeps it alive, np.asarray(result) and `a` are the same memory (read-only if `a` is). Any other layout (a transpose, a
    slice with steps), a misaligned buffer or another float dtype is converted to contiguous float32 with one
    copy; a bool array becomes a Bool mask tensor (one copy); an integer array is a ValueError (a mask is bool or
    float). Do not write the array from another thread while tfm uses it.
    """
    if isinstance(a, Tensor):
        return a
    return _core.from_numpy(_as_numpy(a))


def set_num_threads(n):
    """Sets the number of OpenMP threads every later tfm call computes with (n >= 1), whichever Python thread makes
    it and whatever torch.set_num_threads sets afterwards; results do not depend on it. It leaves torch's count (and
    the calling thread's OpenMP setting) as it is: each tfm call sets n for itself and restores the setting after."""
    _core.set_num_threads(_int("n", n, 1, _core.MAX_THREADS))


def get_num_threads():
    """The number of OpenMP threads tfm computes with: set_num_threads' value, else the OpenMP runtime's."""
    return _core.get_num_threads()


# ---- modules ------------------------------------------------------------------------------------------------

# The arguments of each module's PyTorch forward, in PyTorch's positional order (torch 2's; need_weights and
# average_attn_weights are accepted and ignored where PyTorch has them), and the ones a flag (0-dim bool).
_ARGS = {
    "MultiheadAttention": ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                           "average_attn_weights", "is_causal"],
    "TransformerEncoderLayer": ["src", "src_mask", "src_key_padding_mask", "is_causal"],
    "TransformerEncoder": ["src", "mask", "src_key_padding_mask", "is_causal"],
    "TransformerDecoderLayer": ["tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask",
                                "memory_key_padding_mask", "tgt_is_causal", "memory_is_causal"],
    "TransformerDecoder": ["tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask",
                           "memory_key_padding_mask", "tgt_is_causal", "memory_is_causal"],
    "Transformer": ["src", "tgt", "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask",
                    "tgt_key_padding_mask", "memory_key_padding_mask", "src_is_causal", "tgt_is_causal",
                    "memory_is_causal"],
}
_IGNORED = {"need_weights", "average_attn_weights"}  # need_weights=True given by name is refused: no weights here
# The sequences (batched: a batch axis, unbatched: none) of every module.
_SEQUENCES = {"query", "key", "value", "src", "tgt", "memory"}
# The ones PyTorch's forward requires (no default).
_REQUIRED = {"MultiheadAttention": ["query", "key", "value"], "TransformerEncoderLayer": ["src"],
             "TransformerEncoder": ["src"], "TransformerDecoderLayer": ["tgt", "memory"],
             "TransformerDecoder": ["tgt", "memory"], "Transformer": ["src", "tgt"]}


def _argument(name, v):
    """The forward argument `name` as a tfm.Tensor. An array of a dtype the argument cannot take is a ValueError
    saying what it takes: a sequence (and grad_output) is float, a mask bool (True = blocked) or float (added); a
    causal flag is the 0-dim bool _inputs makes of it."""
    if isinstance(v, Tensor) or name.endswith("is_causal"):
        return tensor(v)
    a = _as_numpy(v)
    if "mask" in name:
        if a.dtype.kind not in "fb":
            note = (" (an integer mask is refused, as PyTorch 2 refuses it; PyTorch 1.13 read a uint8 attn_mask as "
                    "bool, deprecated: pass mask.bool())") if a.dtype.kind in "iu" else ""
            raise ValueError(f"expected a bool (True = blocked) or float (added) mask, got dtype '{a.dtype}'{note}")
    elif a.dtype.kind != "f":
        raise ValueError(f"expected a float array, got dtype '{a.dtype}'")
    return tensor(a)


def _unsqueeze(a, axis):
    """A torch tensor or array-like with a new axis of 1 (a view where it can be one)."""
    return a.unsqueeze(axis) if _is_torch(a) else _np.expand_dims(_np.asarray(a), axis)


class Module:
    """A module run by tfm (tfm.from_torch or tfm.load_module), called like the PyTorch module it came from.

    fast(src, mask=..., src_key_padding_mask=..., is_causal=...) returns the output as a float32 numpy array, or as
    a torch tensor when an input was one. MultiheadAttention returns (output, None), as PyTorch does with
    need_weights=False. Unbatched inputs (sequences (L, E), key padding masks (S,)) give an output without a batch
    axis, as PyTorch's. The module is in eval mode (dropout off). Where PyTorch's call depends on autograd
    (nn.TransformerEncoder's nested-tensor fast path, given only a src_key_padding_mask: 0 at the padded positions),
    the call computes what the torch module's own call computes in the same state: the fast path under
    torch.no_grad() / inference_mode() or when nothing it reads requires a gradient, the regular path when torch's
    grad mode is on and the first encoder layer's parameters (or a torch src) require gradients, as PyTorch 1.13
    decides; requires_grad is read at each call, so a torch module frozen after from_torch is followed. Calls from
    several Python threads are served one at a time (the native module is not safe to call concurrently); use one
    Module per thread to run in parallel.
    """

    def __init__(self, core, config, first_layer=None):
        self._core = core
        self._lock = _threading.Lock()
        self.config = dict(config)
        self.name = core.module_name
        # from_torch: the torch module's first encoder layer, whose parameters PyTorch's nested-tensor path reads
        # at each call (a weak reference: tfm does not keep the torch module alive), and whether they required
        # gradients when last read, which stays once the torch module is gone.
        self._first_layer = None if first_layer is None else _weakref.ref(first_layer)
        self._requires_grad = first_layer is not None and self._layer_requires_grad(first_layer)

    @staticmethod
    def _layer_requires_grad(layer):
        return any(p.requires_grad for p in layer.parameters())

    def _inputs(self, args, kwargs):
        names = _ARGS[self.name]
        if len(args) > len(names):
            raise TypeError(f"{self.name} takes at most {len(names)} positional arguments ({len(args)} given)")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{k}'")
            if k in given:
                raise TypeError(f"{self.name}() got multiple values for argument '{k}'")
            given[k] = v
        missing = [k for k in _REQUIRED[self.name] if given.get(k) is None]
        if missing:  # PyTorch's forward takes no default for these
            raise TypeError(f"{self.name}.forward() missing required argument{'s' if len(missing) > 1 else ''}: "
                            + " and ".join(map(repr, missing)))
        torch_out = any(_is_torch(v) for v in given.values())
        # Unbatched inputs, as PyTorch takes them: sequences (L, E) and key padding masks (S,), given a batch axis
        # of 1 here (attention masks (L, S) or (num_heads, L, S) are a batch of one's already) and the output's
        # taken away again (_unbatch).
        axis = None
        if given.get("need_weights") is not None and bool(given["need_weights"]):  # by name or position
            raise ValueError(f"{self.name}: need_weights=True: tfm does not compute the attention weights (it returns "
                             "(output, None), PyTorch's need_weights=False); leave need_weights out or pass False")
        if _ndim(given[_REQUIRED[self.name][0]]) == 2:
            axis = 0 if self._core.batch_first else 1
            for k, v in list(given.items()):
                if v is None:
                    continue
                if k in _SEQUENCES or (k.endswith("key_padding_mask") and _ndim(v) == 1):
                    given[k] = _unsqueeze(v, axis if k in _SEQUENCES else 0)
        inputs = {}
        for k, v in given.items():
            if v is None or k in _IGNORED:
                continue
            if k.endswith("is_causal"):
                if not bool(v):
                    continue
                v = _np.array(True)
            try:
                inputs[k] = _argument(k, v)
            except ValueError as e:
                raise ValueError(f"{self.name}: {k}: {e}") from None
        return inputs, torch_out, self._torch_autograd(given), axis

    @staticmethod
    def _unbatch(y, axis):
        return y if axis is None else y.squeeze(axis)

    def _torch_autograd(self, given):
        """Whether PyTorch's TransformerEncoder would see autograd recording here, the condition of its nested-tensor
        fast path (torch 1.13 reads src and its first layer's parameters): torch's grad mode on, and the first
        encoder layer of the module converted by from_torch having parameters that require gradients now (read at
        each call, so freezing the torch module after the conversion is followed), or a torch src requiring one.
        The call takes the path PyTorch's would."""
        torch = _sys.modules.get("torch")
        if torch is None or not torch.is_grad_enabled():
            return False
        layer = self._first_layer() if self._first_layer is not None else None
        if layer is not None:
            self._requires_grad = self._layer_requires_grad(layer)
        src = given.get("src")
        return self._requires_grad or (_is_torch(src) and src.requires_grad)

    @staticmethod
    def _out(t, torch_out):
        a = _np.asarray(t)
        if torch_out:
            import torch
            return torch.from_numpy(a)
        return a

    def __call__(self, *args, **kwargs):
        """The module's forward, with PyTorch's arguments (positional or by name; masks bool or float, the
        *is_causal flags True/False); returns the output (MultiheadAttention: (output, None)) as a numpy array, or
        as a torch tensor when an input was one."""
        inputs, torch_out, autograd, axis = self._inputs(args, kwargs)
        if torch_out and _sys.modules["torch"].is_grad_enabled() and any(
                _is_torch(v) and v.requires_grad for v in (*args, *kwargs.values())):
            _warnings.warn(f"{self.name}: an input requires grad, but tfm's output carries no autograd graph (no "
                           "grad_fn): a backward through it gives the input no gradient from this module; "
                           "forward_backward computes them", stacklevel=2)
        with self._lock:  # unbatched: PyTorch's nested-tensor path needs a 3-D src, so the regular path (AUTOGRAD's)
            out = self._core.forward(inputs, autograd=autograd or axis is not None)
        y = self._unbatch(self._out(out["output"], torch_out), axis)
        return (y, None) if self.name == "MultiheadAttention" else y

    forward = __call__

    def forward_backward(self, inputs, grad_output):
        """The `tfm forward` contract with a grad_output: runs the training math (float32, or for a bf16 module the
        bf16 training math of `tfm train --dtype bf16`: docs/bf16.md) on `inputs` (a dict by
        the forward's argument names, or a tuple of positional arguments) and the backward of
        sum(output * grad_output). Returns {"output": ..., "grad.<parameter key>": ..., "grad.<input>": ...}
        (parameter gradients by their PyTorch state_dict key), as numpy arrays or torch tensors."""
        if isinstance(inputs, _Mapping):
            named, torch_out, _, axis = self._inputs((), dict(inputs))
        else:
            named, torch_out, _, axis = self._inputs(tuple(inputs), {})
        torch_out = torch_out or _is_torch(grad_output)
        if axis is not None and _ndim(grad_output) == 2:
            grad_output = _unsqueeze(grad_output, axis)
        try:
            g = _argument("grad_output", grad_output)
        except ValueError as e:
            raise ValueError(f"{self.name}: grad_output: {e}") from None
        with self._lock:
            out = self._core.forward_backward(named, g)
        seq = {"output"} | {"grad." + k for k in _SEQUENCES}
        return {k: self._unbatch(self._out(v, torch_out), axis if k in seq else None) for k, v in out.items()}

    def state_dict(self):
        """The weights tfm holds, by PyTorch key, as numpy arrays (sharing tfm's memory: do not write)."""
        out = {}
        for k, v in self._core.state_dict().items():
            a = _np.asarray(v)
            a.flags.writeable = False
            out[k] = a
        return out

    def __repr__(self):
        return f"tfm.Module({self.name})"


def _weights(state):
    if not isinstance(state, _Mapping):
        raise TypeError(f"weights must be a safetensors file's path or a dict of arrays, got {type(state).__name__}")
    out = {}
    for k, v in state.items():
        if not isinstance(k, str):
            raise TypeError(f"weights: keys are PyTorch state_dict keys (str), got {k!r}")
        try:
            out[k] = tensor(v)
        except ValueError as e:  # the array's dtype or layout, said of its key
            raise ValueError(f"weights: {k!r}: {e}") from None
    return out


def _json_text(config):
    """A config dict as the JSON the library reads; numpy scalars (an override read off an array) as their
    Python values, any other non-JSON value a TypeError naming its key."""
    def plain(o):
        if isinstance(o, _np.generic):
            return o.item()
        raise TypeError(f"config: a {type(o).__name__} is not a JSON value")
    for k, v in config.items():
        try:
            _json.dumps(v, default=plain, allow_nan=False)
        except TypeError as e:
            raise TypeError(f"config key {k!r}: {e}") from None
        except ValueError:  # NaN or an infinity: JSON has none
            raise ValueError(f"config key {k!r}: {v!r} is not a finite number") from None
    return _json.dumps(config, default=plain, allow_nan=False)


def from_torch(module, dtype="f32", mapping=None, target=None, overrides=None):
    """The torch module `module` as a tfm.Module computing the same function.

    For the six torch.nn classes tfm runs (MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer,
    TransformerEncoder, TransformerDecoder, Transformer) the config is read from the instance
    (tfm.torch_config.infer_config, the code tools/export_torch.py uses); `overrides` (a dict) adds or replaces
    config keys, e.g. {"activation": "swiglu"} or the variants (head_dim, qkv_bias, norm_type, ...).
    A hand-written module goes through a mapping (the name of one in tools/import_maps, e.g. "nb4_reverse",
    or a mapping file's path; `target` picks the mapping's target when it has several): its state_dict is
    renamed and reshaped as tools/import_torch.py does (tfm.torch_import, the same code), `overrides` playing
    --set's part. dtype: "f32", "bf16" or "int8" (the Linear matmuls when called; forward_backward in bf16 trains
    as `tfm train --dtype bf16` does; int8 is forward only; docs/bf16.md, docs/int8.md).
    The weights are copied into tfm once: later changes to their values are not seen, but their requires_grad is
    (each call reads it, as PyTorch's nested-tensor path does: see Module). tfm runs the module in eval mode
    (dropout off): a module in training mode gets a UserWarning saying so.
    Raises ValueError when the module or its config is not one tfm runs (for the six classes: also a subclass
    overriding their forward, a forward hook, a submodule of another type; tfm runs the stock forward).
    """
    try:
        from . import torch_config
    except ImportError as e:
        raise ImportError(f"tfm.from_torch needs torch (Debian: python3-torch): {e}") from e
    if mapping is not None:
        from . import torch_import
        m = torch_import.load_mapping(mapping)
        if target is None:
            if len(m["targets"]) != 1:
                raise ValueError(f"mapping '{m['name']}' has targets {sorted(m['targets'])}: pass target=")
            target = next(iter(m["targets"]))
        state = {k: torch_import._to_numpy(v) for k, v in module.state_dict().items()}
        config, tensors = torch_import.import_state(m, target, state, overrides or {})  # MappingError: a ValueError
        if m["targets"][target].get("output", "forward") != "forward":
            raise ValueError(f"mapping target '{target}' writes a model directory: use tools/import_torch.py import "
                             "--out DIR, then tfm.load(DIR)")
    else:
        config = torch_config.infer_config(module)
        config.update(overrides or {})
        if "module" not in config:
            raise ValueError(f"cannot infer the tfm module of {type(module).__name__}: it is none of {', '.join(MODULES)}"
                             " (pass mapping= for a hand-written module)")
        if config["module"] != "MultiheadAttention" and "activation" not in config:
            raise ValueError("the activation is a callable tfm cannot name: pass overrides={'activation': ...}")
        tensors = {k: _as_numpy(v) for k, v in module.state_dict().items()}
    # PyTorch's nested-tensor path reads the first encoder layer's parameters (a Transformer's encoder's) at each
    # call: the Module reads them at its own (Module._torch_autograd).
    nn = torch_config.nn
    encoder = module.encoder if isinstance(module, nn.Transformer) else module
    layers = encoder.layers if mapping is None and isinstance(encoder, nn.TransformerEncoder) else None
    fast = Module(_core.Module(_json_text(config), _weights(tensors), _dtype(dtype), "state_dict"), config,
                  layers[0] if layers else None)
    # The module itself in training mode, or a submodule whose training mode changes torch's numbers (a dropout):
    # "" names the module itself.
    training = [name for name, sub in module.named_modules() if sub.training and (
        name == "" or getattr(sub, "p", 0) > 0 and isinstance(sub, nn.modules.dropout._DropoutNd)
        or isinstance(sub, nn.MultiheadAttention) and sub.dropout > 0)]
    if training:
        which = (f"the {type(module).__name__} is" if "" in training else
                 f"{type(module).__name__}'s submodule{'s' if len(training) > 1 else ''} "
                 f"{', '.join(training[:3])}{', ...' if len(training) > 3 else ''} {'are' if len(training) > 1 else 'is'}")
        _warnings.warn(f"{which} in training mode: tfm runs it in eval mode (dropout off; forward_backward gives "
                       "eval-mode gradients)", stacklevel=2)
    return fast


def load_module(config, weights, dtype="f32"):
    """A tfm.Module from a `tfm forward` config (a JSON file's path, or a dict) and weights (a safetensors file's
    path, or a dict of arrays by PyTorch key), as tools/export_torch.py and tools/import_torch.py write them; any
    combination of the two. A path is a str, bytes or os.PathLike. A dict config is read as the JSON file holding
    its values would be, and a weights file as `tfm forward --weights` reads it (its tensors floating point: F32, F16,
    BF16 or F64)."""
    if isinstance(config, _Mapping):
        cfg = dict(config)
    elif not isinstance(config, (str, bytes, _os.PathLike)):  # an int would be read as a file descriptor
        raise TypeError(f"config must be a JSON file's path or a dict, got {type(config).__name__}")
    else:
        _path("config", config)  # a NUL named by its argument, as the other calls name theirs
        with open(config, "rb") as f:
            text = f.read()
        def keys_once(pairs):  # a key said twice is refused, as the library's config reader refuses it
            obj = {}
            for k, v in pairs:
                if k in obj:
                    raise ValueError(f"{_os.fspath(config)}: config: key {k!r} appears twice in one object")
                obj[k] = v
            return obj
        try:
            cfg = _json.loads(text, object_pairs_hook=keys_once)
        except _json.JSONDecodeError as e:  # said of the file, as the CLI says it
            raise ValueError(f"{_os.fspath(config)}: not valid JSON: {e}") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"{_os.fspath(config)}: not valid JSON: {e}") from None
    if isinstance(weights, (str, bytes, _os.PathLike)):
        if isinstance(config, _Mapping):
            return Module(_core.Module.load_with_config(_json_text(cfg), _path("weights", weights), _dtype(dtype)), cfg)
        return Module(_core.Module.load(_path("config", config), _path("weights", weights), _dtype(dtype)), cfg)
    return Module(_core.Module(_json_text(cfg), _weights(weights), _dtype(dtype), "weights"), cfg)


# ---- trained models -----------------------------------------------------------------------------------------

def _utf8(name, text):
    """A str argument as the native module takes it: its UTF-8 bytes, where the lone surrogates U+DC80..U+DCFF
    (the bytes that are not UTF-8 in a text tfm returned, decoded with surrogateescape) are those bytes again, so
    that such a text can be given back. bytes are taken as they are, None stays None (an option not given); any
    other type is a TypeError naming the argument."""
    if text is None or isinstance(text, bytes):
        return text
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:  # another lone surrogate: no bytes stand for it
        raise ValueError(f"{name}: {e}") from None


def _line(name, text):
    """One source line of translate(), read as `tfm translate` reads a line of its input: _utf8, without a final
    "\n" and a "\r" before it (so lines from readlines() or a CRLF file need no stripping), and no other line
    break inside it (`tfm translate` reads one source a line, so a model never sees one)."""
    text = _utf8(name, text)
    if text is None:
        raise TypeError(f"{name} must be a str, got None")
    if text.endswith(b"\n"):
        text = text[:-1]
    if text.endswith(b"\r"):
        text = text[:-1]
    if b"\n" in text:
        raise ValueError(f"{name} holds a line break: give one source per list item")
    return text


class Model:
    """A trained model directory (written by `tfm train` or tfm.train), loaded once by tfm.load. Make one call at a
    time per Model; load the directory once per thread to decode in parallel. A stream holds the model from its
    first next() until it is exhausted or closed: a call that computes (translate, generate, stream, score,
    score_file, evaluate) from another thread waits until then, and one from a thread that has taken pieces of the
    stream raises RuntimeError (the stream would wait for that thread to take the rest, and the call for the
    stream, forever).

    Text arguments may hold the lone surrogates of a text tfm returned (generate's or translate's bytes that are not
    UTF-8): they are read as those bytes."""

    def __init__(self, path, dtype=None, mmap=True):
        """dtype: "f32", "bf16" or "int8" (the Linear matmuls; docs/bf16.md, docs/int8.md); None: int8 for a
        directory written by `tfm quantize`, else f32. mmap: see tfm.load."""
        self.path = _os.fspath(path)
        self._core = _core.TrainedModel(_path("path", self.path), "" if dtype is None else _dtype(dtype), bool(mmap))
        # The open streams of this model: by stream, the threads that took pieces of it (Thread objects: a thread's
        # id may be reused once it ends).
        self._streams = {}
        self._streams_lock = _threading.Lock()

    def _no_open_stream(self):
        """Raises RuntimeError when this thread has taken pieces of an open stream of this model: the stream's worker
        holds the model until the stream is exhausted or closed, which this thread would then never do."""
        me = _threading.current_thread()
        with self._streams_lock:
            mine = any(me in threads for threads in self._streams.values())
        if mine:
            raise RuntimeError("this model has an open stream in this thread: exhaust or close it first")

    @property
    def is_language_model(self):
        """True for a language model (generate, stream, score), False for a model of pairs (translate,
        evaluate)."""
        return self._core.is_language_model

    @staticmethod
    def _generate_args(max_new_tokens, temperature, top_k, top_p, seed):
        # temperature is checked by the library as given (float32_option: a value float32 would make inf or 0 is
        # refused by name); top_p is a double there.
        return (_int("max_new_tokens", max_new_tokens, *_INT64), float(temperature),
                _int("top_k", top_k, *_INT64), float(top_p), _int("seed", seed, *_UINT64))

    def translate(self, lines, beam=_D["beam"], batch_size=_D["decode_batch_size"], max_len=_D["max_len"]):
        """Predicted targets of source lines (a list of str in, a list of str out), as `tfm translate` (a line's own
        end, "\n" or "\r\n", may be left on it; a UTF-8 byte order mark opening lines[0], as readlines() of such a
        file leaves it, is dropped as `tfm translate` drops it from its input). An output is UTF-8 text, but bytes
        that are not UTF-8 (a byte-token model may emit any, or stop at max_len inside a character) are kept as lone
        surrogates, as generate() keeps them: out.encode("utf-8", "surrogateescape") gives the bytes `tfm translate`
        writes, and such a text may be given back. A line that cannot be read (not UTF-8 under char, space or spm
        tokens, more source tokens than the model's max_len) raises ValueError naming it as lines[i]. max_len: the
        longest output in target tokens (0: 2·source tokens + 10; at most the model's max_len); outputs that stop
        at the limit without an end token get a UserWarning saying how many, the note `tfm translate` prints, and so
        do source tokens the vocabulary lacks (read as <unk>)."""
        if isinstance(lines, str):
            raise TypeError("translate takes a list of lines, not a str")
        self._no_open_stream()
        lines = [_line(f"lines[{i}]", line) for i, line in enumerate(lines)]
        out, notes = self._core.translate(lines, _int("beam", beam, *_INT32), _int("batch_size", batch_size, *_INT64),
                                          _int("max_len", max_len, *_INT64))
        for note in notes:
            _warnings.warn(note, stacklevel=2)
        return out

    def _prompt_of(self, prompt, args, stop):
        """The prompt to generate from as its token ids, once the options are checked: None (the default) is a
        newline, as `tfm generate` starts without a prompt; a given prompt with tokens the vocabulary lacks (read
        as <unk>) gets a UserWarning saying how many, as `tfm generate` notes it. Encoded once, as the native
        module's generate takes it."""
        self._core.check_generate_options(*args[:4], stop)  # a bad option is said before any warning
        if prompt is None:
            return self._core.encode_prompt("\n")
        ids = self._core.encode_prompt(_utf8("prompt", prompt))
        n = self._core.unknown_tokens(ids)
        if n:
            _warnings.warn("%d prompt token%s not in the model's vocabulary, read as <unk>" %
                           (n, " is" if n == 1 else "s are"), stacklevel=3)
        return ids

    def generate(self, prompt=None, max_new_tokens=_D["max_new_tokens"], temperature=_D["temperature"],
                 top_k=_D["top_k"], top_p=_D["top_p"], seed=_D["seed"], stop=None, ignore_eos=_D["ignore_eos"],
                 prefill=_D["prefill"]):
        """The text a language model generates after `prompt` (the prompt not included), as `tfm generate` with
        the same options prints it after the prompt; prompt None starts from a newline. stop: the generation ends
        with the token that completes this text (a subword holding it and more is kept whole); it also ends at the
        end-of-text token unless ignore_eos. prefill=False feeds the prompt one position per model call instead of
        one pass (the same tokens, slower: a benchmark's baseline). Prompt tokens the vocabulary lacks are read as
        <unk>, with a UserWarning saying how many."""
        self._no_open_stream()
        args = self._generate_args(max_new_tokens, temperature, top_k, top_p, seed)
        stop = _utf8("stop", stop)
        ids = self._prompt_of(prompt, args, stop)
        return self._core.generate(ids, *args, stop, None, bool(ignore_eos), bool(prefill))

    def encode(self, text):
        """A language model's token ids of `text` (list of int), as it reads a prompt."""
        if text is None:
            raise TypeError("text must be a str, got None")
        return self._core.encode(_utf8("text", text))

    def decode(self, ids):
        """The bytes a language model's token ids stand for (bytes: ids cut inside a UTF-8 character need not
        decode to text); the end-of-text and padding tokens add nothing."""
        return self._core.decode([_int(f"ids[{i}]", t, *_INT32) for i, t in enumerate(ids)])

    def stream(self, prompt=None, max_new_tokens=_D["max_new_tokens"], temperature=_D["temperature"],
               top_k=_D["top_k"], top_p=_D["top_p"], seed=_D["seed"], stop=None, ignore_eos=_D["ignore_eos"]):
        """generate(), yielding each piece of text as soon as it is decoded (the pieces join to generate's text).
        Generation runs in a worker thread; closing the iterator early stops it at the next token. Like any
        generator it starts on the first next(): bad options raise, and the unknown-token warning comes, there."""
        self._no_open_stream()
        args = self._generate_args(max_new_tokens, temperature, top_k, top_p, seed)
        stop = _utf8("stop", stop)
        ids = self._prompt_of(prompt, args, stop)
        q = _queue.Queue(maxsize=64)
        done = object()
        cancelled = _threading.Event()

        class _Stop(Exception):
            pass

        def offer(item):
            """Hands item to the consumer; False once no one will take it (the iterator closed, or the
            interpreter exiting with the iterator left open)."""
            while not (cancelled.is_set() or _exiting):
                try:
                    q.put(item, timeout=0.05)
                    return True
                except _queue.Full:
                    pass
            return False

        def on_piece(piece):
            if not offer(piece):
                raise _Stop()

        def work():
            try:
                self._core.generate(ids, *args, stop, on_piece, bool(ignore_eos), True)
                offer(done)
            except _Stop:
                pass
            except BaseException as e:  # handed to the consumer
                offer(e)

        t = _threading.Thread(target=work, daemon=True)
        t.start()
        key = object()
        with self._streams_lock:
            self._streams[key] = {_threading.current_thread()}
        try:
            while True:
                item = q.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                with self._streams_lock:  # the thread resuming the stream (a generator may pass between threads)
                    self._streams[key].add(_threading.current_thread())
        finally:
            cancelled.set()  # the worker's offer() gives up within 50 ms, and its generation stops at the next token
            t.join()
            with self._streams_lock:
                del self._streams[key]

    def score(self, text, batch_size=_D["score_batch_size"]):
        """A language model's figures on `text` (a str): the dict `tfm eval --text FILE --json` prints for a file
        holding that text (loss, perplexity, bits_per_token, bits_per_char, tokens, unknown_tokens: those the
        vocabulary lacks, read as <unk>)."""
        self._no_open_stream()
        if text is None:
            raise TypeError("text must be a str, got None")
        return _json.loads(self._core.score(_utf8("text", text), _int("batch_size", batch_size, *_INT64)))

    def logits(self, src, tgt_in=None):
        """The model's logits for a batch of token ids, as its forward computes them in eval mode (what
        tools/check_roundtrip.py compares with the PyTorch twin): src an integer array (B, S) of source ids — a
        language model's input ids —, and for an encoder–decoder tgt_in (B, T), bos then the target's ids. Returns
        a float32 numpy array (B, S, V), or (B, T, V) for an encoder–decoder. Padding is the vocabulary's <pad> id,
        masked as in training."""
        self._no_open_stream()
        arrays = []
        for name, a in (("src", src), ("tgt_in", tgt_in)):
            if a is None:
                arrays.append(None)
                continue
            a = _as_numpy(a)
            if a.dtype.kind not in "iu" or a.ndim != 2:
                raise ValueError(f"{name} must be a 2-D integer array (B, length) of token ids, got {a.dtype} "
                                 f"{a.shape}")
            arrays.append(_np.ascontiguousarray(a, dtype=_np.int64))
        return _np.asarray(self._core.logits(*arrays))

    def score_file(self, path, batch_size=_D["score_batch_size"]):
        """score() on a text file: exactly `tfm eval --text PATH --json`."""
        self._no_open_stream()
        return _json.loads(self._core.score_file(_path("path", path), _int("batch_size", batch_size, *_INT64)))

    def evaluate(self, tsv_path, beam=_D["beam"], batch_size=_D["decode_batch_size"], max_len=_D["max_len"]):
        """The dict `tfm eval --data TSV --json` prints: accuracies, error rates, BLEU and chrF of the decoded
        sources of a TSV file against their references, "truncated", the outputs the length limit (max_len,
        as translate's) stopped, and "skipped", the file's lines not scored. Lines it skips (malformed, empty, a
        source longer than the model's max_len) and outputs the limit stopped are reported as UserWarnings, the notes
        `tfm eval` prints on stderr."""
        self._no_open_stream()
        metrics, *notes = self._core.evaluate(_path("tsv_path", tsv_path), _int("beam", beam, *_INT32),
                                              _int("batch_size", batch_size, *_INT64), _int("max_len", max_len, *_INT64))
        for note in notes:
            if note:
                _warnings.warn(note, stacklevel=2)
        return _json.loads(metrics)

    def __repr__(self):
        return f"tfm.Model({self.path!r})"


def load(path, dtype=None, mmap=True):
    """A trained model directory as a tfm.Model (translate, generate, stream, score, evaluate).
    dtype: "f32", "bf16" or "int8" for the matmuls of the Linear layers (docs/bf16.md, docs/int8.md); None: int8
    for a directory written by `tfm quantize`, else f32.
    mmap: True maps model.safetensors read-only instead of copying it, and gives a weight's pages back once its
    packed copy is made, so the process holds about the packed weights only (as `tfm generate` does); the file
    must then not be truncated or written in place while the model lives (tfm's own writers replace it by rename,
    which is safe): a truncated file kills the process (SIGBUS). An int8 directory's matrices then stay int8 in
    the mapping (expanded to float32 only if read: dtype "f32" or "bf16"). False copies the weights into memory
    of the model's own, independent of the file."""
    return Model(path, dtype, mmap)


# ---- training -----------------------------------------------------------------------------------------------

def train_options():
    """The options of tfm.train, as the library's table defines them: a list of dicts with name (the keyword),
    type (flag, int, float, text, choice), choices, default (as --help shows it), help and group."""
    out = []
    for o in _core.train_options():
        o = dict(o)
        o["name"] = o["name"].replace("-", "_")
        out.append(o)
    return out


def _option_text(name, kind, value):
    if kind == "flag":
        if isinstance(value, _np.bool_):  # numpy's bool, as its ints and floats are taken for the other options
            value = bool(value)
        if not isinstance(value, bool):
            raise ValueError(f"option --{name} takes True or False, got {value!r}")
        return "true" if value else "false"
    if isinstance(value, bool):
        raise ValueError(f"option --{name} takes a value, not {value!r}")
    if isinstance(value, (str, bytes, _os.PathLike)):  # a path or a word: bytes, a NUL refused
        return _path(f"option --{name}", value)
    return str(value)


def train(progress=None, **options):
    """Trains a model as `tfm train` does with the same options, and returns the final metrics.

    Keywords are tfm train's options with '_' for '-' (tfm.train_options() lists them): out, text, train,
    valid, task, arch, preset, d_model, max_steps, threads, resume, init_from, ...; a flag takes True/False
    (bias=False is --no-bias). An unknown keyword is a TypeError naming it; a bad value a ValueError with the
    library's message, which names options as tfm train spells them (--max-steps for max_steps=); an `out` holding
    a run already is a ValueError: continue it with tfm.train(resume=out) (resume= takes no out=), or give
    force=True to delete it and start over. progress(event) receives the events tfm train prints: dicts with kind
    ("step", "eval", "checkpoint", "note"), step, total_steps, epoch, lr, elapsed_seconds (where the run
    stands, in every event), loss, tokens_per_sec, eta_seconds (step and eval events; -1 while unknown, until the
    steps after the first have taken a second), message (checkpoint and
    note events) and, once the run has evaluated, eval (the last metrics row). Ctrl-C (KeyboardInterrupt) finishes the current
    step, writes a checkpoint (resume with tfm.train(resume=out)) and raises KeyboardInterrupt; an exception
    raised by progress stops the run the same way and propagates.

    Returns a dict: steps, epochs_completed, stop_reason, seconds, train_seconds (what time_budget counts),
    time_budget, budget_steps (the step count fitted to time_budget, 0: none), skipped_nonfinite (steps skipped for
    a non-finite loss or gradient), history (the metrics rows), out, and the final metrics: for pairs, the greedy
    decode's figures on the validation set (token_accuracy, sequence_accuracy, ...); for a language model,
    valid_loss, perplexity and bits_per_token of the last evaluation.
    Training under MPI is not available from Python (use mpirun tfm train).
    """
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable (it receives each event), got {type(progress).__name__}")
    kinds = {o["name"]: o["type"] for o in _core.train_options()}
    given = []
    for key, value in options.items():
        name = key.replace("_", "-")
        if name not in kinds:
            flag = name[3:] if name.startswith("no-") else None
            hint = (f"a flag takes True/False: {flag.replace('-', '_')}=False" if kinds.get(flag) == "flag"
                    else "tfm.train_options() lists the keywords")
            raise TypeError(f"train() got an unexpected keyword argument '{key}' ({hint})")
        if value is None:
            continue
        given.append((name, _option_text(name, kinds[name], value)))
    r = _core.train(given, progress)
    result = {k: v for k, v in r.items() if k not in ("final_metrics_json", "language_model")}
    if r["language_model"]:
        import math
        loss = r["history"][-1]["valid_loss"] if r["history"] else 0.0
        result.update(valid_loss=loss, perplexity=math.exp(loss), bits_per_token=loss / math.log(2.0))
    else:
        result.update(_json.loads(r["final_metrics_json"]))
    return result
