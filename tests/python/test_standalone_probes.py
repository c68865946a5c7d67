"""The standalone probes (bench/probes/*.cu) still compile for sm_90a.

They are built only on the GPU machine, with the command in their headers, so a change to a header
they share (layer_call_timing.cuh, the kernel tree's ptx/ and selftest/ headers) would otherwise
show first as a lost device call. Compiled here with nvcc as they are there, without running.
"""

import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import ROOT

PROBES = sorted(p.name for p in (ROOT / "bench" / "probes").glob("*.cu"))


def nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    cuda = pathlib.Path(os.environ.get("CUDA_HOME", os.environ.get("CUDA_PATH", "/usr/local/cuda")))
    candidate = cuda / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def test_every_probe_is_listed():
    assert "t1_stream_floor.cu" in PROBES and "fused_t1_feasibility.cu" in PROBES, PROBES


@pytest.mark.parametrize("probe", PROBES)
def test_probe_compiles_for_sm90a(probe, tmp_path):
    compiler = nvcc()
    if compiler is None:
        pytest.skip("no nvcc on PATH or under CUDA_HOME: the probes are built on the GPU machine")
    r = subprocess.run([compiler, "-O3", "-std=c++20", "-gencode=arch=compute_90a,code=sm_90a",
                        "-I", str(ROOT / "kernels"), "-c", "-o", str(tmp_path / "probe.o"),
                        str(ROOT / "bench" / "probes" / probe)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{probe}: {r.stdout[-3000:]}{r.stderr[-3000:]}"
