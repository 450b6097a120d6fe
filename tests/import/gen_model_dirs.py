#!/usr/bin/env python3
"""gen_model_dirs.py — notebooks 4 and 5 as whole models: the re-statements (tests/gen/notebooks.py) with seeded
random weights, imported with tools/import_torch.py into `tfm train` model directories, plus the batches and the
module's logits that tests/import/model_dir_test.cc checks tfm::load_model_dir + Model::forward against.

    /usr/bin/python3 tests/import/gen_model_dirs.py --out DIR [--only nb4|nb5|nb4_train]

Writes DIR/nb4 and DIR/nb5 (model directories) and DIR/nb4.batch.safetensors, DIR/nb5.batch.safetensors:
    src (B, S) and, for nb5, tgt_in (B, T) ids as I32 (0 = padding at the tail of each row; nb5's tgt_in starts
    with bos); expected (B, S|T, V) F64 = the module's logits in float64 on the same float32 weights; metadata
    "f32_err" = the module's own float32 relative error on them (the bound is max(2e-5, 20·f32_err)).
Notebook 5's module ends in a log-softmax; its logits here are projection_layer.proj's output, what tfm's
generator computes (the log-softmax only subtracts a per-row constant).

DIR/nb4_train (the first 50 training steps, see train_nb4): notebook 4's model with dropout 0 imported, the batches,
and the module's own loss curve under Adam(lr 5e-4) in float32 and float64 from the same initial weights, for the
training-curve check. With --check-trained, instead: DIR/trained (that model after training in tfm, written by the
test) reversed into the module, whose logits must match DIR/trained.logits.safetensors (tfm's).

It also checks, and exits 1 on failure: the reverse direction (import_torch.py reverse --model-dir) gives back the
module's state_dict bit for bit (nb5's sinusoidal buffers recomputed), and refuses a per-feature norm gain in nb5,
naming the key, in one line.
"""

import argparse
import contextlib
import copy
import io
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_notebooks as cn  # noqa: E402  (randomize, padding, rel_err, cli)
import import_torch as it  # noqa: E402
import notebooks as nb  # noqa: E402
import tfm_safetensors as st  # noqa: E402


def ids(rng, b, n, lo, hi, bos=None):
    """(B, n) ids in [lo, hi), tail-padded with 0; row 0 full length; with bos, column 0 is bos."""
    out = rng.integers(lo, hi, size=(b, n)).astype(np.int32)
    for i in range(1, b):
        out[i, rng.integers(2, n + 1):] = 0
    if bos is not None:
        out[:, 0] = bos
    return out


def logits_nb4(m, src):
    return m(src, src == 0)


def logits_nb5(m, src, tgt_in):
    src_mask, tgt_mask = nb.nb5_masks(src, tgt_in, 0)
    return m.projection_layer.proj(m.decode(m.encode(src, src_mask), src_mask, tgt_in, tgt_mask))


def module_logits(model, fn, inputs):
    outs = {}
    for name, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        m = model.to(dtype).eval()
        with torch.no_grad():
            outs[name] = fn(m, *[torch.from_numpy(x.astype(np.int64)) for x in inputs]).double().numpy()
    model.float()
    return outs["f64"], cn.rel_err(outs["f32"], outs["f64"])


def gen_nb4(out, rng, failures):
    """Notebook 4 in its experiment's configuration: d_model 16, 4 heads of width 16, FFN 512, 4 layers, 20 classes."""
    m4 = nb.NB4Model(vocab_size=20, d_model=16, num_heads=4, d_k=16, d_v=16, d_ff=512, num_layers=4, dropout=0.1,
                     max_len=64)
    cn.randomize(m4, 4)
    p4 = os.path.join(out, "nb4.pt")
    torch.save(m4.state_dict(), p4)
    rc, err = cn.cli(["import", "--map", "nb4_reverse", "--target", "model", "--input", p4, "--out",
                      os.path.join(out, "nb4"), "--set", "max_len=64"])
    if rc:
        failures.append(f"nb4 import: {err}")
    src = ids(rng, 3, 9, 1, 20)
    ref, e32 = module_logits(m4, logits_nb4, [src])
    st.save(os.path.join(out, "nb4.batch.safetensors"), [("expected", ref), ("src", src)], {"f32_err": repr(e32)})
    check_reverse(out, "nb4", "nb4_reverse", m4, failures)


