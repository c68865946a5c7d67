# Summarizes the TLW lines of a bench run on the kernels wide_wait_accounting.py instrumented:
# each phase's duration between two marks of the same warp (min / median / max over consumer
# warps) and the per-warp medians of the waits.
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
    for slot, lab, frm in ((26, "FC1 token decode, to before its fence", 2), (27, "FC2 token decode, to before its fence", 7)):
        v = [(c[slot] - c[frm]) / 1e3 for c in cons if len(c) > slot and c[slot] >= c[frm] > 0]
        if v: print(f"    {lab:40s} {min(v):8.2f} {st.median(v):8.2f} {max(v):8.2f}")
    # Phase durations from two marks of the same warp. A mark placed right after a grid barrier
    # reads %globaltimer before that barrier's wait ends (ptxas may schedule the timer read above
    # the barrier; runs 149-157 had releases before the last arrival by up to 57 us while the same
    # configuration's first call on a zeroed buffer was bitwise equal to the oracle, run 158): so
    # a "barrier (wait)" row reads low and the phase after it carries that wait.
    spans = [("entry -> phase 0 done", 0, 1), ("route scan + barrier", 1, 2),
             ("FC1 token decode", 2, 3), ("FC1 tokens barrier", 3, 4),
             ("-> 1st FC1 stage full", 4, 5), ("entry -> 1st FC1 stage full", 0, 5),
             ("FC1 units", 5, 6), ("FC1 barrier (wait)", 6, 7), ("FC2 token decode", 7, 8),
             ("FC2 tokens barrier", 8, 9), ("-> 1st FC2 stage full", 9, 10), ("FC2 units", 10, 11),
             ("final barrier (wait)", 11, 12), ("combine", 12, 13), ("entry -> end", 0, 13)]
    print("  per-warp phase durations (us): min / median / max")
    for n, a, b in spans:
        v = [(c[b] - c[a]) / 1e3 for c in cons if c[b] >= c[a] > 0]
        if v: print(f"    {n:28s} {min(v):8.2f} {st.median(v):8.2f} {max(v):8.2f}")
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
