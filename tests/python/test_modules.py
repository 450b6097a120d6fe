"""tfm.from_torch against PyTorch: the six torch.nn classes and the five notebook mappings, output and every
gradient of forward_backward against the module in float64, within tests/parity's bound
    rel = max|tfm − ref| / max|ref|  ≤  max(2e-5, 20 · f32_err)
where f32_err is PyTorch float32's own rel error against the same float64 reference (tests/parity/parity_test.cc
says why). Also: arrays shared without a copy, non-contiguous and float64 inputs, torch in → torch out, the GIL
released during a forward, torch and tfm imported in either order, and the errors of bad input."""
import copy
import json
import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import tfm
from conftest import ROOT, rel_err

torch = pytest.importorskip("torch")
nn = torch.nn


def _torch_run(module, inputs, diff, dtype, grad_output, mha):
    m = copy.deepcopy(module).to(dtype).eval()
    x = {}
    for k, v in inputs.items():
        t = torch.from_numpy(np.array(v))
        if t.dtype != torch.bool:
            t = t.to(dtype).requires_grad_(k in diff)
        x[k] = t
    y = m(**x, need_weights=False)[0] if mha else m(**x)
    (y * torch.from_numpy(grad_output).to(dtype)).sum().backward()
    res = {"output": y.detach().double().numpy()}
    for k, p in m.named_parameters():
        res["grad." + k] = p.grad.double().numpy()
    for k in diff:
        res["grad." + k] = x[k].grad.double().numpy()
    return res


def check_parity(module, inputs, diff):
    module = module.eval()
    mha = isinstance(module, nn.MultiheadAttention)
    fast = tfm.from_torch(module)
    out = fast(**inputs)
    if mha:
        out, weights = out
        assert weights is None
    rng = np.random.default_rng(0)
    grad_output = rng.standard_normal(out.shape).astype(np.float32)
    ref = _torch_run(module, inputs, diff, torch.float64, grad_output, mha)
    f32 = _torch_run(module, inputs, diff, torch.float32, grad_output, mha)
    got = fast.forward_backward(inputs, grad_output)
    assert rel_err(out, ref["output"]) <= max(2e-5, 20 * rel_err(f32["output"], ref["output"]))
    assert set(got) == set(ref), set(got) ^ set(ref)
    for k, r in ref.items():
        assert got[k].shape == r.shape, k
        e, bound = rel_err(got[k], r), max(2e-5, 20 * rel_err(f32[k], r))
        assert e <= bound, f"{k}: rel {e:.3g} > bound {bound:.3g}"


def _seq(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _pad(rng, b, n):
    kpm = np.zeros((b, n), dtype=bool)
    for i in range(1, b):
        kpm[i, rng.integers(1, n + 1):] = True
    return kpm


def _causal_float(n):
    return np.triu(np.full((n, n), -np.inf, dtype=np.float32), 1)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention(batch_first):
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    q = _seq(rng, 3, 5, 8) if batch_first else _seq(rng, 5, 3, 8)
    kv = _seq(rng, 3, 6, 8) if batch_first else _seq(rng, 6, 3, 8)
    check_parity(m, {"query": q, "key": kv, "value": kv, "key_padding_mask": _pad(rng, 3, 6),
                     "attn_mask": rng.standard_normal((5, 6)).astype(np.float32)}, ["query", "key", "value"])


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_with_kdim_and_vdim(batch_first):
    # Separate q/k/v projections (q_proj_weight, k_proj_weight, v_proj_weight): key and value of their own widths.
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    m = nn.MultiheadAttention(8, 2, kdim=5, vdim=11, batch_first=batch_first)
    fast = tfm.from_torch(m)
    assert {"q_proj_weight", "k_proj_weight", "v_proj_weight"} <= set(fast.state_dict())
    assert "in_proj_weight" not in fast.state_dict()
    seq = (lambda n, w: _seq(rng, 3, n, w)) if batch_first else (lambda n, w: _seq(rng, n, 3, w))
    check_parity(m, {"query": seq(4, 8), "key": seq(6, 5), "value": seq(6, 11), "key_padding_mask": _pad(rng, 3, 6)},
                 ["query", "key", "value"])
    with pytest.raises(ValueError, match=r"tensor 'key' has shape \(3, 6, 8\), expected \(B, T, 5\)"
                       if batch_first else r"tensor 'key' has shape \(6, 3, 8\), expected \(T, B, 5\)"):
        fast(seq(4, 8), seq(6, 8), seq(6, 11))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias_kv, zero_attn", [(True, False), (False, True), (True, True)])
def test_multihead_attention_with_add_bias_kv_and_add_zero_attn(batch_first, bias_kv, zero_attn):
    # bias_k / bias_v appended to every row's keys and values, then a zero position; the masks padded for them.
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    m = nn.MultiheadAttention(8, 2, add_bias_kv=bias_kv, add_zero_attn=zero_attn, batch_first=batch_first)
    fast = tfm.from_torch(m)
    assert ({"bias_k", "bias_v"} <= set(fast.state_dict())) == bias_kv
    seq = (lambda n: _seq(rng, 3, n, 8)) if batch_first else (lambda n: _seq(rng, n, 3, 8))
    kv = seq(6)
    check_parity(m, {"query": seq(4), "key": kv, "value": kv, "key_padding_mask": _pad(rng, 3, 6),
                     "attn_mask": rng.standard_normal((4, 6)).astype(np.float32)}, ["query", "key", "value"])
    x = seq(5)  # self-attention, a bool mask of every key but the first for the first query
    mask = np.zeros((5, 5), dtype=bool)
    mask[0, 1:] = True
    check_parity(m, {"query": x, "key": x, "value": x, "attn_mask": mask}, ["query", "key", "value"])


@pytest.mark.parametrize("batch_first", [True, False])
def test_encoder_layer_variant(batch_first):  # norm_first with GELU
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    m = nn.TransformerEncoderLayer(8, 2, 16, 0.1, activation="gelu", batch_first=batch_first, norm_first=True)
    src = _seq(rng, 3, 5, 8) if batch_first else _seq(rng, 5, 3, 8)
    check_parity(m, {"src": src, "src_mask": _causal_float(5) == -np.inf, "src_key_padding_mask": _pad(rng, 3, 5)},
                 ["src"])


@pytest.mark.parametrize("batch_first", [True, False])
def test_decoder_layer(batch_first):
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    m = nn.TransformerDecoderLayer(8, 2, 16, batch_first=batch_first)
    tgt = _seq(rng, 2, 4, 8) if batch_first else _seq(rng, 4, 2, 8)
    mem = _seq(rng, 2, 6, 8) if batch_first else _seq(rng, 6, 2, 8)
    check_parity(m, {"tgt": tgt, "memory": mem, "tgt_mask": _causal_float(4),
                     "memory_key_padding_mask": _pad(rng, 2, 6)}, ["tgt", "memory"])


def test_encoder_stack():
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    m = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(8), enable_nested_tensor=False)
    check_parity(m, {"src": _seq(rng, 3, 5, 8), "src_key_padding_mask": _pad(rng, 3, 5)}, ["src"])


