#pragma once
// The pre-dispatch kernel as the launcher, the kernel registry, tests and the benchmark see it
// (kernels/megamoe/impls/sm90_pre_dispatch.cuh; docs/pre_dispatch.md).
#include <vector>

#include "jit/compiler.hpp"
#include "megamoe/config.hpp"
#include "megamoe/pre_dispatch.hpp"

namespace megamoe::runtime {

// The template arguments that do not come from the configuration.
struct PreDispatchVariant {
  bool idx64 = false;          // topk_idx is i64 (else i32)
  bool expert_scales = false;  // per-expert scales folded into the route weights
  // FP8 only: encode e4m3 with the hardware conversion (NaN bytes rewritten to the CPU's) instead
  // of the integer recipe. Both are bitwise equal to the CPU; tests check both.
  bool hw_e4m3 = true;
  // FP4 only: the one-CTA-per-row kernel (sm90_pre_dispatch.cuh) whatever the default.
  bool cta_per_row = false;
  // FP4 only: 1, 2 or 4 warps per row in the row kernel (sm90_pre_dispatch_fp4_rows.cuh); 0 = the
  // measured default (pre_dispatch_fp4_warps_per_row). Ignored when the row does not fit.
  int fp4_warps_per_row = 0;
  friend bool operator==(const PreDispatchVariant&, const PreDispatchVariant&) = default;
};

// The JIT request for `config` (act_format fp8, mxfp4 or nvfp4). InvalidArgument otherwise.
jit::KernelRequest pre_dispatch_request(const MoEConfig& config, const PreDispatchVariant& variant);

// The requests `megamoe precompile` warms: i32 and i64 ids, with and without expert scales, in
// the default e4m3 mode. Empty when the activation format is bf16.
std::vector<jit::KernelRequest> pre_dispatch_kernels(const MoEConfig& config);

// Warps per row of the FP4 row kernel that `variant` of `config` runs, 0 for the one-CTA-per-row
// kernel. Default: two warps per row for both FP4 formats, the fastest layout measured
// (bench/results/2026-11-29-device-run-2.md; the definition says more).
int pre_dispatch_fp4_warps_per_row(const MoEConfig& config, const PreDispatchVariant& variant);

// Threads per CTA of the kernel for `config`: 128 for the FP4 row kernel (4 / W rows), else one
// per 32 elements for FP4 and per 16 for FP8.
int pre_dispatch_threads(const MoEConfig& config, const PreDispatchVariant& variant = {});

// mega_moe_pre_dispatch with an explicit e4m3 mode (tests and the benchmark compare both) and,
// for FP4, an explicit kernel layout (the PreDispatchVariant fields of the same names).
void launch_pre_dispatch(const SymmBuffer& buffer, std::span<const PreDispatchInputs> inputs,
                         megamoe::Stream stream, bool hw_e4m3, bool cta_per_row = false,
                         int fp4_warps_per_row = 0);

}  // namespace megamoe::runtime
