// get_num_sms: the SM budget rule of core/heuristics.cpp applied to the GPU's SM count.
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/heuristics_state.hpp"
#include "megamoe/heuristics.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe {

int get_num_sms() {
  const cuda::Driver& d = cuda::driver();
  // The current context's GPU: the one the launchers launch on (cuda::current_device()).
  CUdevice device = 0;
  MEGAMOE_CU(d.cuCtxGetDevice(&device));
  int device_sms = 0;
  MEGAMOE_CU(d.cuDeviceGetAttribute(&device_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  std::optional<std::string_view> env;
  if (const char* v = std::getenv("MEGAMOE_SM_HEADROOM")) env = std::string_view(v);
  return resolve_num_sms(device_sms, detail::pinned_num_sms(), env);
}

}  // namespace megamoe
