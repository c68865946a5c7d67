// Symmetric buffer planning and allocation (megamoe/buffer.hpp). Region views come back as
// DLPack arrays over the buffer's device memory (torch.from_dlpack / cupy.from_dlpack take them
// without a copy); each view keeps the buffer alive.
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cuda.h>

#include "common.hpp"
#include "megamoe/buffer.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe::python {
namespace {

namespace dl = nb::dlpack;

struct RegionType {
  dl::dtype dtype;
  std::vector<std::size_t> shape;
};

// The element type and shape of the regions whose layout the planner documents; every other
// region (quantized data, scales, pools, sync) is a flat byte array.
RegionType region_type(const SymmBufferPlan& plan, const BufferRegion& r) {
  const MoEConfig& c = plan.config;
  const auto t = static_cast<std::size_t>(c.max_tokens_per_rank);
  const auto k = static_cast<std::size_t>(c.shape.top_k);
  const auto h = static_cast<std::size_t>(c.shape.hidden);
  const dl::dtype i32{static_cast<std::uint8_t>(dl::dtype_code::Int), 32, 1};
  const dl::dtype u32{static_cast<std::uint8_t>(dl::dtype_code::UInt), 32, 1};
  const dl::dtype f32{static_cast<std::uint8_t>(dl::dtype_code::Float), 32, 1};
  const dl::dtype bf16{static_cast<std::uint8_t>(dl::dtype_code::Bfloat), 16, 1};
  const dl::dtype u8{static_cast<std::uint8_t>(dl::dtype_code::UInt), 8, 1};
  RegionType typed{u8, {r.bytes}};
  if (r.rows > 0 && r.row_pitch > 0 && r.rows * r.row_pitch <= r.bytes) {
    typed = RegionType{u8, {r.rows, r.row_pitch}};  // row-structured bytes, pitch included
  }
  auto fits = [&](dl::dtype d, std::vector<std::size_t> shape) {
    std::size_t n = d.bits / 8;
    for (std::size_t e : shape) n *= e;
    if (n <= r.bytes && n > 0) typed = RegionType{d, std::move(shape)};
  };
  if (r.name == "topk_idx") fits(i32, {t, k});
  if (r.name == "topk_weights") fits(f32, {t, k});
  if (r.name == "x_global") fits(f32, {t});
  if (r.name == "num_tokens") fits(i32, {1});
  if (r.name == "error_count") fits(u32, {1});
  if (r.name == "combine" && !c.fp8_combine) fits(bf16, {k, t, h});
  return typed;
}

int device_of_pointer(void* p) {
  int ordinal = 0;
  const auto& d = cuda::driver();
  MEGAMOE_CU(d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     reinterpret_cast<CUdeviceptr>(p)));
  return ordinal;
}

void check_rank(const SymmBuffer& b, int rank) {
  if (rank < 0 || rank >= b.memory->num_ranks()) {
    throw_invalid(
        "rank", "must be in [0, num_ranks)",
        std::to_string(rank) + " with " + std::to_string(b.memory->num_ranks()) + " ranks");
  }
}

nb::object region_view(nb::handle owner, const SymmBuffer& b, int rank, std::string_view name) {
  check_rank(b, rank);
  const BufferRegion& r = b.plan.region(name);
  void* p = b.view(rank, name);
  RegionType t = region_type(b.plan, r);
  nb::ndarray<> array(p, t.shape.size(), t.shape.data(), owner, nullptr, t.dtype,
                      nb::device::cuda::value, device_of_pointer(p));
  return nb::cast(array);
}

nb::dict all_views(nb::handle owner, const SymmBuffer& b, int rank) {
  nb::dict d;
  for (const BufferRegion& r : b.plan.regions)
    d[r.name.c_str()] = region_view(owner, b, rank, r.name);
  return d;
}

}  // namespace

void register_buffer(nb::module_& m) {
  nb::class_<SymmBuffer>(m, "SymmBuffer", "A planned symmetric buffer with its device memory")
      .def_ro("plan", &SymmBuffer::plan)
      .def_ro("device", &SymmBuffer::device, "ordinal of the GPU the memory lives on")
      .def_prop_ro("provider", [](const SymmBuffer& b) { return std::string(b.memory->kind()); })
      .def_prop_ro("num_ranks", [](const SymmBuffer& b) { return b.memory->num_ranks(); })
      .def_prop_ro("driven_ranks", [](const SymmBuffer& b) { return b.memory->driven_ranks(); })
      .def_prop_ro("bytes_per_rank", [](const SymmBuffer& b) { return b.memory->bytes_per_rank(); })
      .def(
          "base",
          [](const SymmBuffer& b, int rank) {
            check_rank(b, rank);
            return reinterpret_cast<std::uintptr_t>(b.memory->base(rank));
          },
          nb::arg("rank"), "device address of rank's buffer")
      .def(
          "view_ptr",
          [](const SymmBuffer& b, int rank, std::string_view region) {
            check_rank(b, rank);
            return reinterpret_cast<std::uintptr_t>(b.view(rank, region));
          },
          nb::arg("rank"), nb::arg("region"))
      .def(
          "view",
          [](nb::pointer_and_handle<SymmBuffer> self, int rank, std::string_view region) {
            return region_view(self.h, *self.p, rank, region);
          },
          nb::arg("rank"), nb::arg("region"), "one region of rank's buffer as a DLPack array")
      .def(
          "views",
          [](nb::pointer_and_handle<SymmBuffer> self, int rank) {
            return all_views(self.h, *self.p, rank);
          },
          nb::arg("rank") = 0, "{region name: DLPack array} of rank's buffer")
      .def(
          "rank_buffer",
          [](nb::pointer_and_handle<SymmBuffer> self, int rank) {
            check_rank(*self.p, rank);
            void* p = self.p->memory->base(rank);
            const std::size_t n = self.p->memory->bytes_per_rank();
            nb::ndarray<> array(p, 1, &n, self.h, nullptr, nb::dtype<std::uint8_t>(),
                                nb::device::cuda::value, device_of_pointer(p));
            return nb::cast(array);
          },
          nb::arg("rank"), "rank's whole buffer as a uint8 DLPack array");

  m.def(
      "get_symm_buffer_for_mega_moe",
      [](const MoEConfig& config, std::string_view provider, std::uintptr_t nccl_comm) {
        return get_symm_buffer_for_mega_moe(config, provider, reinterpret_cast<void*>(nccl_comm));
      },
      nb::arg("config"), nb::arg("provider") = "local", nb::arg("nccl_comm") = 0,
      "Plans and allocates; provider 'local' (num_ranks virtual ranks on this GPU) or 'nccl'");
}

}  // namespace megamoe::python
