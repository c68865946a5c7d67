#!/usr/bin/env python3
"""Plots a benchmark CSV: time vs tokens per preset/routing, with the floor and the baselines.

Usage: plot.py RESULTS.csv OUT.png
CSV columns (written by bench_nvfp4_mega_moe and merged baselines): preset, routing, tokens,
time_us, floor_us, and optional baseline columns named baseline_<name>_us.
"""
import csv
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(open(sys.argv[1])))
    groups = defaultdict(list)
    for r in rows:
        groups[(r["preset"], r.get("routing", "uniform"))].append(r)
    cols = min(3, len(groups))
    nrows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4.5 * nrows), squeeze=False)
    for ax, ((preset, routing), rs) in zip(axes.flat, sorted(groups.items())):
        rs.sort(key=lambda r: int(r["tokens"]))
        t = [int(r["tokens"]) for r in rs]

        def series(col):
            return [float(r[col]) if r.get(col) not in (None, "") else float("nan") for r in rs]

        ax.plot(t, series("time_us"), "o-", label="megamoe")
        ax.plot(t, series("floor_us"), "k--", label="weight-byte floor")
        for col in sorted(k for k in rs[0] if k.startswith("baseline_") and k.endswith("_us")):
            ax.plot(t, series(col), "s:", label=col[len("baseline_"):-len("_us")])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens per rank")
        ax.set_ylabel("time (µs)")
        ax.set_title(f"{preset} ({routing})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
