#pragma once
// Plain value types shared by every part of the public API.
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace megamoe {

// Element types as they sit in memory. Packed and scale types are one byte per stored element:
// e2m1x2 holds two FP4 values (low nibble = even element), so its last dimension is K / 2.
enum class DType : std::uint8_t {
  bf16,
  f16,
  f32,
  f64,
  i32,
  i64,
  u8,
  e4m3,    // FP8 e4m3fn
  e2m1x2,  // two FP4 e2m1 per byte
  ue4m3,   // unsigned e4m3 scale (NVFP4 block scale)
  ue8m0,   // power-of-two scale 2^(s-127) (MXFP4, FP8 with power-of-two scales)
};

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);

// Quantization format of a GEMM operand (weights or activations).
enum class Format : std::uint8_t {
  bf16,   // no quantization
  fp8,    // e4m3fn; activations 1x128 blocks, weights 128x128 blocks
  mxfp4,  // e2m1 + UE8M0 per 32 along K
  nvfp4,  // e2m1 + UE4M3 per 16 along K + fp32 global scale
};
std::string_view format_name(Format f);

// FP8 block scales may be fp32 or powers of two (UE8M0).
enum class Fp8ScaleKind : std::uint8_t { f32, ue8m0 };

// Layout of a block-scale tensor: plain row-major [rows, K / block], or the 128x4 swizzled tiles
// used by cuBLAS / TensorRT-LLM NVFP4 checkpoints (docs/design.md, "Scale layouts").
enum class ScaleLayout : std::uint8_t { row_major, swizzled_128x4 };

// The gated activation between FC1 and FC2. FC1's output holds gate rows [0, I) then up rows.
enum class ActivationKind : std::uint8_t {
  swiglu,      // silu(gate) * up; with clamp c: gate = min(gate, c), up = clamp(up, -c, c)
  geglu,       // gelu_tanh(gate) * up; same optional clamp
  swiglu_oai,  // gpt-oss: gate = min(gate, limit), up = clamp(up, -limit, limit),
               // (up + 1) * gate * sigmoid(alpha * gate)
};
std::string_view activation_name(ActivationKind a);

struct ActivationSpec {
  ActivationKind kind = ActivationKind::swiglu;
  float clamp = 0.0f;        // swiglu/geglu: 0 = no clamp; must be > 0 otherwise
  float oai_alpha = 1.702f;  // swiglu_oai only
  float oai_limit = 7.0f;    // swiglu_oai only
  friend bool operator==(const ActivationSpec&, const ActivationSpec&) = default;
};

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

// A non-owning view of a strided tensor (row-major strides in elements). At most 4 dimensions.
struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<std::int64_t, kMaxDims> shape{};
  std::array<std::int64_t, kMaxDims> strides{};

  // A dense row-major view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               Device device = {});

  bool defined() const noexcept { return data != nullptr; }
  std::int64_t size(int dim) const;  // negative dim counts from the back
  std::int64_t numel() const noexcept;
  std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(numel()) * dtype_size(dtype);
  }
  bool is_contiguous() const noexcept;
  std::string shape_string() const;  // "[T, H]" style, for messages
  template <typename T>
  T* ptr() const noexcept {
    return static_cast<T*>(data);
  }
};

}  // namespace megamoe
