"""bench/torch_peer.py — the environments a PyTorch peer runs in, named once for every benchmark.

PyTorch 1.13 from Debian runs its matrix products through Debian's OpenBLAS 0.3.21, which picks its kernel by
CPU model and falls back to a generic one on CPUs it does not know (the Intel Xeons here: config-M inference
about 6× slower than with the AVX-512 kernel named). A fair comparison is against PyTorch at its best:
  best       OPENBLAS_CORETYPE = SkylakeX where the CPU has AVX-512, else Haswell; OMP_WAIT_POLICY=passive (the
             OpenMP threads sleep between parallel regions instead of spinning against the other process's
             threads); OMP_NUM_THREADS and torch.set_num_threads = the thread count; OpenBLAS's own threads as
             OpenMP's (Debian builds the OpenMP variant).
  inherited  this process's environment as it is (what a user who sets nothing gets), with the thread count.
Benchmarks report both and state ratios against "best". describe() is the one-line text a table prints.
"""
import os


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def isa():
    """The ISA facts that decide the speed of these benchmarks, e.g. "AVX-512, AVX512-BF16, VNNI, no AMX"."""
    f = cpu_flags()
    parts = ["AVX-512" if "avx512f" in f else "AVX2" if "avx2" in f else "no AVX2"]
    if "avx512_bf16" in f:
        parts.append("AVX512-BF16")
    if "avx512_vnni" in f:
        parts.append("VNNI")
    parts.append("AMX" if "amx_tile" in f else "no AMX")
    return ", ".join(parts)


def best_env(threads, base=None):
    env = dict(os.environ if base is None else base)
    env.update({"OPENBLAS_CORETYPE": "SkylakeX" if "avx512f" in cpu_flags() else "Haswell",
                "OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": str(threads)})
    return env


def inherited_env(threads, base=None):
    env = dict(os.environ if base is None else base)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def describe(env):
    return "OPENBLAS_CORETYPE=%s OMP_WAIT_POLICY=%s OMP_NUM_THREADS=%s" % (
        env.get("OPENBLAS_CORETYPE", "(unset)"), env.get("OMP_WAIT_POLICY", "(unset)"),
        env.get("OMP_NUM_THREADS", "(unset)"))