def gen_nb5(out, rng, failures):
    """A small build_transformer: d_model 16, 4 heads, FFN 32, 2 + 2 layers, vocabularies 11 / 13."""
    m5 = nb.build_transformer(11, 13, 24, 24, d_model=16, N=2, h=4, dropout=0.1, d_ff=32)
    cn.randomize(m5, 5)
    p5 = os.path.join(out, "nb5.safetensors")
    st.save(p5, [(k, v.detach().float().contiguous().numpy()) for k, v in m5.state_dict().items()])
    rc, err = cn.cli(["import", "--map", "nb5_build_transformer", "--target", "model", "--input", p5, "--out",
                      os.path.join(out, "nb5"), "--set", "nhead=4"])
    if rc:
        failures.append(f"nb5 import: {err}")
    src, tgt_in = ids(rng, 3, 7, 3, 11), ids(rng, 3, 6, 3, 13, bos=1)
    ref, e32 = module_logits(m5, logits_nb5, [src, tgt_in])
    st.save(os.path.join(out, "nb5.batch.safetensors"), [("expected", ref), ("src", src), ("tgt_in", tgt_in)],
            {"f32_err": repr(e32)})
    check_reverse(out, "nb5", "nb5_build_transformer", m5, failures)
    # the refusal: a per-feature gain where the module holds one scalar
    d5 = os.path.join(out, "nb5")
    bad = os.path.join(out, "nb5_per_feature")
    os.makedirs(bad, exist_ok=True)
    for f in ("config.json", "src_vocab.txt", "tgt_vocab.txt"):
        with open(os.path.join(d5, f), "rb") as s, open(os.path.join(bad, f), "wb") as t:
            t.write(s.read())
    w, _ = st.load(os.path.join(d5, "model.safetensors"))
    key = "transformer.decoder.norm.weight"
    w[key] = w[key] * np.linspace(0.9, 1.1, w[key].size, dtype=np.float32)
    st.save(os.path.join(bad, "model.safetensors"), list(w.items()))
    rc, err = cn.cli(["reverse", "--map", "nb5_build_transformer", "--target", "model", "--model-dir", bad,
                      "--out", os.path.join(out, "refused.pt")])
    if rc == 0 or f"'{key}'" not in err or "decoder.norm.alpha" not in err or "\n" in err:
        failures.append(f"nb5 reverse of a per-feature gain: expected a one-line refusal naming {key}, got {err!r}")


def check_reverse(out, name, mapping, model, failures):
    """The model directory back into the module's state_dict, bit for bit."""
    back = os.path.join(out, name + ".back.pt")
    rc, err = cn.cli(["reverse", "--map", mapping, "--target", "model", "--model-dir", os.path.join(out, name),
                      "--out", back])
    if rc:
        failures.append(f"{name} reverse: {err}")
        return
    got, want = it.load_state(back), {k: v.float().numpy() for k, v in model.state_dict().items()}
    if set(got) != set(want):
        failures.append(f"{name} reverse: keys differ ({sorted(set(got) ^ set(want))[:4]})")
    for k in sorted(set(got) & set(want)):
        if got[k].shape != want[k].shape or not np.array_equal(got[k], want[k]):
            failures.append(f"{name} reverse: '{k}' differs from the module's")


