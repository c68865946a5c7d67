#!/usr/bin/env bash
# Pre-dispatch on a GPU machine: the GPU tests and the benchmark, run from a build directory
# (default build-predispatch); logs and Markdown tables go to $OUT (default ./out).
set -u
B=${1:-build-predispatch}
O=${OUT:-out}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
if [ -z "${MEGAMOE_NCCL_LIBRARY:-}" ]; then
  lib=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  if [ -n "$lib" ] && [ -f "$lib" ]; then export MEGAMOE_NCCL_LIBRARY=$lib; fi
fi
echo "nccl: ${MEGAMOE_NCCL_LIBRARY:-libnccl.so.2 from the loader path}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$O/gpu.txt"
timeout 150 "$B/tests/gpu_test_pre_dispatch" --gtest_brief=1 2>&1 | tee "$O/test_pre_dispatch.log" | tail -40
timeout 60 "$B/tests/gpu_test_peer_memory" --gtest_brief=1 2>&1 | tee "$O/test_peer_memory.log" | tail -20
timeout 60 "$B/bench_pre_dispatch" "$O/bench_h7168.md" 2>&1 | tee "$O/bench.log"
timeout 40 "$B/bench_pre_dispatch" "$O/bench_h4096.md" --hidden 4096 2>&1 | tee -a "$O/bench.log"