def test_decoder_stack():
    torch.manual_seed(5)
    rng = np.random.default_rng(5)
    m = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2)
    check_parity(m, {"tgt": _seq(rng, 4, 2, 8), "memory": _seq(rng, 5, 2, 8), "tgt_mask": _causal_float(4)},
                 ["tgt", "memory"])


def test_transformer():
    torch.manual_seed(6)
    rng = np.random.default_rng(6)
    m = nn.Transformer(8, 2, 2, 2, 16, batch_first=True)
    check_parity(m, {"src": _seq(rng, 2, 5, 8), "tgt": _seq(rng, 2, 4, 8), "tgt_mask": _causal_float(4),
                     "src_key_padding_mask": _pad(rng, 2, 5), "memory_key_padding_mask": _pad(rng, 2, 5)},
                 ["src", "tgt"])


def test_nested_tensor_fast_path_as_torch_no_grad():
    """nn.TransformerEncoder's enable_nested_tensor (PyTorch's default): PyTorch's no-grad call gives 0 at the padded
    positions before the final norm (so the norm's bias there), which reaches every output of an nn.Transformer
    whose decoder is not given the memory's padding; tfm's forward does the same where PyTorch takes the path, and
    the regular path elsewhere (a mask not left-aligned, norm_first, the switch off), against float64 PyTorch."""
    torch.manual_seed(7)
    x = torch.randn(3, 5, 8)
    left = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    holes = torch.tensor([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]], dtype=torch.bool)

    def compare(module, args, kpm):
        fast = tfm.from_torch(module.eval())
        ref_module = copy.deepcopy(module).double()
        with torch.no_grad():
            ref = ref_module(*[a.double() for a in args], src_key_padding_mask=kpm).numpy()
        with torch.no_grad():  # the call follows torch's grad mode (the test below)
            out = fast(*[a.numpy() for a in args], src_key_padding_mask=kpm.numpy())
        assert out.shape == ref.shape and rel_err(out, ref) <= 2e-6, (out.shape, ref.shape)
        return out

    def stack(nested=True, mask_check=True, norm_first=False):
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=norm_first)
        return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8), enable_nested_tensor=nested, mask_check=mask_check)

    enc = stack()
    with torch.no_grad():
        enc.norm.bias.uniform_(-1, 1)
    bias = enc.norm.bias.detach().numpy()
    out = compare(enc, (x,), left)
    assert np.array_equal(out[0, 3:], np.broadcast_to(bias, (2, 8)))  # the padded rows: norm(0) = bias
    assert np.array_equal(out[2, 1:], np.broadcast_to(bias, (4, 8)))
    assert tfm.from_torch(enc).config["enable_nested_tensor"] is True
    float_kpm = torch.zeros(3, 5).masked_fill(left, float("-inf"))
    assert np.array_equal(compare(enc, (x,), float_kpm), out)
    for regular in (compare(enc, (x,), holes), compare(stack(nested=False), (x,), left),
                    compare(stack(norm_first=True), (x,), left)):
        assert not np.allclose(regular[0, 3:], np.broadcast_to(bias, (2, 8)))
    compare(stack(mask_check=False), (x,), holes)  # a row of n unpadded positions is its first n
    tr = nn.Transformer(8, 2, 1, 1, 16, batch_first=True)
    compare(tr, (x, torch.randn(3, 4, 8)), left)


def test_unbatched_inputs_as_torch():
    """PyTorch's six classes take unbatched inputs (sequences (L, E), key padding masks (S,)): so does a converted
    module, for both batch_first values, output and forward_backward's gradients without the batch axis; an
    unbatched nn.Transformer with a padding mask takes PyTorch's regular path (its nested path needs a 3-D src)."""
    torch.manual_seed(5)
    x, t = torch.randn(5, 8), torch.randn(4, 8)
    kpm = torch.tensor([0, 0, 0, 1, 1], dtype=torch.bool)
    for bf in (False, True):
        cases = [(nn.MultiheadAttention(8, 2, batch_first=bf), dict(query=x, key=x, value=x, key_padding_mask=kpm)),
                 (nn.TransformerEncoderLayer(8, 2, 16, batch_first=bf), dict(src=x, src_key_padding_mask=kpm)),
                 (nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=bf), 2),
                  dict(src=x, src_key_padding_mask=kpm)),
                 (nn.TransformerDecoderLayer(8, 2, 16, batch_first=bf), dict(tgt=t, memory=x)),
                 (nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, batch_first=bf), 2), dict(tgt=t, memory=x)),
                 (nn.Transformer(8, 2, 1, 1, 16, batch_first=bf), dict(src=x, tgt=t, src_key_padding_mask=kpm))]
        for module, args in cases:
            module = module.eval()
            mha = isinstance(module, nn.MultiheadAttention)
            ref_module = copy.deepcopy(module).double()
            with torch.no_grad():
                ref = ref_module(**{k: v.double() if v.dtype != torch.bool else v for k, v in args.items()})
                ref = (ref[0] if mha else ref).numpy()
                out = tfm.from_torch(module)(**args)
                out = (out[0] if mha else out).numpy()
            assert out.shape == ref.shape and rel_err(out, ref) <= 2e-6, (type(module).__name__, bf, out.shape)
            g = np.ones(out.shape, np.float32)
            grads = tfm.from_torch(module).forward_backward({k: v.numpy() for k, v in args.items()}, g)
            first = next(iter(args))
            assert grads["output"].shape == ref.shape and grads["grad." + first].shape == args[first].shape


