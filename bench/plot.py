#!/usr/bin/env python3
"""Plots a benchmark CSV: time vs tokens per preset/routing, with the floor and the baselines.

Usage: plot.py RESULTS.csv OUT.png
CSV columns (written by bench_nvfp4_mega_moe and merged baselines): preset, routing, tokens,
time_us, floor_us, and optional baseline columns named baseline_<name>_us. Uniform panels also
mark the DeepGEMM FP8 figures that BENCHMARKS.md quotes (labelled as quoted, not measured here).
"""
import csv
import sys
from collections import defaultdict

# DeepGEMM's SM90 FP8 MegaMoE on one H200, all experts local, uniform routing: figures quoted in
# ../shared/BENCHMARKS.md (not measured by us), drawn as reference points only.
QUOTED_DEEPGEMM_FP8_US = {
    "dsv4-flash": {1: 118.0, 16: 572.0, 128: 1600.0},
    "h6144-e256-k8": {1: 189.0, 16: 1490.0, 128: 3610.0},
}

# Labels of the baseline columns bench/merge_baseline.py writes.
BASELINE_LABELS = {"torch_bf16": "PyTorch _grouped_mm BF16 (same run)"}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    try:
        import matplotlib
    except ImportError:
        sys.stderr.write("plot.py needs matplotlib: pip install -r bench/requirements-plot.txt\n")
        return 1

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
            name = col[len("baseline_"):-len("_us")]
            ax.plot(t, series(col), "s:", label=BASELINE_LABELS.get(name, name))
        quoted = QUOTED_DEEPGEMM_FP8_US.get(preset, {})
        if routing == "uniform" and quoted:
            qt = sorted(quoted)
            ax.plot(qt, [quoted[x] for x in qt], "x", color="gray", markersize=8,
                    label="DeepGEMM FP8 (quoted, BENCHMARKS.md)")
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
