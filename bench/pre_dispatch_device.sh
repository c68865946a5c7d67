#!/usr/bin/env bash
# Pre-dispatch on a GPU machine: the GPU tests (each test in its own process, so one crash hides
# nothing) and the benchmark, run from a build directory (default build-predispatch). Logs and
# Markdown tables go to $OUT (default ./out). A failing test is rerun with MEGAMOE_PDL=0.
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$O/bench.log"
for bin in gpu_test_pre_dispatch gpu_test_peer_memory; do
  for t in $("$B/tests/$bin" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
    if timeout 120 "$B/tests/$bin" --gtest_filter="$t" >>"$O/$bin.log" 2>&1; then
      echo "PASS $t"
    else
      echo "FAIL $t (rc $?); rerun with MEGAMOE_PDL=0:"
      MEGAMOE_PDL=0 timeout 120 "$B/tests/$bin" --gtest_filter="$t" --gtest_brief=1 2>&1 |
        tee -a "$O/pdl0.log" | tail -5
      grep -B2 -A6 "Failure" "$O/$bin.log" | head -30
    fi
  done
done | tee "$O/tests.txt"
grep -h "^NCCL " "$O"/gpu_test_peer_memory.log | head -1
timeout 60 "$B/bench_pre_dispatch" "$O/bench_h7168.md" 2>&1 | tee -a "$O/bench.log"
timeout 40 "$B/bench_pre_dispatch" "$O/bench_h4096.md" --hidden 4096 2>&1 | tee -a "$O/bench.log"
