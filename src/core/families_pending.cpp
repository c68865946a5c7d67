// Entry points of the families whose sm90 kernels are not written yet. They validate their
// arguments in full (so callers can build against the API and get every argument error now)
// and then refuse honestly instead of doing nothing.
#include <string>

#include "core/validate.hpp"
#include "megamoe/error.hpp"
#include "megamoe/mega_moe.hpp"
#include "megamoe/side_lora.hpp"

namespace megamoe {
namespace {

// These calls never reach a GPU: every tensor must be on the buffer's (SymmBuffer::device), the
// GPU a launcher would find current.
Device buffer_gpu(const SymmBuffer& buffer) {
  return Device{DeviceKind::cuda, buffer.device};
}

[[noreturn]] void no_kernel(std::string_view function) {
  throw Unsupported(std::string(function) +
                    ": no sm90 kernel for this family yet (see docs/design.md)");
}

}  // namespace

void fp8_mega_moe(const SymmBuffer& buffer, std::span<const Fp8ExpertWeights> weights,
                  std::span<const MoEOutputs> outputs, Stream) {
  validate::validate_fp8_mega_moe(validate::buffer_facts(buffer, buffer_gpu(buffer)), weights,
                                  outputs);
  no_kernel("fp8_mega_moe");
}

void mxfp4_mega_moe(const SymmBuffer& buffer, std::span<const Mxfp4ExpertWeights> weights,
                    std::span<const MoEOutputs> outputs, Stream) {
  validate::validate_mxfp4_mega_moe(validate::buffer_facts(buffer, buffer_gpu(buffer)), weights,
                                    outputs);
  no_kernel("mxfp4_mega_moe");
}

void bf16_mega_moe(const SymmBuffer& buffer, std::span<const Bf16ExpertWeights> weights,
                   std::span<const MoEOutputs> outputs, Stream) {
  validate::validate_bf16_mega_moe(validate::buffer_facts(buffer, buffer_gpu(buffer)), weights,
                                   outputs);
  no_kernel("bf16_mega_moe");
}

void side_lora_mega_moe_forward(const SymmBuffer& buffer,
                                std::span<const SideLoraForwardArgs> ranks, Stream) {
  validate::validate_side_lora_forward(validate::buffer_facts(buffer, buffer_gpu(buffer)), ranks);
  no_kernel("side_lora_mega_moe_forward");
}

void side_lora_mega_moe_backward(const SymmBuffer& buffer,
                                 std::span<const SideLoraBackwardArgs> ranks, Stream) {
  validate::validate_side_lora_backward(validate::buffer_facts(buffer, buffer_gpu(buffer)), ranks);
  no_kernel("side_lora_mega_moe_backward");
}

}  // namespace megamoe
