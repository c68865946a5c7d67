#!/usr/bin/env bash
# One device call for the NVFP4 MegaMoE kernel: GPU tests with both kernel versions,
# compute-sanitizer (memcheck / racecheck / synccheck) on the small case, and the EP1 bench for
# both versions. Builds nothing: run it from the repository root with the build folder carried.
#
#   bench/run_nvfp4_device.sh [build_dir] [out_dir]      e.g. bench/run_nvfp4_device.sh build-nvfp4 $OUT
set -u
build=${1:-build-nvfp4}
out=${2:-/tmp/nvfp4-device}
mkdir -p "$out"
export MEGAMOE_CACHE_DIR=${MEGAMOE_CACHE_DIR:-/tmp/megamoe-jit}
export MEGAMOE_PEER_TIMEOUT_MS=${MEGAMOE_PEER_TIMEOUT_MS:-5000}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$out/gpu.txt" 2>&1
for v in simple pipelined; do
  MEGAMOE_NVFP4_KERNEL=$v timeout 110 "$build/tests/gpu_test_nvfp4_mega_moe" > "$out/test_$v.log" 2>&1
  echo "rc=$?" >> "$out/test_$v.log"
done
for tool in memcheck racecheck synccheck; do
  MEGAMOE_NVFP4_KERNEL=pipelined timeout 40 compute-sanitizer --tool $tool \
    "$build/tests/gpu_test_nvfp4_mega_moe" --gtest_filter='*SanitizerSizedCase' > "$out/san_$tool.log" 2>&1
  echo "rc=$?" >> "$out/san_$tool.log"
done
for v in simple pipelined; do
  MEGAMOE_NVFP4_KERNEL=$v timeout 60 "$build/bench_nvfp4_mega_moe" "$out/bench_$v" > "$out/bench_$v.log" 2>&1
  echo "rc=$?" >> "$out/bench_$v.log"
done
cat "$out/gpu.txt"
for v in simple pipelined; do
  echo "== tests $v"
  grep -E "^\s+H=|FAILED|PASSED|rc=|exception|seed [0-9]+$" "$out/test_$v.log" | tail -12
done
for tool in memcheck racecheck synccheck; do grep -E "SUMMARY|rc=" "$out/san_$tool.log"; done
for v in simple pipelined; do
  echo "== bench $v"
  [ -f "$out/bench_$v.md" ] && cut -d'|' -f2-4,7-10 "$out/bench_$v.md" | tail -31 || tail -3 "$out/bench_$v.log"
done
