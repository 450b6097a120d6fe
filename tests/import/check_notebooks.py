#!/usr/bin/env python3
"""check_notebooks.py — the five notebook re-statements (tests/gen/notebooks.py) imported with tools/import_torch.py
and run by the `tfm forward` executable, checked against the module itself in float64.

    /usr/bin/python3 tests/import/check_notebooks.py --tfm build/tfm [--only nb3] [--keep DIR]

For each case: the module is built with seeded random weights (every LayerNorm gain 1 + 0.2·N(0, 1), every bias
and shift 0.2·N(0, 1), matrices U(±sqrt(3/fan_in)), so that a wrong bias, gain or layout is visible); its
state_dict is saved (torch.save or safetensors, alternately) and imported with the mapping's target through
import_torch.py's command line; `tfm forward` runs on random inputs and a random grad_output; its output and
every gradient — parameters mapped back into the module's layout with reverse_state(grad=True), i.e. per-head
grads reassembled into (H, D, Dh), a broadcast scalar's gradient summed, a shared layer's gradient under every
index — are compared with the module's, run in float64 on the same float32 weights and inputs.

Bound: the parity suite's (tests/parity/README.md). rel = max|tfm − ref| / max|ref| (1 when ref is all zeros) must
be <= max(2e-5, 20·f32_err), f32_err being the same measure for the module's own float32 run.

Also per case: the reverse direction (import_torch.py reverse) gives back the source state_dict bit for bit; and the
error paths: a per-feature gain refused on reverse naming the key, a missing and a misshapen source tensor.
Where torch.nn has the model (notebook 1's layer and encoder, notebook 3's block with a zero qkv bias), the
re-statement itself is checked against torch.nn to 1e-9 first.

Exit status 0 when every case passes, 1 otherwise, 77 when torch is missing (ctest SKIP_RETURN_CODE).
"""

import argparse
import contextlib
import copy
import fnmatch
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError:
    print("torch or numpy missing: skipped")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import import_torch as it  # noqa: E402
import notebooks as nb  # noqa: E402
import tfm_safetensors as st  # noqa: E402


# ---------------------------------------------------------------------------------------------------------------
# Weights and inputs

def randomize(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() == 1:
                if leaf in ("weight", "alpha", "gamma") and "norm" in name:
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.2 * torch.randn(p.shape, generator=g))
                continue
            if leaf in ("Wq", "Wk", "Wv"):
                fan_in = p.shape[1]
            elif leaf == "Wo":
                fan_in = p.shape[0]
            else:
                fan_in = p.shape[-1]
            a = math.sqrt(3.0 / fan_in)
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * a)


def padding(rng, b, n, full_row=0):
    """(B, n) bool, True at padded positions (the tail of each row); row full_row is never padded."""
    kpm = np.zeros((b, n), dtype=bool)
    for i in range(b):
        if i != full_row:
            kpm[i, rng.integers(1, n + 1):] = True
    return kpm


def attn_mask(rng, n, kind, kpm):
    """(n, n) mask (bool True = blocked, or float with −inf) redrawn until no query row is fully blocked with kpm."""
    for _ in range(200):
        blocked = rng.random((n, n)) < 0.25
        dead = blocked[None] | (kpm[:, None, :] if kpm is not None else False)
        if not dead.all(axis=-1).any():
            break
    if kind == "bool":
        return blocked
    v = rng.standard_normal((n, n)).astype(np.float32)
    v[blocked] = -np.inf
    return v


# ---------------------------------------------------------------------------------------------------------------
# Cases. Each: the module, how it is called, which mapping target, and tfm forward's inputs.

class Case:
    def __init__(self, name, mapping, target, module, call, inputs, differentiable, overrides=None, fmt="pt",
                 nn_twin=None, broadcast_key=None):
        self.name, self.mapping, self.target, self.module = name, mapping, target, module
        self.call = call                    # (module, {name: tensor}) → output
        self.inputs = inputs                # tfm forward inputs, numpy (masks bool / float, flags 0-dim bool)
        self.differentiable = differentiable
        self.overrides = overrides or {}
        self.fmt = fmt                      # how the state_dict is stored: "pt" (torch.save) or "safetensors"
        self.nn_twin = nn_twin              # optional (torch.nn module builder, call) checked against the module
        self.broadcast_key = broadcast_key  # a tfm key holding a broadcast scalar (for the refusal check)


