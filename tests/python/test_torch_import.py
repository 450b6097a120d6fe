"""tools/import_torch.py import (python/tfm/torch_import.py, the code tfm.from_torch(mapping=...) runs too): a source
tensor whose shape is not the one the config gives its tfm tensor — misshapen, transposed, or the very tensor a config
value is read from — is a one-line error naming it, its tfm key, its shape and the shape expected, before anything is
written; and the weights are floating point and within Float32's range, as `tfm forward` requires of its weights."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import import_torch as it  # noqa: E402
import notebooks as nb  # noqa: E402
import tfm_safetensors as st  # noqa: E402

TOOL = os.path.join(ROOT, "tools", "import_torch.py")


def state(module, seed=0):
    torch.manual_seed(seed)
    for p in module.parameters():
        torch.nn.init.normal_(p.data)
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def refused(mapping, target, sd, overrides=None):
    with pytest.raises(it.MappingError) as e:
        it.import_state(it.load_mapping(mapping), target, sd, overrides or {})
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def nb3():
    return state(nb.NB3Block(16, 4, qkv_bias=True), 1)  # D 16, F 64


def test_misshapen_tensor_named_with_its_tfm_key_and_both_shapes():
    sd = nb3()
    msg = refused("nb3_vit_block", "layer", {**sd, "attn.proj.weight": sd["attn.proj.weight"][:, :8].copy()},
                  {"nhead": 4})
    assert msg == ("source 'attn.proj.weight' (for tfm 'self_attn.out_proj.weight'): shape (16, 8), expected (16, 16) "
                   "(d_model 16, nhead 4, v_head_dim 4)")
    msg = refused("nb3_vit_block", "layer", {**sd, "mlp.fc2.bias": sd["mlp.fc2.bias"][None]}, {"nhead": 4})
    assert msg.startswith("source 'mlp.fc2.bias' (for tfm 'linear2.bias'): shape (1, 16), expected (16,)")


def test_tensor_a_config_value_is_read_from_is_checked_against_the_others():
    # dim_feedforward is read off mlp.fc1.weight's dimension 0: transposed, it said 16, and the import blamed
    # nothing (tfm forward then blamed linear1.weight against (16, 16)). mlp.fc1.bias and mlp.fc2.weight carry 64.
    sd = nb3()
    msg = refused("nb3_vit_block", "layer", {**sd, "mlp.fc1.weight": sd["mlp.fc1.weight"].T.copy()}, {"nhead": 4})
    assert msg.startswith("source 'mlp.fc1.weight' (for tfm 'linear1.weight'): shape (16, 64), expected (64, 16) "
                          "(dim_feedforward 64, as 'mlp.fc1.bias', 'mlp.fc2.weight' have it"), msg
    # d_model is read off norm1.weight: cut short, it is the one named, not the tensors that are right.
    msg = refused("nb3_vit_block", "layer", {**sd, "norm1.weight": sd["norm1.weight"][:15].copy()}, {"nhead": 4})
    assert msg.startswith("source 'norm1.weight' (for tfm 'norm1.weight'): shape (15,), expected (16,) "
                          "(d_model 16"), msg
    # The same for a value --set gives: checked against it.
    msg = refused("nb3_vit_block", "layer", sd, {"nhead": 4, "dim_feedforward": 32})
    assert msg.startswith("source 'mlp.fc1.weight' (for tfm 'linear1.weight'): shape (64, 16), expected (32, 16) "
                          "(dim_feedforward 32, d_model 16)"), msg


def test_every_rule_kind_checks_its_sources():
    # per-head (H, D, Dh) tensors: Wq transposed on its first and last axes (H and Dh read off Wq)
    sd = state(nb.NB4EncoderLayer(16, 4, 8, 8, 32), 2)
    msg = refused("nb4_reverse", "layer", {**sd, "attn.Wq": np.ascontiguousarray(sd["attn.Wq"].transpose(2, 1, 0))})
    assert msg.startswith("source 'attn.Wq' (for tfm 'self_attn.in_proj_weight'): shape (8, 16, 4), expected "
                          "(4, 16, 8)"), msg
    # a transposed rule (Wo (H·Dv, D) → out_proj.weight (D, H·Dv)), given untransposed
    msg = refused("nb4_reverse", "layer", {**sd, "attn.Wo": sd["attn.Wo"].T.copy()})
    assert msg.startswith("source 'attn.Wo' (for tfm 'self_attn.out_proj.weight'): shape (16, 32), expected (32, 16)")
    # q, k, v Linear weights stacked into in_proj_weight
    model = nb.build_transformer(11, 13, 20, 20, d_model=16, N=1, h=4, dropout=0.0, d_ff=32)
    sd5 = state(model, 3)
    key = "encoder.layers.0.self_attention_block.w_k.weight"
    msg = refused("nb5_build_transformer", "encoder", {**sd5, key: sd5[key][:12].copy()}, {"nhead": 4})
    assert msg.startswith(f"source '{key}' (for tfm 'layers.0.self_attn.in_proj_weight'): shape (12, 16), expected "
                          "(16, 16)"), msg
    # a (1,) gain broadcast to the width
    key = "encoder.layers.0.residual_connections.0.norm.alpha"
    msg = refused("nb5_build_transformer", "encoder", {**sd5, key: np.ones(16, np.float32)}, {"nhead": 4})
    assert msg.startswith(f"source '{key}' (for tfm 'layers.0.norm1.weight'): shape (16,), expected (1,)"), msg
    # a model directory's embedding and generator: the vocabulary read off head.weight, which is transposed
    sd4 = state(nb.NB4Model(vocab_size=6, d_model=8, num_heads=2, d_k=4, d_v=4, d_ff=16, num_layers=1), 4)
    msg = refused("nb4_reverse", "model", {**sd4, "head.weight": sd4["head.weight"].T.copy()})
    assert msg.startswith("source 'head.weight' (for tfm 'generator.weight'): shape (8, 6), expected (6, 8) "
                          "(tgt_vocab_size 6, as 'head.bias' has it"), msg
    # a stored sinusoidal table of the wrong width
    msg = refused("nb5_build_transformer", "model", {**sd5, "src_pos.pe": sd5["src_pos.pe"][:, :, :15].copy()},
                  {"nhead": 4})
    assert msg == ("source 'src_pos.pe' (a sinusoidal table): shape (1, 20, 15), expected (1, 20, 16) (max_len 20, "
                   "d_model 16)"), msg
    # two tables of different lengths: either may be the wrong one, and the message names both
    msg = refused("nb5_build_transformer", "model", {**sd5, "src_pos.pe": sd5["src_pos.pe"][:, :19].copy()},
                  {"nhead": 4})
    assert msg == ("source 'tgt_pos.pe' (a sinusoidal table): shape (1, 20, 16), expected (1, 19, 16) (max_len 19, "
                   "as 'src_pos.pe' has it; d_model 16)"), msg


def test_rule_to_a_key_tfm_does_not_have_is_refused():
    sd = nb3()
    m = it.load_mapping("nb3_vit_block")
    m["targets"]["layer"]["rules"][-1]["to"] = "norm2.beta"
    with pytest.raises(it.MappingError, match=r"^tfm 'norm2.beta' \(from source 'norm2.bias'\) is no tensor of a tfm"):
        it.import_state(m, "layer", sd, {"nhead": 4})


def test_agreeing_tensors_import_as_before():
    sd = nb3()
    config, out = it.import_state(it.load_mapping("nb3_vit_block"), "layer", sd, {"nhead": 4})
    assert config["d_model"] == 16 and config["dim_feedforward"] == 64
    np.testing.assert_array_equal(out["linear1.weight"], sd["mlp.fc1.weight"])


def test_integer_and_out_of_range_weights_refused_as_tfm_forward_refuses_them():
    sd = nb3()
    msg = refused("nb3_vit_block", "layer", {**sd, "norm1.bias": np.zeros(16, np.int64)}, {"nhead": 4})
    assert msg == "source tensor 'norm1.bias' must be floating point, got I64"
    msg = refused("nb3_vit_block", "layer", {**sd, "norm1.bias": np.zeros(16, bool)}, {"nhead": 4})
    assert msg == "source tensor 'norm1.bias' must be floating point, got BOOL"
    big = sd["norm2.weight"].astype(np.float64)
    big[3] = 1e300
    msg = refused("nb3_vit_block", "layer", {**sd, "norm2.weight": big}, {"nhead": 4})
    assert msg == ("source tensor 'norm2.weight': element 3 of F64 (16,) is 1.0000000000000001e+300, beyond the "
                   "Float32 range (±3.4028235e+38)")
    # F64 within range and F16 are converted; an integer tensor the mapping ignores is no weight.
    m = it.load_mapping("nb3_vit_block")
    m["targets"]["layer"]["ignore"] = ["num_batches_tracked"]
    near = sd["norm2.weight"].astype(np.float64)
    near[0] = 3.4028235e38
    config, out = it.import_state(m, "layer", {**sd, "norm2.weight": near, "num_batches_tracked": np.array(3)},
                                  {"nhead": 4})
    assert out["norm2.weight"].dtype == np.float32 and np.isfinite(out["norm2.weight"]).all()


def test_command_line_one_line_errors_and_nothing_written(tmp_path):
    sd = nb3()
    cases = {"transposed.safetensors": ({**sd, "mlp.fc1.weight": sd["mlp.fc1.weight"].T.copy()},
                                        "source 'mlp.fc1.weight' (for tfm 'linear1.weight'): shape (16, 64), "
                                        "expected (64, 16)"),
             "i64.pt": ({**sd, "norm1.bias": np.zeros(16, np.int64)},
                        "source tensor 'norm1.bias' must be floating point, got I64"),
             "f64.pt": ({**sd, "norm1.bias": np.full(16, -1e300)},
                        "source tensor 'norm1.bias': element 0 of F64 (16,) is -1.0000000000000001e+300, beyond the "
                        "Float32 range")}
    for name, (tensors, needle) in cases.items():
        path = str(tmp_path / name)
        if name.endswith(".pt"):
            torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, path)
        else:
            st.save(path, tensors)
        out = str(tmp_path / ("out_" + name.split(".")[0]))
        r = subprocess.run([sys.executable, TOOL, "import", "--map", "nb3_vit_block", "--input", path, "--set",
                            "nhead=4", "--out", out], capture_output=True, text=True)
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("import_torch.py: error: " + needle), r.stderr
        assert not os.path.exists(out + ".json") and not os.path.exists(out + ".safetensors")
    # F64 source within range: imported (rounded), and runs
    path = str(tmp_path / "ok.pt")
    torch.save({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()}, path)
    r = subprocess.run([sys.executable, TOOL, "import", "--map", "nb3_vit_block", "--input", path, "--set",
                        "nhead=4", "--out", str(tmp_path / "ok")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "ok.json") as f:
        assert json.load(f)["dim_feedforward"] == 64
