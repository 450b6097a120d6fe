"""generate() / stream() options the library checks, as `tfm generate` has them checked: a stop text that is empty
is refused (stop=None is no stop), a temperature float32 would make inf or 0 is refused naming the value given
(tfm::float32_option), and top_p is a double (any value in (0, 1] is taken: 1e-50 keeps the likeliest token)."""
import subprocess

import pytest

import tfm

TEXT = "the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat by a log.\n" * 20
LM = dict(tokens="char", block_size=16, d_model=16, nhead=2, layers=1, dim_feedforward=32, max_steps=4,
          batch_size=8, eval_every=4, seed=1, threads=1)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen_options")
    (d / "t.txt").write_text(TEXT)
    tfm.train(out=str(d / "lm"), text=str(d / "t.txt"), **LM)
    return str(d / "lm")


def test_an_empty_stop_text_is_refused_as_the_cli_refuses_it(lm, tfm_cli):
    m = tfm.load(lm)
    said = "stop: empty: give the text to stop at"
    with pytest.raises(ValueError, match=f"^{said}$"):
        m.generate("the", max_new_tokens=5, stop="")
    with pytest.raises(ValueError, match=f"^{said}$"):
        next(m.stream("the", max_new_tokens=5, stop=""))
    p = subprocess.run([tfm_cli, "generate", "--model", lm, "--prompt", "the", "--stop", ""], capture_output=True,
                       text=True)
    assert p.returncode != 0 and p.stderr == f"tfm: error: {said}\n"
    # No stop (the default, None) runs every token; a stop text still stops.
    free = m.generate("the", max_new_tokens=12, temperature=0, ignore_eos=True)
    assert len(free) == 12 and m.generate("the", max_new_tokens=12, temperature=0, ignore_eos=True, stop=None) == free
    stop = free[3]
    assert m.generate("the", max_new_tokens=12, temperature=0, ignore_eos=True, stop=stop) == \
        free[:free.index(stop) + 1]


def test_float_options_are_checked_as_given(lm, tfm_cli):
    m = tfm.load(lm)
    for value, text in [(1e39, r"1e\+39"), (1e-50, "1e-50"), (-1e-50, "-1e-50"), (1e300, r"1e\+300")]:
        with pytest.raises(ValueError, match=f"^temperature must be representable as a float32, got {text}$"):
            m.generate("the", temperature=value)
        p = subprocess.run([tfm_cli, "generate", "--model", lm, "--temperature", repr(value)], capture_output=True,
                           text=True)
        assert p.returncode != 0
        assert p.stderr == f"tfm: error: --temperature must be representable as a float32, got {value!r}\n"
    # top_p is a double: below float's least value it is still in (0, 1] and keeps the likeliest token.
    greedy = m.generate("the", max_new_tokens=10, temperature=0)
    assert m.generate("the", max_new_tokens=10, top_p=1e-50, seed=2) == greedy
    cli = subprocess.run([tfm_cli, "generate", "--model", lm, "--prompt", "the", "--max-new-tokens", "10", "--top-p",
                          "1e-50", "--seed", "2", "--threads", "1"], capture_output=True, text=True, check=True)
    assert cli.stdout == "the" + greedy + ("" if greedy.endswith("\n") else "\n")
