#!/usr/bin/env python3
"""profile_step.py — where a training step's time goes, by category: `perf record` over `tfm train`, then each
sample of the step put in one category by its innermost frame that names one.

    /usr/bin/python3 bench/profile_step.py --tfm build/tfm [--steps 100] [--threads 2] [--wait-policy default|passive] [--dtype f32|bf16]
                     [--preset nanogpt-baby | --model s2s] [--markdown] [--explain K]

`--model s2s` profiles the seq2seq model of bench/compare_train_torch.py instead (d_model 256, 3+3 layers,
FFN 1024, `--batch-tokens 4096`, characters, on its TSV task), with one evaluation at the end.

Runs `tfm train --preset P` on Vim's documentation (Debian's vim-runtime, split as bench/subword_lm.py does: the
help files but the user manual) with the user manual's first 3 kB as validation text, so that evaluation is a negligible share, under
`perf record --call-graph dwarf`. Two columns: the main thread's samples inside `ShardedStep::run` (the step:
forward, backward, clip and optimizer), whose shares are the step's wall time — OpenMP there is the main thread
waiting at a region's end for the others; and those plus every sample of the other threads (OpenMP workers,
which run parallel regions and spin or sleep between them), the CPU time. Setup, data loading, evaluation and
checkpoints are left out.

Categories, tried on each sample's frames from the innermost outwards (the first frame matching any rule
decides; rules in CATEGORIES order for one frame). oneDNN's JIT-compiled kernels have no symbols or unwind
information: an innermost frame perf cannot name is counted as GEMM, the only JIT code a training step runs, and
as the step's on the main thread (the evaluation's share of it is negligible with the short validation text).
Needs perf (linux-perf) and permission to profile (perf_event_paranoid ≤ 1, or root).
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from subword_lm import vim_texts  # noqa: E402
import int8_accuracy  # noqa: E402  (make_data: the licenses TSV)
from compare_train_torch import S2S_ARGS  # noqa: E402

# (category, pattern on a frame's "symbol dso" text), in the order they are tried on one frame.
CATEGORIES = [
    ("allocation (malloc/free, page faults)",
     r"\b(malloc|_int_malloc|_int_free|free|cfree|aligned_alloc|posix_memalign|_mid_memalign|sysmalloc|"
     r"asm_exc_page_fault|exc_page_fault|clear_page\w*|do_anonymous_page|handle_mm_fault|__mmap|__munmap|"
     r"madvise|brk)\b|BlockCache|allocate_storage"),
    ("OpenMP fork/join/barrier", r"libgomp|\bgomp_|\bGOMP_"),
    # before GEMM: the flash kernels' own small products (gemm_small, attention_avx512.cc) are attention's
    ("attention (flash kernels forward and backward)",
     r"attention|forward_tile|backward_key_tile|backward_pair|gemm_small"),
    # before GEMM and elementwise: bf16 training's rounding passes (inside gemm_bf16's panels, or fused with the
    # bias gradient and the ReLU backward)
    ("rounding to bf16", r"convert_rows_to_bf16|convert_to_bf16|bias_grad_strip<\d+, true\b|relu_round_strip"),
    ("GEMM (oneDNN kernels, tfm's GEMM drivers, transposes)", r"dnnl|gemm|transpose|sgemm|jit_|libdnnl"),
    ("layer norm", r"layer_norm|rms_norm"),
    ("optimizer + clip", r"(?i)adam|sgd|clip|OptimizerShards|zero_grad|optim|grad_norm|norm_block_partials"),
    ("cross-entropy", r"cross_entropy|log_softmax"),
    ("elementwise / activation / dropout / embedding",
     r"activation|gelu|relu|add_forward|add_dropout|dropout|embedding|bias_grad|elementwise|accumulate_grad|"
     r"add_into|scale"),
]
GEMM = CATEGORIES[4][0]
assert GEMM.startswith("GEMM")
S2S = "seq2seq d256 3+3 FFN 1024 --batch-tokens 4096"
OTHER = "other (memcpy, autograd bookkeeping, the rest)"


def texts(tmp):
    """Vim's help files as subword_lm.py splits them, with the validation text cut to its first 3 kB."""
    train, valid = vim_texts(tmp)
    with open(valid, "rb") as f:
        text = f.read(3000)
    short = os.path.join(tmp, "valid3k.txt")
    with open(short, "wb") as out:
        out.write(text[:text.rfind(b"\n") + 1])
    return train, short


def s2s_task(tmp):
    """The seq2seq model's arguments: compare_train_torch.py's model on the licenses TSV, validated on the first 20
    pairs of its validation set (so that the evaluation is a negligible share)."""
    data = os.path.join(tmp, "data")
    int8_accuracy.make_data(data)
    short = os.path.join(tmp, "valid20.tsv")
    with open(os.path.join(data, "valid.tsv"), encoding="utf-8") as f, open(short, "w", encoding="utf-8") as out:
        out.writelines(f.readlines()[:20])
    return ["--train", os.path.join(data, "train.tsv"), "--valid", short] + S2S_ARGS


