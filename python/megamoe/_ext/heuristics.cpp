// Block sizes and the SM budget (megamoe/heuristics.hpp).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common.hpp"
#include "megamoe/heuristics.hpp"

namespace megamoe::python {

void register_heuristics(nb::module_& m) {
  m.def("get_block_m_for_mega_moe", &get_block_m_for_mega_moe, nb::arg("config"),
        nb::arg("num_tokens_per_rank"));
  m.def("get_device_choice_block_m_for_mega_moe", &get_device_choice_block_m_for_mega_moe,
        nb::arg("config"), nb::arg("num_tokens_per_rank"),
        "the larger token tile the call may switch to on the device under skewed routing "
        "(None where the table's tile stands)");
  m.def("tile_choice_percent", &tile_choice_percent,
        "weight-pass ratio (percent) from which the device takes the larger tile");
  m.def(
      "tile_choice_for_route_counts",
      [](const std::vector<std::int64_t>& route_counts, int block_m, int alternative,
         int min_gain_passes) {
        return tile_choice_for_route_counts(route_counts, block_m, alternative, min_gain_passes);
      },
      nb::arg("route_counts"), nb::arg("block_m"), nb::arg("alternative"),
      nb::arg("min_gain_passes") = 0,
      "the device's tile choice for per-expert route counts, computed on the host");
  m.def("tile_choice_min_gain_passes", &tile_choice_min_gain_passes, nb::arg("config"),
        nb::arg("table_block_m"),
        "weight passes the larger tile must save on top of the ratio (expert parallelism, the "
        "table's 8)");
  m.def("reachable_block_ms", &reachable_block_ms, nb::arg("config"));
  m.def("block_m_regime_ends", &block_m_regime_ends, nb::arg("config"),
        "largest token count of each reachable BLOCK_M regime, ascending");
  m.def("set_num_sms", &set_num_sms, nb::arg("num_sms"),
        "pin the SM count of the persistent kernels; 0 = all SMs minus MEGAMOE_SM_HEADROOM");
  m.def("get_num_sms", &get_num_sms, "needs a GPU");
  m.def(
      "resolve_num_sms",
      [](int device_sms, int explicit_sms, std::optional<std::string> headroom_env) {
        std::optional<std::string_view> env;
        if (headroom_env) env = *headroom_env;
        return resolve_num_sms(device_sms, explicit_sms, env);
      },
      nb::arg("device_sms"), nb::arg("explicit_sms"), nb::arg("headroom_env").none() = nb::none(),
      "the pure rule behind get_num_sms");
}

}  // namespace megamoe::python
