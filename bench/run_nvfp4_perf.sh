#!/usr/bin/env bash
# One device call for tuning the pipelined NVFP4 MegaMoE kernel (bench/NOTES.md, "NVFP4"). Builds
# nothing: run it from the repository root with a folder holding gpu_test_nvfp4_mega_moe and
# bench_nvfp4_mega_moe. Stages run in the order given while time is left (each is skipped when
# fewer than 8 of SECONDS remain); the summary comes last, the logs as OUT/logs.tgz.
#
#   bench/run_nvfp4_perf.sh BIN OUT SECONDS STAGE...
#   stages: test      the full GPU test with the pipelined version, each test in its own process
#           wtest     the same with the wide version forced (cases it does not build skip)
#           dtest     the same with the default selection (wide from BLOCK_M 16 on)
#           wide      EP1 bench, wide version forced at every T
#           auto      EP1 bench, default selection
#           bench     EP1 bench, pipelined, default ring depth
#           bench4    EP1 bench, pipelined, ring 4
#           bench@KS/RG  EP1 bench, pipelined, K split KS and ring depth RG (e.g. bench@2/8)
#           stages@N  EP1 bench, pipelined, N shared-memory weight stages (0: register ring)
#           sb@N      EP1 bench, N blocks per consumer warp in a shared-memory stage (1, 2 or 4)
#           rb@N      EP1 bench, N split-K exchange buffers (1 or 2)
#           base[@L]  EP1 bench with the baseline build BIN/base/bench_nvfp4_mega_moe (another
#                     commit, for a side-by-side comparison in one call; L labels a repeat)
#           fp8       EP1 bench with FP8 combine slots (config.fp8_combine)
#           simple    EP1 bench, simple
#           ncu       stall reasons of one launch (NCU_PRESET, default dsv4-flash, uniform, T = NCU_TOKENS,
#                     default 128, kernel NCU_KERNEL, default pipelined)
#           san       racecheck + memcheck + synccheck on the small case (pipelined)
#           wsan      the same with the wide version forced
#   e.g. bench/run_nvfp4_perf.sh perfbin $OUT 135 test bench
set -u
bin=$1
final=$2
budget=$3
shift 3
mkdir -p "$final"
# Logs go to a scratch folder and come back as one archive (the device tool returns few files).
out=$(mktemp -d)
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
export MEGAMOE_CACHE_DIR=${MEGAMOE_CACHE_DIR:-/tmp/megamoe-jit}
export MEGAMOE_PEER_TIMEOUT_MS=${MEGAMOE_PEER_TIMEOUT_MS:-5000}
export MEGAMOE_NVFP4_KERNEL=pipelined
S=$out/summary.txt
{
  echo "date $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
} >"$S"

step() {  # label, limit, command...
  local label=$1 limit=$2
  shift 2
  local l t0
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -lt 8 ]; then
    echo "SKIP $label (no time)" >>"$S"
    return 1
  fi
  t0=$(date +%s)
  timeout "$limit" "$@" >>"$out/$label.log" 2>&1
  local rc=$?
  echo "$label rc=$rc $(($(date +%s) - t0))s" >>"$S"
  return $rc
}

