#!/usr/bin/env bash
# Collects the binaries a device call needs into devbin/ (git-ignored; carried to the GPU
# machine by the device tool): the tool, the GPU tests and the benchmarks of a Release build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# The binaries embed the kernel tree of their build: bring the build up to date first, or a device
# run would test older kernels than the commit it names (runs 208-210, bench/NOTES.md).
cmake --build "$build" -j"$(nproc)" >/dev/null
rm -rf devbin && mkdir devbin
cp "$build/megamoe" devbin/
cp "$build"/tests/gpu_test_* devbin/ 2>/dev/null || true
rm -f devbin/*.cmake
cp "$build"/bench_* devbin/
git rev-parse --short HEAD >devbin/COMMIT
[ -z "$(git status --porcelain)" ] || echo "+uncommitted" >>devbin/COMMIT
du -sh devbin
