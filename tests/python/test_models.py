"""tfm.train, tfm.load and a trained model's methods against the tfm executable: the same options write bitwise the
same model.safetensors; generate(seed=s) prints what `tfm generate --seed s` prints; evaluate / score give the
dicts `tfm eval --json` prints; translate what `tfm translate` prints. Plus the option keywords' errors and stream()."""
import json
import os
import subprocess
import sys
import warnings

import pytest

import tfm
from conftest import ROOT

TEXT = ("To delete a word, move the cursor to the start of the word and type dw. The word and the space after it "
        "are deleted. To delete a line, type dd. To undo, type u.\n") * 30

LM = dict(tokens="char", block_size=32, d_model=32, nhead=2, layers=2, dim_feedforward=64, max_steps=12,
          batch_size=8, eval_every=6, seed=3, threads=1)
PAIRS = "3 1 4 1 5\t5 1 4 1 3\n2 7 1 8\t8 1 7 2\n9 2 6\t6 2 9\n"


def _cli_args(options):
    args = []
    for k, v in options.items():
        name = k.replace("_", "-")
        if isinstance(v, bool):
            args.append(f"--{name}" if v else f"--no-{name}")
        else:
            args += [f"--{name}", str(v)]
    return args


def _run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory, tfm_cli):
    d = tmp_path_factory.mktemp("lm")
    (d / "t.txt").write_text(TEXT)
    events = []
    py = tfm.train(out=str(d / "py"), text=str(d / "t.txt"), progress=events.append, **LM)
    _run([tfm_cli, "train", "--out", str(d / "cli"), "--text", str(d / "t.txt")] + _cli_args(LM))
    return d, py, events


def test_train_matches_cli_bitwise(lm_runs):
    d, result, events = lm_runs
    assert (d / "py" / "model.safetensors").read_bytes() == (d / "cli" / "model.safetensors").read_bytes()
    assert result["steps"] == 12 and result["stop_reason"] == "max-steps"
    assert len(result["history"]) == 2 and result["valid_loss"] == result["history"][-1]["valid_loss"]
    kinds = {e["kind"] for e in events}
    assert "step" in kinds and "eval" in kinds
    checkpoints = [e for e in events if e["kind"] == "checkpoint"]
    assert checkpoints and all(e["step"] > 0 and e["total_steps"] == 12 and e["epoch"] >= 1 for e in checkpoints)
    assert any("eval" in e for e in events)


def test_generate_warns_about_unknown_prompt_characters(lm_runs, tfm_cli):
    d, _, _ = lm_runs
    m = tfm.load(str(d / "py"))
    with pytest.warns(UserWarning, match=r"^2 prompt tokens are not in the model's vocabulary, read as <unk>$"):
        m.generate("To \u2603\u2604", max_new_tokens=2)
    with pytest.warns(UserWarning, match=r"^1 prompt token is not"):
        list(m.stream("\u2603", max_new_tokens=2))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.generate("To delete", max_new_tokens=2)
    assert m._core.unknown_tokens(m._core.encode_prompt("To \u2603")) == 1
    # A bad option raises before any warning; the default prompt (a newline) never warns.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="max_new_tokens"):
            m.generate("\u2603", max_new_tokens=-1)
        with pytest.raises(ValueError, match="top_p"):
            next(m.stream("\u2603", top_p=2.0))
        assert m.generate(max_new_tokens=2, seed=1) == m.generate("\n", max_new_tokens=2, seed=1)
    err = subprocess.run([tfm_cli, "generate", "--model", str(d / "cli"), "--prompt", "To \u2603\u2604",
                          "--max-new-tokens", "2"], capture_output=True, text=True)
    assert err.returncode == 0 and err.stderr == "note: 2 prompt tokens are not in the model's vocabulary, read as <unk>\n"


def test_load_maps_or_copies(lm_runs, tmp_path):
    """mmap=True (the default) and mmap=False generate the same; a model loaded either way keeps generating the
    same when its directory's file is replaced by rename (what tfm's writers do), and a copied model also when the
    file is overwritten in place (a mapped one must not be: the documented hazard)."""
    import shutil
    d, _, _ = lm_runs
    src = tmp_path / "m"
    shutil.copytree(d / "py", src)

    def gen(m):
        return m.generate("To delete", max_new_tokens=30, temperature=0.8, seed=4)

    want = gen(tfm.load(str(d / "py")))
    mapped, copied = tfm.load(str(src)), tfm.load(str(src), mmap=False)
    assert gen(mapped) == want and gen(copied) == want
    data = (src / "model.safetensors").read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    import numpy as np
    half = (np.frombuffer(data[header:], dtype="<f4") * np.float32(0.5)).astype("<f4")
    (tmp_path / "new.safetensors").write_bytes(data[:header] + half.tobytes())  # every weight halved
    (tmp_path / "new.safetensors").replace(src / "model.safetensors")  # a rename over the file
    half_copy = tfm.load(str(src), mmap=False)
    halved = gen(half_copy)
    assert halved != want  # the replacement is what a new load reads ...
    assert gen(mapped) == want and gen(copied) == want  # ... not what the loaded models read
    (src / "model.safetensors").write_bytes(data)  # in place: truncated and written again
    assert gen(half_copy) == halved
    assert gen(tfm.load(str(src))) == want


