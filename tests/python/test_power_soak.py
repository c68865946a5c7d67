"""bench/probes/power_soak.py: soak windows of the bench and the probes against nvidia-smi samples."""

import random
import time


def smi_line(t, mhz, watts, capped, celsius):
    whole = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(int(t)))
    return f"{whole}.{int(round((t % 1) * 1000)):03d}, {mhz}, {watts}, " \
           f"{'Active' if capped else 'Not Active'}, {celsius}"


def test_windows_power_clock_and_energy(load_script):
    ps = load_script("bench/probes/power_soak.py")
    rnd = random.Random()
    base = 1796057000 + rnd.randrange(100000)  # unix seconds, whole
    full_w, pre_w = rnd.uniform(600, 700), rnd.uniform(100, 200)
    lines = ["timestamp, clocks.sm [MHz], ...", "junk [N/A]"]
    for i in range(100):  # every 20 ms over 2 s, in whole milliseconds
        t = base + i * 20 / 1000
        in_ramp = i < 10
        if i < 50:
            lines.append(smi_line(t, 1980 if in_ramp else 1800, 900 if in_ramp else full_w,
                                  not in_ramp, 55))
        elif i >= 60:
            lines.append(smi_line(t, 1980, pre_w, False, 50))
    samples = ps.parse_samples(lines)
    assert len(samples) == len(lines) - 2
    c_full, c_pre = 100, 4000
    prog = [
        "| a table line the summary ignores |",
        f"SOAK dsv4-flash uniform 512 full {base:.6f} {base + 1.0:.6f} "
        f"pre {base + 1.0:.6f} {base + 2.0:.6f} calls {c_full} {c_pre}",
        f"SOAKW stream_x {base:.6f} {base + 1.0:.6f} 10 2000000000",
        f"SOAKW mma_y {base:.6f} {base + 1.0:.6f} 4 5000000000 word",
        f"SOAKC torch_z {base:.6f} {base + 1.0:.6f} 400",
        f"SOAKC outside {base + 5:.6f} {base + 6:.6f} 400",
    ]
    rows = ps.summarize(prog, samples)
    assert len(rows) == 5
    per_full, per_pre = 1.0 / (c_full * ps.KSETS), 1.0 / (c_pre * ps.KSETS)
    us = (per_full - per_pre) * 1e6
    mj = (full_w * per_full - pre_w * per_pre) * 1e3
    assert rows[0].startswith("dsv4-flash uniform T=512 | ")
    assert f"{us:8.1f} us" in rows[0] and "1800 MHz" in rows[0] and "cap 1.00" in rows[0]
    assert f"{full_w:5.0f} W" in rows[0] and f"{mj:7.3f} mJ" in rows[0]
    assert f"{20.0:7.1f} GB/s" in rows[1] and f"{full_w / 20.0 * 1e3:6.1f} pJ/B" in rows[1]
    assert f"{20.0:7.1f} Gword/s" in rows[2] and "pJ/word" in rows[2]
    assert f"{1e6 / 400:8.1f} us" in rows[3] and f"{full_w / 400 * 1e3:7.3f} mJ" in rows[3]
    assert rows[4] == "outside: no samples in the soak window"


def test_usage_error_without_separator(load_script):
    ps = load_script("bench/probes/power_soak.py")
    try:
        ps.main(["power_soak.py", "out", "prog"])
    except SystemExit as e:
        assert "usage" in str(e)
    else:
        raise AssertionError("no usage error")


def test_clear_error_without_nvidia_smi(load_script, monkeypatch, tmp_path):
    ps = load_script("bench/probes/power_soak.py")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi on it
    try:
        ps.main(["power_soak.py", str(tmp_path / "out"), "--", "true"])
    except SystemExit as e:
        assert "nvidia-smi not found" in str(e)
    else:
        raise AssertionError("no error without nvidia-smi")
