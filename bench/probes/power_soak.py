# SM clock, board power and energy per layer call in steady state (bench/NOTES.md, twentieth
# session): runs a program that prints soak windows while nvidia-smi samples the GPU every 20 ms,
# then summarizes the samples inside each window (its first 200 ms skipped: the power
# controller's ramp). The bench's timed replays are too short for the driver's power readings;
# a soak window of a second or more is not. Window lines it reads from the program's stdout:
#   SOAK preset routing T full t0 t1 pre t2 t3 calls c1 c2   bench_nvfp4_mega_moe with
#       MEGAMOE_BENCH_SOAK_MS: the layer graph's window and the input copies' alone
#       -> preset routing T | us/call | SM MHz | W | power-cap share | mJ/call | max C
#   SOAKW name t0 t1 launches units [unit]   stream_probe (STREAM_PROBE_SOAK_MS, bytes read) and
#       mma_rate_probe (MMA_PROBE_SOAK_MS, weight words)
#       -> name | G units/s | SM MHz | W | power-cap share | pJ per unit
#   SOAKC name t0 t1 calls   bench/torch_baseline.py with MEGAMOE_BENCH_SOAK_MS
#       -> name | us/call | SM MHz | W | power-cap share | mJ/call
# (t in unix seconds.) mJ per layer call = mean power x time per call, for the bench minus the
# copies-only window's share. Usage (device):
#   python3 bench/probes/power_soak.py OUT_PREFIX -- devbin/bench_nvfp4_mega_moe PREFIX
# with the program's own selection in the environment (the SOAK_MS variables default to 1500).
# Writes OUT_PREFIX.smi.csv, .bench.log (the program's output) and .txt (the summary).
import calendar
import os
import statistics as st
import subprocess
import sys
import time

KSETS = 8  # layer calls per graph (bench/nvfp4_mega_moe.cpp, kSets)
RAMP_S = 0.2  # skipped at the start of each window
QUERY = "timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.sw_power_cap,temperature.gpu"


class Sample:
    def __init__(self, t, mhz, watts, capped, celsius):
        self.t, self.mhz, self.watts, self.capped, self.celsius = t, mhz, watts, capped, celsius


def parse_samples(lines):
    """nvidia-smi csv lines (noheader, nounits; timestamps in UTC) -> Samples; lines that do not
    parse (a header, an "[N/A]" reading) are skipped."""
    out = []
    for line in lines:
        p = [x.strip() for x in line.split(",")]
        try:
            day, clock = p[0].split(" ")
            whole, frac = clock.split(".")
            t = calendar.timegm(time.strptime(day + " " + whole, "%Y/%m/%d %H:%M:%S"))
            out.append(Sample(t + float("0." + frac), float(p[1]), float(p[2]),
                              p[3].lower() == "active", float(p[4])))
        except (ValueError, IndexError):
            continue
    return out


def window(samples, t0, t1):
    return [s for s in samples if t0 + RAMP_S <= s.t <= t1]


def stats(w):
    """(median MHz, mean W, share capped, max C) of a window's samples."""
    return (st.median(s.mhz for s in w), st.mean(s.watts for s in w),
            sum(s.capped for s in w) / len(w), max(s.celsius for s in w))


def summarize(program_lines, samples):
    """One summary line per window line of the program's output."""
    rows = []
    for line in program_lines:
        f = line.split()
        if not f or f[0] not in ("SOAK", "SOAKW", "SOAKC"):
            continue
        if f[0] == "SOAK":
            name = f"{f[1]} {f[2]} T={f[3]}"
            t0, t1, t2, t3 = float(f[5]), float(f[6]), float(f[8]), float(f[9])
            wf, wp = window(samples, t0, t1), window(samples, t2, t3)
            if not wf or not wp:
                rows.append(f"{name}: no samples in the soak windows")
                continue
            per_full = (t1 - t0) / (int(f[11]) * KSETS)
            per_pre = (t3 - t2) / (int(f[12]) * KSETS)
            mhz, watts, cap, celsius = stats(wf)
            mj = (watts * per_full - stats(wp)[1] * per_pre) * 1e3
            rows.append(f"{name} | {(per_full - per_pre) * 1e6:8.1f} us | {mhz:6.0f} MHz | "
                        f"{watts:5.0f} W | cap {cap:4.2f} | {mj:7.3f} mJ | {celsius:.0f} C | "
                        f"samples {len(wf)}")
            continue
        t0, t1, n = float(f[2]), float(f[3]), int(f[4])
        w = window(samples, t0, t1)
        if not w:
            rows.append(f"{f[1]}: no samples in the soak window")
            continue
        mhz, watts, cap, _ = stats(w)
        if f[0] == "SOAKW":
            unit = f[6] if len(f) > 6 else "B"
            rate = n * float(f[5]) / (t1 - t0) / 1e9
            rows.append(f"{f[1]} | {rate:7.1f} G{unit}/s | {mhz:6.0f} MHz | {watts:5.0f} W | "
                        f"cap {cap:4.2f} | {watts / rate * 1e3:6.1f} pJ/{unit} | samples {len(w)}")
        else:
            per = (t1 - t0) / n
            rows.append(f"{f[1]} | {per * 1e6:8.1f} us | {mhz:6.0f} MHz | {watts:5.0f} W | "
                        f"cap {cap:4.2f} | {watts * per * 1e3:7.3f} mJ | samples {len(w)}")
    return rows


def main(argv):
    if "--" not in argv or argv.index("--") != 2 or len(argv) < 4:
        sys.exit("usage: power_soak.py OUT_PREFIX -- PROGRAM [ARGS...]")
    out, cmd = argv[1], argv[3:]
    env = dict(os.environ)
    for var in ("MEGAMOE_BENCH_SOAK_MS", "STREAM_PROBE_SOAK_MS", "MMA_PROBE_SOAK_MS"):
        env.setdefault(var, "1500")
    query = QUERY
    try:
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                               capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("power_soak.py: nvidia-smi not found (it samples a GPU machine's clock and power)")
    if probe.returncode != 0:  # older drivers: no instant reading
        query = query.replace("power.draw.instant", "power.draw")
    with open(out + ".smi.csv", "w") as smi_file:
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}",
                                "--format=csv,noheader,nounits", "-lms", "20"],
                               stdout=smi_file, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        program = subprocess.run(cmd, env=env, capture_output=True, text=True)
        time.sleep(0.3)
        smi.terminate()
        smi.wait()
    with open(out + ".bench.log", "w") as f:
        f.write(program.stdout + program.stderr)
    if program.returncode != 0:
        sys.exit(f"{cmd[0]} failed (rc {program.returncode}), see {out}.bench.log")
    with open(out + ".smi.csv") as f:
        rows = summarize(program.stdout.splitlines(), parse_samples(f))
    with open(out + ".txt", "w") as f:
        f.write("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv)
