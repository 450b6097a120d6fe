#!/usr/bin/env python3
"""gen_bleu.py — writes the BLEU cross-check that tests/train/text_metrics_test.cc checks tfm against.

    /usr/bin/python3 tests/gen/gen_bleu.py --out tests/fixtures/bleu/bleu.json           # the committed fixture
    /usr/bin/python3 tests/gen/gen_bleu.py --out /tmp/b.json --seed 7                   # another draw

Texts. Lines of the licence texts every Debian machine has (/usr/share/common-licenses), perturbed with a
seeded random.Random: words dropped, swapped, replaced, repeated; punctuation, numbers with commas, periods
and dashes ("1,000.50", "2-3"), HTML escapes (&quot; &amp; &lt; &gt;), non-ASCII letters and Unicode
spaces inserted; some hypotheses cut short (brevity penalty), some built so that no 2-, 3- or 4-gram
matches anywhere in the corpus (smoothing). The fixture stores the texts themselves, so the C++ test does
not read the licence files.

Tokenization. `tok13a` below restates sacreBLEU's 13a tokenizer (mteval-v13a's rules) with Python's `re`;
each string is stored with its tokenization and the C++ tokenize_13a must give the same string.

Reference BLEU. Debian's python3-nltk, nltk.translate.bleu_score.corpus_bleu on the 13a words, x100, with
SmoothingFunction().method3. method3 is NIST's geometric smoothing: the k-th order (k = 1, 2, ...) whose
match count is 0 gets precision 1 / (2^k * total), which is sacreBLEU's default smooth "exp". nltk and
sacreBLEU agree everywhere else (clipping by the maximum count over references, closest reference length
with ties to the shorter, BP = exp(1 - r/c)) except in two places that the cases avoid, asserted below:
  - nltk counts a hypothesis with fewer than n words as 1 n-gram in the order-n denominator
    (max(1, count)); sacreBLEU counts 0. Every hypothesis here has at least 4 words.
  - with no n-gram of some order in the whole corpus sacreBLEU returns 0 and nltk does not; implied by
    the above.
The per-order numerators/denominators (nltk's modified_precision) and lengths (closest_ref_length) are
stored too, and the C++ statistics must equal them exactly.

Output: one JSON object {"format": "tfm-bleu", "version": 1, "seed", "tokenize": [{"text", "tokens"}],
"corpora": [{"name", "hypotheses", "references": [[...] per hypothesis], "hyp_len", "ref_len",
"matches": [4], "totals": [4], "bleu"}]}.
"""
import argparse
import json
import random
import re
import sys
from pathlib import Path

LICENSES = Path("/usr/share/common-licenses")

# 13a, restated. Rule 1's class: { | } ~  [ \ ] ^ _ `  space ! " # $ % &  ( ) * +  : ; < = > ? @  /
_SYMBOL = re.compile(r"([\x7b-\x7e\x5b-\x60\x20-\x26\x28-\x2b\x3a-\x40/])")
_STOP_AFTER_NONDIGIT = re.compile(r"([^0-9])([.,])")
_STOP_BEFORE_NONDIGIT = re.compile(r"([.,])([^0-9])")
_DASH_AFTER_DIGIT = re.compile(r"([0-9])(-)")


def tok13a(line):
    for a, b in (("<skipped>", ""), ("-\n", ""), ("\n", " ")):
        line = line.replace(a, b)
    for a, b in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
        line = line.replace(a, b)
    line = " " + line + " "
    line = _SYMBOL.sub(r" \1 ", line)
    line = _STOP_AFTER_NONDIGIT.sub(r"\1 \2 ", line)
    line = _STOP_BEFORE_NONDIGIT.sub(r" \1 \2", line)
    line = _DASH_AFTER_DIGIT.sub(r"\1 \2 ", line)
    return " ".join(line.split())


def bleu_words(text):  # sacreBLEU's BLEU preprocessing: rstrip, 13a, split
    return tok13a(text.rstrip()).split()


def licence_lines():
    lines = []
    for f in sorted(LICENSES.iterdir()):
        if f.is_file():
            for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
                line = " ".join(line.split())
                if len(line.split()) >= 6:
                    lines.append(line)
    return sorted(set(lines))


FILLERS = ["qzxv", "vvqk", "zqjx", "xkqz", "jzzq"]  # never in the licences: they break n-grams
EXTRAS = ["1,000.50", "3.14", "2-3", "10,5", "1.", ",7", "(a)", "well-known", "e.g.", "U.S.A.", "--", "x--y",
          "naïve", "café", "Straße", "«quoted»", "—", "&quot;hi&quot;", "&amp;", "&lt;tag&gt;", "&amp;quot;",
          "it's", "$5", "100%", "a/b", "[1]", "{x}", "~", "^", "_", "`", "@home", "C++", "5-", "-5", "..."]
UNICODE_SPACES = ["\u00a0", "\u3000", "\u2009", "\t", "\x1c"]


def perturb(rng, text, edits):
    w = text.split()
    for _ in range(edits):
        op = rng.randrange(7)
        i = rng.randrange(len(w))
        if op == 0 and len(w) > 5:
            del w[i]
        elif op == 1 and i + 1 < len(w):
            w[i], w[i + 1] = w[i + 1], w[i]
        elif op == 2:
            w[i] = rng.choice(EXTRAS)
        elif op == 3:
            w.insert(i, rng.choice(EXTRAS))
        elif op == 4:
            w[i] = w[i] + rng.choice([",", ".", ";", "!", "?", ")", ":", "'s", "-"])
        elif op == 5:
            w.insert(i, w[i])
        else:
            w[i] = rng.choice(["(", '"', "&quot;", "'"]) + w[i]
    out = " ".join(w)
    if rng.random() < 0.15:  # a Unicode space or trailing whitespace now and then
        out = out.replace(" ", rng.choice(UNICODE_SPACES), 1)
    if rng.random() < 0.1:
        out += rng.choice([" ", "\t", "\u3000", " -"])
    return out


