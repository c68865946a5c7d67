#include "runtime/bandwidth_probe.hpp"

#include <algorithm>
#include <vector>

#include "jit/compiler.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/module.hpp"

namespace megamoe::runtime {

jit::KernelRequest read_bandwidth_request() {
  jit::KernelRequest r;
  r.name = "read_bandwidth_probe";
  r.source = "#include \"megamoe/selftest/read_bandwidth.cuh\"\n";
  r.entry = "megamoe::device::selftest::read_bandwidth_kernel";
  return r;
}

namespace {

CUfunction probe_kernel() {
  return load(*jit::compile(read_bandwidth_request()));
}

}  // namespace

double measure_read_bandwidth_tbs(CUdeviceptr data, std::size_t bytes, CUstream stream) {
  const CUfunction f = probe_kernel();
  const DeviceProperties props = device_properties();
  DeviceBuffer sink(4);
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(props.sm_count * 4), 1, 1};
  cfg.block = {512, 1, 1};
  cfg.stream = stream;
  const unsigned long long n = bytes / 16;
  const CUdeviceptr s = sink.get();
  Event a, b;
  std::vector<double> ms;
  for (int i = 0; i < 17; ++i) {
    a.record(stream);
    launch_kernel(f, cfg, data, n, s);
    b.record(stream);
    b.synchronize();
    if (i >= 2) ms.push_back(b.elapsed_ms_since(a));  // two warm-ups
  }
  std::sort(ms.begin(), ms.end());
  return static_cast<double>(n * 16) / (ms[ms.size() / 2] * 1e-3) / 1e12;
}

double measure_read_bandwidth_tbs(std::size_t bytes, CUstream stream) {
  DeviceBuffer buf(bytes);
  // Non-zero, varying contents: a fill with a 32-bit pattern per word is enough for reads.
  MEGAMOE_CU(cuda::driver().cuMemsetD32Async(buf.get(), 0x5A3C96E1u, bytes / 4, stream));
  return measure_read_bandwidth_tbs(buf.get(), bytes, stream);
}

}  // namespace megamoe::runtime
