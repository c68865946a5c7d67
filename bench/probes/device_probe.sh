#!/usr/bin/env bash
# One device call for the v4 design question (bench/NOTES.md, "NVFP4 v4"): the streaming probe,
# then ncu stall profiles of the pipelined kernel at dsv4-flash T = 1 and T = 128 (first eager
# launch of each). BIN holds stream_probe and bench_nvfp4_mega_moe; logs and the per-instruction
# source page (CSV) land in OUT.
#   bench/probes/device_probe.sh BIN OUT
set -u
bin=$1
out=$2
mkdir -p "$out"
export MEGAMOE_CACHE_DIR=/tmp/megamoe-jit MEGAMOE_NVFP4_KERNEL=pipelined
{
  echo "date $(date -u +%FT%TZ) commit $(cat "$bin/COMMIT" | tr '\n' ' ')"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  echo "== stream probe"
  timeout 120 "$bin/stream_probe" 2>&1
} | tee "$out/probe.txt"
for T in 1 128; do
  MEGAMOE_BENCH_PRESETS=dsv4-flash MEGAMOE_BENCH_ROUTINGS=uniform MEGAMOE_BENCH_TOKENS=$T \
    timeout 200 ncu --clock-control none --launch-count 1 --kernel-name regex:mega_moe \
    --set full --import-source no -o "$out/prof_t$T" \
    "$bin/bench_nvfp4_mega_moe" "$out/bench_t$T" >"$out/ncu_run_t$T.log" 2>&1
  echo "ncu T=$T rc=$?" | tee -a "$out/probe.txt"
  ncu --import "$out/prof_t$T.ncu-rep" --page details >"$out/details_t$T.txt" 2>&1
  ncu --import "$out/prof_t$T.ncu-rep" --page source --csv --print-source sass \
    >"$out/sass_t$T.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots|Eligible Warps|No Eligible|L1/TEX Hit|Registers Per|Shared Memory Config|Achieved Occupancy|Stall" \
    "$out/details_t$T.txt" | head -40 | tee -a "$out/probe.txt"
done
gzip -f "$out"/sass_t*.csv
rm -f "$out"/bench_t*.md "$out"/bench_t*.csv "$out"/*.ncu-rep
(cd "$out" && tar czf run_logs.tgz ncu_run_t*.log && rm -f ncu_run_t*.log)
ls -la "$out"