def _seq(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def nb1_cases():
    out = []
    for norm_first in (True, False):
        tag = "pre" if norm_first else "post"
        rng = np.random.default_rng(11 + norm_first)
        layer = nb.NB1EncoderLayer(4, 2, 64, 0.2, "gelu", batch_first=True, norm_first=norm_first)
        randomize(layer, 1 + norm_first)
        b, n = 3, 5
        kpm = padding(rng, b, n)
        x = {"src": _seq(rng, b, n, 4), "src_mask": attn_mask(rng, n, "bool" if norm_first else "float", kpm),
             "src_key_padding_mask": kpm}
        out.append(Case(f"nb1_layer_{tag}", "nb1_transformer_layer", "layer", layer,
                        lambda m, t: m(t["src"], t.get("src_mask"), t.get("src_key_padding_mask")), x, ["src"],
                        {"nhead": 2, "norm_first": norm_first}, "pt" if norm_first else "safetensors"))
        # the notebook's own test: 3 layers sharing one instance, pre-norm, no final norm; post-norm with a final
        # norm and masks
        layer = nb.NB1EncoderLayer(4, 2, 64, 0.2, "gelu", batch_first=True, norm_first=norm_first)
        enc = nb.NB1Encoder(layer, 3, None if norm_first else nn.LayerNorm(4))
        randomize(enc, 3 + norm_first)
        x = {"src": _seq(rng, 2, 5, 4)}
        if not norm_first:
            kpm = padding(rng, 2, 5)
            x.update({"mask": attn_mask(rng, 5, "bool", kpm), "src_key_padding_mask": kpm})
        out.append(Case(f"nb1_encoder_shared_{tag}", "nb1_transformer_layer", "encoder", enc,
                        lambda m, t: m(t["src"], t.get("mask"), t.get("src_key_padding_mask")), x, ["src"],
                        {"nhead": 2, "norm_first": norm_first}, "safetensors" if norm_first else "pt",
                        nn_twin=nb1_twin(norm_first, 3, not norm_first)))
    return out


def nb1_twin(norm_first, n_layers, final_norm):
    """nn.TransformerEncoder with each (deep-copied) layer loaded from the one shared layer."""
    def build(module):
        layer = nn.TransformerEncoderLayer(4, 2, 64, 0.2, activation="gelu", batch_first=True, norm_first=norm_first)
        enc = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(4) if final_norm else None,
                                    enable_nested_tensor=False)
        sd = module.state_dict()
        ren = {"block1.0.mha.": "self_attn.", "block2.0.": "linear1.", "block2.3.": "linear2."}
        new = {}
        for k, v in sd.items():
            for a, b in ren.items():
                k = k.replace(a, b)
            new[k] = v
        enc.load_state_dict(new, strict=True)
        return enc

    def call(m, t):
        return m(t["src"], mask=t.get("mask"), src_key_padding_mask=t.get("src_key_padding_mask"))
    return build, call


def nb2_cases():
    out = []
    for kind in ("bool", "float"):
        rng = np.random.default_rng(21 if kind == "bool" else 22)
        layer = nb.NB2EncoderLayer(512, 1, 1024, 0.1)
        randomize(layer, 21)
        b, n = 2, 4
        kpm = padding(rng, b, n)
        x = {"src": _seq(rng, b, n, 512), "src_mask": attn_mask(rng, n, kind, kpm), "src_key_padding_mask": kpm}
        out.append(Case(f"nb2_layer_mask_{kind}", "nb2_deeper_look", "layer", layer,
                        lambda m, t: m(t["src"], t.get("src_mask"), t.get("src_key_padding_mask")), x, ["src"],
                        {"nhead": 1}, "pt" if kind == "bool" else "safetensors"))
    return out


def nb3_cases():
    out = []
    for qkv_bias, qk_scale in ((False, None), (True, 0.3)):
        rng = np.random.default_rng(31 + qkv_bias)
        block = nb.NB3Block(32, 8, qkv_bias=qkv_bias, qk_scale=qk_scale, drop=0.1, attn_drop=0.1, drop_path=0.1)
        randomize(block, 31 + qkv_bias)
        x = {"src": _seq(rng, 2, 6, 32)}
        over = {"nhead": 8, "drop_path": 0.1}  # stochastic depth: training only, so the eval output ignores it
        if qk_scale is not None:
            over["attn_scale"] = qk_scale
        twin = None if qkv_bias else nb3_twin()
        out.append(Case("nb3_block" + ("_qkv_bias_scale" if qkv_bias else ""), "nb3_vit_block", "layer", block,
                        lambda m, t: m(t["src"]), x, ["src"], over, "safetensors" if qkv_bias else "pt",
                        nn_twin=twin))
    return out


