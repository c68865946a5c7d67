# SM clock, board power and energy per layer call in steady state (bench/NOTES.md, twentieth
# session): runs the NVFP4 bench with MEGAMOE_BENCH_SOAK_MS while nvidia-smi samples the GPU every
# 20 ms, then for each row reads the samples inside its soak windows (the first 200 ms of each
# skipped: the power controller's ramp). Prints one line per row:
#   preset routing T | us/call (soak) | SM MHz (median) | W (mean) | power-cap share | mJ/call
# mJ per call = mean power x time of the full graph's window minus the copies-only window, per
# layer call. Usage (device):
#   python3 bench/probes/power_soak.py OUT_PREFIX -- devbin/bench_nvfp4_mega_moe PREFIX
# with the bench's own MEGAMOE_BENCH_* selection in the environment (SOAK_MS defaults to 1500).
# Also reads the "SOAKW name t0 t1 launches units [unit]" lines of stream_probe
# (STREAM_PROBE_SOAK_MS; bytes read) and mma_rate_probe (MMA_PROBE_SOAK_MS; weight words):
#   name | G units/s | SM MHz | W | power-cap share | pJ per unit
# and the "SOAKC name t0 t1 calls" lines of bench/torch_baseline.py (the PyTorch baseline):
#   name | us/call | SM MHz | W | power-cap share | mJ/call
import calendar
import os
import statistics as st
import subprocess
import sys
import time

KSETS = 8  # layer calls per graph (bench/nvfp4_mega_moe.cpp, kSets)
out = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]
env = dict(os.environ)
env.setdefault("MEGAMOE_BENCH_SOAK_MS", "1500")
env.setdefault("STREAM_PROBE_SOAK_MS", "1500")
query = "timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.sw_power_cap,temperature.gpu"
probe = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                       capture_output=True, text=True)
if probe.returncode != 0:  # older drivers: no instant reading
    query = query.replace("power.draw.instant", "power.draw")
smi_file = open(out + ".smi.csv", "w")
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                        "-lms", "20"], stdout=smi_file, stderr=subprocess.STDOUT)
time.sleep(0.5)
bench = subprocess.run(cmd, env=env, capture_output=True, text=True)
time.sleep(0.3)
smi.terminate()
smi.wait()
smi_file.close()
with open(out + ".bench.log", "w") as f:
    f.write(bench.stdout + bench.stderr)
if bench.returncode != 0:
    sys.exit(f"bench failed (rc {bench.returncode}), see {out}.bench.log")

samples = []
for line in open(out + ".smi.csv"):
    p = [x.strip() for x in line.split(",")]
    try:
        day, clock = p[0].split(" ")
        ts = calendar.timegm(time.strptime(day + " " + clock.split(".")[0], "%Y/%m/%d %H:%M:%S"))
        ts += float("0." + clock.split(".")[1])
        samples.append((ts, float(p[1]), float(p[2]), p[3].lower().startswith("active"), float(p[4])))
    except (ValueError, IndexError):
        continue  # a header or an "[N/A]" reading


def window(t0, t1):
    return [s for s in samples if t0 + 0.2 <= s[0] <= t1]


rows = []
for line in bench.stdout.splitlines():
    if line.startswith("SOAKW "):
        f = line.split()
        t0, t1, n, nbytes = float(f[2]), float(f[3]), int(f[4]), float(f[5])
        unit = f[6] if len(f) > 6 else "B"
        w = window(t0, t1)
        if not w:
            rows.append(f"{f[1]}: no samples in the soak window")
            continue
        gbs = n * nbytes / (t1 - t0) / 1e9
        watts = st.mean(s[2] for s in w)
        rows.append(f"{f[1]} | {gbs:7.1f} G{unit}/s | {st.median(s[1] for s in w):6.0f} MHz | "
                    f"{watts:5.0f} W | cap {sum(s[3] for s in w) / len(w):4.2f} | "
                    f"{watts / gbs * 1e3:6.1f} pJ/{unit} | samples {len(w)}")
        continue
    if line.startswith("SOAKC "):
        f = line.split()
        t0, t1, n = float(f[2]), float(f[3]), int(f[4])
        w = window(t0, t1)
        if not w:
            rows.append(f"{f[1]}: no samples in the soak window")
            continue
        per = (t1 - t0) / n
        watts = st.mean(s[2] for s in w)
        rows.append(f"{f[1]} | {per * 1e6:8.1f} us | {st.median(s[1] for s in w):6.0f} MHz | "
                    f"{watts:5.0f} W | cap {sum(s[3] for s in w) / len(w):4.2f} | "
                    f"{watts * per * 1e3:7.3f} mJ | samples {len(w)}")
        continue
    if not line.startswith("SOAK "):
        continue
    f = line.split()
    preset, routing, T = f[1], f[2], int(f[3])
    t0, t1, t2, t3 = float(f[5]), float(f[6]), float(f[8]), float(f[9])
    c_full, c_pre = int(f[11]), int(f[12])
    wf, wp = window(t0, t1), window(t2, t3)
    if not wf or not wp:
        rows.append(f"{preset} {routing} T={T}: no samples in the soak windows")
        continue
    per_full = (t1 - t0) / (c_full * KSETS)
    per_pre = (t3 - t2) / (c_pre * KSETS)
    p_full, p_pre = st.mean(s[2] for s in wf), st.mean(s[2] for s in wp)
    mj = (p_full * per_full - p_pre * per_pre) * 1e3
    cap = sum(s[3] for s in wf) / len(wf)
    rows.append(f"{preset} {routing} T={T} | {(per_full - per_pre) * 1e6:8.1f} us | "
                f"{st.median(s[1] for s in wf):6.0f} MHz | {p_full:5.0f} W | cap {cap:4.2f} | "
                f"{mj:7.3f} mJ | {max(s[4] for s in wf):.0f} C | samples {len(wf)}")
with open(out + ".txt", "w") as f:
    f.write("\n".join(rows) + "\n")
print("\n".join(rows))
