// On a Hopper GPU: the JIT-compiled self-test kernel loads and runs with > 48 KB of dynamic
// shared memory, thread-block clusters and programmatic dependent launch, and its output
// matches a CPU computation bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "jit/compiler.hpp"
#include "jit/selftest_kernel.hpp"
#include "jit_test_support.hpp"
#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/module.hpp"

namespace megamoe {
namespace {

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; inputs here are finite.
std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

// The kernel's contract (kernels/megamoe/selftest/cluster_axpy.cuh), on the CPU.
std::vector<std::uint16_t> reference(const std::vector<std::uint16_t>& x, float alpha, int tile,
                                     int cluster) {
  const std::size_t n = x.size();
  std::vector<std::uint16_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = i / tile, j = i % tile;
    const std::size_t r = b % cluster;
    const std::size_t partner = b - r + (r + 1) % cluster;
    const std::size_t k = partner * tile + j;
    const float other = k < n ? bf16_to_float(x[k]) : 0.0f;
    out[i] = float_to_bf16(std::fma(alpha, bf16_to_float(x[i]), other));
  }
  return out;
}

class JitGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no CUDA GPU: " << why;
    const runtime::DeviceProperties p = runtime::device_properties();
    if (p.major != 9) GTEST_SKIP() << "needs an sm_90 GPU for sm_90a code, found " << p.arch;
  }
};

TEST_F(JitGpu, DevicePropertiesAreSane) {
  const runtime::DeviceProperties p = runtime::device_properties();
  EXPECT_EQ(p.arch, "sm_90");
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.total_memory, std::size_t{1} << 30);
  EXPECT_GE(p.max_shared_memory_per_block, 200 * 1024);
  EXPECT_GE(p.driver_version, 12000);
  EXPECT_FALSE(p.name.empty());
}

TEST_F(JitGpu, ClusterPdlLargeSmemKernelMatchesCpu) {
  const jit::SelftestShape shape{256, 64};
  ASSERT_GT(shape.dynamic_smem_bytes(), 48u * 1024u);
  const auto compiled = jit::compile(jit::selftest_request(shape));
  test::expect_no_spills(*compiled);
  const CUfunction function = runtime::load(*compiled);
  EXPECT_EQ(runtime::load(*compiled), function) << "module loaded twice";

  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int tile = shape.tile();
  for (int cluster : {1, 2, 4}) {
    SCOPED_TRACE("cluster " + std::to_string(cluster));
    // A ragged tail, so the last tiles read zeros past n and must not write there.
    const int blocks = cluster * std::uniform_int_distribution<int>(2, 5)(rng);
    const int n = blocks * tile - std::uniform_int_distribution<int>(1, tile + tile / 2)(rng);
    const int grid = (n + tile - 1) / tile;
    const unsigned grid_rounded = static_cast<unsigned>((grid + cluster - 1) / cluster * cluster);
    const float alpha = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(n));
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    for (auto& v : x) v = float_to_bf16(value(rng));

    // Outputs hold n elements plus a guard tail; everything starts poisoned (0xffff is a NaN).
    const std::size_t guard = 1024;
    const std::size_t bytes = (x.size() + guard) * 2;
    runtime::DeviceBuffer in(x.size() * 2), mid(bytes), out(bytes);
    in.copy_from_host(std::as_bytes(std::span(x)));
    mid.fill_bytes(0xff);
    out.fill_bytes(0xff);

    runtime::Stream stream;
    runtime::LaunchConfig config;
    config.grid = {grid_rounded, 1, 1};
    config.block = {static_cast<unsigned>(shape.threads), 1, 1};
    config.dynamic_smem = shape.dynamic_smem_bytes();
    config.stream = stream.get();
    config.cluster = {static_cast<unsigned>(cluster), 1, 1};
    config.pdl = true;
    // The second launch reads the first one's output: griddepcontrol.wait must hold it back.
    runtime::launch_kernel(function, config, mid.as<void>(), in.as<const void>(), alpha, n);
    runtime::launch_kernel(function, config, out.as<void>(), mid.as<const void>(), alpha, n);
    stream.synchronize();

    std::vector<std::uint16_t> got_mid(x.size() + guard), got_out(x.size() + guard);
    mid.copy_to_host(std::as_writable_bytes(std::span(got_mid)));
    out.copy_to_host(std::as_writable_bytes(std::span(got_out)));
    const auto want_mid = reference(x, alpha, tile, cluster);
    const auto want_out = reference(want_mid, alpha, tile, cluster);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (got_mid[i] != want_mid[i] || got_out[i] != want_out[i]) {
        if (++bad <= 5) {
          ADD_FAILURE() << "element " << i << ": first " << std::hex << got_mid[i] << " want "
                        << want_mid[i] << ", second " << got_out[i] << " want " << want_out[i];
        }
      }
    }
    EXPECT_EQ(bad, 0u) << "of " << x.size();
    for (std::size_t i = x.size(); i < x.size() + guard; ++i) {
      ASSERT_EQ(got_out[i], 0xffff) << "wrote past n at " << i;
      ASSERT_EQ(got_mid[i], 0xffff) << "wrote past n at " << i;
    }
  }
}

TEST_F(JitGpu, LaunchRejectsAGridThatIsNotAMultipleOfTheCluster) {
  const auto compiled = jit::compile(jit::selftest_request(jit::SelftestShape{64, 4}));
  const CUfunction function = runtime::load(*compiled);
  runtime::LaunchConfig config;
  config.grid = {3, 1, 1};
  config.block = {64, 1, 1};
  config.dynamic_smem = 64 * 4 * 4;
  config.cluster = {2, 1, 1};
  try {
    runtime::launch_kernel(function, config, CUdeviceptr{0}, CUdeviceptr{0}, 1.0f, 0);
    FAIL() << "launched";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "grid");
  }
}

TEST_F(JitGpu, BufferCopiesCheckTheirSize) {
  runtime::DeviceBuffer buffer(64);
  std::vector<std::byte> host(32);
  EXPECT_THROW(buffer.copy_from_host(host), InvalidArgument);
  host.resize(64);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::byte>(i * 7 + 1);
  buffer.copy_from_host(host);
  std::vector<std::byte> back(64);
  buffer.copy_to_host(back);
  EXPECT_EQ(back, host);
}

}  // namespace
}  // namespace megamoe