def breaking(rng, ref, keep):
    """`keep` consecutive reference words (13a's) at a time, separated by a filler word: no (keep+1)-gram matches
    (unless the reference repeats itself)."""
    w = bleu_words(ref)
    out = []
    for i, x in enumerate(w):
        if i and i % keep == 0:
            out.append(rng.choice(FILLERS))
        out.append(x)
    return " ".join(out)


def nltk_corpus(hyps, refs):
    from fractions import Fraction
    from nltk.translate.bleu_score import SmoothingFunction, closest_ref_length, corpus_bleu, modified_precision

    H = [bleu_words(h) for h in hyps]
    R = [[bleu_words(r) for r in rs] for rs in refs]
    assert all(len(h) >= 4 for h in H), "a hypothesis under 4 words: nltk's denominators would differ from sacreBLEU's"
    num, den = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for h, rs in zip(H, R):
        for n in range(1, 5):
            p = modified_precision(rs, h, n)
            assert isinstance(p, Fraction)
            num[n - 1] += p.numerator
            den[n - 1] += p.denominator
        hyp_len += len(h)
        ref_len += closest_ref_length(rs, len(h))
    bleu = 100 * corpus_bleu(R, H, smoothing_function=SmoothingFunction().method3)
    return {"hyp_len": hyp_len, "ref_len": ref_len, "matches": num, "totals": den, "bleu": bleu}


def make_corpora(rng, lines):
    def pick(k):
        return rng.sample(lines, k)

    corpora = []

    def add(name, hyps, refs):
        c = {"name": name, "hypotheses": hyps, "references": refs}
        c.update(nltk_corpus(hyps, refs))
        corpora.append(c)

    refs = pick(30)
    add("one_reference", [perturb(rng, r, rng.randint(1, 3)) for r in refs], [[r] for r in refs])
    refs = pick(30)
    add("two_references", [perturb(rng, r, rng.randint(1, 4)) for r in refs],
        [[r, perturb(rng, r, 2)] for r in refs])
    refs = pick(25)
    add("one_to_three_references", [perturb(rng, r, rng.randint(0, 5)) for r in refs],
        [[r] + [perturb(rng, r, rng.randint(1, 3)) for _ in range(rng.randint(0, 2))] for r in refs])
    refs = pick(20)
    short = []
    for r in refs:
        w = r.split()
        short.append(" ".join(w[: max(4, int(len(w) * rng.uniform(0.5, 0.8)))]))
    add("short_hypotheses", short, [[r, perturb(rng, r, 1)] for r in refs])
    refs = pick(20)
    add("long_hypotheses", [r + " " + " ".join(rng.choice(lines).split()[:5]) for r in refs], [[r] for r in refs])
    refs = pick(15)
    add("no_bigram_matches", [breaking(rng, r, 1) for r in refs], [[r] for r in refs])
    refs = pick(15)
    add("no_trigram_matches", [breaking(rng, r, 2) for r in refs], [[r] for r in refs])
    refs = pick(15)
    add("no_fourgram_matches", [breaking(rng, r, 3) for r in refs], [[r, perturb(rng, r, 1)] for r in refs])
    refs = pick(10)
    add("exact", list(refs), [[r] for r in refs])
    for c in corpora[5:8]:  # the smoothing cases are what their names say
        order = {"no_bigram_matches": 1, "no_trigram_matches": 2, "no_fourgram_matches": 3}[c["name"]]
        assert c["matches"][order] == 0 and c["matches"][order - 1] > 0, c["name"]
    return corpora


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=19)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    lines = licence_lines()
    corpora = make_corpora(rng, lines)
    texts = [t for c in corpora for t in c["hypotheses"] + [r for rs in c["references"] for r in rs]]
    texts += rng.sample(lines, 40)
    texts += [  # the rules one at a time, and the corners of their interplay
        "", " ", "a", "Hello, world.", "1,000.50 and 3.14, then 2-3 or 10-", "x.,y", "a..b", ".5 5. 5.5 ,5 5,",
        "&quot;quoted&quot; &amp;amp; &amp;quot; &lt;b&gt; &unknown; &", "<skipped>a<skipped>b", "co-\nop", "line\nbreak",
        "trailing-\n", "(x)[y]{z}", "a/b\\c|d~e^f_g`h", "it's o'clock", "e-mail re-enter -5 5- 5--6", "A—B «C» naïve",
        "no\u00a0break\u3000ideographic\u2009thin", "tab\there\x0bv\x0cf\rcr\x1cfs", "$5 100% @home #1 !!", "...",
        "U.S.A. e.g. i.e.", "3.14.15", "a,b,c", "1,a", "a,1", "é.", ".é", "9.é", "é-9-", "x-\n-\ny",
    ]
    out = {
        "format": "tfm-bleu",
        "version": 1,
        "seed": a.seed,
        "tokenize": [{"text": t, "tokens": tok13a(t)} for t in texts],
        "corpora": corpora,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{a.out}: {len(out['tokenize'])} tokenizations, {len(corpora)} corpora", file=sys.stderr)


if __name__ == "__main__":
    main()
