#!/usr/bin/python3
"""bench/many_shapes.py — a service's calls: one loaded layer, called with a new sequence length nearly every time.

Each packed weight keeps the oneDNN primitives (compiled products) of the row counts it used last; a row count it
no longer keeps is made again, from oneDNN's own primitive cache while that holds it. This script measures what that
costs where it costs most — every call a new length, cycling through more lengths than a weight keeps — and what a
process holds after: builds of the Python package are run alternately, each in a fresh process per round, and the
medians printed.

    /usr/bin/python3 bench/many_shapes.py --python OLD/python NEW/python [--rounds 5] [--lengths 200] [--passes 4]

Per build: the median over rounds of one pass's seconds (a pass: lengths 1..L, batch 1, d_model 256, 4 heads,
FFN 1024, one thread), the first pass (which makes every primitive) apart, and the process's RSS at the end.
"""

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, torch, tfm
tfm.set_num_threads(1)
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).eval()
fast = tfm.from_torch(layer)
rng = np.random.default_rng(0)
xs = [rng.standard_normal((1, n, 256), dtype=np.float32) for n in range(1, int(sys.argv[2]) + 1)]
passes = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    for x in xs:
        fast(x)
    passes.append(time.perf_counter() - t)
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
print(json.dumps({"first": passes[0], "later": statistics.median(passes[1:]), "rss_mb": rss}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", nargs="+", required=True, help="PYTHONPATH of each build's package")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lengths", type=int, default=200)
    ap.add_argument("--passes", type=int, default=4)
    a = ap.parse_args()
    runs = {p: [] for p in a.python}
    for _ in range(a.rounds):
        for p in a.python:  # alternately, so that the machine's drift falls on every build alike
            out = subprocess.run([sys.executable, "-c", CHILD, p, str(a.lengths), str(a.passes)], check=True,
                                 capture_output=True, text=True, env={"OMP_WAIT_POLICY": "passive", "PATH": "/usr/bin"})
            runs[p].append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["later"] for r in runs[a.python[0]])
    print(f"| build | first pass (s) | later passes (s) | vs the first build | RSS at the end (MB) |")
    print("|---|---|---|---|---|")
    for p, rs in runs.items():
        later = statistics.median(r["later"] for r in rs)
        print(f"| {p} | {statistics.median(r['first'] for r in rs):.3f} | {later:.3f} | {later / base:.3f}× | "
              f"{statistics.median(r['rss_mb'] for r in rs):.0f} |")


if __name__ == "__main__":
    main()
