#!/usr/bin/env python3
"""tests/kernels/check_bf16_isa.py LIBRARY — AVX512-BF16 instructions only where the dispatch allows them.

src/kernels/attention_avx512.cc is compiled with -mavx512bf16 (CMakeLists.txt) so that its bfloat16 template
instances can use vdpbf16ps; its float32 code runs on AVX-512 CPUs without AVX512-BF16, so no other function may
contain such an instruction. This disassembles the library (`objdump -d -C`) and checks that every function
holding vdpbf16ps, vcvtne2ps2bf16 or vcvtneps2bf16 is one of the attention kernel's BF instances, and that
there is at least one (the bf16 path is really compiled). Exit 77 (skipped) without objdump.
"""
import re
import shutil
import subprocess
import sys

BF16 = re.compile(r"\b(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)\b")
# The BF = true instances of attention_avx512.cc: micro<MR, NV, ACC, BF>, micro_rest<NV, ACC, BF, R>,
# rows_of<NV, ACC, BF>, gemm_small<ACC, BF>, forward_tile<NVQ, BF>, backward_pair<BF>.
ALLOWED = re.compile(r"tfm::kernels::\(anonymous namespace\)::("
                     r"micro<\d+, \d+, (true|false), true>|"
                     r"micro_rest<\d+, (true|false), true, \d+>|"
                     r"rows_of<\d+, (true|false), true>|"
                     r"gemm_small<(true|false), true>|"
                     r"forward_tile<\d+, true>|"
                     r"backward_pair<true>)\(")


def main():
    if shutil.which("objdump") is None:
        print("objdump not found: skipped")
        return 77
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", sys.argv[1]], check=True,
                         capture_output=True, text=True).stdout
    function, holders = None, set()
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            function = m.group(1)
        elif function and BF16.search(line):
            holders.add(function)
    bad = sorted(f for f in holders if not ALLOWED.search(f))
    for f in bad:
        print("AVX512-BF16 instruction outside the attention kernel's BF instances: " + f)
    if not holders:
        print("no AVX512-BF16 instruction anywhere: the attention kernel's bf16 path was not compiled")
        return 1
    if bad:
        return 1
    print("%d functions hold AVX512-BF16 instructions, all BF instances of the attention kernel" % len(holders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
