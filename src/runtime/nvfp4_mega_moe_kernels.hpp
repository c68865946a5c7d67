#pragma once
// JIT requests of the SM90 NVFP4 MegaMoE kernel (kernels/megamoe/impls/sm90_nvfp4_mega_moe.cuh):
// one per configuration and BLOCK_M. Shared by the launcher, the kernel registry (precompile)
// and the CPU compile test.
#include <cstddef>
#include <vector>

#include "jit/compiler.hpp"
#include "megamoe/config.hpp"

namespace megamoe::runtime {

inline constexpr int kNvfp4Threads = 256;

// Tokens per shared-memory sub-tile for this BLOCK_M (16, or 8 when 16 rows of the wider of H and
// I do not fit); Unsupported when even 8 rows do not fit.
int nvfp4_token_subtile(const MoEConfig& config, int block_m);
// Dynamic shared memory of the kernel (bytes), mirroring its Smem struct.
std::size_t nvfp4_smem_bytes(const MoEConfig& config, int block_m);

// Kernel versions (docs/nvfp4_kernel.md, "Versions"): `simple` streams each work item's weights
// on its own; `pipelined` keeps one weight stream per warp across items and phases.
enum class Nvfp4KernelVersion { simple, pipelined };
// MEGAMOE_NVFP4_KERNEL=simple|pipelined overrides the default; anything else is InvalidArgument.
Nvfp4KernelVersion nvfp4_kernel_version();

// Weight-ring depth of the pipelined version (blocks of 128 k in flight per warp: 4, 6 or 8).
// Default: the deepest that divides both phases' blocks per warp (H / 256 and I / 256), so that
// no ring slot idles at a work-unit boundary; 4 when none does. MEGAMOE_NVFP4_RING=4|6|8
// overrides it (tuning); anything else is InvalidArgument.
int nvfp4_ring_depth(const MoEConfig& config);

jit::KernelRequest nvfp4_mega_moe_request(const MoEConfig& config, int block_m,
                                          Nvfp4KernelVersion version = nvfp4_kernel_version());

// Every request a configuration can need (one per reachable BLOCK_M); empty for other families.
std::vector<jit::KernelRequest> nvfp4_mega_moe_kernels(const MoEConfig& config);

}  // namespace megamoe::runtime
