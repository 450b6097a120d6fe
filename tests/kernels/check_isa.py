#!/usr/bin/env python3
"""tests/kernels/check_isa.py LIBRARY — instructions beyond AVX-512F/BW/DQ/VL only where the dispatch allows them.

The *_avx512.cc kernels run on every CPU with AVX-512 F/BW/DQ/VL and FMA (kernels::cpu_has_avx512()). Two files
are built with one more feature (CMakeLists.txt), for code that runs only where the CPU has it:
  * src/kernels/attention_avx512.cc with -mavx512bf16, for its bfloat16 template instances (vdpbf16ps), called
    only when cpu_has_bf16_dot(); its float32 code runs on CPUs without AVX512-BF16;
  * src/kernels/gemm_rows_vnni_avx512.cc with -mavx512vnni, the int8 row kernel (vpdpbusd), called only when
    cpu_has_int8_dot().
This disassembles the library (`objdump -d -C`) and checks, for each feature, that every function holding one of
its instructions is one of those allowed, and that there is at least one (the path is really compiled).
Exit 77 (skipped) without objdump.
"""
import re
import shutil
import subprocess
import sys

# The BF = true instances of attention_avx512.cc: micro<MR, NV, ACC, BF>, micro_rest<NV, ACC, BF, R>,
# rows_of<NV, ACC, BF>, gemm_small<ACC, BF>, forward_tile<NVQ, BF>, backward_pair<BF>.
BF16_ALLOWED = re.compile(r"tfm::kernels::\(anonymous namespace\)::("
                          r"micro<\d+, \d+, (true|false), true>|"
                          r"micro_rest<\d+, (true|false), true, \d+>|"
                          r"rows_of<\d+, (true|false), true>|"
                          r"gemm_small<(true|false), true>|"
                          r"forward_tile<\d+, true>|"
                          r"backward_pair<true>)\(")
# Everything of gemm_rows_vnni_avx512.cc: rows_s8<R, V>, rows_s8_blocks<R, V>, rows_s8_v<R>, and its entry.
VNNI_ALLOWED = re.compile(r"tfm::kernels::((\(anonymous namespace\)::rows_s8(_blocks|_v)?<[\d, ]+>)|"
                          r"gemm_rows_s8_avx512vnni)\(")

FEATURES = [
    ("AVX512-BF16", re.compile(r"\b(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)\b"), BF16_ALLOWED,
     "the attention kernel's BF instances"),
    ("AVX512-VNNI", re.compile(r"\b(vpdpbusds?|vpdpwssds?)\b"), VNNI_ALLOWED, "the int8 row kernel"),
]


def main():
    if shutil.which("objdump") is None:
        print("objdump not found: skipped")
        return 77
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", sys.argv[1]], check=True,
                         capture_output=True, text=True).stdout
    holders = {name: set() for name, _, _, _ in FEATURES}
    function = None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            function = m.group(1)
            continue
        if function:
            for name, instructions, _, _ in FEATURES:
                if instructions.search(line):
                    holders[name].add(function)
    failed = False
    for name, _, allowed, where in FEATURES:
        bad = sorted(f for f in holders[name] if not allowed.search(f))
        for f in bad:
            print("%s instruction outside %s: %s" % (name, where, f))
        if not holders[name]:
            print("no %s instruction anywhere: %s was not compiled" % (name, where))
        failed = failed or bool(bad) or not holders[name]
        if holders[name] and not bad:
            print("%d functions hold %s instructions, all in %s" % (len(holders[name]), name, where))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
