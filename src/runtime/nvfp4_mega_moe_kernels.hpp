#pragma once
// JIT requests of the SM90 NVFP4 MegaMoE kernel (kernels/megamoe/impls/sm90_nvfp4_mega_moe.cuh):
// one per configuration and BLOCK_M. Shared by the launcher, the kernel registry (precompile)
// and the CPU compile test.
#include <cstddef>
#include <vector>

#include "core/buffer_plan_detail.hpp"
#include "jit/compiler.hpp"
#include "megamoe/config.hpp"

namespace megamoe::runtime {

// Kernel versions (docs/nvfp4_kernel.md, "Versions"): `simple` streams each work item's weights
// on its own; `pipelined` keeps one weight stream per warp across items and phases; `wide`
// streams the token operand with the weights in 256-row units (token tiles of 16+ routes).
enum class Nvfp4KernelVersion { simple, pipelined, wide };
// MEGAMOE_NVFP4_KERNEL=simple|pipelined|wide forces a version (anything else is
// InvalidArgument); unset, the default for this configuration and BLOCK_M: `wide` where the
// configuration supports it (wide_kernel_supported) and BLOCK_M >= kNvfp4WideMinBlockM, else
// `pipelined`. The wide kernel needs the plan's "token_f16" scratch, which plan_symm_buffer
// allocates where such a BLOCK_M is reachable or MEGAMOE_NVFP4_KERNEL=wide was set when planning.
inline constexpr int kNvfp4WideMinBlockM = kWideKernelMinBlockM;
Nvfp4KernelVersion nvfp4_kernel_version(const MoEConfig& config, int block_m);

// Everything the launcher and the JIT request must agree on for one configuration and BLOCK_M.
struct Nvfp4LaunchShape {
  int threads = 256;       // CTA size: 4 row groups x ksplit warps x 32 (+ a producer warp)
  int ksplit = 2;          // warps splitting K per row group (2 or 4; `simple`: 2)
  int ring = 0;            // register ring: weight blocks in flight per warp (`pipelined`)
  int stages = 0;          // shared-memory weight stages (`pipelined`; 0 = register ring)
  int stage_blocks = 1;    // blocks of 128 k per consumer warp in one stage (1, 2 or 4)
  int reduce_buffers = 1;  // split-K exchange buffers (`pipelined`; 2: one barrier per unit);
                           // `wide`: FC1 exchange buffers (0: one small region)
  int token_subtile = 16;  // tokens per sub-tile (16, or 8 when 16 do not fit)
  std::size_t smem = 0;    // dynamic shared memory (bytes), mirroring the kernel's Smem struct
};

// Defaults, overridable for tuning (anything outside the listed values is InvalidArgument):
//   MEGAMOE_NVFP4_KSPLIT=2|4   warps per row group (pipelined)
//   MEGAMOE_NVFP4_RING=2..8    ring depth (2..4 with ksplit 4, 4..8 with ksplit 2)
//   MEGAMOE_NVFP4_STAGES=0|2..8  shared-memory stages filled by a producer warp (0: register
//                              ring). Default: the deepest that fits next to the token tile,
//                              4..8 blocks per consumer warp in flight in at least 2 stages,
//                              when H / 128 and I / 128 divide by the K split, else 0.
//   MEGAMOE_NVFP4_STAGE_BLOCKS=1|2|4  blocks per consumer warp in one stage. Default: 4 when
//                              H / 128 and I / 128 divide by four times the K split and two
//                              such stages fit, else 2 when they divide by twice the K split,
//                              else 1 (and 1 for the register ring, which has no stages).
//   MEGAMOE_NVFP4_REDUCE_BUFFERS=1|2  split-K exchange buffers. Default: 2 when they fit beside
//                              the token tile and the stages, else 1.
// The default ring is the deepest that divides both phases' blocks per warp (no slot idles at a
// unit boundary). Unsupported when not even an 8-token sub-tile fits in shared memory.
// `wide`: 16 consumer warps and a producer, sub-tiles of min(BLOCK_M, 32) tokens; stages of 4, 3
// or 2 blocks per row group (the widest that H and I divide into and two of which fit;
// MEGAMOE_NVFP4_STAGE_BLOCKS=2|3|4 overrides), the deepest 2..6 such stages that fit with one
// exchange buffer, else two with none (MEGAMOE_NVFP4_STAGES overrides), two FC1 exchange buffers
// where they fit beside them, else one, else none: FC1's warp pairs then exchange two 8-token
// groups at a time through an 8 KB region; FC2 units store from registers
// (MEGAMOE_NVFP4_REDUCE_BUFFERS=0|1|2 overrides).
// Unsupported without the plan's "token_f16" (H or I not a multiple of 256); FP8 combine slots
// as well as bf16 ones.
Nvfp4LaunchShape nvfp4_launch_shape(const MoEConfig& config, int block_m,
                                    Nvfp4KernelVersion version);
Nvfp4LaunchShape nvfp4_launch_shape(const MoEConfig& config, int block_m);

jit::KernelRequest nvfp4_mega_moe_request(const MoEConfig& config, int block_m,
                                          Nvfp4KernelVersion version);
jit::KernelRequest nvfp4_mega_moe_request(const MoEConfig& config, int block_m);

// Every request a configuration can need (one per reachable BLOCK_M); empty for other families.
std::vector<jit::KernelRequest> nvfp4_mega_moe_kernels(const MoEConfig& config);

}  // namespace megamoe::runtime
