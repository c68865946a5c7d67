#!/usr/bin/env python3
"""Merges PyTorch baseline timings (torch_baseline.py JSON lines) into a bench table.

Usage: merge_baseline.py PREFIX BASELINE.jsonl [BASELINE.jsonl ...]

PREFIX.csv (written by bench_nvfp4_mega_moe) gains the column baseline_torch_bf16_us, which
plot.py draws; PREFIX.md gains a table of both times and their ratio. Rows are matched on
(preset, routing, tokens); torch_baseline.py names the routings uniform / skewed / masked, the
bench uniform / zipf1.2 / masked20 (the same models: Zipf(1.2) popularity, 20 % masked routes).
A baseline that failed (an "error" line) or is missing is reported in the table, never filled in.
The table says for each row whether the baseline ran the bench's own routings (torch_baseline.py
--route-sets: "routes": "bench") or a draw of its own from the same model.
Both files must come from the same device call (../shared/BENCHMARKS.md: ratios measured side by
side).
"""
import csv
import json
import sys

COLUMN = "baseline_torch_bf16_us"
ROUTING_OF_BASELINE = {"uniform": "uniform", "skewed": "zipf1.2", "masked": "masked20"}


def read_baselines(paths):
    """{(preset, bench routing, tokens): us or error string}, {same key: True when the baseline
    ran the bench's routings}."""
    out, same = {}, {}
    for path in paths:
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if "preset" not in rec or "tokens" not in rec:
                continue  # e.g. {"error": "torch is not installed"}
            routing = ROUTING_OF_BASELINE.get(rec.get("routing", "uniform"), rec.get("routing"))
            key = (rec["preset"], routing, int(rec["tokens"]))
            out[key] = rec["baseline_us"] if "baseline_us" in rec else "error: " + rec["error"]
            same[key] = rec.get("routes") == "bench"
    return out, same


def merge(prefix, paths):
    baselines, same = read_baselines(paths)
    rows = list(csv.DictReader(open(prefix + ".csv")))
    if not rows:
        raise SystemExit(f"{prefix}.csv has no rows")
    fields = list(rows[0].keys())
    if COLUMN not in fields:
        fields.append(COLUMN)
    table = [
        "",
        "## PyTorch BF16 baseline (bench/torch_baseline.py, same device call)",
        "",
        "`torch._grouped_mm` BF16 MoE: sort by expert, grouped GEMM, SwiGLU, grouped GEMM, "
        "weighted scatter-add; median CUDA-graph replay of one call, random bf16 weights.",
        "",
        "| preset | routing | T | megamoe (us) | PyTorch BF16 (us) | speedup | baseline's routings |",
        "|---|---|---|---|---|---|---|",
    ]
    matched = 0
    for r in rows:
        key = (r["preset"], r.get("routing", "uniform"), int(r["tokens"]))
        b = baselines.get(key)
        r[COLUMN] = f"{b:.2f}" if isinstance(b, (int, float)) else ""
        ours = float(r["time_us"])
        if isinstance(b, (int, float)):
            matched += 1
            cell, ratio = f"{b:.1f}", f"{b / ours:.2f}x"
        else:
            cell, ratio = (b if b else "not measured"), "--"
        source = "--" if key not in same else "the bench's" if same[key] else "own draw"
        table.append(f"| {key[0]} | {key[1]} | {key[2]} | {ours:.1f} | {cell} | {ratio} | {source} |")
    with open(prefix + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    with open(prefix + ".md", "a") as f:
        f.write("\n".join(table) + "\n")
    return matched, len(rows)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    matched, total = merge(sys.argv[1], sys.argv[2:])
    print(f"merged {matched} of {total} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