benches=()
for stage in "$@"; do
  case $stage in
    test | wtest | dtest)
      kernel=pipelined
      [ "$stage" = wtest ] && kernel=wide
      [ "$stage" = dtest ] && kernel=
      for t in $("$bin/gpu_test_nvfp4_mega_moe" --gtest_list_tests |
        awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
        MEGAMOE_NVFP4_KERNEL=$kernel step "${stage}_${t#*.}" 150 "$bin/gpu_test_nvfp4_mega_moe" \
          --gtest_filter="$t"
        grep -E "^\[  (PASSED|FAILED|SKIPPED)|seed [0-9]+$" "$out/${stage}_${t#*.}.log" |
          tail -3 >>"$S"
      done ;;
    wide) MEGAMOE_NVFP4_KERNEL=wide step bench_wide 60 "$bin/bench_nvfp4_mega_moe" \
      "$out/bench_wide" && benches+=(bench_wide) ;;
    auto) MEGAMOE_NVFP4_KERNEL= step bench_auto 60 "$bin/bench_nvfp4_mega_moe" \
      "$out/bench_auto" && benches+=(bench_auto) ;;
    bench) step bench_default 40 "$bin/bench_nvfp4_mega_moe" "$out/bench_default" &&
      benches+=(bench_default) ;;
    bench@*/*)
      spec=${stage#bench@}
      MEGAMOE_NVFP4_KSPLIT=${spec%/*} MEGAMOE_NVFP4_RING=${spec#*/} \
        step "bench_k${spec%/*}r${spec#*/}" 40 "$bin/bench_nvfp4_mega_moe" \
        "$out/bench_k${spec%/*}r${spec#*/}" && benches+=("bench_k${spec%/*}r${spec#*/}") ;;
    stages@*)
      MEGAMOE_NVFP4_STAGES=${stage#stages@} step "bench_s${stage#stages@}" 40 \
        "$bin/bench_nvfp4_mega_moe" "$out/bench_s${stage#stages@}" &&
        benches+=("bench_s${stage#stages@}") ;;
    sb@*)
      MEGAMOE_NVFP4_STAGE_BLOCKS=${stage#sb@} step "bench_sb${stage#sb@}" 40 \
        "$bin/bench_nvfp4_mega_moe" "$out/bench_sb${stage#sb@}" &&
        benches+=("bench_sb${stage#sb@}") ;;
    rb@*)
      MEGAMOE_NVFP4_REDUCE_BUFFERS=${stage#rb@} step "bench_rb${stage#rb@}" 40 \
        "$bin/bench_nvfp4_mega_moe" "$out/bench_rb${stage#rb@}" &&
        benches+=("bench_rb${stage#rb@}") ;;
    base | base@*)
      label=bench_base${stage#base}
      label=${label/@/_}
      step "$label" 40 "$bin/base/bench_nvfp4_mega_moe" "$out/$label" && benches+=("$label") ;;
    fp8) MEGAMOE_BENCH_FP8_COMBINE=1 step bench_fp8 40 "$bin/bench_nvfp4_mega_moe" \
      "$out/bench_fp8" && benches+=(bench_fp8) ;;
    bench4) MEGAMOE_NVFP4_RING=4 step bench_ring4 40 "$bin/bench_nvfp4_mega_moe" "$out/bench_ring4" &&
      benches+=(bench_ring4) ;;
    simple) MEGAMOE_NVFP4_KERNEL=simple step bench_simple 40 "$bin/bench_nvfp4_mega_moe" \
      "$out/bench_simple" && benches+=(bench_simple) ;;
    ncu)
      # dsv4-flash, uniform, T = NCU_TOKENS (default 128): the first eager launch.
      MEGAMOE_BENCH_PRESETS=${NCU_PRESET:-dsv4-flash} MEGAMOE_BENCH_ROUTINGS=uniform \
        MEGAMOE_NVFP4_KERNEL=${NCU_KERNEL:-pipelined} \
        MEGAMOE_BENCH_TOKENS=${NCU_TOKENS:-128} step ncu 90 ncu --clock-control none \
        --launch-count 1 --kernel-name regex:mega_moe --set full --import-source no \
        -o "$out/prof" "$bin/bench_nvfp4_mega_moe" "$out/bench_ncu"
      if [ -f "$out/prof.ncu-rep" ]; then
        ncu --import "$out/prof.ncu-rep" --page details >"$out/ncu.txt" 2>&1
        ncu --import "$out/prof.ncu-rep" --page source --csv --print-source sass >"$out/sass.csv" 2>&1
        cp "$out/sass.csv" "$final/sass.csv" && gzip -f "$final/sass.csv"
        grep -E "Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" \
          "$out/ncu.txt" | head -20 >>"$S"
        rm -f "$out/prof.ncu-rep"
      fi ;;
    san | wsan)
      kernel=pipelined
      [ "$stage" = wsan ] && kernel=wide
      for tool in racecheck memcheck synccheck; do
        MEGAMOE_NVFP4_KERNEL=$kernel step "${stage}_$tool" 40 compute-sanitizer --tool $tool \
          "$bin/gpu_test_nvfp4_mega_moe" --gtest_filter='*SanitizerSizedCase'
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/${stage}_$tool.log" | tail -1 >>"$S"
      done ;;
    *) echo "unknown stage $stage" >>"$S" ;;
  esac
done
for b in "${benches[@]}"; do
  echo "== $b" >>"$S"
  grep -E "uniform|HBM" "$out/$b.md" | cut -d'|' -f2-4,7-10 >>"$S"
done
cp "$S" "$final/summary.txt"
tar czf "$final/logs.tgz" -C "$out" .
cat "$S"
