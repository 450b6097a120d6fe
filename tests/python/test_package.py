"""The package as a user gets it: `import tfm` without torch (numpy only), the package installed by
`cmake --install` and imported from outside the source and build trees, and the docstrings and stub."""
import os
import subprocess
import sys

import pytest

import tfm
from conftest import ROOT


def test_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None  # import torch now fails\n"
            "import numpy as np, tfm\n"
            "a = np.ones((1, 2, 4), np.float32)\n"
            "assert np.shares_memory(np.asarray(tfm.tensor(a)), a)\n"
            "cfg = {'module': 'TransformerEncoderLayer', 'd_model': 4, 'nhead': 2, 'dim_feedforward': 8,"
            " 'batch_first': True, 'dropout': 0.0}\n"
            "rng = np.random.default_rng(0)\n"
            "shapes = {'self_attn.in_proj_weight': (12, 4), 'self_attn.in_proj_bias': (12,),"
            " 'self_attn.out_proj.weight': (4, 4), 'self_attn.out_proj.bias': (4,), 'linear1.weight': (8, 4),"
            " 'linear1.bias': (8,), 'linear2.weight': (4, 8), 'linear2.bias': (4,), 'norm1.weight': (4,),"
            " 'norm1.bias': (4,), 'norm2.weight': (4,), 'norm2.bias': (4,)}\n"
            "w = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}\n"
            "y = tfm.load_module(cfg, w)(a)\n"
            "assert isinstance(y, np.ndarray) and y.shape == (1, 2, 4)\n"
            "try:\n"
            "    tfm.from_torch(object())\n"
            "except ImportError:\n"
            "    print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_installed_package(tmp_path):
    build = os.environ.get("TFM_BUILD_DIR")
    if not build:
        pytest.skip("TFM_BUILD_DIR not set")
    prefix = tmp_path / "prefix"
    p = subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "dist-packages"
    assert (site / "tfm" / "__init__.pyi").exists() and (site / "tfm" / "import_maps" / "nb4_reverse.json").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    code = ("import tfm, os; assert tfm.__file__.startswith(os.environ['PYTHONPATH']), tfm.__file__\n"
            "from tfm import torch_import\n"
            "print(sorted(torch_import.load_mapping('nb4_reverse')['targets']))\n")
    p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=120)
    assert p.returncode == 0 and "encoder" in p.stdout, p.stderr


def test_docstrings():
    for name in tfm.__all__:
        obj = getattr(tfm, name)
        if callable(obj):
            assert obj.__doc__ and obj.__doc__.strip(), name
    for name in ("translate", "generate", "stream", "score", "score_file", "evaluate"):
        assert getattr(tfm.Model, name).__doc__, name
    assert tfm.Module.forward_backward.__doc__ and tfm.Module.state_dict.__doc__
    assert os.path.exists(os.path.join(os.path.dirname(tfm.__file__), "__init__.pyi"))


def test_threads_setting():
    code = ("import threading, torch, tfm\n"
            "tfm.set_num_threads(1); torch.set_num_threads(2)\n"
            "assert tfm.get_num_threads() == 1, tfm.get_num_threads()\n"
            # Debian's torch shares tfm's OpenMP runtime: a tfm call runs on tfm's count and leaves torch's.
            "import numpy as np\n"
            "f = tfm.from_torch(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval())\n"
            "f(np.zeros((1, 2, 8), np.float32))\n"
            "assert torch.get_num_threads() == 2 and tfm.get_num_threads() == 1, "
            "(torch.get_num_threads(), tfm.get_num_threads())\n"
            "tfm.set_num_threads(1)\n"
            "assert torch.get_num_threads() == 2, torch.get_num_threads()\n"
            "got = []\n"
            "t = threading.Thread(target=lambda: got.append(tfm.get_num_threads())); t.start(); t.join()\n"
            "assert got == [1], got\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if p.returncode != 0 and "No module named 'torch'" in p.stderr:
        pytest.skip("no torch")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_forked_child_computes_on_one_thread():
    """libgomp's pool does not survive fork(): a child forked after the parent computed on two threads used to wait
    forever in its first call. It now computes on one thread (tfm/threads.h), the same numbers."""
    code = ("import multiprocessing as mp, numpy as np, tfm\n"
            "cfg = {'module': 'TransformerEncoderLayer', 'd_model': 64, 'nhead': 4, 'dim_feedforward': 256,"
            " 'batch_first': True, 'dropout': 0.0}\n"
            "rng = np.random.default_rng(0)\n"
            "shapes = {'self_attn.in_proj_weight': (192, 64), 'self_attn.in_proj_bias': (192,),"
            " 'self_attn.out_proj.weight': (64, 64), 'self_attn.out_proj.bias': (64,), 'linear1.weight': (256, 64),"
            " 'linear1.bias': (256,), 'linear2.weight': (64, 256), 'linear2.bias': (64,), 'norm1.weight': (64,),"
            " 'norm1.bias': (64,), 'norm2.weight': (64,), 'norm2.bias': (64,)}\n"
            "w = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}\n"
            "x = rng.standard_normal((8, 128, 64)).astype(np.float32)\n"
            "def run(_):\n"
            "    return tfm.load_module(cfg, w)(x), tfm.get_num_threads()\n"
            "if __name__ == '__main__':\n"
            "    tfm.set_num_threads(2)\n"
            "    y, _ = run(0)\n"
            "    with mp.get_context('fork').Pool(1) as p:\n"
            "        (yc, n), = p.map_async(run, [0]).get(timeout=60)\n"
            "    assert n == 1 and np.array_equal(y, yc), n\n"
            "    print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_defaults_are_the_librarys():
    # The trained-model calls' defaults come from the library (tfm._core.DEFAULTS): the stub shows the same values,
    # and the CLI's --help the same batch sizes, beam and length limit.
    import ast
    import inspect
    d = tfm._core.DEFAULTS
    assert d["decode_batch_size"] >= 1 and d["score_batch_size"] >= 1 and d["beam"] == 1
    stub = ast.parse(open(os.path.join(os.path.dirname(tfm.__file__), "__init__.pyi")).read())
    model = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    checked = 0
    for fn in model.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_") or not fn.args.defaults:
            continue
        args = fn.args.args[-len(fn.args.defaults):] if fn.args.defaults else []
        sig = inspect.signature(getattr(tfm.Model, fn.name)).parameters
        for a, v in zip(args, fn.args.defaults):
            assert ast.literal_eval(v) == sig[a.arg].default, (fn.name, a.arg)
            checked += 1
    assert checked >= 20, checked
    assert inspect.signature(tfm.Model.score_file).parameters["batch_size"].default == d["score_batch_size"]
    assert inspect.signature(tfm.Model.evaluate).parameters["batch_size"].default == d["decode_batch_size"]


def test_cli_help_shows_the_same_defaults(tfm_cli):
    d = tfm._core.DEFAULTS
    run = lambda *a: subprocess.run([tfm_cli, *a, "--help"], capture_output=True, text=True, timeout=60).stdout
    eval_help = " ".join(run("eval").split())
    assert f"sources decoded together (default {d['decode_batch_size']})" in eval_help, eval_help
    assert f"windows scored together (default {d['score_batch_size']})" in eval_help, eval_help
    translate_help = " ".join(run("translate").split())
    assert f"--batch-size INT={d['decode_batch_size']}" in translate_help, translate_help
    assert f"--beam INT={d['beam']}" in translate_help and f"--max-len INT={d['max_len']}" in translate_help