def test_nested_tensor_fast_path_follows_torch_grad_mode():
    """PyTorch takes the nested-tensor path only when autograd records nothing: a plain `model.eval(); model(x)` with
    parameters requiring gradients takes the regular path, and through an nn.Transformer whose decoder attends to the
    padded memory rows every output differs. A from_torch module's call computes what the torch module's call
    computes in the same state: grad mode on or off (torch.no_grad, inference_mode), parameters requiring gradients
    or not, a torch input requiring one."""
    torch.manual_seed(3)
    src, tgt = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    kpm = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    tr = nn.Transformer(8, 2, 1, 1, 16, batch_first=True).eval()
    ref = copy.deepcopy(tr).double()
    fast = tfm.from_torch(tr)

    def torch_call(**grad):
        a, b = src.double().requires_grad_(grad.get("src", False)), tgt.double()
        return ref(a, b, src_key_padding_mask=kpm).detach().numpy()

    plain = torch_call()
    with torch.no_grad():
        no_grad = torch_call()
    assert rel_err(plain, no_grad) > 0.05  # the premise: the two calls differ at every position
    assert rel_err(fast(src, tgt, src_key_padding_mask=kpm).numpy(), plain) <= 2e-6
    assert rel_err(fast(src.numpy(), tgt.numpy(), src_key_padding_mask=kpm.numpy()), plain) <= 2e-6
    with torch.no_grad():
        assert rel_err(fast(src, tgt, src_key_padding_mask=kpm).numpy(), no_grad) <= 2e-6
    with torch.inference_mode():
        assert rel_err(fast(src, tgt, src_key_padding_mask=kpm).numpy(), no_grad) <= 2e-6
    # PyTorch reads src and the first encoder layer's parameters only: a frozen encoder under a trainable decoder
    # takes the fast path in grad mode.
    half = copy.deepcopy(tr)
    half.encoder.requires_grad_(False)
    premise = copy.deepcopy(half).double()(src.double(), tgt.double(), src_key_padding_mask=kpm).detach().numpy()
    assert rel_err(premise, no_grad) <= 1e-12
    assert rel_err(tfm.from_torch(half)(src, tgt, src_key_padding_mask=kpm).numpy(), no_grad) <= 2e-6
    # Parameters that require no gradient: PyTorch's fast path in grad mode too, unless the input requires one.
    frozen = copy.deepcopy(tr).requires_grad_(False)
    ref.requires_grad_(False)
    assert rel_err(torch_call(), no_grad) <= 1e-12
    assert rel_err(torch_call(src=True), plain) <= 1e-12
    fast = tfm.from_torch(frozen)
    assert rel_err(fast(src, tgt, src_key_padding_mask=kpm).numpy(), no_grad) <= 2e-6
    assert rel_err(fast(src.clone().requires_grad_(True), tgt, src_key_padding_mask=kpm).numpy(), plain) <= 2e-6


def test_nested_tensor_fast_path_ignores_non_finite_padding():
    """PyTorch's nested tensor drops the padded positions, so a NaN or an infinity stored there (an uninitialised
    padding buffer) reaches no output of its no-grad call; tfm's fast path leaves the kept positions as finite
    padding gives them, bit for bit, and as PyTorch computes them. PyTorch's regular path (grad mode, parameters
    requiring gradients) lets a NaN through, and so does tfm's there."""
    torch.manual_seed(8)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, 0.0, batch_first=True), 1).eval()
    fast = tfm.from_torch(enc)
    src = torch.randn(2, 6, 16)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[0, 4:] = True  # sequence 0: 4 tokens, then 2 padded slots
    with torch.no_grad():
        finite = fast(src, src_key_padding_mask=kpm).numpy()
    for junk in (float("nan"), float("inf"), float("-inf")):
        x = src.clone()
        x[0, 5] = junk
        x[0, 4, 3] = junk
        with torch.no_grad():
            ref = copy.deepcopy(enc).double()(x.double(), src_key_padding_mask=kpm).numpy()
            out = fast(x, src_key_padding_mask=kpm).numpy()
        assert np.isfinite(ref).all()  # the premise: PyTorch's fast path never reads the padded slots
        assert np.array_equal(out, finite), junk
        assert rel_err(out, ref) <= 2e-6
    x = src.clone()
    x[0, 5] = float("nan")
    assert np.isnan(fast(x, src_key_padding_mask=kpm).numpy()[0, :4]).all()  # grad mode: the regular path
    assert torch.isnan(enc(x, src_key_padding_mask=kpm)[0, :4]).all()


def test_nested_tensor_fast_path_follows_requires_grad_set_after_from_torch():
    """The path choice reads the torch module's parameters at each call, as PyTorch's does: freezing the module
    after the conversion (a deployment step) gives the fast path in grad mode, unfreezing it the regular path again,
    and the choice keeps its last reading once the torch module is gone."""
    torch.manual_seed(9)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 1).eval()
    ref = copy.deepcopy(enc).double()
    fast = tfm.from_torch(enc)  # the parameters require gradients here (PyTorch's default)
    src = torch.randn(2, 5, 8)
    kpm = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    with torch.no_grad():
        nested = ref(src.double(), src_key_padding_mask=kpm).numpy()
    regular = ref(src.double(), src_key_padding_mask=kpm).detach().numpy()
    assert rel_err(regular, nested) > 0.05  # the premise: the two paths differ (the padded rows)
    assert rel_err(fast(src, src_key_padding_mask=kpm).numpy(), regular) <= 2e-6
    enc.requires_grad_(False)
    ref.requires_grad_(False)
    assert rel_err(ref(src.double(), src_key_padding_mask=kpm).numpy(), nested) <= 1e-12  # torch: the fast path
    assert rel_err(fast(src, src_key_padding_mask=kpm).numpy(), nested) <= 2e-6
    enc.layers[0].linear1.weight.requires_grad_(True)  # one parameter of the first layer is enough
    assert rel_err(fast(src, src_key_padding_mask=kpm).numpy(), regular) <= 2e-6
    enc.requires_grad_(False)
    assert rel_err(fast(src, src_key_padding_mask=kpm).numpy(), nested) <= 2e-6
    del enc
    import gc
    gc.collect()
    assert rel_err(fast(src, src_key_padding_mask=kpm).numpy(), nested) <= 2e-6


