// Activation pre-dispatch (megamoe/pre_dispatch.hpp). One rank's arrays, or lists of them (one
// entry per rank) to publish several virtual ranks in one call.
#include <vector>

#include "common.hpp"
#include "megamoe/pre_dispatch.hpp"

namespace megamoe::python {
namespace {

void pre_dispatch(const SymmBuffer& buffer, nb::handle x, nb::handle topk_idx,
                  nb::handle topk_weights, nb::handle expert_scales, nb::handle rank,
                  nb::handle stream) {
  const std::size_t n = is_sequence(x) ? nb::len(x) : 1;
  const auto xs = per_rank(x, n, "x");
  const auto idx = per_rank(topk_idx, n, "topk_idx");
  const auto w = per_rank(topk_weights, n, "topk_weights");
  const auto scales = per_rank(expert_scales, n, "expert_scales");
  std::vector<int> ranks;
  if (rank.is_none()) {
    for (std::size_t r = 0; r < n; ++r) ranks.push_back(static_cast<int>(r));
  } else {
    for (const nb::object& r : per_rank(rank, n, "rank")) ranks.push_back(nb::cast<int>(r));
  }
  std::vector<PreDispatchInputs> inputs(n);
  for (std::size_t i = 0; i < n; ++i) {
    inputs[i].rank = ranks[i];
    inputs[i].x = to_view(as_array(xs[i], "x"), "x", DType::bf16);
    inputs[i].topk_idx =
        to_view_of(as_array(idx[i], "topk_idx"), "topk_idx", {DType::i32, DType::i64});
    inputs[i].topk_weights = to_view(as_array(w[i], "topk_weights"), "topk_weights", DType::f32);
    if (!scales[i].is_none()) {
      inputs[i].expert_scales =
          to_view(as_array(scales[i], "expert_scales"), "expert_scales", DType::f32);
    }
  }
  void* s = stream_arg(stream);
  nb::gil_scoped_release release;
  mega_moe_pre_dispatch(buffer, inputs, s);
}

}  // namespace

void register_pre_dispatch(nb::module_& m) {
  m.def("mega_moe_pre_dispatch", &pre_dispatch, nb::arg("buffer"), nb::arg("x"),
        nb::arg("topk_idx"), nb::arg("topk_weights"), nb::kw_only(),
        nb::arg("expert_scales") = nb::none(), nb::arg("rank") = nb::none(),
        nb::arg("stream") = nb::none(),
        "Quantizes bf16 tokens [T, H] + routing into the buffer's input region. x, topk_idx, "
        "topk_weights (and expert_scales, rank) may be lists with one entry per rank; rank "
        "defaults to 0..n-1.");
  m.def(
      "read_and_clear_dispatch_errors",
      [](const SymmBuffer& buffer, int rank, nb::handle stream) {
        void* s = stream_arg(stream);
        nb::gil_scoped_release release;
        return read_and_clear_dispatch_errors(buffer, rank, s);
      },
      nb::arg("buffer"), nb::arg("rank") = 0, nb::arg("stream") = nb::none(),
      "Reads and clears rank's count of out-of-range expert ids (synchronizes the stream)");
}

}  // namespace megamoe::python