def test_generate_matches_cli(lm_runs, tfm_cli):
    d, _, _ = lm_runs
    m = tfm.load(str(d / "py"))
    assert m.is_language_model
    for seed in (0, 5):
        text = m.generate("To delete", max_new_tokens=40, temperature=0.8, top_k=10, seed=seed)
        out = _run([tfm_cli, "generate", "--model", str(d / "cli"), "--prompt", "To delete", "--max-new-tokens",
                    "40", "--temperature", "0.8", "--top-k", "10", "--seed", str(seed)])
        assert out == "To delete" + text + ("" if text.endswith("\n") else "\n")
        pieces = list(m.stream("To delete", max_new_tokens=40, temperature=0.8, top_k=10, seed=seed))
        assert "".join(pieces) == text and len(pieces) == 40
    # stop: the sample is the full one cut right after the first occurrence of the stop text (a char model: each
    # token one character), the same as `tfm generate --stop`.
    full = m.generate("To", max_new_tokens=50, temperature=0, ignore_eos=True)
    stop = full[5:7]
    cut = m.generate("To", max_new_tokens=50, temperature=0, ignore_eos=True, stop=stop)
    assert cut == full[:full.find(stop) + len(stop)], (full, stop, cut)
    out = _run([tfm_cli, "generate", "--model", str(d / "cli"), "--prompt", "To", "--max-new-tokens", "50",
                "--temperature", "0", "--ignore-eos", "--stop", stop])
    assert out == "To" + cut + ("" if cut.endswith("\n") else "\n")
    it = m.stream("To", max_new_tokens=1000)
    next(it)
    it.close()  # stops the worker early


def test_a_call_from_the_thread_holding_a_stream_raises(lm_runs):
    # A stream's worker holds the model until the stream is exhausted or closed: a call from the thread that takes
    # its pieces would wait for itself forever, so it raises; another thread's call waits for the stream's end. Run in
    # a subprocess, so that a regression fails on the timeout instead of hanging the tests.
    d, _, _ = lm_runs
    code = (
        "import threading, tfm\n"
        f"m = tfm.load({str(d / 'py')!r})\n"
        "def refused(call):\n"
        "    try:\n"
        "        call()\n"
        "    except RuntimeError as e:\n"
        "        assert str(e) == 'this model has an open stream in this thread: exhaust or close it first', e\n"
        "    else:\n"
        "        raise AssertionError('not refused')\n"
        "want = m.generate('To', max_new_tokens=5, seed=1)\n"
        "s = m.stream('To', max_new_tokens=1000, ignore_eos=True)\n"
        "next(s)\n"
        "for call in (lambda: m.generate('To', max_new_tokens=5), lambda: m.score('To'), lambda: m.translate(['To']),\n"
        "             lambda: next(m.stream('To'))):\n"
        "    refused(call)\n"
        "assert m.encode('To') and m.decode(m.encode('To')) == b'To'  # these do not wait for the model\n"
        "other = []\n"
        "t = threading.Thread(target=lambda: other.append(m.generate('To', max_new_tokens=5, seed=1)))\n"
        "t.start()\n"
        "t.join(0.5)\n"
        "assert t.is_alive() and not other  # waiting for the stream\n"
        "s.close()\n"
        "t.join()\n"
        "assert other == [want] and m.generate('To', max_new_tokens=5, seed=1) == want\n"
        "a, b = m.stream('To', max_new_tokens=50), m.stream('The', max_new_tokens=50)\n"
        "refused(lambda: list(zip(a, b)))\n"
        "a.close()\n"
        "s = m.stream('To', max_new_tokens=1000, ignore_eos=True)\n"
        "next(s)\n"
        "t = threading.Thread(target=lambda: next(s))  # a stream passed to another thread: both took pieces\n"
        "t.start()\n"
        "t.join()\n"
        "refused(lambda: m.generate('To', max_new_tokens=5))\n"
        "for piece in s:\n"
        "    pass\n"
        "assert m.generate('To', max_new_tokens=5, seed=1) == want  # exhausted: the model is free\n"
        "print('done')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "done", (p.returncode, p.stderr[-2000:])


def test_text_with_surrogate_escapes_goes_back_in(tmp_path, lm_runs):
    # A byte-level model may generate bytes that are not UTF-8: tfm returns them as lone surrogates
    # (surrogateescape), and such a text is taken back as those bytes by every method reading text.
    (tmp_path / "t.txt").write_text(TEXT)
    tfm.train(out=str(tmp_path / "byte"), text=str(tmp_path / "t.txt"), **{**LM, "tokens": "byte"})
    m = tfm.load(str(tmp_path / "byte"))
    for seed in range(100):
        text = m.generate("To", max_new_tokens=20, temperature=3.0, seed=seed)
        if any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
            break
    else:
        pytest.fail("no generated text holds a byte that is not UTF-8")
    raw = text.encode("utf-8", "surrogateescape")
    assert m.decode(m.encode(text)) == raw and m.encode(text) == m.encode(raw)
    assert m.generate(text, max_new_tokens=5, seed=2) == m.generate(raw, max_new_tokens=5, seed=2)
    assert "".join(m.stream(text, max_new_tokens=5, seed=2)) == m.generate(text, max_new_tokens=5, seed=2)
    assert m.score(text) == m.score(raw) and m.score(text)["tokens"] == len(raw) - 1
    lone = next(c for c in text if 0xDC80 <= ord(c) <= 0xDCFF)
    assert m.generate("To", max_new_tokens=20, temperature=3.0, seed=seed, stop=lone) == text[:text.index(lone) + 1]
    # A char model reads UTF-8 text: a lone byte is the library's ValueError, not the binding's TypeError.
    d, _, _ = lm_runs
    char = tfm.load(str(d / "py"))
    with pytest.raises(ValueError, match="^prompt: invalid UTF-8 at byte 0"):
        char.generate("\udcff", max_new_tokens=2)
    with pytest.raises(ValueError, match="^text: invalid UTF-8 at byte 2"):
        char.encode("To\udcff")
    with pytest.raises(ValueError, match="invalid UTF-8"):
        char.score("To\udcff")
    with pytest.raises(ValueError, match="^prompt: .*surrogates not allowed"):  # no byte stands for it
        char.generate("\ud800", max_new_tokens=2)


def test_score_matches_cli_eval(lm_runs, tfm_cli):
    d, _, _ = lm_runs
    m = tfm.load(str(d / "py"))
    want = json.loads(_run([tfm_cli, "eval", "--model", str(d / "cli"), "--text", str(d / "t.txt"), "--json"]))
    assert m.score_file(str(d / "t.txt")) == want
    got = m.score(TEXT)
    assert got["tokens"] == want["tokens"]
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12), k