# ---- the notebook mappings (tools/import_maps), through tests/import/check_notebooks.py's cases -----------------

def _notebook_cases():
    sys.path.insert(0, os.path.join(ROOT, "tests", "import"))
    import check_notebooks as cn
    return cn, [c for make in cn.CASES.values() for c in make()]


@pytest.mark.parametrize("nb", ["nb1", "nb2", "nb3", "nb4", "nb5"])
def test_notebook_mapping(nb):
    import fnmatch
    import zlib
    cn, _ = _notebook_cases()
    for case in cn.CASES[nb]():
        fast = tfm.from_torch(case.module.eval(), mapping=case.mapping, target=case.target, overrides=case.overrides)
        rng = np.random.default_rng(zlib.crc32(case.name.encode()))
        with torch.no_grad():
            probe = case.call(copy.deepcopy(case.module).eval(), cn.torch_inputs(case.inputs, torch.float32, ()))
        grad_output = rng.standard_normal(tuple(probe.shape)).astype(np.float32)
        ref = cn.run_module(case, torch.float64, grad_output)
        f32 = cn.run_module(case, torch.float32, grad_output)
        ignore = cn.it.load_mapping(case.mapping)["targets"][case.target].get("ignore", [])
        for k in [k for k in ref if k.startswith("grad.") and any(fnmatch.fnmatchcase(k[5:], g) for g in ignore)]:
            del ref[k]
        got = fast.forward_backward(case.inputs, grad_output)
        param_grads = {k[5:]: v.astype(np.float64) for k, v in got.items()
                       if k.startswith("grad.") and k[5:] not in case.differentiable}
        mapped = {"output": got["output"]}
        back = cn.it.reverse_state(cn.it.load_mapping(case.mapping), case.target, fast.config, param_grads, grad=True,
                                   overrides=case.overrides)
        mapped.update({"grad." + k: v for k, v in back.items()})
        mapped.update({"grad." + k: got["grad." + k] for k in case.differentiable})
        assert set(mapped) == set(ref), (case.name, set(mapped) ^ set(ref))
        for k, r in ref.items():
            e, bound = rel_err(mapped[k], r), max(2e-5, 20 * rel_err(f32[k], r))
            assert e <= bound, f"{case.name} {k}: rel {e:.3g} > bound {bound:.3g}"
        # the plain forward agrees with forward_backward's output
        flags = {k: bool(v) for k, v in case.inputs.items() if v.dtype == np.bool_ and v.ndim == 0}
        rest = {k: v for k, v in case.inputs.items() if k not in flags}
        y = fast(**rest, **flags)
        y = y[0] if isinstance(y, tuple) else y
        assert rel_err(y, ref["output"]) <= max(2e-5, 20 * rel_err(f32["output"], ref["output"]))


def test_reverse_refuses_a_trained_model_the_notebook_module_does_not_compute(tmp_path):
    """tools/import_torch.py reverse --map nb4_reverse --target model on models trained by tfm: one with the
    notebook's settings exports, and notebook 4's module (tests/gen/notebooks.py) given the export computes tfm's
    logits; one trained with another activation, attention scale, embedding scale, positional encoding or with
    shared layers is refused in one line naming the config key, its value and the mapping's."""
    cn, _ = _notebook_cases()
    import notebooks as nb
    base = dict(task="reverse", arch="encoder", d_model=16, nhead=4, head_dim=16, qkv_bias=False, out_bias=False,
                dim_feedforward=32, layers=2, max_steps=3, threads=1, seed=1)
    for name, opts, needles in (
            ("ok", {}, None),
            ("gelu", {"activation": "gelu"}, ['activation is "gelu"', 'fixes "relu"']),
            ("as", {"attn_scale": 0.3}, ["attn_scale is 0.3", "tfm's default, 0.25"]),
            ("se", {"scale_embeddings": True}, ["scale_embeddings is true", "fixes false"]),
            ("pos", {"positional": "none"}, ['positional is "none"', 'fixes "sinusoidal"']),
            ("sh", {"share_layers": True}, ["share_layers is true", "'layers.{i}.'"])):
        d = str(tmp_path / name)
        tfm.train(out=d, **base, **opts)
        rc, err = cn.cli(["reverse", "--map", "nb4_reverse", "--target", "model", "--model-dir", d,
                          "--out", d + ".pt"])
        if needles is not None:
            assert rc == 1 and "\n" not in err and all(n in err for n in [d + "/config.json: "] + needles), err
            continue
        assert rc == 0, err
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)["model"]
        m = nb.NB4Model(vocab_size=c["src_vocab_size"], d_model=16, num_heads=4, d_k=16, d_v=16, d_ff=32,
                        num_layers=2, dropout=0.0, max_len=64).eval()
        m.load_state_dict(torch.load(d + ".pt"), strict=True)
        src = np.random.default_rng(0).integers(3, c["src_vocab_size"], size=(2, 9))
        with torch.no_grad():
            ref = m.double()(torch.tensor(src)).numpy()
        assert rel_err(tfm.load(d).logits(src), ref) <= 2e-6


# ---- arrays ---------------------------------------------------------------------------------------------------

def test_zero_copy():
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    t = tfm.tensor(a)
    assert np.shares_memory(np.asarray(t), a)
    assert t.shape == (2, 3, 4) and t.dtype == "float32" == str(np.asarray(t).dtype)
    tt = torch.from_numpy(a)
    assert np.shares_memory(np.asarray(tfm.tensor(tt)), a)
    # outputs: the numpy array is tfm's memory, the torch tensor shares it
    layer = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    y = fast(torch.from_numpy(a))
    assert isinstance(y, torch.Tensor) and y.shape == (2, 3, 4)
    with torch.no_grad():
        assert rel_err(y.numpy(), layer(torch.from_numpy(a)).numpy()) < 1e-5


