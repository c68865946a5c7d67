#pragma once
// The one validation layer of the public API (docs/api.md, "Validation rules"). Every public
// entry point calls its validate_* function before anything is launched; each failed rule
// throws InvalidArgument naming the argument ("weights[1].w13") and the rule. Nothing here
// touches a GPU: device pointers are only compared as numbers.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/config.hpp"
#include "megamoe/error.hpp"
#include "megamoe/mega_moe.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/side_lora.hpp"
#include "megamoe/types.hpp"

namespace megamoe::validate {

// ---- limits (docs/api.md) -------------------------------------------------------------------
inline constexpr std::int64_t kDimMultiple = 128;  // H and I: one BLOCK_K / FP8 scale block
inline constexpr std::int64_t kMinHidden = 256, kMaxHidden = 16384;
inline constexpr std::int64_t kMinIntermediate = 128, kMaxIntermediate = 16384;
inline constexpr std::int64_t kMaxExperts = 1024;
inline constexpr std::int64_t kMaxLocalExperts = 512;  // per-expert counters of one rank
inline constexpr int kMaxTopK = 16;
inline constexpr std::int64_t kMaxTokensPerRank = 131072;
inline constexpr int kMinLoraRank = 16, kMaxLoraRank = 256, kLoraRankMultiple = 16;
inline constexpr std::size_t kPointerAlignment = 16;  // TMA global addresses, 128-bit loads
inline constexpr std::size_t kRowAlignment = 16;      // TMA global strides

// ---- reusable tensor checks ---------------------------------------------------------------
// A required tensor: data must be set (an empty tensor, numel 0, may have no data).
void check_defined(const TensorView& t, std::string_view name);
// An optional tensor that must stay empty (e.g. da3 when A1 = A3 is tied).
void check_absent(const TensorView& t, std::string_view name, std::string_view why);
void check_dtype(const TensorView& t, std::string_view name, DType want);
void check_dtype_any(const TensorView& t, std::string_view name,
                     std::initializer_list<DType> allowed);
void check_ndim(const TensorView& t, std::string_view name, int ndim);
// Dimension `dim` equals `want`; `what` names the quantity ("hidden", "2 * intermediate").
void check_dim(const TensorView& t, std::string_view name, int dim, std::int64_t want,
               std::string_view what);
void check_dim_at_most(const TensorView& t, std::string_view name, int dim, std::int64_t max,
                       std::string_view what);
// The full shape, one (value, what) per dimension; checks ndim first.
struct Dim {
  std::int64_t value;
  std::string_view what;
};
void check_shape(const TensorView& t, std::string_view name, std::initializer_list<Dim> dims);
void check_contiguous(const TensorView& t, std::string_view name);
// Last dimension dense and every outer stride a multiple of `bytes` (rows may be padded).
void check_rows(const TensorView& t, std::string_view name, std::size_t bytes = kRowAlignment);
void check_pointer_aligned(const TensorView& t, std::string_view name,
                           std::size_t bytes = kPointerAlignment);
// A CUDA tensor on `device` (the buffer's GPU).
void check_device(const TensorView& t, std::string_view name, Device device);
void check_min_bytes(const TensorView& t, std::string_view name, std::size_t need,
                     std::string_view what);
// All of the above for the common case: defined, dtype, shape, device, aligned pointer, dense
// last dim with 16-byte row strides (or fully contiguous when `contiguous`).
void check_tensor(const TensorView& t, std::string_view name, DType dtype,
                  std::initializer_list<Dim> dims, Device device, bool contiguous = true);
void check_tensor_any(const TensorView& t, std::string_view name,
                      std::initializer_list<DType> dtypes, std::initializer_list<Dim> dims,
                      Device device, bool contiguous = true);

// A per-token [T, H] tensor of `dtype` with T <= max_tokens_per_rank (rows may be padded to a
// 16-byte stride); returns T.
std::int64_t check_token_rows(const TensorView& t, std::string_view name, DType dtype,
                              const MoEConfig& config, Device device);

// Plain-layout expert weights of a rank, shared by the MXFP4/BF16 families and side-LoRA bases.
void check_mxfp4_weight_pair(const MoEConfig& config, const TensorView& w13,
                             const TensorView& w13_sf, const TensorView& w2,
                             const TensorView& w2_sf, std::string_view name, Device device);
void check_bf16_weight_pair(const MoEConfig& config, const TensorView& w13, const TensorView& w2,
                            std::string_view name, Device device);

// ---- configuration ------------------------------------------------------------------------
void validate_config(const MoEConfig& config);

// ---- the buffer as the launchers see it -----------------------------------------------------
// What validation needs to know about a SymmBuffer, without touching the GPU.
struct BufferFacts {
  const SymmBufferPlan* plan = nullptr;
  int num_ranks = 0;              // of the peer memory
  std::vector<int> driven_ranks;  // ranks this process launches
  std::size_t bytes_per_rank = 0;
  Device device{DeviceKind::cuda, 0};  // the GPU the call launches on (tensors must be there)
  int buffer_device = 0;               // SymmBuffer::device: where the buffer's memory lives
};
// `device`: the GPU the caller launches on (launchers pass their current device).
BufferFacts buffer_facts(const SymmBuffer& buffer, Device device);
// Plan valid, memory as large as the plan, ranks consistent.
void validate_buffer(const BufferFacts& buffer);
// The buffer was planned for one of `families` ("nvfp4 x nvfp4"); `function` names the caller.
void check_family(const BufferFacts& buffer, std::string_view function, bool ok,
                  std::string_view wanted);
// `ranks[i]` (named "<list>[i].rank") are distinct driven ranks: every driven rank exactly once
// when `all_driven` (a fused layer launches every driven rank together), otherwise at least one
// (pre-dispatch fills each rank's input region independently).
enum class RankCoverage : bool { subset, all_driven };
void check_rank_set(const BufferFacts& buffer, std::span<const int> ranks, std::string_view list,
                    RankCoverage coverage = RankCoverage::all_driven);

// ---- entry points ---------------------------------------------------------------------------
void validate_pre_dispatch(const BufferFacts& buffer, std::span<const PreDispatchInputs> inputs);

void validate_nvfp4_checkpoint_weights(const MoEConfig& config, const Nvfp4CheckpointWeights& w,
                                       Device device, std::string_view name = "in");
void validate_nvfp4_kernel_weights(const MoEConfig& config, const Nvfp4KernelWeights& w,
                                   const Nvfp4KernelWeightBytes& bytes, Device device,
                                   std::string_view name = "out");
// `bytes`: nvfp4_kernel_weight_bytes(config) (passed in so validation stays layout-agnostic).
// `max_tokens_across_ranks`: 0, or in [the largest count among outputs, max_tokens_per_rank].
void validate_nvfp4_mega_moe(const BufferFacts& buffer, std::span<const Nvfp4KernelWeights> weights,
                             std::span<const Nvfp4MoEOutputs> outputs,
                             const Nvfp4KernelWeightBytes& bytes,
                             std::int64_t max_tokens_across_ranks = 0);

void validate_fp8_mega_moe(const BufferFacts& buffer, std::span<const Fp8ExpertWeights> weights,
                           std::span<const MoEOutputs> outputs);
void validate_mxfp4_mega_moe(const BufferFacts& buffer, std::span<const Mxfp4ExpertWeights> weights,
                             std::span<const MoEOutputs> outputs);
void validate_bf16_mega_moe(const BufferFacts& buffer, std::span<const Bf16ExpertWeights> weights,
                            std::span<const MoEOutputs> outputs);

void validate_side_lora_forward(const BufferFacts& buffer,
                                std::span<const SideLoraForwardArgs> ranks);
void validate_side_lora_backward(const BufferFacts& buffer,
                                 std::span<const SideLoraBackwardArgs> ranks);

// "name[i]" / "name.field", for argument names in messages.
std::string indexed(std::string_view name, std::size_t i);
std::string field(std::string_view name, std::string_view member);

// Shared by every fused-layer call: the buffer, its family, every driven rank exactly once, one
// weight entry per output, and each output's rows. `Output` has `rank` and `out` members.
template <typename Output>
void validate_layer_call(const BufferFacts& b, std::string_view function, bool family_ok,
                         std::string_view family, std::size_t num_weights,
                         std::span<const Output> outputs) {
  validate_buffer(b);
  check_family(b, function, family_ok, family);
  std::vector<int> ranks;
  for (const Output& o : outputs) ranks.push_back(o.rank);
  check_rank_set(b, ranks, "outputs");
  if (num_weights != outputs.size()) {
    throw_invalid(
        "weights",
        "must have one entry per entry of outputs (" + std::to_string(outputs.size()) + ")",
        std::to_string(num_weights) + " entries");
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    check_token_rows(outputs[i].out, field(indexed("outputs", i), "out"), DType::bf16,
                     b.plan->config, b.device);
  }
}

}  // namespace megamoe::validate
