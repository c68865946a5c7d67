"""The probes that instrument a copy of the kernels (bench/probes/kernel_patch.py) still apply.

Each edits the kernel sources by exact patterns and stops with the pattern it missed when a kernel
change moved one; run 206 lost its timeline that way, and wide_wait_accounting.py had been stale
since the tile choice moved its anchor. Applying them here, where CI runs, catches that early.
"""

import subprocess
import sys

import pytest

from conftest import ROOT

PROBES = ["ep_timeline.py", "start_timeline.py", "barrier_check.py", "wide_wait_accounting.py",
          "wide_ablation.py", "wide_l2_variants.py", "dead_rows_row0.py", "pipelined_ablation.py"]


@pytest.mark.parametrize("probe", PROBES)
def test_probe_applies_to_the_current_kernels(probe, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "probes" / probe), str(tmp_path / "k")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{probe}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
    assert any((tmp_path / "k").rglob("*.cuh")), f"{probe} wrote no kernel tree under {tmp_path}"
