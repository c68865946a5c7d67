#!/usr/bin/env bash
# One device call: runs the chosen stages from a folder of prebuilt binaries and writes every log
# under OUT, printing a short summary last. Builds nothing (binaries come from scripts/devbin.sh).
#
#   bench/device_session.sh BIN OUT STAGE...
#   stages: tests nvfp4[-simple|-pipelined] bench[-simple|-pipelined] soak predispatch sanitizer demo
#           multigpu python
#   (soak: the bench's uniform rows in steady state, 1 s of replays a row beside nvidia-smi:
#   bench/probes/power_soak.py; run it after `bench`, whose timed rows it would otherwise heat)
set -u
B=$1
OUT_DIR=$2
shift 2
# Logs go to a scratch folder and come back as one archive (the device tool returns few files);
# the summary is written straight into OUT so that it survives a call cut short.
O=$(mktemp -d)
mkdir -p "$OUT_DIR"
export MEGAMOE_CACHE_DIR=${MEGAMOE_CACHE_DIR:-/tmp/megamoe-jit}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1  # never NVLink multicast here
export MEGAMOE_PEER_TIMEOUT_MS=${MEGAMOE_PEER_TIMEOUT_MS:-10000}
if [ -z "${MEGAMOE_NCCL_LIBRARY:-}" ]; then
  lib=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -n "$lib" ] && [ -f "$lib" ] && export MEGAMOE_NCCL_LIBRARY=$lib
fi
S="$OUT_DIR/summary.txt"
{
  echo "date: $(date -u +%FT%TZ)  commit: $(cat "$B/COMMIT" 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
} >"$S"

# Each test in its own process, so one crash hides nothing.
run_tests() {  # binary, label, per-test timeout
  local bin=$1 label=$2 limit=$3 t
  for t in $("$B/$bin" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
    # SKIP_TESTS: a regex of tests another stage covers.
    if [ -n "${SKIP_TESTS:-}" ] && [[ $t =~ $SKIP_TESTS ]]; then continue; fi
    if timeout "$limit" "$B/$bin" --gtest_filter="$t" >>"$O/$label.log" 2>&1; then
      echo "PASS $label $t" >>"$S"
    else
      echo "FAIL $label $t (rc $?)" >>"$S"
    fi
  done
}

for stage in "$@"; do
  echo "== $stage $(date -u +%T)" >>"$S"
  case $stage in
    tests)
      "$B/megamoe" info >>"$S" 2>&1
      for bin in gpu_test_jit_gpu gpu_test_num_sms gpu_test_peer_memory gpu_test_pre_dispatch \
        gpu_test_multi_gpu; do
        [ -x "$B/$bin" ] && run_tests "$bin" "$bin" 120
      done ;;
    nvfp4) run_tests gpu_test_nvfp4_mega_moe "nvfp4_${MEGAMOE_NVFP4_KERNEL:-default}" 150 ;;
    nvfp4-simple | nvfp4-pipelined)
      v=${stage#nvfp4-}
      MEGAMOE_NVFP4_KERNEL=$v run_tests gpu_test_nvfp4_mega_moe "nvfp4_$v" 150 ;;
    bench | bench-simple | bench-pipelined)
      v=${stage#bench}
      v=${v#-}
      v=${v:-${MEGAMOE_NVFP4_KERNEL:-default}}
      if [ "$v" = default ]; then
        timeout 120 "$B/bench_nvfp4_mega_moe" "$O/nvfp4_$v" >"$O/bench_$v.log" 2>&1
      else
        MEGAMOE_NVFP4_KERNEL=$v timeout 120 "$B/bench_nvfp4_mega_moe" "$O/nvfp4_$v" \
          >"$O/bench_$v.log" 2>&1
      fi
      echo "rc=$?" >>"$S"
      [ -f "$O/nvfp4_$v.md" ] && grep -E "uniform|HBM" "$O/nvfp4_$v.md" >>"$S" ;;
    soak)
      MEGAMOE_BENCH_SOAK_MS=1000 MEGAMOE_BENCH_ROUTINGS=uniform timeout 200 python3 \
        bench/probes/power_soak.py "$O/soak" -- "$B/bench_nvfp4_mega_moe" "$O/soak_table" \
        >/dev/null 2>"$O/soak.err"
      echo "rc=$?" >>"$S"
      cat "$O/soak.txt" >>"$S" 2>/dev/null
      tail -2 "$O/soak.err" >>"$S" ;;
    predispatch)
      timeout 90 "$B/bench_pre_dispatch" "$O/pre_dispatch_h7168.md" >"$O/pre_dispatch.log" 2>&1
      echo "rc=$?" >>"$S"
      grep -E "nvfp4|mxfp4|fp8|Copy|copy" "$O/pre_dispatch_h7168.md" >>"$S" ;;
    sanitizer)
      for tool in memcheck racecheck synccheck; do
        MEGAMOE_PEER_TIMEOUT_MS=60000 timeout 150 compute-sanitizer --tool $tool \
          "$B/gpu_test_nvfp4_mega_moe" --gtest_filter='*SanitizerSizedCase' >"$O/san_$tool.log" 2>&1
        echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/san_$tool.log" | tail -1)" >>"$S"
      done ;;
    demo)
      timeout 240 "$B/megamoe" demo --preset dsv4-flash --tokens 128 >"$O/demo.log" 2>&1
      echo "rc=$?" >>"$S"
      tail -12 "$O/demo.log" >>"$S" ;;
    multigpu)
      for preset in ${MULTI_GPU_PRESETS:-dsv4-flash}; do
        timeout 200 "$B/megamoe" bench --ranks "$(nvidia-smi -L | wc -l)" --preset $preset \
          --tokens 1,8,16,128 --check-virtual --out "$O/multi_gpu_$preset" \
          >"$O/multi_gpu_$preset.log" 2>&1
        echo "$preset rc=$?" >>"$S"
        tail -12 "$O/multi_gpu_$preset.log" >>"$S"
      done ;;
    python)
      export CC=/usr/bin/gcc CXX=/usr/bin/g++ CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
      timeout 200 bash -c 'python3 -m pip install -q --no-build-isolation --no-deps . &&
        PYTHONUNBUFFERED=1 python3 -m pytest tests/python -q -rs' >"$O/python.log" 2>&1
      echo "rc=$?" >>"$S"
      tail -15 "$O/python.log" >>"$S" ;;
    *) echo "unknown stage $stage" >>"$S" ;;
  esac
done
echo "== end $(date -u +%T)" >>"$S"
tar czf "$OUT_DIR/logs.tgz" -C "$O" .
cat "$S"