def test_read_only_input_and_weights_copied_once(tmp_path):
    torch.manual_seed(10)
    layer = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    x.setflags(write=False)
    assert np.shares_memory(np.asarray(tfm.tensor(x)), x)
    # Shared, a read-only array stays read-only: tfm's view of a bytes object or of a read-only memory map
    # must not be a way to write it (a write to the map's pages would crash the interpreter).
    assert not np.asarray(tfm.tensor(x)).flags.writeable
    frozen = bytes(16)
    view = np.asarray(tfm.tensor(np.frombuffer(frozen, dtype=np.float32)))
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1.0
    assert frozen == bytes(16)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    t = tfm.tensor(mapped)
    assert np.shares_memory(np.asarray(t), mapped) and not np.asarray(t).flags.writeable
    assert np.array_equal(fast(mapped), fast(x))
    # Outputs are the caller's: fresh memory each call, writeable.
    y1, y2 = fast(x), fast(x)
    assert y1.flags.writeable and not np.shares_memory(y1, y2)
    before = fast(x).copy()
    with torch.no_grad():
        layer.linear1.weight.mul_(2)  # the tfm module took a copy of the weights
    assert np.array_equal(fast(x), before)


def test_non_contiguous_and_float64_inputs():
    torch.manual_seed(7)
    layer = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    base = np.random.default_rng(1).standard_normal((3, 4, 2)).astype(np.float32)
    x = base.transpose(2, 0, 1)[:, :, ::1]  # (2, 3, 4), not C-contiguous
    assert not x.flags.c_contiguous
    t = tfm.tensor(x)
    assert not np.shares_memory(np.asarray(t), base)
    with torch.no_grad():
        want = layer(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    assert rel_err(fast(x), want) < 1e-5
    assert rel_err(fast(x.astype(np.float64)), want) < 1e-5
    assert rel_err(fast(torch.from_numpy(base).permute(2, 0, 1)).numpy(), want) < 1e-5


def test_load_module_from_files(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from export_torch import export
    torch.manual_seed(8)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8, batch_first=True), 2,
                                enable_nested_tensor=False).eval()
    cfg, w = export(enc, {}, str(tmp_path / "enc"))
    fast = tfm.load_module(cfg, w)
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    with torch.no_grad():
        assert rel_err(fast(x), enc(torch.from_numpy(x)).numpy()) < 1e-5
    bf = tfm.load_module(cfg, w, dtype="bf16")
    assert rel_err(bf(x), fast(x)) < 0.05


def test_load_module_takes_any_path_type_and_any_combination(tmp_path, monkeypatch):
    # config and weights: each a path (str, bytes or os.PathLike, the stub's PathLike) or a dict, in any combination.
    import pathlib
    import tempfile
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import tfm_safetensors as st
    torch.manual_seed(9)
    layer = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval()
    want = tfm.from_torch(layer)
    cfg = dict(want.config)
    sd = {k: v.numpy() for k, v in layer.state_dict().items()}
    cfg_path, w_path = tmp_path / "enc.json", tmp_path / "enc.safetensors"
    cfg_path.write_text(json.dumps(cfg))
    st.save(str(w_path), sd)
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    for config in (cfg, str(cfg_path), os.fsencode(cfg_path), pathlib.Path(cfg_path)):
        for weights in (sd, str(w_path), os.fsencode(w_path), pathlib.Path(w_path)):
            got = tfm.load_module(config, weights)
            np.testing.assert_array_equal(got(x), want(x))
            assert got.config == cfg
    assert os.listdir(tmp_path / "tmp") == []  # a dict config's text went through a temporary file, removed
    # A dict config with a weights file is read as the file holding its JSON is: the library's messages, without the
    # temporary file's name (as with dict weights), and the file's tensors checked as `tfm forward` checks them.
    bad = {k: v for k, v in cfg.items() if k != "nhead"} | {"n_head": 2}
    with pytest.raises(ValueError) as with_dict:
        tfm.load_module(bad, sd)
    with pytest.raises(ValueError) as with_file:
        tfm.load_module(bad, os.fsencode(w_path))
    assert str(with_file.value) == str(with_dict.value) and str(with_dict.value).startswith("config: ")
    st.save(str(tmp_path / "i64.safetensors"), {**sd, "linear1.bias": np.zeros(8, np.int64)})
    with pytest.raises(ValueError, match=r"i64.safetensors: tensor 'linear1.bias' must be floating point, got I64$"):
        tfm.load_module(cfg, str(tmp_path / "i64.safetensors"))
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        tfm.load_module(cfg, b"missing.safetensors")
    with pytest.raises(ValueError, match="^weights: embedded null byte"):
        tfm.load_module(cfg, b"a\0b")
    assert os.listdir(tmp_path / "tmp") == []


# ---- errors ---------------------------------------------------------------------------------------------------

def test_errors(tmp_path):
    layer = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    with pytest.raises(ValueError, match="src"):
        fast(np.zeros((2, 3, 5), dtype=np.float32))  # wrong width
    with pytest.raises(TypeError, match="srcx"):
        fast(np.zeros((2, 3, 4), dtype=np.float32), srcx=1)
    cfg = dict(fast.config)
    sd = {k: v.numpy() for k, v in layer.state_dict().items()}
    del sd["linear1.weight"]
    with pytest.raises(ValueError, match="linear1.weight"):
        tfm.load_module(cfg, sd)
    with pytest.raises(ValueError, match="n_head"):
        tfm.load_module({**cfg, "n_head": 2}, sd)
    with pytest.raises(ValueError, match="dtype|precision"):
        tfm.from_torch(layer, dtype="f16")
    with pytest.raises(ValueError):
        tfm.from_torch(nn.Linear(2, 2))
    (tmp_path / "cfg.json").write_text(__import__("json").dumps(cfg))
    with pytest.raises(FileNotFoundError):
        tfm.load_module(str(tmp_path / "cfg.json"), str(tmp_path / "missing.safetensors"))
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(OSError, match="bad.safetensors"):
        tfm.load_module(str(tmp_path / "cfg.json"), str(tmp_path / "bad.safetensors"))
    with pytest.raises(FileNotFoundError):
        tfm.load(str(tmp_path / "no_such_run"))
    for n in (0, 5000):  # one range, the library's, whichever side n misses it on
        with pytest.raises(ValueError, match=r"n must be in \[1, 1024\], got " + str(n)):
            tfm.set_num_threads(n)
    with pytest.raises(ValueError, match="dtype"):
        tfm.from_torch(layer, dtype=None)
    # Messages holding bytes that are not UTF-8 (a parser echoing a file's bytes) still reach Python, escaped.
    (tmp_path / "badkey.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\xff\": 1")
    with pytest.raises(OSError, match=r"badkey.safetensors.*\\xff"):
        tfm.load_module(str(tmp_path / "cfg.json"), str(tmp_path / "badkey.safetensors"))
    # A config file that is not JSON is named, as the CLI names it.
    (tmp_path / "notjson.json").write_bytes(b"{\"module\": \xff")
    with pytest.raises(ValueError, match="notjson.json: not valid JSON"):
        tfm.load_module(str(tmp_path / "notjson.json"), sd)
    (tmp_path / "twice.json").write_text('{"module": "TransformerEncoderLayer", "d_model": 4, "d_model": 8}')
    with pytest.raises(ValueError, match="twice.json: config: key 'd_model' appears twice"):
        tfm.load_module(str(tmp_path / "twice.json"), sd)
    with pytest.raises(ValueError, match="'linear1.bias'.*int64"):
        tfm.load_module(cfg, {**sd, "linear1.bias": np.zeros(8, np.int64)})
    assert fast(np.zeros((1, 2, 4), dtype=np.float32)).shape == (1, 2, 4)  # the interpreter survives


