#!/usr/bin/env python3
"""bench/unigram_bits.py — the character-unigram baseline a language model is measured against.

    /usr/bin/python3 bench/unigram_bits.py TRAIN.txt VALID.txt

Counts each code point of TRAIN (UTF-8) and scores VALID with those frequencies: the cross-entropy in
bits per character, −Σ log2 p(c) / |VALID|, with add-one smoothing over TRAIN's characters plus one
unseen class so a character absent from TRAIN costs a finite amount. `tfm eval --model DIR --text
VALID.txt` reports bits per character over the same text (every character but the first, which it is
given); a model that learned anything beyond letter frequencies is well below this figure.
"""
import collections
import math
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    with open(sys.argv[1], encoding="utf-8") as f:
        counts = collections.Counter(f.read())
    with open(sys.argv[2], encoding="utf-8") as f:
        valid = f.read()
    n, classes = sum(counts.values()), len(counts) + 1
    bits = -sum(math.log2((counts.get(ch, 0) + 1) / (n + classes)) for ch in valid)
    print(f"train {n} chars ({len(counts)} distinct), valid {len(valid)} chars: "
          f"unigram {bits / len(valid):.4f} bits/char; 40% below it is {0.6 * bits / len(valid):.4f}")


if __name__ == "__main__":
    main()
