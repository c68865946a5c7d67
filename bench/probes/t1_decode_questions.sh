#!/usr/bin/env bash
# One device call for the T = 1 question of bench/NOTES.md (twenty-sixth session): why the
# pipelined kernel's consumers decode at ~37-41 KB/us a SM where the probe's block body read ~52
# (answered in run 228 and after: the probe overstated the body, which runs at ~40 beside a stream).
# (1) `MMA_PROBE_T1=1 mma_rate_probe` (built here with nvcc): the block body at NT = 1 alone, with
# dead token rows' lanes reading row 0's B fragments, beside a bulk-copy stream into shared
# memory, and both; (2) the same row-0 change in the kernels (bench/probes/dead_rows_row0.py)
# against the repository's kernels, EP1 uniform, T = 1 / 16 / 64 / 128, two alternating passes,
# same binary, then two NVFP4 GPU tests on the variant. BIN holds bench_nvfp4_mega_moe,
# gpu_test_nvfp4_mega_moe and COMMIT (scripts/devbin.sh); logs land in OUT, the summary prints last.
#   bash bench/probes/t1_decode_questions.sh BIN OUT
set -u
mkdir -p "$2"
B=$(cd "$1" && pwd)
OUT=$(cd "$2" && pwd)
cd "$(dirname "$0")/../.."  # the repository root: kernels/ and the probes
S=$OUT/summary.txt
{
  echo "date $(date -u +%FT%TZ) commit $(tr '\n' ' ' <"$B/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
} >"$S"
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I kernels \
  -o "$OUT/mma_rate_probe" bench/probes/mma_rate_probe.cu >"$OUT/probe_build.log" 2>&1
echo "probe build rc=$?" >>"$S"
MMA_PROBE_T1=1 timeout 120 "$OUT/mma_rate_probe" >"$OUT/probe.log" 2>&1
echo "probe rc=$?" >>"$S"
cat "$OUT/probe.log" >>"$S"
rm -f "$OUT/mma_rate_probe"
python3 bench/probes/dead_rows_row0.py "$OUT/kern_dead_rows" >/dev/null
for rep in 1 2; do
  for v in base row0; do
    if [ $v = base ]; then kd=$PWD/kernels; else kd=$OUT/kern_dead_rows; fi
    echo "\$ [$v] MEGAMOE_BENCH_ROUTINGS=uniform MEGAMOE_BENCH_TOKENS=1,16,64,128 bench_nvfp4_mega_moe" >>"$S"
    MEGAMOE_KERNEL_DIR=$kd MEGAMOE_CACHE_DIR=/tmp/jit-t1q-$v MEGAMOE_BENCH_ROUTINGS=uniform \
      MEGAMOE_BENCH_TOKENS=1,16,64,128 timeout 200 "$B/bench_nvfp4_mega_moe" "$OUT/ep1_${v}_$rep" \
      >"$OUT/ep1_${v}_$rep.log" 2>&1
    echo "rc=$?" >>"$S"
    grep -E "uniform|HBM" "$OUT/ep1_${v}_$rep.md" | cut -d'|' -f2,4,7,8,10 >>"$S"
  done
done
# The variant against the oracle (relative L2 0 expected, as for the repository's kernels).
if [ -x "$B/gpu_test_nvfp4_mega_moe" ]; then
  for t in SingleRankTokenCountsAroundBlockM DsV4FlashWidths; do
    MEGAMOE_KERNEL_DIR=$OUT/kern_dead_rows MEGAMOE_CACHE_DIR=/tmp/jit-t1q-row0 timeout 150 \
      "$B/gpu_test_nvfp4_mega_moe" --gtest_filter="*.$t" >"$OUT/test_$t.log" 2>&1
    echo "row0 $t rc=$? $(grep -c 'relL2 0.00e+00' "$OUT/test_$t.log") cases at relative L2 0" >>"$S"
  done
fi
rm -rf "$OUT/kern_dead_rows"
cat "$S"