def classify(frames):
    """frames: innermost first, each 'symbol (dso)'. Returns (category, the frame that decided)."""
    if frames and frames[0].startswith("[unknown]") and "libgomp" not in frames[0]:
        return GEMM, frames[0]  # oneDNN's JIT code
    for f in frames:
        for name, pat in CATEGORIES:
            if re.search(pat, f):
                return name, f
    return OTHER, frames[0] if frames else "(no frames)"


def samples(perf_data):
    """Yields (pid, tid, frames) per sample of `perf script`."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "pid,tid,ip,sym,dso"], check=True,
                         capture_output=True, text=True, errors="replace").stdout
    head, frames = None, []
    for line in out.splitlines() + [""]:
        if not line.strip():
            if head:
                yield head[0], head[1], frames
            head, frames = None, []
        elif line[0] == "\t":  # a frame: address, symbol, (dso)
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
        else:  # a sample's header: pid/tid, right-aligned
            m = re.match(r"\s*(\d+)/(\d+)", line)
            if m:
                head = (int(m.group(1)), int(m.group(2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfm", default="build/tfm")
    ap.add_argument("--preset", default="nanogpt-baby")
    ap.add_argument("--model", choices=["preset", "s2s"], default="preset",
                    help="s2s: compare_train_torch.py's seq2seq model instead of the preset")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="tfm train --dtype")
    ap.add_argument("--wait-policy", choices=["default", "passive"], default="default",
                    help="OMP_WAIT_POLICY for tfm (default: libgomp's own, as tfm runs unless the user sets it)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--explain", type=int, default=0, metavar="K",
                    help="also print each category's K most frequent innermost frames (to check the rules)")
    a = ap.parse_args()
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if a.wait_policy == "passive":
        env["OMP_WAIT_POLICY"] = "passive"
    with tempfile.TemporaryDirectory() as tmp:
        if a.model == "s2s":
            task = s2s_task(tmp)
        else:
            train, valid = texts(tmp)
            task = ["--preset", a.preset, "--text", train, "--valid-text", valid]
        data = os.path.join(tmp, "perf.data")
        subprocess.run(["perf", "record", "-q", "-F", "999", "--call-graph", "dwarf,16384", "-o", data, "--",
                        a.tfm, "train", "--out", os.path.join(tmp, "run")] + task +
                       ["--max-steps", str(a.steps), "--eval-every", str(a.steps), "--threads", str(a.threads),
                        "--seed", "1", "--dtype", a.dtype], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        main_thread, all_threads = collections.Counter(), collections.Counter()
        deciding = collections.defaultdict(collections.Counter)  # category -> (innermost, deciding frame) -> n
        for pid, tid, frames in samples(data):
            if tid == pid:
                jit = bool(frames) and frames[0].startswith("[unknown]") and "libgomp" not in frames[0]
                if not jit and not any("ShardedStep::run" in f for f in frames):
                    continue  # the main thread outside the step (JIT code cannot be unwound: counted as the step's)
            category, frame = classify(frames)
            if tid == pid:
                main_thread[category] += 1
            all_threads[category] += 1
            deciding[category][(frames[0][:70] if frames else "", frame[:90])] += 1
    n_main, n_all = sum(main_thread.values()), sum(all_threads.values())
    if not n_main:
        sys.exit("no samples: is perf allowed to profile (perf_event_paranoid)?")
    names = [name for name, _ in CATEGORIES] + [OTHER]
    names.sort(key=lambda k: -main_thread[k])
    print(f"{S2S if a.model == 's2s' else a.preset}, {a.steps} steps, {a.threads} threads, OMP_WAIT_POLICY {a.wait_policy}: {n_main} samples of "
          f"the main thread in the step (its wall time), {n_all} of all threads (CPU time)")
    if a.markdown:
        print("\n| category | main thread | all threads |\n|---|---|---|")
        for k in names:
            print(f"| {k} | {100.0 * main_thread[k] / n_main:.1f}% | {100.0 * all_threads[k] / n_all:.1f}% |")
    else:
        print("   main    all")
        for k in names:
            print(f"  {100.0 * main_thread[k] / n_main:5.1f}%  {100.0 * all_threads[k] / n_all:5.1f}%  {k}")
    for k in names if a.explain else []:
        print(f"\n{k}: the most frequent innermost frames (all threads), and the frame that decided")
        for (inner, frame), n in deciding[k].most_common(a.explain):
            print(f"  {100.0 * n / n_all:5.1f}%  {inner}  <-  {frame}")


if __name__ == "__main__":
    main()
