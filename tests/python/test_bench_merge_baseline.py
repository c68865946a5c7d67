"""bench/merge_baseline.py: baseline timings join the bench table by (preset, routing, T)."""

import csv
import json
import random


def test_merge_matches_routings_and_reports_gaps(tmp_path, load_script):
    merge = load_script("bench/merge_baseline.py")
    rnd = random.Random()
    prefix = str(tmp_path / "table")
    rows = []
    for preset in ("dsv4-flash", "h6144-e256-k8"):
        for routing in ("uniform", "zipf1.2", "masked20"):
            for t in (1, 16, 128):
                rows.append({"preset": preset, "routing": routing, "tokens": t,
                             "time_us": round(rnd.uniform(20, 3000), 2)})
    with open(prefix + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["preset", "routing", "tokens", "time_us"])
        w.writeheader()
        w.writerows(rows)
    open(prefix + ".md", "w").write("# table\n")
    # Baselines for everything but h6144 skewed T = 128 (missing) and dsv4-flash masked T = 16
    # (an error line); routings under torch_baseline.py's names.
    expected = {}
    lines = {"uniform": [], "skewed": [], "masked": []}
    bench_name = {"uniform": "uniform", "skewed": "zipf1.2", "masked": "masked20"}
    for preset in ("dsv4-flash", "h6144-e256-k8"):
        for routing in lines:
            for t in (1, 16, 128):
                if (preset, routing, t) == ("h6144-e256-k8", "skewed", 128):
                    continue
                if (preset, routing, t) == ("dsv4-flash", "masked", 16):
                    lines[routing].append({"preset": preset, "tokens": t, "routing": routing,
                                           "error": "out of memory"})
                    continue
                us = round(rnd.uniform(500, 9000), 2)
                expected[(preset, bench_name[routing], t)] = us
                rec = {"preset": preset, "tokens": t, "routing": routing, "baseline_us": us,
                       "impl": "torch._grouped_mm bf16"}
                if preset == "dsv4-flash":
                    # torch_baseline.py --route-sets: the bench's routing names and routings.
                    rec.update(routing=bench_name[routing], routes="bench", sets=8)
                lines[routing].append(rec)
    paths = []
    for routing, recs in lines.items():
        p = tmp_path / f"base_{routing}.jsonl"
        p.write_text("noise that is not json\n" + "\n".join(json.dumps(r) for r in recs) + "\n")
        paths.append(str(p))

    matched, total = merge.merge(prefix, paths)
    assert (matched, total) == (len(expected), len(rows))
    out = list(csv.DictReader(open(prefix + ".csv")))
    for r in out:
        key = (r["preset"], r["routing"], int(r["tokens"]))
        if key in expected:
            assert float(r[merge.COLUMN]) == expected[key]
        else:
            assert r[merge.COLUMN] == ""
    md = open(prefix + ".md").read()
    assert "| dsv4-flash | masked20 | 16 |" in md and "error: out of memory" in md
    assert "| h6144-e256-k8 | zipf1.2 | 128 |" in md and "not measured" in md
    key = ("dsv4-flash", "uniform", 16)
    ours = next(float(r["time_us"]) for r in rows if (r["preset"], r["routing"], r["tokens"]) == key)
    assert f"{expected[key] / ours:.2f}x" in md
    row = next(l for l in md.splitlines() if l.startswith("| dsv4-flash | uniform | 16 |"))
    assert row.endswith("| the bench's |")
    row = next(l for l in md.splitlines() if l.startswith("| h6144-e256-k8 | uniform | 16 |"))
    assert row.endswith("| own draw |")
    row = next(l for l in md.splitlines() if l.startswith("| h6144-e256-k8 | zipf1.2 | 128 |"))
    assert row.endswith("| -- |")
