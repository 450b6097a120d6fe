"""tools/convert_gpt2.py: pickled GPT-2 checkpoints (Hugging Face's pytorch_model.bin, nanoGPT's ckpt.pt) → tfm model
directories. Each converted directory is exported back with `tfm export gpt2` and compared tensor by tensor with the
pickle's weights (nanoGPT's nn.Linear weights transposed), so every tensor is shown to have landed where it belongs."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import tfm_safetensors  # noqa: E402
import torch_models  # noqa: E402

TOOL = os.path.join(ROOT, "tools", "convert_gpt2.py")
LINEAR = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


def tiny(tmp_path, **kw):
    """A random GPT-2 folder (tools/torch_models.py's twin): 2 layers, d 16, the 257-token byte tokenizer."""
    src = tmp_path / "src"
    torch_models.make_gpt2(str(src), n_layer=2, n_head=2, n_embd=16, vocab_size=257, n_positions=32, seed=5,
                           prefixed=True, **kw)
    tensors, _ = tfm_safetensors.load(str(src / "model.safetensors"))
    return src, {k: np.asarray(v) for k, v in tensors.items()}


def exported(tfm_cli, model_dir, tmp_path):
    out = tmp_path / "back"
    r = subprocess.run([tfm_cli, "export", "gpt2", str(model_dir), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tensors, _ = tfm_safetensors.load(str(out / "model.safetensors"))
    with open(out / "config.json") as f:
        return {k: np.asarray(v) for k, v in tensors.items()}, json.load(f)


def test_hf_pytorch_model_bin(tfm_cli, tmp_path):
    src, tensors = tiny(tmp_path)
    state = {k: torch.from_numpy(v.copy()) for k, v in tensors.items() if v.dtype != bool}
    torch.save(state, src / "pytorch_model.bin")
    os.remove(src / "model.safetensors")
    r = run(TOOL, "--from", "hf", str(src / "pytorch_model.bin"), "--out", str(tmp_path / "m"), "--tfm", tfm_cli)
    assert r.returncode == 0, r.stderr
    assert "GPT-2 imported" in r.stdout
    back, config = exported(tfm_cli, tmp_path / "m", tmp_path)
    for k, v in tensors.items():
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue
        assert np.array_equal(back[k], v), k


def test_nanogpt_ckpt_with_padded_vocabulary_and_no_bias(tfm_cli, tmp_path):
    src, tensors = tiny(tmp_path)
    pad_rows = np.random.default_rng(0).standard_normal((7, 16)).astype(np.float32)
    model = {}
    for k, v in tensors.items():
        if k.endswith(".attn.masked_bias") or k.endswith(".attn.bias") or (k.endswith(".bias")):
            continue  # bias=False: no biases in Linears or LayerNorms
        if k.endswith(LINEAR):
            v = v.T.copy()  # nanoGPT's nn.Linear (out, in)
        if k in ("transformer.wte.weight", "lm_head.weight"):
            v = np.concatenate([v, pad_rows])  # 257 → 264 rows, the head tied to the embedding
        model["_orig_mod." + k] = torch.from_numpy(np.ascontiguousarray(v))
    args = {"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 32, "vocab_size": 264, "bias": False,
            "dropout": 0.0}
    torch.save({"model": model, "model_args": args, "iter_num": 10, "best_val_loss": 3.0}, tmp_path / "ckpt.pt")
    r = run(TOOL, "--from", "nanogpt", str(tmp_path / "ckpt.pt"), "--tokenizer", str(src), "--out",
            str(tmp_path / "m"), "--tfm", tfm_cli)
    assert r.returncode == 0, r.stderr
    assert "7 padded rows are kept as tokens generation never emits" in r.stdout
    back, config = exported(tfm_cli, tmp_path / "m", tmp_path)
    assert config["activation_function"] == "gelu" and config["bias"] is False and config["vocab_size"] == 264
    for k, v in model.items():
        k = k[len("_orig_mod."):]
        if k == "lm_head.weight":
            continue  # tied: exported as wte
        want = v.numpy().T if k.endswith(LINEAR) else v.numpy()
        assert np.array_equal(back[k], want), k  # the intermediate folder kept the prefix


class NotWeights:
    pass


def test_refuses_a_pickle_that_is_not_weights(tfm_cli, tmp_path):
    src, _ = tiny(tmp_path)
    torch.save({"model": NotWeights(), "model_args": {}}, tmp_path / "evil.pt")
    r = run(TOOL, "--from", "nanogpt", str(tmp_path / "evil.pt"), "--tokenizer", str(src), "--out",
            str(tmp_path / "m"), "--tfm", tfm_cli)
    assert r.returncode != 0
    assert "cannot be read as a weights-only PyTorch checkpoint" in r.stderr
    assert not (tmp_path / "m").exists()


def imported(tfm_cli, tmp_path):
    """tiny()'s checkpoint imported by `tfm import gpt2` into tmp_path/m, loaded by the Python package."""
    tfm = pytest.importorskip("tfm")
    src, _ = tiny(tmp_path)
    r = subprocess.run([tfm_cli, "import", "gpt2", str(src), "--out", str(tmp_path / "m")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return tfm.load(str(tmp_path / "m"))


def test_load_an_imported_gpt2_generates_as_the_cli(tfm_cli, tmp_path):
    m = imported(tfm_cli, tmp_path)
    assert m.is_language_model
    ids = m.encode("Hello world")
    assert m.decode(ids) == b"Hello world"
    text = m.generate("Hello world", max_new_tokens=12, seed=3, top_k=20, ignore_eos=True)
    cli = subprocess.run([tfm_cli, "generate", "--model", str(tmp_path / "m"), "--prompt", "Hello world",
                          "--max-new-tokens", "12", "--seed", "3", "--top-k", "20", "--ignore-eos"],
                         capture_output=True)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == ("Hello world" + text + ("" if text.endswith("\n") else "\n")).encode("utf-8", "surrogateescape")
    # Streaming cuts pieces on whole characters: they join to the same text (bytes outside UTF-8 escaped alike).
    streamed = list(m.stream("Hello world", max_new_tokens=12, seed=3, top_k=20, ignore_eos=True))
    assert "".join(streamed) == text


def test_bytes_a_gpt2_model_generated_go_back_in(tfm_cli, tmp_path):
    # Byte-level BPE tokens may end inside a UTF-8 character, so a generation may hold bytes that are not UTF-8
    # (returned as lone surrogates, printed raw by the CLI): every gpt2-bpe reader takes them back as those bytes.
    m = imported(tfm_cli, tmp_path)
    for seed in range(100):
        text = m.generate("Party", max_new_tokens=20, temperature=3.0, seed=seed, ignore_eos=True)
        if any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
            break
    else:
        pytest.fail("no generated text holds a byte that is not UTF-8")
    text = "Party" + text + "Party \U0001F389"[:-1] + "\udcf0\udc9f\udc8e"  # and a character cut by hand
    raw = text.encode("utf-8", "surrogateescape")
    assert m.decode(m.encode(text)) == raw and m.encode(text) == m.encode(raw)
    assert m.generate(text, max_new_tokens=5, seed=2) == m.generate(raw, max_new_tokens=5, seed=2)
    assert "".join(m.stream(text, max_new_tokens=5, seed=2)) == m.generate(text, max_new_tokens=5, seed=2)
    assert m.score(text) == m.score(raw)
    # The CLI: the same bytes as a prompt file and as eval's text.
    (tmp_path / "cont.txt").write_bytes(raw)
    gen = subprocess.run([tfm_cli, "generate", "--model", str(tmp_path / "m"), "--prompt-file", str(tmp_path / "cont.txt"),
                          "--max-new-tokens", "5", "--seed", "2"], capture_output=True)
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.startswith(raw)
    ev = subprocess.run([tfm_cli, "eval", "--model", str(tmp_path / "m"), "--text", str(tmp_path / "cont.txt"), "--json"],
                        capture_output=True, text=True)
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["tokens"] == m.score(text)["tokens"]
