# Summarizes the TLW lines of a bench run on the kernels wide_wait_accounting.py instrumented:
# phase marks (us from the first CTA's entry; min / median / max over consumer warps) and the
# per-warp medians of the waits.
#   python3 bench/probes/wide_wait_report.py LOG [LOG.gz ...]
import gzip, sys, statistics as st
for f in sys.argv[1:]:
    op = gzip.open if f.endswith(".gz") else open
    rows = [l.split() for l in op(f, "rt") if l.startswith("TLW ")]
    cons = [list(map(int, r[4:])) for r in rows if int(r[3]) < 16]
    prod = [list(map(int, r[4:])) for r in rows if int(r[3]) == 16]
    t0 = min(c[0] for c in cons)
    ghz = st.median([((c[24] - c[23]) % 2**32) / (c[13] - c[0]) for c in cons if c[13] > c[0]])
    end = st.median([(c[13] - t0) / 1e3 for c in cons])
    print(f"== {f}: {len(cons)} consumer warps, {len(prod)} producers, clock {ghz:.3f} GHz, end {end:.1f} us")
    for slot, lab in ((26, "FC1 token decode, before its fence"), (27, "FC2 token decode, before its fence")):
        v = [(c[slot] - t0) / 1e3 for c in cons if len(c) > slot and c[slot] >= t0]
        if v: print(f"    {lab:36s} {min(v):8.2f} {st.median(v):8.2f} {max(v):8.2f}")
    names = ["entry", "phase 0 done", "routes barrier done", "FC1 tokens decoded", "after tokens barrier",
             "1st FC1 stage full", "FC1 end", "after FC1 barrier", "FC2 tokens decoded",
             "after FC2 tokens barrier", "1st FC2 stage full", "FC2 end", "after final barrier", "end"]
    print("  consumer marks (us from the first entry): min / median / max")
    for i, n in enumerate(names):
        v = [(c[i] - t0) / 1e3 for c in cons if c[i] >= t0]
        if v: print(f"    {n:26s} {min(v):8.2f} {st.median(v):8.2f} {max(v):8.2f}")
    us = lambda cyc: cyc / ghz / 1e3
    for ph, (a, b, lab) in enumerate([(14, 18, "FC1"), (19, 25, "FC2")]):
        span = [(c[6] - c[5]) / 1e3 if ph == 0 else (c[11] - c[10]) / 1e3 for c in cons]
        full = [us(c[a]) for c in cons]; take = [us(c[a + 1]) for c in cons]
        sync = [us(c[a + 2]) for c in cons]; epi = [us(c[a + 3]) for c in cons]
        units = [c[b] for c in cons]
        print(f"  {lab}: span median {st.median(span):.1f} us; per warp medians: stage waits {st.median(full):.1f} us,"
              f" unit waits {st.median(take):.1f}, tile syncs {st.median(sync):.1f}, epilogues {st.median(epi):.1f},"
              f" units {st.median(units)} (min {min(units)} max {max(units)})")
    pm = [((p[2] - t0) / 1e3, (p[4] - t0) / 1e3, (p[5] - t0) / 1e3, (p[13] - t0) / 1e3) for p in prod]
    print("  producer: first copy / tokens ready FC1 / tokens ready FC2 / end (median us):",
          " / ".join(f"{st.median([x[i] for x in pm]):.1f}" for i in range(4)))
    print(f"  producer waits for free stages FC1 {st.median([us(p[14]) for p in prod]):.1f} us, FC2 {st.median([us(p[19]) for p in prod]):.1f} us, tokens {st.median([us(p[15]) for p in prod]):.1f} us")