def nb3_twin():
    """nn.TransformerEncoderLayer (pre-norm, GELU) with a zero in_proj_bias: the default block has no qkv bias."""
    def build(module):
        layer = nn.TransformerEncoderLayer(32, 8, 128, 0.1, activation="gelu", batch_first=True, norm_first=True)
        sd = module.state_dict()
        new = {"self_attn.in_proj_weight": sd["attn.qkv.weight"],
               "self_attn.in_proj_bias": torch.zeros(96, dtype=sd["attn.qkv.weight"].dtype),
               "self_attn.out_proj.weight": sd["attn.proj.weight"], "self_attn.out_proj.bias": sd["attn.proj.bias"],
               "linear1.weight": sd["mlp.fc1.weight"], "linear1.bias": sd["mlp.fc1.bias"],
               "linear2.weight": sd["mlp.fc2.weight"], "linear2.bias": sd["mlp.fc2.bias"]}
        for k in ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"):
            new[k] = sd[k]
        layer.load_state_dict(new, strict=True)
        return layer
    return build, lambda m, t: m(t["src"])


def nb4_cases():
    rng = np.random.default_rng(41)
    layer = nb.NB4EncoderLayer(16, 4, 16, 16, 512, 0.1)
    randomize(layer, 41)
    b, n = 3, 7
    kpm = padding(rng, b, n)
    x = {"src": _seq(rng, b, n, 16), "src_key_padding_mask": kpm}
    out = [Case("nb4_layer", "nb4_reverse", "layer", layer, lambda m, t: m(t["src"], t.get("src_key_padding_mask")),
                x, ["src"], {}, "pt")]
    enc = nb.NB4Encoder(4, d_model=16, num_heads=4, d_k=16, d_v=8, d_ff=64)
    randomize(enc, 42)
    kpm = padding(rng, 2, 6)
    x = {"src": _seq(rng, 2, 6, 16), "src_key_padding_mask": kpm}
    out.append(Case("nb4_encoder_dv8", "nb4_reverse", "encoder", enc,
                    lambda m, t: m(t["src"], t.get("src_key_padding_mask")), x, ["src"], {}, "safetensors"))
    return out


def nb5_cases():
    rng = np.random.default_rng(51)
    model = nb.build_transformer(11, 13, 20, 20, d_model=16, N=2, h=4, dropout=0.1, d_ff=32)
    randomize(model, 51)
    b, s, t = 3, 6, 5
    skpm, tkpm = padding(rng, b, s), padding(rng, b, t, full_row=1)
    causal = np.triu(np.ones((t, t), dtype=bool), 1)

    def keep(kpm, causal_mask=None):
        k = torch.from_numpy(~kpm)[:, None, None, :]
        if causal_mask is not None:
            k = k & torch.from_numpy(~causal_mask)[None, None]
        return k.int()

    src_mask, tgt_mask = keep(skpm), keep(tkpm, causal)
    out = [
        Case("nb5_encoder", "nb5_build_transformer", "encoder", model,
             lambda m, x: m.encoder(x["src"], src_mask),
             {"src": _seq(rng, b, s, 16), "src_key_padding_mask": skpm}, ["src"], {"nhead": 4}, "pt",
             broadcast_key="layers.0.norm1.weight"),
        Case("nb5_decoder", "nb5_build_transformer", "decoder", model,
             lambda m, x: m.decoder(x["tgt"], x["memory"], src_mask, tgt_mask),
             {"tgt": _seq(rng, b, t, 16), "memory": _seq(rng, b, s, 16), "tgt_key_padding_mask": tkpm,
              "memory_key_padding_mask": skpm, "tgt_is_causal": np.array(True)}, ["tgt", "memory"],
             {"nhead": 4}, "safetensors", broadcast_key="norm.bias"),
        Case("nb5_transformer", "nb5_build_transformer", "transformer", model,
             lambda m, x: m.decoder(x["tgt"], m.encoder(x["src"], src_mask), src_mask, tgt_mask),
             {"src": _seq(rng, b, s, 16), "tgt": _seq(rng, b, t, 16), "src_key_padding_mask": skpm,
              "tgt_key_padding_mask": tkpm, "memory_key_padding_mask": skpm, "tgt_is_causal": np.array(True)},
             ["src", "tgt"], {"nhead": 4}, "pt", broadcast_key="decoder.layers.1.norm3.weight"),
    ]
    return out


