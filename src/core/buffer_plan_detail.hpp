#pragma once
// Internals of plan_symm_buffer exposed for its tests.
#include <cstddef>
#include <cstdint>

#include "megamoe/buffer.hpp"
#include "megamoe/config.hpp"

namespace megamoe {

// The wide NVFP4 kernel's token chunks (region "token_f16"), sized for its largest layout:
// chunks of 256 k, rows of 256 f16 + a 16-byte pad (nvfp4_wide::Chunk<256> of
// kernels/megamoe/impls/sm90_nvfp4_mega_moe_wide.cuh; chunks of 384 or 512 k take fewer bytes).
inline constexpr std::int64_t kTokenChunkK = 256;
inline constexpr std::size_t kTokenChunkRowBytes = (256 + 8) * 2;

// The wide NVFP4 kernel runs from this BLOCK_M on (runtime::kNvfp4WideMinBlockM).
inline constexpr int kWideKernelMinBlockM = 16;

// Whether the wide NVFP4 kernel supports the configuration: NVFP4 weights and activations, no
// side-LoRA, H and I multiples of 256 (its token chunks).
bool wide_kernel_supported(const MoEConfig& config);

// Whether the plan has "token_f16", the wide kernel's scratch: where it is supported and can run
// -- a reachable BLOCK_M of 16 or more, or MEGAMOE_NVFP4_KERNEL=wide set when planning (it then
// runs at every BLOCK_M). A decode-only plan (BLOCK_M 8 at every token count) goes without it:
// at dsv4-flash, T_max = 128, that is 20.6 of its 35.4 MiB.
bool plan_has_token_f16(const MoEConfig& config);

// The most padded pool rows t live tokens per rank can need with token tile bm.
std::int64_t worst_case_pool_rows(const MoEConfig& config, std::int64_t t, int bm);

// Before a launch of t live tokens per rank with token tile bm: the plan's pools hold its worst
// case. Always true for the BLOCK_M the plan saw (the heuristic); an InvalidArgument naming
// MEGAMOE_BLOCK_M when that override changed after the buffer was planned.
void check_pools_fit(const SymmBufferPlan& plan, std::int64_t t, int bm);

}  // namespace megamoe