def test_argument_types(tmp_path):
    # A config that is neither a path nor a mapping is refused before anything is opened: an int would be read
    # (and closed) as a file descriptor.
    layer = nn.TransformerEncoderLayer(4, 1, dim_feedforward=8, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    sd = fast.state_dict()
    with open(tmp_path / "log.txt", "w") as log:
        for config in (log.fileno(), False, 3.5):
            with pytest.raises(TypeError, match="^config must be a JSON file's path or a dict, got "):
                tfm.load_module(config, sd)
        os.fstat(log.fileno())  # still open
    with pytest.raises(TypeError, match="^weights: keys are PyTorch state_dict keys"):
        tfm.load_module(fast.config, {1: np.zeros((12, 4), np.float32)})
    with pytest.raises(TypeError, match="^weights must be a safetensors file's path or a dict"):
        tfm.load_module(fast.config, [1, 2])
    # Any Mapping serves where a dict does; numpy scalars are config values.
    again = tfm.load_module(types.MappingProxyType(fast.config), types.MappingProxyType(sd))
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(again(x), fast(x))
    got = fast.forward_backward(types.MappingProxyType({"src": x}), np.ones((2, 3, 4), np.float32))
    assert got["output"].shape == (2, 3, 4)
    with pytest.raises(ValueError, match="grad_output: .*int64"):
        fast.forward_backward({"src": x}, np.ones((2, 3, 4), np.int64))
    wide = tfm.from_torch(layer, overrides={"layer_norm_eps": np.float64(1e-5)})
    np.testing.assert_array_equal(wide(x), fast(x))
    with pytest.raises(TypeError, match="^config key 'layer_norm_eps': "):
        tfm.from_torch(layer, overrides={"layer_norm_eps": object()})
    # The weights tfm holds are read-only views.
    with pytest.raises(ValueError, match="read-only"):
        sd["linear1.weight"][0, 0] = 1.0
    # PyTorch's MultiheadAttention.forward requires query, key and value.
    mha = tfm.from_torch(nn.MultiheadAttention(4, 1, batch_first=True).eval())
    with pytest.raises(TypeError, match="^MultiheadAttention.forward\\(\\) missing required arguments: 'key' and 'value'$"):
        mha(x)
    with pytest.raises(TypeError, match="missing required argument: 'value'$"):
        mha(x, key=x)
    assert mha(x, x, x)[0].shape == (2, 3, 4)


def test_integer_masks_refused_as_torch_refuses_them():
    # An integer mask converted to float would be added to the scores: refused, naming the argument.
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    fast = tfm.from_torch(mha)
    x = torch.randn(2, 5, 8)
    for dtype in (torch.uint8, torch.int32, torch.int64):
        with pytest.raises(ValueError, match="key_padding_mask.*bool"):
            fast(x, x, x, key_padding_mask=torch.tensor([[0, 0, 0, 1, 1], [0] * 5], dtype=dtype))
        with pytest.raises(ValueError, match="attn_mask"):
            fast(x, x, x, attn_mask=torch.zeros(5, 5, dtype=dtype))
    kpm = torch.tensor([[False, False, False, True, True], [False] * 5])
    with torch.no_grad():
        want = mha(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
    assert rel_err(fast(x, x, x, key_padding_mask=kpm)[0].numpy(), want.numpy()) < 1e-5


def test_integer_arguments_refused_saying_what_each_takes():
    """An integer sequence is refused as one (a float array; bool is no sequence either), an integer mask as a mask
    (bool or float). tfm refuses a uint8 attn_mask as PyTorch 2 does, which PyTorch 1.13 still read as bool
    (deprecated): the message says so and what to pass."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    for src in (np.ones((2, 5, 8), np.int64), torch.ones(2, 5, 8, dtype=torch.int32)):
        with pytest.raises(ValueError) as e:
            fast(src)
        assert str(e.value) == f"TransformerEncoderLayer: src: expected a float array, got dtype '{_dtype_of(src)}'"
    with pytest.raises(ValueError, match="^TransformerEncoderLayer: src: expected a float array, got dtype 'bool'$"):
        fast(np.ones((2, 5, 8), bool))
    with pytest.raises(ValueError) as e:
        fast(torch.randn(2, 5, 8), src_mask=torch.zeros(5, 5, dtype=torch.uint8))
    assert str(e.value) == (
        "TransformerEncoderLayer: src_mask: expected a bool (True = blocked) or float (added) mask, got dtype 'uint8' "
        "(an integer mask is refused, as PyTorch 2 refuses it; PyTorch 1.13 read a uint8 attn_mask as bool, "
        "deprecated: pass mask.bool())")
    with pytest.raises(ValueError) as e:  # the converter's own message, for any array
        tfm.tensor(np.ones(3, np.int64))
    assert str(e.value) == "expected a float array (or, for a mask, a bool one: True = blocked), got dtype 'int64'"


def _dtype_of(a):
    return str(a.numpy().dtype) if torch.is_tensor(a) else str(a.dtype)


def test_misaligned_float32_buffer_is_copied():
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    b = np.zeros(x.size * 4 + 1, np.uint8)[1:].view(np.float32).reshape(x.shape)  # C-contiguous, 1 byte off
    b[...] = x
    assert b.ctypes.data % 4 != 0 and b.flags.c_contiguous
    np.testing.assert_array_equal(fast(b), fast(x))


def test_modules_one_config_cannot_hold_are_refused():
    # tfm's config holds one layer_norm_eps and one set of layer arguments per stack: a stack whose final norm or
    # whose layers say otherwise would silently compute something else.
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16, eps=0.1), enable_nested_tensor=False).eval()
    with pytest.raises(ValueError, match="norm.eps"):
        tfm.from_torch(enc)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    enc.layers[1].norm_first = True
    with pytest.raises(ValueError, match=r"layers\[1\]'s norm_first"):
        tfm.from_torch(enc)
    dec_layer = nn.TransformerDecoderLayer(16, 4, 32)
    dec_layer.norm3.eps = 1e-3
    with pytest.raises(ValueError, match="norm3.eps"):
        tfm.from_torch(dec_layer)
    with pytest.raises(ValueError, match="no layers"):
        tfm.from_torch(nn.Transformer(16, 4, 0, 1, 32))


def test_modules_computing_otherwise_are_refused():
    # tfm runs the stock forward of the six classes: a module that PyTorch computes otherwise (a subclass overriding
    # the forward path, a forward hook, a submodule of another type) is refused, naming the submodule.
    def refused(module, match):
        with pytest.raises(ValueError, match=match):
            tfm.from_torch(module.eval())

    class FeedForwardSkipped(nn.TransformerEncoderLayer):
        def _ff_block(self, x):
            return x

    class Called(nn.Transformer):
        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs)

    class Attention(nn.MultiheadAttention):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)

    refused(FeedForwardSkipped(8, 2, 16),
            r"^layer \(FeedForwardSkipped\) overrides nn.TransformerEncoderLayer._ff_block: tfm runs")
    refused(nn.TransformerEncoder(FeedForwardSkipped(8, 2, 16), 2, enable_nested_tensor=False),
            r"^encoder.layers\[0\] \(FeedForwardSkipped\) overrides")
    refused(Called(8, 2, 1, 1, 16), r"^transformer \(Called\) overrides nn.Transformer.__call__")
    refused(Attention(8, 2), r"^attention \(Attention\) overrides nn.MultiheadAttention.forward")
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    layer.forward = lambda src, *args, **kwargs: src
    refused(layer, r"^layer \(TransformerEncoderLayer\) overrides nn.TransformerEncoderLayer.forward")

    # Forward hooks and pre-hooks, on the module or a submodule, and PyTorch's global ones.
    tr = nn.Transformer(8, 2, 1, 2, 16)
    handle = tr.decoder.layers[1].linear2.register_forward_hook(lambda module, args, out: out * 2)
    refused(tr, r"^decoder.layers\[1\].linear2 has a forward hook")
    handle.remove()
    handle = tr.register_forward_pre_hook(lambda module, args: None)
    refused(tr, r"^transformer has a forward pre-hook")
    handle.remove()
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False)
    enc.layers[1].activation = nn.ReLU()
    enc.layers[1].activation.register_forward_hook(lambda module, args, out: out + 1)
    refused(enc, r"^encoder.layers\[1\].activation has a forward hook")
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        refused(nn.TransformerEncoderLayer(8, 2, 16), "_global_forward_hooks is not empty")
    finally:
        handle.remove()

    # Submodules replaced by another type.
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    layer.linear1 = nn.Sequential(nn.Linear(8, 16))
    refused(layer, r"^layer.linear1 is Sequential: tfm runs nn.Linear there")
    dec_layer = nn.TransformerDecoderLayer(8, 2, 16)
    dec_layer.norm3 = nn.Identity()
    refused(dec_layer, r"^layer.norm3 is Identity: tfm runs nn.LayerNorm there")
    dec_layer = nn.TransformerDecoderLayer(8, 2, 16)
    dec_layer.dropout3 = nn.Identity()
    refused(dec_layer, r"^layer.dropout3 is Identity: tfm runs nn.Dropout there")
    dec_layer = nn.TransformerDecoderLayer(8, 2, 16)
    dec_layer.multihead_attn = Attention(8, 2)
    refused(dec_layer, r"^layer.multihead_attn is Attention: tfm runs nn.MultiheadAttention there")
    mha = nn.MultiheadAttention(8, 2)
    mha.out_proj = nn.Sequential(nn.Linear(8, 8))
    refused(mha, r"^attention.out_proj is Sequential: tfm runs nn.Linear or NonDynamicallyQuantizableLinear")

    # A decoder layer's two attentions with different head counts (tfm's config holds one nhead).
    dec_layer = nn.TransformerDecoderLayer(8, 2, 16)
    dec_layer.multihead_attn = nn.MultiheadAttention(8, 4)
    refused(dec_layer, r"^layer.multihead_attn.num_heads is 4 but layer.self_attn.num_heads is 2")

    # Attention tfm does not have: in a layer, separate q/k/v projections and add_bias_kv / add_zero_attn; one bias
    # of two; bias_k without bias_v.
    dec_layer = nn.TransformerDecoderLayer(8, 2, 16)
    dec_layer.multihead_attn = nn.MultiheadAttention(8, 2, kdim=4, vdim=4)
    refused(dec_layer, r"^layer.multihead_attn has separate q/k/v projections")
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    layer.self_attn = nn.MultiheadAttention(8, 2, add_bias_kv=True)
    refused(layer, r"^layer.self_attn has add_bias_kv or add_zero_attn: tfm runs them in a MultiheadAttention of its "
                   r"own, not in a layer")
    layer.self_attn = nn.MultiheadAttention(8, 2, add_zero_attn=True)
    refused(layer, r"^layer.self_attn has add_bias_kv or add_zero_attn")
    mha = nn.MultiheadAttention(8, 2, add_bias_kv=True)
    mha.bias_v = None
    refused(mha, r"^attention has bias_k without bias_v: add_bias_kv makes both")
    mha = nn.MultiheadAttention(8, 2)
    mha.out_proj.bias = None
    refused(mha, r"^attention has an in_proj_bias but no out_proj.bias")
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, enable_nested_tensor=False)
    enc.layers[1].self_attn.in_proj_bias = None
    refused(enc, r"^encoder.layers\[1\].self_attn has an out_proj.bias but no in_proj_bias")

    # A subclass adding attributes only computes as the stock class does, and is run; an activation of a subclass of
    # nn.ReLU is a callable tfm cannot name: it needs overrides.
    class Tagged(nn.TransformerEncoderLayer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.tag = "mine"

    torch.manual_seed(12)
    tagged = Tagged(8, 2, 16, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert rel_err(tfm.from_torch(tagged)(x).numpy(), tagged(x).numpy()) < 1e-5

    class Relu(nn.ReLU):
        pass

    tagged.activation = Relu()
    with pytest.raises(ValueError, match="activation is a callable tfm cannot name"):
        tfm.from_torch(tagged)
    assert tfm.from_torch(tagged, overrides={"activation": "relu"}).config["activation"] == "relu"


def test_training_mode_warns():
    # tfm runs a module in eval mode: one in training mode (dropout on in PyTorch) is converted with a warning.
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    with pytest.warns(UserWarning, match=r"^the TransformerEncoderLayer is in training mode: tfm runs it in eval mode "
                                         r"\(dropout off; forward_backward gives eval-mode gradients\)$"):
        tfm.from_torch(layer)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tfm.from_torch(layer.eval())


def test_submodule_in_training_mode_warns():
    # Only a layer in training mode: torch's call runs its dropout, tfm's does not — said by the submodule's name.
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5), 2).eval()
    enc.layers[1].train()
    with pytest.warns(UserWarning, match=r"^TransformerEncoder's submodules layers\.1\.self_attn, layers\.1\.dropout, "
                                         r"layers\.1\.dropout1, \.\.\. are in training mode"):
        tfm.from_torch(enc)
    import warnings
    with warnings.catch_warnings():  # a submodule whose mode changes nothing (no dropout) is not worth a warning
        warnings.simplefilter("error")
        enc.layers[1].eval()
        enc.layers[1].norm1.train()
        tfm.from_torch(enc)


def test_torch_tensor_subclass_and_tfm_tensor_inputs():
    class MetaTensor(torch.Tensor):  # a subclass defined outside torch (MONAI's is one)
        pass

    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        ref = layer(x)
        out = fast(x.as_subclass(MetaTensor))
    assert isinstance(out, torch.Tensor) and rel_err(out.numpy(), ref.numpy()) < 1e-5
    # an unbatched tfm.Tensor is unbatched as numpy's is
    x2 = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    assert np.array_equal(fast(tfm.tensor(x2)), fast(x2))
    assert fast(tfm.tensor(x2)).shape == (5, 8)


def test_requires_grad_input_warns_that_the_output_has_no_graph():
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    x = torch.randn(2, 5, 8, requires_grad=True)
    with pytest.warns(UserWarning, match="an input requires grad, but tfm's output carries no autograd graph"):
        y = fast(x)
    assert y.grad_fn is None
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():  # nothing is recorded in torch either: no warning
            fast(x)


def test_need_weights_true_is_refused():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    fast = tfm.from_torch(mha)
    x = np.zeros((1, 3, 8), np.float32)
    assert fast(x, x, x)[1] is None and fast(x, x, x, need_weights=False)[1] is None
    for call in (lambda: fast(x, x, x, need_weights=True), lambda: fast(x, x, x, None, True),
                 lambda: fast(x, x, x, need_weights=np.True_)):
        with pytest.raises(ValueError, match="need_weights=True: tfm does not compute the attention weights"):
            call()


def test_non_finite_override_is_named():
    layer = nn.TransformerEncoderLayer(8, 2, 16).eval()
    with pytest.raises(ValueError, match=r"^config key 'layer_norm_eps': nan is not a finite number$"):
        tfm.from_torch(layer, overrides={"layer_norm_eps": float("nan")})


def test_mapping_errors_and_paths(tmp_path):
    import pathlib
    layer = nn.TransformerEncoderLayer(8, 2, 16).eval()
    with pytest.raises(ValueError, match="nb4_revers"):  # a name: no such mapping
        tfm.from_torch(layer, mapping="nb4_revers")
    with pytest.raises(FileNotFoundError, match="nope.json"):  # a file's path: no such file
        tfm.from_torch(layer, mapping=pathlib.Path(tmp_path / "nope.json"))
    (tmp_path / "notjson.json").write_text("targets: {}")
    with pytest.raises(ValueError, match="notjson.json: not valid JSON"):
        tfm.from_torch(layer, mapping=str(tmp_path / "notjson.json"))


# ---- the GIL ----------------------------------------------------------------------------------------------------

def test_gil_released_during_forward():
    torch.manual_seed(9)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(128, 4, 512, batch_first=True), 4,
                                enable_nested_tensor=False).eval()
    fast = tfm.from_torch(enc)
    x = np.random.default_rng(3).standard_normal((8, 256, 128)).astype(np.float32)
    fast(x)  # pack the weights once
    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    th = threading.Thread(target=counter)
    th.start()
    time.sleep(0.05)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # without a released GIL the counter would not run during the call
    try:
        start, t0 = count[0], time.time()
        fast(x)
        seconds, advanced = time.time() - t0, count[0] - start
    finally:
        sys.setswitchinterval(old)
        stop.set()
        th.join()
    # Held through the call, the GIL would leave the counter where it was (the main thread reads it before
    # giving the GIL up again); released, the counter runs during the call, and for up to the switch interval
    # while this thread waits to take the GIL back.
    assert advanced > 1000, f"counter advanced {advanced} in {seconds:.2f} s"


# ---- torch and tfm in one process, either order ------------------------------------------------------------------

@pytest.mark.parametrize("order", ["torch,tfm", "tfm,torch"])
def test_import_order(order):
    code = (f"import {order}, numpy as np\n"
            "torch.manual_seed(0); torch.set_num_threads(2); tfm.set_num_threads(2)\n"
            "l = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2,"
            " enable_nested_tensor=False).eval()\n"
            "f = tfm.from_torch(l)\n"
            "x = torch.randn(4, 32, 64)\n"
            "with torch.no_grad():\n"
            "    for _ in range(3):\n"
            "        a = l(x); b = f(x)\n"
            "        assert float((a - b).abs().max()) < 1e-4, float((a - b).abs().max())\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_one_module_from_two_threads():
    torch.manual_seed(11)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    fast = tfm.from_torch(layer)
    xs = [np.random.default_rng(i).standard_normal((4, 12, 16)).astype(np.float32) for i in range(2)]
    want = [fast(x).copy() for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                assert np.array_equal(fast(xs[i]), want[i])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
