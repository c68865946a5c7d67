// Peer-memory providers on the GPU: `local` (R virtual ranks on one GPU) and `nccl` (symmetric
// windows, one rank here), and pre-dispatch writing through either.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/nccl_library.hpp"

namespace megamoe {
namespace {

class PeerMemoryGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why)) GTEST_SKIP() << "no CUDA GPU: " << why;
  }
};

MoEConfig config(int ranks) {
  MoEConfig c;
  c.shape.hidden = 2048;
  c.shape.intermediate = 256;
  c.shape.num_experts = 64;
  c.shape.top_k = 6;
  c.num_ranks = ranks;
  c.max_tokens_per_rank = 96;
  return c;
}

CUdeviceptr dptr(void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

// Every rank's buffer starts zeroed, is writable and readable, and no two overlap: each rank gets
// its own random pattern, read back after all were written.
void check_buffers(const PeerMemory& m, std::mt19937_64& rng) {
  const cuda::Driver& d = cuda::driver();
  const std::size_t n = m.bytes_per_rank();
  std::vector<std::vector<std::uint8_t>> patterns;
  for (int r = 0; r < m.num_ranks(); ++r) {
    std::vector<std::uint8_t> zero(n, 0xFF);
    MEGAMOE_CU(d.cuMemcpyDtoH(zero.data(), dptr(m.base(r)), n));
    EXPECT_EQ(std::count(zero.begin(), zero.end(), 0), static_cast<std::ptrdiff_t>(n))
        << "rank " << r << " not zeroed";
    std::vector<std::uint8_t> p(n);
    for (auto& b : p) b = static_cast<std::uint8_t>(rng());
    MEGAMOE_CU(d.cuMemcpyHtoD(dptr(m.base(r)), p.data(), n));
    patterns.push_back(std::move(p));
  }
  for (int r = 0; r < m.num_ranks(); ++r) {
    std::vector<std::uint8_t> back(n);
    MEGAMOE_CU(d.cuMemcpyDtoH(back.data(), dptr(m.base(r)), n));
    EXPECT_EQ(back, patterns[static_cast<std::size_t>(r)]) << "rank " << r;
  }
}

// A small pre-dispatch through `b` for every driven rank; checks the token count it publishes.
void pre_dispatch_smoke(const SymmBuffer& b, std::mt19937_64& rng) {
  const MoEConfig& c = b.plan.config;
  const std::int64_t t = 1 + static_cast<std::int64_t>(rng() % 96);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(t * c.shape.hidden));
  for (auto& v : x) v = formats::bf16_from_float(static_cast<float>(rng() % 200) / 50.0f - 2.0f);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(t * c.shape.top_k));
  std::vector<float> w(ids.size(), 0.25f);
  // Distinct ids per token, as a router's top-k gives (repeats would count as errors).
  const auto k = static_cast<std::size_t>(c.shape.top_k);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::int32_t id = 0;
    do {
      id = static_cast<std::int32_t>(rng() % 64);
    } while (std::find(ids.begin() + static_cast<std::ptrdiff_t>(i - i % k),
                       ids.begin() + static_cast<std::ptrdiff_t>(i),
                       id) != ids.begin() + static_cast<std::ptrdiff_t>(i));
    ids[i] = id;
  }
  runtime::DeviceBuffer dx(x.size() * 2), di(ids.size() * 4), dw(w.size() * 4);
  dx.copy_from_host(std::as_bytes(std::span<const std::uint16_t>(x)));
  di.copy_from_host(std::as_bytes(std::span<const std::int32_t>(ids)));
  dw.copy_from_host(std::as_bytes(std::span<const float>(w)));
  const Device gpu{DeviceKind::cuda, 0};
  std::vector<PreDispatchInputs> in;
  for (const int r : b.memory->driven_ranks()) {
    PreDispatchInputs p;
    p.rank = r;
    p.x = TensorView::contiguous(dx.as<void>(), DType::bf16, {t, c.shape.hidden}, gpu);
    p.topk_idx = TensorView::contiguous(di.as<void>(), DType::i32, {t, c.shape.top_k}, gpu);
    p.topk_weights = TensorView::contiguous(dw.as<void>(), DType::f32, {t, c.shape.top_k}, gpu);
    in.push_back(p);
  }
  runtime::Stream stream;
  mega_moe_pre_dispatch(b, in, stream.get());
  stream.synchronize();
  for (const int r : b.memory->driven_ranks()) {
    std::int32_t published = -1;
    MEGAMOE_CU(cuda::driver().cuMemcpyDtoH(&published, dptr(b.view(r, "num_tokens")), 4));
    EXPECT_EQ(published, t) << "rank " << r;
    EXPECT_EQ(read_and_clear_dispatch_errors(b, r, nullptr), 0u);
  }
}

TEST_F(PeerMemoryGpu, LocalRanksAreSeparateZeroedBuffers) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto m = make_local_peer_memory(4, 3 * 4096 + 16);
  EXPECT_EQ(m->kind(), "local");
  EXPECT_EQ(m->num_ranks(), 4);
  EXPECT_EQ(m->driven_ranks(), (std::vector<int>{0, 1, 2, 3}));
  check_buffers(*m, rng);
  EXPECT_THROW(m->base(4), InvalidArgument);
  EXPECT_THROW(m->base(-1), InvalidArgument);
}

TEST_F(PeerMemoryGpu, LocalSymmBufferViewsAndPreDispatch) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const SymmBuffer b = get_symm_buffer_for_mega_moe(config(2));
  ASSERT_EQ(b.memory->num_ranks(), 2);
  EXPECT_GE(b.memory->bytes_per_rank(), b.plan.total_bytes);
  for (const BufferRegion& r : b.plan.regions) {
    EXPECT_EQ(static_cast<char*>(b.view(1, r.name)) - static_cast<char*>(b.memory->base(1)),
              static_cast<std::ptrdiff_t>(r.offset))
        << r.name;
  }
  EXPECT_THROW(b.view(0, "no_such_region"), InvalidArgument);
  pre_dispatch_smoke(b, rng);
}

TEST_F(PeerMemoryGpu, NcclOneRankWindow) {
  std::string why;
  if (!nccl::available(&why)) GTEST_SKIP() << "NCCL >= 2.28 not available: " << why;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  cuda::driver();  // NCCL uses the current device's primary context, as the driver does
  const nccl::Library& n = nccl::library();
  std::printf("NCCL %d from %s\n", n.version, n.path.c_str());
  ncclUniqueId id;
  MEGAMOE_NCCL(n.ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  MEGAMOE_NCCL(n.ncclCommInitRank(&comm, 1, id, 0));
  {
    const auto m = make_nccl_peer_memory(comm, 2 * 4096);
    EXPECT_EQ(m->kind(), "nccl");
    EXPECT_EQ(m->num_ranks(), 1);
    EXPECT_EQ(m->driven_ranks(), std::vector<int>{0});
    check_buffers(*m, rng);

    const SymmBuffer b = get_symm_buffer_for_mega_moe(config(1), "nccl", comm);
    EXPECT_EQ(b.memory->kind(), "nccl");
    pre_dispatch_smoke(b, rng);
  }
  MEGAMOE_NCCL(n.ncclCommDestroy(comm));
}

}  // namespace
}  // namespace megamoe