def train_nb4(out, rng, failures, steps=50, batch=32, lr=5e-4):
    """Notebook 4's model (dropout 0) imported into DIR/nb4_train, the batches DIR/nb4_train.batches.safetensors
    (src, tgt_out (steps, B, 15) I32: the reverse task, lengths 3..15, tokens 1..19, 0 = padding, target = the
    source reversed) and the module's own Adam(lr) losses from the same initial weights, float32 and float64, in
    DIR/nb4_train.losses.json."""
    m = nb.NB4Model(vocab_size=20, d_model=16, num_heads=4, d_k=16, d_v=16, d_ff=512, num_layers=4, dropout=0.0,
                    max_len=64)
    cn.randomize(m, 44)
    p = os.path.join(out, "nb4_train.pt")
    torch.save(m.state_dict(), p)
    rc, err = cn.cli(["import", "--map", "nb4_reverse", "--target", "model", "--input", p, "--out",
                      os.path.join(out, "nb4_train"), "--set", "max_len=64", "--set", "dropout=0"])
    if rc:
        failures.append(f"nb4_train import: {err}")
    width = 15
    src = np.zeros((steps, batch, width), dtype=np.int32)
    tgt = np.zeros_like(src)
    for s in range(steps):
        for b in range(batch):
            n = int(rng.integers(3, 16))
            seq = rng.integers(1, 20, size=n)
            src[s, b, :n], tgt[s, b, :n] = seq, seq[::-1]
    st.save(os.path.join(out, "nb4_train.batches.safetensors"), [("src", src), ("tgt_out", tgt)], {"lr": repr(lr)})
    curves = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        mm = copy.deepcopy(m).to(dtype).train()
        opt = torch.optim.Adam(mm.parameters(), lr=float(np.float32(lr)))
        losses = []
        for s in range(steps):
            x, y = torch.from_numpy(src[s].astype(np.int64)), torch.from_numpy(tgt[s].astype(np.int64))
            opt.zero_grad(set_to_none=True)
            logits = mm(x, x == 0)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=0)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        curves[name] = losses
    with open(os.path.join(out, "nb4_train.losses.json"), "w") as f:
        json.dump(curves, f)


def check_trained(out):
    """OUT/trained (notebook 4's model after training in tfm) reversed into the module's state_dict and loaded
    strictly into NB4Model: its logits on OUT/trained.logits.safetensors's src, in float64, against tfm's, with the
    parity bound max(2e-5, 20·f32_err)."""
    back = os.path.join(out, "trained.back.pt")
    rc, err = cn.cli(["reverse", "--map", "nb4_reverse", "--target", "model", "--model-dir",
                      os.path.join(out, "trained"), "--out", back])
    if rc:
        print(f"FAIL reverse: {err}", file=sys.stderr)
        return 1
    m = nb.NB4Model(vocab_size=20, d_model=16, num_heads=4, d_k=16, d_v=16, d_ff=512, num_layers=4, dropout=0.0,
                    max_len=64)
    m.load_state_dict(torch.load(back), strict=True)
    t, _ = st.load(os.path.join(out, "trained.logits.safetensors"))
    src = t["src"].astype(np.int32)
    ref, e32 = module_logits(m, logits_nb4, [src])
    e, bound = cn.rel_err(t["logits"].astype(np.float64), ref), max(2e-5, 20 * e32)
    print(f"trained nb4 reversed into its module: logits rel {e:.3g}, bound {bound:.3g}", file=sys.stderr)
    return 0 if e <= bound else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=["nb4", "nb5", "nb4_train"], help="one part (default: all)")
    ap.add_argument("--check-trained", action="store_true",
                    help="instead: reverse OUT/trained into notebook 4's module and compare its logits with "
                         "OUT/trained.logits.safetensors (what tfm computed)")
    a = ap.parse_args()
    if a.check_trained:
        return check_trained(a.out)
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    failures = []
    parts = {"nb4": gen_nb4, "nb5": gen_nb5, "nb4_train": train_nb4}
    for name, fn in parts.items():
        if a.only in (None, name):
            fn(a.out, np.random.default_rng(len(name) * 7 + ord(name[-1])), failures)
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main()
    sys.exit(rc)
