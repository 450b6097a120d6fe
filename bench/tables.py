"""bench/tables.py — the one table printer of the benchmark scripts.

print_table(hdr, rows, markdown): Markdown for bench/RESULTS.md, or columns padded to their widest cell for the
terminal (left-aligned, or right-aligned with right=True for columns of numbers). Cells are printed with str().
"""


def print_table(hdr, rows, markdown, right=False):
    hdr = [str(h) for h in hdr]
    rows = [[str(c) for c in r] for r in rows]
    if markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join("---" for _ in hdr) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(c) for c in col) for col in zip(hdr, *rows)]
    for r in [hdr] + rows:
        print("  ".join(c.rjust(w) if right else c.ljust(w) for c, w in zip(r, widths)).rstrip())
