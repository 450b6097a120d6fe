"""bench/torch_peer.py — the environments a PyTorch peer runs in, named once for every benchmark.

PyTorch 1.13 from Debian runs its matrix products through Debian's OpenBLAS 0.3.21 (the pthreads variant: its own
thread pool beside libgomp's), which picks its kernel by CPU model and falls back to a generic one on CPUs it does
not know (the Intel Xeons here: config-M inference about 6× slower than with the AVX-512 kernel named). A fair
comparison is against PyTorch at its best:
  best       OPENBLAS_CORETYPE = SkylakeX where the CPU has AVX-512, else Haswell; OMP_WAIT_POLICY=passive (the
             OpenMP threads sleep between parallel regions instead of spinning against OpenBLAS's threads and the
             other process's); and the fastest of the thread splits of splits(): torch.set_num_threads and
             OMP_NUM_THREADS = the torch threads, OPENBLAS_NUM_THREADS = OpenBLAS's threads. Which split is fastest
             depends on the shapes, so a benchmark measures every candidate of best_candidates() and keeps the
             fastest (per row, or once by a short calibration run for benchmarks that train for minutes).
  inherited  this process's environment as it is (what a user who sets nothing gets), with the thread count.
Benchmarks report both and state ratios against "best"; every table header names the CPU and its ISA (header()).
bench/train_bf16.py also searches OMP_WAIT_POLICY (best_env's wait: passive or active) for its "best": PyTorch's
bf16 autocast runs its products in oneDNN on libgomp's threads, and there active waiting was faster (config M's
step on Zen 5: 36.1 ms active, 40.1 ms passive). The float32 benchmarks keep passive waiting, where OpenBLAS's own
threads run beside libgomp's (the nanogpt-baby loop: 4,865 tokens/s inherited, 20,594 best).

To add a peer run to a benchmark: start one worker per Peer of [inherited(T)] + best_candidates(T) with
peer.env and peer.torch_threads, and report min over the candidates as "best", naming the split (peer.split).
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
    """The model name with its family and model numbers, e.g. "AMD EPYC (family 25 model 17)": virtual machines
    often report only the vendor's brand, and the numbers tell Zen 4 from Zen 5 or one Xeon from another."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    name = info.get("model name", "unknown CPU")
    if "cpu family" in info and "model" in info:
        name += " (family %s model %s)" % (info["cpu family"], info["model"])
    return name


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


def best_env(threads, base=None, blas_threads=None, wait="passive"):
    """wait: OMP_WAIT_POLICY, "passive" or "active". Passive suits PyTorch's float32 runs (OpenBLAS's own threads
    beside libgomp's); its bfloat16 autocast runs its products in oneDNN on libgomp's threads alone, where
    sleeping between regions costs more than it saves (train_bf16.py searches both)."""
    env = dict(os.environ if base is None else base)
    env.update({"OPENBLAS_CORETYPE": "SkylakeX" if "avx512f" in cpu_flags() else "Haswell",
                "OMP_WAIT_POLICY": wait, "OMP_NUM_THREADS": str(threads),
                "OPENBLAS_NUM_THREADS": str(threads if blas_threads is None else blas_threads)})
    return env


def inherited_env(threads, base=None):
    env = dict(os.environ if base is None else base)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def describe(env):
    return "OPENBLAS_CORETYPE=%s OMP_WAIT_POLICY=%s OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s" % (
        env.get("OPENBLAS_CORETYPE", "(unset)"), env.get("OMP_WAIT_POLICY", "(unset)"),
        env.get("OMP_NUM_THREADS", "(unset)"), env.get("OPENBLAS_NUM_THREADS", "(unset)"))


def splits(threads):
    """The (torch threads, OpenBLAS threads) pairs "best" is chosen among: every thread or one, on either side."""
    out = []
    for t in (threads, 1):
        for b in (threads, 1):
            if (t, b) not in out:
                out.append((t, b))
    return out


class Peer:
    """One PyTorch environment: name ("best" or "inherited"), env (the process environment), torch_threads (for
    torch.set_num_threads), split ("torch T × OpenBLAS B" for a "best" candidate, "" for inherited)."""

    def __init__(self, name, env, torch_threads, split=""):
        self.name, self.env, self.torch_threads, self.split = name, env, torch_threads, split

    def describe(self):
        return describe(self.env) + ", torch.set_num_threads(%d)" % self.torch_threads


def inherited(threads):
    return Peer("inherited", inherited_env(threads), threads)


def best_candidates(threads):
    return [Peer("best", best_env(t, blas_threads=b), t, "torch %d × OpenBLAS %d" % (t, b)) for t, b in splits(threads)]


def fastest(peers, seconds):
    """The peer of the lowest seconds[i] (parallel lists), and a note naming every split's time, e.g.
    "torch 2 × OpenBLAS 1 (of: torch 2 × OpenBLAS 2 61.2, torch 2 × OpenBLAS 1 55.0, ...)"."""
    i = min(range(len(peers)), key=lambda k: seconds[k])
    return peers[i], "%s (of: %s)" % (peers[i].split, ", ".join(
        "%s %.4g" % (p.split, s) for p, s in zip(peers, seconds)))


def header(threads):
    """What every table states first: the CPU, its ISA, the thread count and PyTorch's environments."""
    return "%s (%s), %d threads; PyTorch best = %s with the fastest of the splits %s; inherited = %s" % (
        cpu_name(), isa(), threads, describe(best_env(threads)).replace(
            " OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d" % (threads, threads), ""),
        ", ".join("%d×%d" % s for s in splits(threads)), describe(inherited_env(threads)))
