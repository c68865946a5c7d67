#pragma once
// A minimal fork-join loop over all hardware threads: the oracle must stay fast enough to check
// production-sized layers on a small CI machine.
#include <cstdint>
#include <functional>

namespace megamoe::reference::detail {

// Calls fn(i) once for every i in [0, n), spreading indices over std::thread::hardware_concurrency
// threads with dynamic scheduling (uneven expert pools). The first exception is rethrown.
// Results must not depend on which thread runs an index; every caller writes disjoint outputs.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn);

}  // namespace megamoe::reference::detail