@pytest.fixture(scope="module")
def pair_runs(tmp_path_factory, tfm_cli):
    d = tmp_path_factory.mktemp("pairs")
    (d / "p.tsv").write_text(PAIRS * 20)
    opts = dict(train=str(d / "p.tsv"), valid=str(d / "p.tsv"), arch="seq2seq", d_model=16, nhead=2, layers=1,
                dim_feedforward=32, max_steps=10, batch_size=16, bias=False, threads=1, seed=1)
    r = tfm.train(out=str(d / "py"), **opts)
    _run([tfm_cli, "train", "--out", str(d / "cli")] + _cli_args(opts))
    return d, r


def test_pairs_train_with_ema_is_the_clis(tmp_path, tfm_cli):
    (tmp_path / "p.tsv").write_text(PAIRS * 20)
    opts = dict(train=str(tmp_path / "p.tsv"), valid=str(tmp_path / "p.tsv"), arch="seq2seq", d_model=16, nhead=2,
                layers=1, dim_feedforward=32, max_steps=10, batch_size=16, threads=1, seed=1, ema=0.9)
    r = tfm.train(out=str(tmp_path / "py"), **opts)
    assert r["budget_steps"] == 0 and r["time_budget"] == 0
    _run([tfm_cli, "train", "--out", str(tmp_path / "cli")] + _cli_args(opts))
    assert (tmp_path / "py" / "model.safetensors").read_bytes() == (tmp_path / "cli" / "model.safetensors").read_bytes()