CASES = {"nb1": nb1_cases, "nb2": nb2_cases, "nb3": nb3_cases, "nb4": nb4_cases, "nb5": nb5_cases}


# ---------------------------------------------------------------------------------------------------------------
# Running and comparing

def torch_inputs(inputs, dtype, differentiable):
    t = {}
    for k, v in inputs.items():
        if v.dtype == np.bool_ and v.ndim == 0:
            continue  # causal flags: the module's masks already say it
        if v.dtype == np.bool_:
            t[k] = torch.from_numpy(v.copy())
        else:
            t[k] = torch.from_numpy(v.copy()).to(dtype).requires_grad_(k in differentiable)
    return t


def run_module(case, dtype, grad_output):
    """Output and gradients of sum(output ⊙ grad_output), by state_dict key and 'grad.<input>'."""
    m = copy.deepcopy(case.module).to(dtype).eval()  # deepcopy keeps the shared layer shared
    x = torch_inputs(case.inputs, dtype, case.differentiable)
    y = case.call(m, x)
    (y * torch.from_numpy(grad_output).to(dtype)).sum().backward()
    res = {"output": y.detach().double().numpy()}
    for k, p in m.state_dict(keep_vars=True).items():
        if isinstance(p, nn.Parameter):
            res["grad." + k] = (p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().numpy()
    for k in case.differentiable:
        res["grad." + k] = x[k].grad.detach().double().numpy()
    return res


def rel_err(a, ref):
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return float(np.max(np.abs(a - ref))) / (scale if scale > 0 else 1.0) if ref.size else 0.0


def cli(args):
    """import_torch.py's command line in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = it.main(args)
    return rc, err.getvalue().strip()


def set_arg(key, value):
    """KEY=VALUE of import_torch.py's --set (its value JSON)."""
    return f"{key}={json.dumps(value)}"


def save_source(case, path):
    sd = case.module.state_dict()
    if case.fmt == "pt":
        torch.save(sd, path)
    else:
        st.save(path, [(k, v.detach().float().contiguous().numpy()) for k, v in sd.items()])


def check_case(case, tfm, work):
    failures = []
    d = os.path.join(work, case.name)
    os.makedirs(d, exist_ok=True)
    src_path = os.path.join(d, "module." + ("pt" if case.fmt == "pt" else "safetensors"))
    save_source(case, src_path)
    sets = [a for k, v in case.overrides.items() for a in ("--set", set_arg(k, v))]
    prefix = os.path.join(d, "tfm")
    rc, err = cli(["import", "--map", case.mapping, "--target", case.target, "--input", src_path, "--out", prefix]
                  + sets)
    if rc != 0:
        return [f"import failed: {err}"]

    # the torch.nn twin, where torch.nn has the model
    if case.nn_twin is not None:
        build, call = case.nn_twin
        m64 = copy.deepcopy(case.module).double().eval()
        twin = build(m64).double().eval()
        xt = torch_inputs(case.inputs, torch.float64, ())
        with torch.no_grad():
            e = rel_err(call(twin, xt).numpy(), case.call(m64, xt).numpy())
        if e > 1e-9:
            failures.append(f"re-statement differs from torch.nn by {e:.3g}")

    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    with torch.no_grad():
        probe = case.call(copy.deepcopy(case.module).eval(), torch_inputs(case.inputs, torch.float32, ()))
    grad_output = rng.standard_normal(tuple(probe.shape)).astype(np.float32)
    ref = run_module(case, torch.float64, grad_output)
    f32 = run_module(case, torch.float32, grad_output)
    ignore = it.load_mapping(case.mapping)["targets"][case.target].get("ignore", [])
    for k in [k for k in ref if k.startswith("grad.") and any(fnmatch.fnmatchcase(k[5:], g) for g in ignore)]:
        del ref[k]  # parts of the module outside the imported target (e.g. nb5's embeddings for its encoder)

    inputs = dict(case.inputs)
    inputs["grad_output"] = grad_output
    in_path, out_path = os.path.join(d, "inputs.safetensors"), os.path.join(d, "out.safetensors")
    st.save(in_path, sorted(inputs.items(), key=lambda kv: -kv[1].dtype.itemsize))
    p = subprocess.run([tfm, "forward", "--config", prefix + ".json", "--weights", prefix + ".safetensors",
                        "--inputs", in_path, "--output", out_path], capture_output=True, text=True)
    if p.returncode != 0:
        return failures + [f"tfm forward failed: {p.stderr.strip()}"]
    got, _ = st.load(out_path)
    with open(prefix + ".json") as f:
        config = json.load(f)
    param_grads = {k[5:]: v.astype(np.float64) for k, v in got.items()
                   if k.startswith("grad.") and k[5:] not in case.differentiable}
    mapped = {"output": got["output"].astype(np.float64)}
    try:
        back = it.reverse_state(it.load_mapping(case.mapping), case.target, config, param_grads, grad=True,
                                overrides=case.overrides)
    except it.MappingError as e:
        return failures + [f"mapping the gradients back: {e}"]
    mapped.update({"grad." + k: v for k, v in back.items()})
    mapped.update({"grad." + k: got["grad." + k].astype(np.float64) for k in case.differentiable})
    worst = (0.0, "")
    for k, r in ref.items():
        if k not in mapped:
            failures.append(f"{k}: tfm gave no such tensor")
            continue
        if mapped[k].shape != r.shape:
            failures.append(f"{k}: shape {mapped[k].shape} vs module {r.shape}")
            continue
        e, bound = rel_err(mapped[k], r), max(2e-5, 20 * rel_err(f32[k], r))
        worst = max(worst, (e / bound, k))
        if not e <= bound:
            idx = np.unravel_index(np.argmax(np.abs(mapped[k] - r)), r.shape)
            failures.append(f"{k}: rel {e:.3g} > bound {bound:.3g} (at {idx}: tfm {mapped[k][idx]:.8g}, "
                            f"module {r[idx]:.8g})")
    extra = set(mapped) - set(ref)
    if extra:
        failures.append(f"tfm tensors with no module counterpart: {sorted(extra)}")

    # reverse: the tfm weights back into the module's state_dict, bit for bit (given the settings import was given)
    back_path = os.path.join(d, "back." + ("safetensors" if case.fmt == "pt" else "pt"))
    rc, err = cli(["reverse", "--map", case.mapping, "--target", case.target, "--config", prefix + ".json",
                   "--weights", prefix + ".safetensors", "--out", back_path] + sets)
    # and without a setting that differs from the target's config: refused, naming it
    t = it.load_mapping(case.mapping)["targets"][case.target]
    free = set(t.get("infer", {})) | set(t.get("required", [])) | it._UNCOMPARED
    for k, v in case.overrides.items():
        if k in free or t.get("config", {}).get(k, None) == v:
            continue
        sets_but = [a for k2, v2 in case.overrides.items() if k2 != k for a in ("--set", set_arg(k2, v2))]
        rc2, err2 = cli(["reverse", "--map", case.mapping, "--target", case.target, "--config", prefix + ".json",
                         "--weights", prefix + ".safetensors", "--out", os.path.join(d, "refused.pt")] + sets_but)
        if rc2 == 0 or f": {k} is " not in err2 or "\n" in err2:
            failures.append(f"reverse without --set {k}: expected a one-line refusal naming {k}, got rc {rc2}: "
                            f"{err2!r}")
    if rc != 0:
        failures.append(f"reverse failed: {err}")
    else:
        back_sd, orig = it.load_state(back_path), case.module.state_dict()
        t = it.load_mapping(case.mapping)["targets"][case.target]
        want = {k: v.float().numpy() for k, v in orig.items()
                if not any(fnmatch.fnmatchcase(k, g) for g in t.get("ignore", []))}
        if set(back_sd) != set(want):
            failures.append(f"reverse keys differ: missing {sorted(set(want) - set(back_sd))[:3]}, "
                            f"extra {sorted(set(back_sd) - set(want))[:3]}")
        else:
            for k, v in want.items():
                if back_sd[k].shape != v.shape or not np.array_equal(back_sd[k], v):
                    failures.append(f"reverse '{k}' differs from the source")
                    break
    # the refusal: a per-feature gain where the module holds one scalar
    if case.broadcast_key:
        w, _ = st.load(prefix + ".safetensors")
        w = dict(w)
        w[case.broadcast_key] = w[case.broadcast_key] + np.linspace(0, 0.1, w[case.broadcast_key].size,
                                                                   dtype=np.float32)
        bad = os.path.join(d, "per_feature.safetensors")
        st.save(bad, list(w.items()))
        rc, err = cli(["reverse", "--map", case.mapping, "--target", case.target, "--config", prefix + ".json",
                       "--weights", bad, "--out", os.path.join(d, "refused.pt")])
        if rc == 0 or f"'{case.broadcast_key}'" not in err or "\n" in err:
            failures.append(f"reverse of a per-feature '{case.broadcast_key}' was not refused in one line naming it: "
                            f"rc {rc}, {err!r}")
    print(f"{case.name:28s} {'FAIL' if failures else 'ok':4s} worst rel/bound {worst[0]:.3g} ({worst[1]})")
    return failures


def check_errors(work):
    """Missing, misshapen and unmapped source tensors, a value only --set can give: one-line errors naming the
    key. And the vocabularies of a model_dir target."""
    failures = []
    enc = nb.NB4EncoderLayer(8, 2, 4, 4, 16)
    sd = {k: v.detach().numpy() for k, v in enc.state_dict().items()}
    cases = [
        ({k: v for k, v in sd.items() if k != "ffn.3.weight"}, "'ffn.3.weight'"),
        ({**sd, "attn.Wk": sd["attn.Wk"][0]}, "'attn.Wk'"),
        ({**sd, "extra.weight": sd["ffn.0.bias"]}, "'extra.weight'"),
    ]
    for i, (bad, needle) in enumerate(cases):
        path = os.path.join(work, f"bad{i}.safetensors")
        st.save(path, list(bad.items()))
        rc, err = cli(["import", "--map", "nb4_reverse", "--target", "layer", "--input", path,
                       "--out", os.path.join(work, f"bad{i}")])
        if rc == 0 or needle not in err or "\n" in err:
            failures.append(f"bad source {i}: expected a one-line error naming {needle}, got rc {rc}: {err!r}")
    path = os.path.join(work, "vit.safetensors")
    st.save(path, [(k, v.detach().numpy()) for k, v in nb.NB3Block(16, 4).state_dict().items()])
    rc, err = cli(["import", "--map", "nb3_vit_block", "--input", path, "--out", os.path.join(work, "x")])
    if rc == 0 or "--set nhead=" not in err or "\n" in err:
        failures.append(f"nb3 without --set nhead: {err!r}")
    # model_dir vocabularies: given as files (checked against the embedding's rows), or spelled from the ids
    m4 = nb.NB4Model(vocab_size=6, d_model=8, num_heads=2, d_k=4, d_v=4, d_ff=16, num_layers=1)
    path = os.path.join(work, "nb4_small.pt")
    torch.save(m4.state_dict(), path)
    vocab = os.path.join(work, "vocab.txt")
    for tokens, ok in ((["<pad>", "a", "b", "c", "d", "e"], True), (["<pad>", "a"], False)):
        with open(vocab, "w") as f:
            f.write("".join(t + "\n" for t in tokens))
        out = os.path.join(work, "nb4_small")
        rc, err = cli(["import", "--map", "nb4_reverse", "--target", "model", "--input", path, "--out", out,
                       "--src-vocab", vocab, "--tgt-vocab", vocab])
        if ok:
            with open(os.path.join(out, "src_vocab.txt")) as f:
                got = f.read().split("\n")[:-1]
            with open(os.path.join(out, "tgt_vocab.txt")) as f:
                if rc != 0 or got != tokens or f.read().split("\n")[:-1] != tokens:
                    failures.append(f"--src-vocab/--tgt-vocab not written as given: rc {rc} {err!r}")
        elif rc == 0 or "vocab.txt: 2 tokens" not in err:
            failures.append(f"a vocabulary file of the wrong size: expected an error naming it, got {err!r}")
    rc, err = cli(["import", "--map", "nb4_reverse", "--target", "model", "--input", path, "--out",
                   os.path.join(work, "nb4_ids")])
    with open(os.path.join(work, "nb4_ids", "src_vocab.txt")) as f:
        if rc != 0 or f.read().split() != ["<pad>", "1", "2", "3", "4", "5"]:
            failures.append(f"default vocabulary: expected <pad> then the ids spelled out ({err!r})")
    print(f"{'errors':28s} {'FAIL' if failures else 'ok'}")
    return failures


def check_reverse_config(work):
    """reverse refuses a tfm model whose config the module does not compute with (the target's "config", or tfm's
    default where the target leaves a key unset), in one line naming the config file, the key, the model's value and
    the mapping's; shared layers against per-layer keys and back. A model with the module's settings, and one that
    differs only where the numbers do not (dropout, drop_path, bos_id, eos_id, max_len), exports bit for bit; a
    --set stating the module's own setting is taken, as on import."""
    failures = []

    def imported(mapping, target, module, name, sets=()):
        path = os.path.join(work, name + ".pt")
        torch.save(module.state_dict(), path)
        rc, err = cli(["import", "--map", mapping, "--target", target, "--input", path, "--out",
                       os.path.join(work, name)] + list(sets))
        if rc != 0:
            raise RuntimeError(f"{name}: import failed: {err}")
        return module.state_dict()

    def edited(src, dst, changes, model_dir, drop=()):
        """A copy of the tfm module src (a model directory or a forward prefix) with its config changed and the
        tensors whose keys start with one of `drop` removed."""
        cfg_in, w_in = ((os.path.join(src, "config.json"), os.path.join(src, "model.safetensors")) if model_dir
                        else (src + ".json", src + ".safetensors"))
        if model_dir:
            os.makedirs(dst, exist_ok=True)
        cfg_out, w_out = ((os.path.join(dst, "config.json"), os.path.join(dst, "model.safetensors")) if model_dir
                          else (dst + ".json", dst + ".safetensors"))
        with open(cfg_in) as f:
            doc = json.load(f)
        (doc["model"] if model_dir else doc).update(changes)
        with open(cfg_out, "w") as f:
            json.dump(doc, f)
        w, _ = st.load(w_in)
        st.save(w_out, [(k, v) for k, v in dict(w).items() if not k.startswith(tuple(drop))])
        return ["--model-dir", dst] if model_dir else ["--config", cfg_out, "--weights", w_out]

    def reverse(mapping, target, args, name, sets=()):
        out = os.path.join(work, name + ".back.pt")
        rc, err = cli(["reverse", "--map", mapping, "--target", target, "--out", out] + args + list(sets))
        return rc, err, out

    def expect_refused(mapping, target, args, name, needles):
        rc, err, _ = reverse(mapping, target, args, name)
        if rc == 0 or "\n" in err or not all(n in err for n in needles):
            failures.append(f"reverse of {name}: expected a one-line refusal naming {needles}, got rc {rc}: {err!r}")

    def expect_bitwise(mapping, target, args, name, want, sets=()):
        rc, err, out = reverse(mapping, target, args, name, sets)
        if rc != 0:
            failures.append(f"reverse of {name} failed: {err}")
            return
        got = it.load_state(out)
        if set(got) != set(want) or any(not np.array_equal(got[k], v.float().numpy()) for k, v in want.items()):
            failures.append(f"reverse of {name} does not give back the module's state_dict")

    # notebook 4's whole model (model_dir): post-norm, ReLU, unscaled embeddings, sinusoidal positions, pad id 0,
    # Dk = 4 (scale 0.5), one weight set per layer
    m4 = nb.NB4Model(vocab_size=9, d_model=8, num_heads=2, d_k=4, d_v=4, d_ff=16, num_layers=2)
    randomize(m4, 61)
    want = imported("nb4_reverse", "model", m4, "cfg_nb4")
    base = os.path.join(work, "cfg_nb4")
    expect_bitwise("nb4_reverse", "model", ["--model-dir", base], "cfg_nb4", want)
    same = {"dropout": 0.3, "drop_path": 0.2, "bos_id": 7, "eos_id": 8, "max_len": 33}
    expect_bitwise("nb4_reverse", "model", edited(base, base + "_same", same, True), "cfg_nb4_same", want)
    cfg = os.path.join(base + "_x", "config.json") + ": "
    for changes, needles, drop in (
            ({"activation": "gelu"}, ['activation is "gelu"', 'fixes "relu"'], ()),
            ({"activation": "swiglu"}, ['activation is "swiglu"', 'fixes "relu"'], ()),
            ({"attn_scale": 0.3}, ["attn_scale is 0.3", "tfm's default, 0.5"], ()),
            ({"scale_embeddings": True}, ["scale_embeddings is true", "fixes false"], ()),
            ({"positional": "none"}, ['positional is "none"', 'fixes "sinusoidal"'], ()),
            ({"norm_first": True}, ["norm_first is true", "fixes false"], ()),
            ({"norm_type": "rms_norm", "norm_bias": None}, ['norm_type is "rms_norm"', '"layer_norm"'], ()),
            ({"layer_norm_eps": 1e-6}, ["layer_norm_eps is 1e-06", "1e-05"], ()),
            ({"pad_id": 3}, ["pad_id is 3", "fixes 0"], ()),
            ({"share_layers": True}, ["share_layers is true", "'layers.{i}.'"], ("encoder.layers.1.",))):
        args = edited(base, base + "_x", changes, True, drop)
        expect_refused("nb4_reverse", "model", args, "cfg_nb4_" + "_".join(changes), [cfg] + needles)
    # a --set that states the module's own setting is taken (here a module built with GELU: the mapping cannot tell)
    args = edited(base, base + "_x", {"activation": "gelu"}, True)
    expect_bitwise("nb4_reverse", "model", args, "cfg_nb4_set", want, ["--set", "activation=gelu"])

    # forward targets: notebook 3's block (pre-norm, GELU), notebook 4's stack (no final norm, per-layer),
    # notebook 1's encoder (one layer instance repeated)
    vit = nb.NB3Block(16, 4)
    want = imported("nb3_vit_block", "layer", vit, "cfg_vit", ["--set", "nhead=4"])
    base = os.path.join(work, "cfg_vit")
    args = edited(base, base + "_post", {"norm_first": False, "activation": "relu"}, False)
    expect_refused("nb3_vit_block", "layer", args, "cfg_vit_post", [base + "_post.json: ", 'activation is "relu"',
                                                                   'fixes "gelu"'])
    expect_refused("nb3_vit_block", "layer", args + ["--set", "activation=relu"], "cfg_vit_post",
                   ["norm_first is false", "fixes true"])
    args = edited(base, base + "_as", {"attn_scale": 0.3}, False)
    expect_refused("nb3_vit_block", "layer", args, "cfg_vit_as", ["attn_scale is 0.3", "default, 0.5"])
    expect_bitwise("nb3_vit_block", "layer", ["--config", base + ".json", "--weights", base + ".safetensors"],
                   "cfg_vit", want)
    enc = nb.NB4Encoder(2, d_model=8, num_heads=2, d_k=4, d_v=4, d_ff=16)
    randomize(enc, 62)
    imported("nb4_reverse", "encoder", enc, "cfg_enc4")
    base = os.path.join(work, "cfg_enc4")
    expect_refused("nb4_reverse", "encoder", edited(base, base + "_sh", {"share_layers": True}, False,
                                                    ("layers.1.",)), "cfg_enc4_sh", ["share_layers is true"])
    expect_refused("nb4_reverse", "encoder", edited(base, base + "_norm", {"norm": True}, False), "cfg_enc4_norm",
                   ["norm is true", "fixes false"])
    enc1 = nb.NB1Encoder(nb.NB1EncoderLayer(4, 2, 64, 0.2, "gelu", batch_first=True, norm_first=True), 3)
    randomize(enc1, 63)
    want = imported("nb1_transformer_layer", "encoder", enc1, "cfg_enc1", ["--set", "nhead=2"])
    base = os.path.join(work, "cfg_enc1")
    expect_bitwise("nb1_transformer_layer", "encoder", ["--config", base + ".json", "--weights",
                                                        base + ".safetensors"], "cfg_enc1", want)
    expect_refused("nb1_transformer_layer", "encoder", edited(base, base + "_sep", {"share_layers": False}, False),
                   "cfg_enc1_sep", ["share_layers is false", "one layer instance"])
    print(f"{'reverse config':28s} {'FAIL' if failures else 'ok'}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tfm", required=True, help="the tfm executable")
    ap.add_argument("--only", default="", help="comma-separated notebooks (nb1..nb5) or 'errors'")
    ap.add_argument("--keep", help="keep the files in this directory")
    a = ap.parse_args()
    torch.set_num_threads(1)
    only = set(filter(None, a.only.split(",")))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        work = a.keep or tmp
        os.makedirs(work, exist_ok=True)
        for name, make in CASES.items():
            if only and name not in only:
                continue
            for case in make():
                failures += [f"{case.name}: {f}" for f in check_case(case, a.tfm, work)]
        if not only or "errors" in only:
            failures += check_errors(work)
            failures += check_reverse_config(work)
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