def test_pairs_train_in_bf16_is_the_clis(tmp_path, tfm_cli):
    (tmp_path / "p.tsv").write_text(PAIRS * 20)
    opts = dict(train=str(tmp_path / "p.tsv"), valid=str(tmp_path / "p.tsv"), arch="seq2seq", d_model=32, nhead=2,
                layers=1, dim_feedforward=64, max_steps=6, batch_size=16, threads=1, seed=1, dtype="bf16")
    tfm.train(out=str(tmp_path / "py"), **opts)
    _run([tfm_cli, "train", "--out", str(tmp_path / "cli")] + _cli_args(opts))
    assert (tmp_path / "py" / "model.safetensors").read_bytes() == (tmp_path / "cli" / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "py" / "config.json").read_text())["train"]["dtype"] == "bf16"
    with pytest.raises(ValueError, match="int8 is for inference"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", dtype="int8", max_steps=1)


def test_pairs_train_evaluate_translate(pair_runs, tfm_cli):
    d, r = pair_runs
    assert (d / "py" / "model.safetensors").read_bytes() == (d / "cli" / "model.safetensors").read_bytes()
    assert "sequence_accuracy" in r and "token_accuracy" in r
    m = tfm.load(str(d / "py"))
    for beam in (1, 3):
        want = json.loads(_run([tfm_cli, "eval", "--model", str(d / "cli"), "--data", str(d / "p.tsv"), "--json",
                                "--beam", str(beam)]))
        assert m.evaluate(str(d / "p.tsv"), beam=beam) == want
    lines = ["3 1 4 1 5", "9 2 6", ""]
    out = _run([tfm_cli, "translate", "--model", str(d / "cli"), "--beam", "2"], input="\n".join(lines) + "\n")
    assert m.translate(lines, beam=2) == out.split("\n")[:-1]
    # max_len as tfm translate/eval's --max-len: the same outputs, a warning counting those it stopped, and
    # evaluate's "truncated" the CLI's
    out = _run([tfm_cli, "translate", "--model", str(d / "cli"), "--max-len", "2"], input="\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"^2 of 3 outputs stopped at the length limit \(max_len 2\)"):
        assert m.translate(lines, max_len=2) == out.split("\n")[:-1]
    want = json.loads(_run([tfm_cli, "eval", "--model", str(d / "cli"), "--data", str(d / "p.tsv"), "--json",
                            "--max-len", "1"]))
    with pytest.warns(UserWarning, match="stopped at the length limit"):
        assert m.evaluate(str(d / "p.tsv"), max_len=1) == want
    assert want["truncated"] == want["examples"]
    with pytest.raises(ValueError, match="max_len 513 is beyond the model's max_len 512"):
        m.translate(lines, max_len=513)
    # Source tokens the vocabulary lacks are read as <unk>, with the note tfm translate prints.
    p = subprocess.run([tfm_cli, "translate", "--model", str(d / "cli")], input="3 x 4 y\n", capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0 and "tfm: note: 2 source tokens are not in the model's vocabulary, read as <unk>" in p.stderr
    with pytest.warns(UserWarning, match=r"^2 source tokens are not in the model's vocabulary, read as <unk>$"):
        assert m.translate(["3 x 4 y"]) == p.stdout.split("\n")[:-1]
    with pytest.raises(ValueError, match="language model"):
        m.generate("3 1")
    with pytest.raises(TypeError):
        m.translate("3 1 4")
    # A line the library refuses is named by its index, as the Python layer names an item it refuses.
    with pytest.raises(ValueError, match=r"^lines\[1\]: invalid UTF-8 at byte 2"):
        m.translate(["3 1", "3 \udcff"])  # a line with a byte that is not UTF-8 reaches the library
    with pytest.raises(ValueError, match=r"^lines\[2\]: 600 source tokens, more than the model's max_len 512$"):
        m.translate(["3 1", "", "3" * 600])
    with pytest.raises(ValueError, match="beam must be ≥ 1, got 0"):
        m.translate(lines, beam=0)
    with pytest.raises(ValueError, match="batch_size must be ≥ 1, got -2"):
        m.evaluate(str(d / "p.tsv"), batch_size=-2)


def test_logits_go_to_check_roundtrip(pair_runs, lm_runs, tmp_path):
    """Model.logits gives the inputs tools/check_roundtrip.py compares with the PyTorch twin (in float64): a seq2seq
    model's (B, T, V) for src and tgt_in, a language model's (B, S, V); bad ids are a ValueError."""
    import numpy as np
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import tfm_safetensors
    finally:
        sys.path.pop(0)
    d, _ = pair_runs
    mt = tfm.load(str(d / "cli"))
    src = np.array([[4, 5, 6, 7], [8, 9, 0, 0]])  # 0: <pad>
    tgt_in = np.array([[1, 7, 6], [1, 9, 8]])     # bos first
    logits = mt.logits(src, tgt_in)
    assert logits.shape == (2, 3, mt.logits(src, tgt_in[:, :1]).shape[2]) and logits.dtype == np.float32
    tfm_safetensors.save(str(tmp_path / "mt.safetensors"), {"src": src, "tgt_in": tgt_in, "logits": logits})
    lm_dir, _, _ = lm_runs
    lm = tfm.load(str(lm_dir / "py"))
    ids = np.array([lm.encode("To delete a word")])
    tfm_safetensors.save(str(tmp_path / "lm.safetensors"), {"src": ids, "logits": lm.logits(ids)})
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_roundtrip.py"), str(d / "cli"),
                        str(tmp_path / "mt.safetensors"), str(lm_dir / "py"), str(tmp_path / "lm.safetensors")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [json.loads(line)["ok"] for line in p.stdout.splitlines() if line.startswith("{")] == [True, True]
    with pytest.raises(ValueError, match="an encoder–decoder needs tgt_in"):
        mt.logits(src)
    with pytest.raises(ValueError, match="src must be a 2-D integer array"):
        mt.logits(src.astype(np.float32), tgt_in)
    with pytest.raises(ValueError, match="id -1"):
        lm.logits(np.array([[1, -1]]))
    with pytest.raises(ValueError, match=r"tgt_in is an encoder–decoder's; this model \(arch decoder\) reads src alone"):
        lm.logits(ids, ids)


def test_quantized_directory_loads_int8_by_default(pair_runs, tfm_cli):
    d, _ = pair_runs
    _run([tfm_cli, "quantize", "--model", str(d / "cli"), "--out", str(d / "int8")])
    lines = ["3 1 4 1 5", "9 2 6"]
    want = _run([tfm_cli, "translate", "--model", str(d / "int8")], input="\n".join(lines) + "\n")
    assert tfm.load(str(d / "int8")).translate(lines) == want.split("\n")[:-1]
    assert tfm.load(str(d / "int8"), dtype="int8").translate(lines) == want.split("\n")[:-1]
    f32 = _run([tfm_cli, "translate", "--model", str(d / "int8"), "--dtype", "f32"], input="\n".join(lines) + "\n")
    assert tfm.load(str(d / "int8"), dtype="f32").translate(lines) == f32.split("\n")[:-1]
    with pytest.raises(ValueError, match="int8-quantized"):
        tfm.train(out=str(d / "ft"), init_from=str(d / "int8"), train=str(d / "p.tsv"), valid=str(d / "p.tsv"),
                  max_steps=1)
    # The PyTorch twin (tools/torch_models.py, check_roundtrip.py) refuses it too: its I8 codes are no weights.
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import torch_models
    finally:
        sys.path.pop(0)
    with pytest.raises(ValueError, match="int8-quantized model directory"):
        torch_models.load_tfm_model(str(d / "int8"))
    torch_models.load_tfm_model(str(d / "cli"))  # its float32 source loads


def test_train_refuses_a_launcher_of_several_processes(tmp_path):
    """Under mpirun each copy of a script would train the whole run alone into one directory: refused, as the
    CLI built without MPI refuses it (mpirun's environment, not mpirun itself: the variable is what tfm reads)."""
    code = ("import tfm\n"
            "try:\n"
            f"    tfm.train(out={str(tmp_path / 'run')!r}, task='reverse', max_steps=1)\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE="2")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "a launcher started 2 (mpirun)" in p.stdout, (p.stdout, p.stderr)
    assert not (tmp_path / "run").exists()


def test_train_option_errors(tmp_path):
    with pytest.raises(TypeError, match="d_modle"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", d_modle=8)
    with pytest.raises(ValueError, match="d-model|d_model"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", d_model="wide")
    with pytest.raises(ValueError, match="arch"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", arch="rnn")
    with pytest.raises(ValueError, match="bias"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", bias="no")
    # numpy's bool is a flag's value, as numpy's ints and floats are the others' (bias=np.bool_(False): --no-bias).
    np = pytest.importorskip("numpy")
    tiny = dict(task="reverse", task_train_size=64, d_model=16, nhead=2, layers=1, dim_feedforward=32, max_steps=1,
                threads=1)
    tfm.train(out=str(tmp_path / "npbool"), bias=np.bool_(False), **tiny)
    tfm.train(out=str(tmp_path / "pybool"), bias=False, **tiny)
    assert (tmp_path / "npbool" / "model.safetensors").read_bytes() == (tmp_path / "pybool" / "model.safetensors").read_bytes()
    with pytest.raises(FileNotFoundError):
        tfm.train(out=str(tmp_path / "x"), text=str(tmp_path / "missing.txt"), max_steps=1)
    with pytest.raises(ValueError, match="--ema"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", ema=1.5, max_steps=1)
    # A vocabulary size the text cannot give is the option's bad value (ValueError), though said of the file.
    (tmp_path / "t.txt").write_text(TEXT)
    with pytest.raises(ValueError, match="t.txt.*a vocabulary of 8 pieces is too small"):
        tfm.train(out=str(tmp_path / "x"), text=str(tmp_path / "t.txt"), tokens="spm", vocab_size=8, max_steps=1)
    with pytest.raises(IsADirectoryError):  # as Python's open() says it
        tfm.train(out=str(tmp_path / "x"), text=str(tmp_path), max_steps=1)
    names = {o["name"] for o in tfm.train_options()}
    assert {"out", "threads", "resume", "init_from", "d_model", "max_steps", "ema", "time_budget"} <= names


def test_ctrl_c_checkpoints_then_resume(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    code = (
        "import os, signal, sys, tfm\n"
        "sent = []\n"
        "def progress(e):\n"
        "    if e['step'] >= 3 and not sent: sent.append(1); os.kill(os.getpid(), signal.SIGINT)\n"
        "try:\n"
        f"    tfm.train(out={str(tmp_path / 'run')!r}, text={str(tmp_path / 't.txt')!r}, progress=progress,"
        " **" + repr({**LM, "max_steps": 200}) + ")\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted'); sys.exit(0)\n"
        "print('finished')\n")
    p = subprocess.run([__import__("sys").executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.strip() == "interrupted", p.stderr
    assert (tmp_path / "run" / "trainer_state.safetensors").exists()
    r = tfm.train(resume=str(tmp_path / "run"), max_steps=6)
    assert r["steps"] == 6


def _with_lm(d, body):
    """Runs `body` in a fresh interpreter after `m = tfm.load(<d>/py)` on one thread (os, signal, sys, threading and
    time imported); returns its stripped stdout, asserting it exited 0."""
    code = ("import os, signal, sys, threading, time, tfm\n"
            "tfm.set_num_threads(1)\n"
            f"m = tfm.load({str(d / 'py')!r})\n" + body)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout.strip()


def test_ctrl_c_stops_generate(lm_runs):
    """A generation far longer than the test is stopped by Ctrl-C (SIGINT 0.5 s in) with KeyboardInterrupt, from
    inside the call (it polls Python's signal handlers while it decodes), not when it would have returned."""
    d, _, _ = lm_runs
    assert _with_lm(d, "threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
                       "try:\n"
                       "    m.generate('To', max_new_tokens=10 ** 8, ignore_eos=True)\n"
                       "    print('returned')\n"
                       "except KeyboardInterrupt:\n"
                       "    print('interrupted')\n") == "interrupted"


def test_fork_child_exits_while_a_parent_thread_computes(lm_runs):
    """A child forked while another thread of the parent is inside a tfm call has no such call: it exits at once
    (the exit hook waited for the parent's call, forever)."""
    d, _, _ = lm_runs
    assert _with_lm(d, "threading.Thread(target=lambda: m.generate('To', max_new_tokens=10 ** 8, ignore_eos=True),"
                       " daemon=True).start()\n"
                       "time.sleep(0.5)\n"
                       "pid = os.fork()\n"
                       "if pid == 0:\n"
                       "    sys.exit(0)\n"
                       "t0 = time.time()\n"
                       "while time.time() - t0 < 30:\n"
                       "    done, status = os.waitpid(pid, os.WNOHANG)\n"
                       "    if done:\n"
                       "        print('child exited', os.waitstatus_to_exitcode(status)); os._exit(0)\n"
                       "    time.sleep(0.05)\n"
                       "os.kill(pid, 9); print('child hung'); os._exit(0)\n") == "child exited 0"


def test_errors_of_a_trained_model(lm_runs, tmp_path):
    d, _, _ = lm_runs
    m = tfm.load(str(d / "py"))
    with pytest.raises(ValueError, match="vocabulary"):
        m.decode([10 ** 6])
    with pytest.raises(ValueError, match="seed"):
        m.generate("To", seed=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        m.generate("To", max_new_tokens=2 ** 70)
    with pytest.raises(ValueError, match="dtype"):
        tfm.load(str(d / "py"), dtype=7)
    with pytest.raises(ValueError, match="batch_size must be ≥ 1, got 0"):  # the library's check, through the binding
        m.score("To", batch_size=0)
    with pytest.raises(NotADirectoryError):
        tfm.load(str(d / "t.txt"))
    with pytest.raises(NotADirectoryError):
        tfm.train(out=str(d / "t.txt" / "run"), task="reverse", max_steps=1)
    # A path with a NUL is refused as open() refuses it, not read up to the NUL (another file).
    for call in (lambda: tfm.load(str(d / "py") + "\0x"), lambda: m.score_file(str(d / "t.txt") + "\0x"),
                 lambda: tfm.train(out=str(tmp_path / "nul"), text=str(d / "t.txt") + "\0x", max_steps=1),
                 lambda: tfm.train(out=str(tmp_path / "nul") + "\0x", text=str(d / "t.txt"), max_steps=1)):
        with pytest.raises(ValueError, match="embedded null byte"):
            call()
    assert not (tmp_path / "nul").exists()
    # A run directory's file that is not what it should be is a file error, config.json as model.safetensors.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{bad")
    with pytest.raises(OSError, match="config.json: not valid JSON"):
        tfm.load(str(tmp_path / "bad"))
    assert m.generate("To", max_new_tokens=3, seed=1)  # the interpreter survives


def test_wrong_argument_types_are_named(lm_runs, pair_runs, tmp_path):
    # A wrong type is a TypeError naming the argument, never pybind11's dump of a private function's signature.
    d, _, _ = lm_runs
    m = tfm.load(str(d / "py"))
    for call, name in [(lambda: m.generate(5), "prompt"), (lambda: m.generate("To", stop=5), "stop"),
                       (lambda: next(m.stream(5)), "prompt"), (lambda: m.encode(5), "text"),
                       (lambda: m.score(None), "text"), (lambda: m.score(5), "text")]:
        with pytest.raises(TypeError, match=f"^{name} must be a str, got "):
            call()
    with pytest.raises(ValueError, match=r"^ids\[1\] must be in \[-2147483648, 2147483647\], got 1099511627776$"):
        m.decode([1, 2 ** 40])
    with pytest.raises(TypeError):
        m.decode(["a"])
    # float32 would make this inf: the value given is named, not the rounded one (top_p is a double: 1e-50 keeps
    # the likeliest token).
    with pytest.raises(ValueError, match=r"^temperature must be representable as a float32, got 1e\+300$"):
        m.generate("To", temperature=1e300)
    p = tfm.load(str(pair_runs[0] / "py"))
    with pytest.raises(TypeError, match=r"^lines\[1\] must be a str, got int$"):
        p.translate(["3 1", 2])
    with pytest.raises(ValueError, match=r"^lines\[0\] holds a line break: give one source per list item$"):
        p.translate(["3 1\n4"])
    with pytest.raises(TypeError, match="^progress must be callable"):
        tfm.train(out=str(tmp_path / "x"), task="reverse", max_steps=1, progress=5)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match=r"^n must be in \[1, 1024\], got 1099511627776$"):
        tfm.set_num_threads(2 ** 40)


def test_translate_reads_an_item_as_tfm_translate_reads_a_line(pair_runs):
    # A line's own end ("\n", "\r\n": readlines() of a CRLF file) is not part of the source, as `tfm translate`
    # reads its input; with characters as tokens a kept "\r" would be one more source token (<unk>).
    m = tfm.load(str(pair_runs[0] / "py"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        want = m.translate(["3 1 4", "9 2"])
        assert m.translate(["3 1 4\r\n", "9 2\n"]) == want
        assert m.translate(["3 1 4\r", "9 2\r\n"]) == want
        # A UTF-8 byte order mark opening the list (readlines() of such a file keeps it) is not text, as `tfm
        # translate` drops it opening its input; anywhere else it is a character (here one the vocabulary lacks).
        assert m.translate(["\ufeff3 1 4\n", "9 2\n"]) == want
        assert m.translate([b"\xef\xbb\xbf3 1 4", b"9 2"]) == want
    assert not [w for w in seen if "vocabulary" in str(w.message)]  # no <unk> read for a "\r" or the mark
    with pytest.warns(UserWarning, match=r"^1 source token is not in the model's vocabulary"):
        m.translate(["3 1 4", "\ufeff9 2"])
    with pytest.raises(ValueError, match=r"^lines\[0\] holds a line break: give one source per list item$"):
        m.translate(["3 1\n\n"])


def _set_generator_bias(model_dir, values):
    """Rewrites model_dir/model.safetensors (a new file: a loaded model keeps its map of the old one) with
    generator.bias[i] = v for each i: v of `values`."""
    import numpy as np
    path = os.path.join(model_dir, "model.safetensors")
    data = bytearray(open(path, "rb").read())
    n = int.from_bytes(data[:8], "little")
    entry = json.loads(bytes(data[8:8 + n]))["generator.bias"]
    assert entry["dtype"] == "F32"
    begin, end = entry["data_offsets"]
    bias = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4, offset=8 + n + begin)  # (V), a view of data
    for i, v in values.items():
        bias[i] = v
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


def test_translate_of_a_byte_model(tmp_path, tfm_cli):
    # A byte-token model may write bytes that are not UTF-8: here its generator's bias makes E0 (the lead byte of a
    # 3-byte character) every step's choice, so each output is E0 E0 E0 at max_len 3. translate keeps them as lone
    # surrogates, as generate does, which encode back to the bytes `tfm translate` writes.
    (tmp_path / "p.tsv").write_text(PAIRS * 20)
    d = str(tmp_path / "byte")
    tfm.train(out=d, train=str(tmp_path / "p.tsv"), valid=str(tmp_path / "p.tsv"), arch="seq2seq", tokens="byte",
              d_model=16, nhead=2, layers=1, dim_feedforward=32, max_steps=2, batch_size=16, threads=1, seed=1)
    _set_generator_bias(d, {0xE0: 60})
    lines = ["3 1 4", "9 2", "2 7 1 8"]
    stdin = ("\n".join(lines) + "\n").encode()
    want = ["\udce0" * 3] * 3

    def cli(*options):
        p = subprocess.run([tfm_cli, "translate", "--model", d, "--threads", "1", "--max-len", "3"] + list(options),
                           input=stdin, capture_output=True, timeout=600)
        assert p.returncode == 0, p.stderr
        return p.stdout

    with pytest.warns(UserWarning, match="stopped at the length limit"):
        assert tfm.load(d).translate(lines, max_len=3) == want
    written = b"".join(t.encode("utf-8", "surrogateescape") + b"\n" for t in want)
    assert cli() == written
    # A prediction is one line: with <0x0A> and <0x0D> far above every other byte, no search picks them (a TSV
    # target never holds a line break), so the outputs are the same, one a line, greedy, beam or sampled.
    _set_generator_bias(d, {0x0A: 80, 0x0D: 70, 0xE0: 60})
    with pytest.warns(UserWarning, match="stopped at the length limit"):
        assert tfm.load(d).translate(lines, max_len=3) == want
        assert tfm.load(d).translate(lines, beam=3, max_len=3) == want
    assert cli() == written
    assert cli("--beam", "3") == written
    assert cli("--sample", "--temperature", "30", "--seed", "1").count(b"\n") == len(lines)


def test_evaluate_warns_of_skipped_lines(pair_runs):
    d, _ = pair_runs
    # a malformed line, and a source longer than the model's max_len (512): lines the model cannot take
    (d / "mixed.tsv").write_text(PAIRS + "no tab on this line\n" + "3" * 600 + "\t3\n")
    m = tfm.load(str(d / "py"))
    with pytest.warns(UserWarning, match=r"skipped 2 of 5 lines \(line 4: malformed line: no tab between source and "
                                         r"target; line 5: over-long source: 600 tokens, more than the model's "
                                         r"max_len 512\)"):
        mixed = m.evaluate(str(d / "mixed.tsv"))
    whole = m.evaluate(str(d / "p.tsv"))
    # the dict counts the lines it left out, as tfm eval --json does
    assert mixed.pop("skipped") == 2 and whole.pop("skipped") == 0
    assert mixed == whole


def test_train_threads_apply_to_the_run_only(tmp_path):
    code = ("import tfm\n"
            "before = tfm.get_num_threads()\n"
            f"tfm.train(out={str(tmp_path / 'r')!r}, task='reverse', max_steps=1, d_model=8, nhead=2, layers=1,"
            " dim_feedforward=16, threads=1)\n"
            "assert before == 2 and tfm.get_num_threads() == before, (before, tfm.get_num_threads())\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "OMP_NUM_THREADS": "2"})
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def _exits_cleanly(code):
    """Runs code in a fresh interpreter: it must print 'done' and exit 0 (not abort in std::terminate as a
    thread still inside tfm is ended by the interpreter's finalization), printing no traceback of the calls the
    exit stopped."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("done"), (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "Exception in thread" not in p.stderr, p.stderr[-2000:]


def test_exit_with_a_stream_left_open(lm_runs):
    d, _, _ = lm_runs
    start = f"import tfm\nm = tfm.load({str(d / 'py')!r})\ns = m.stream('To', max_new_tokens=100000, ignore_eos=True)\n"
    _exits_cleanly(start + "for i, p in enumerate(s):\n    if i == 3: break\nprint('done')\n")
    _exits_cleanly(start + "next(s)\nprint('done')\n")
    _exits_cleanly(f"import threading, time, tfm\nm = tfm.load({str(d / 'py')!r})\n"
                   "threading.Thread(target=lambda: m.generate('To', max_new_tokens=10 ** 6, ignore_eos=True),"
                   " daemon=True).start()\ntime.sleep(0.5)\nprint('done')\n")


def test_exit_while_a_daemon_thread_trains(tmp_path):
    (tmp_path / "t.txt").write_text(TEXT)
    run = tmp_path / "run"
    _exits_cleanly(
        "import threading, tfm\n"
        "started = threading.Event()\n"
        "def train():\n"
        f"    tfm.train(out={str(run)!r}, text={str(tmp_path / 't.txt')!r}, progress=lambda e: e['step'] >= 2 and"
        " started.set(), **" + repr({**LM, "max_steps": 10 ** 6, "eval_every": 10 ** 6}) + ")\n"
        "threading.Thread(target=train, daemon=True).start()\n"
        "assert started.wait(300)\n"
        "print('done')\n")
    assert (run / "trainer_state.safetensors").exists()  # stopped as after Ctrl-C: with its checkpoint


def test_train_value_errors_name_the_option_given(tmp_path):
    """A value that does not parse is named by the option given (as tfm train spells it), never by the config fields
    it sets: layers= sets each stack's layer count (num_encoder_layers first, though a language model has no encoder),
    tokens= both sides' tokenization (src_tokens first, a TSV source side's)."""
    (tmp_path / "t.txt").write_text(TEXT)
    text = str(tmp_path / "t.txt")
    with pytest.raises(ValueError, match=r"^train config: --layers must be an integer, got 'x'$"):
        tfm.train(out=str(tmp_path / "x1"), text=text, layers="x")
    with pytest.raises(ValueError, match=r"^train config: --tokens: unknown tokenization 'wordpiece' \(expected "):
        tfm.train(out=str(tmp_path / "x2"), text=text, tokens="wordpiece")
    assert not (tmp_path / "x1").exists() and not (tmp_path / "x2").exists()
