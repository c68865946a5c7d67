// Peer-memory providers and the symmetric buffer without a GPU: argument errors, NCCL missing,
// pre-dispatch validation before anything touches the driver, and NVRTC builds of the
// pre-dispatch kernel for every format.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "jit/compiler.hpp"
#include "jit_test_support.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "runtime/nccl_library.hpp"
#include "runtime/pre_dispatch_kernel.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

MoEConfig small_config(Format f = Format::nvfp4) {
  MoEConfig c;
  c.shape.hidden = 2048;
  c.shape.intermediate = 256;
  c.shape.num_experts = 64;
  c.shape.top_k = 8;
  c.weight_format = c.act_format = f;
  c.max_tokens_per_rank = 64;
  return c;
}

TEST(PeerMemoryCpu, ProviderArgumentsAreChecked) {
  EXPECT_INVALID(get_symm_buffer_for_mega_moe(small_config(), "shmem"), "provider",
                 "must be \"local\" or \"nccl\"");
  EXPECT_INVALID(get_symm_buffer_for_mega_moe(small_config(), "nccl", nullptr), "nccl_comm",
                 "needs the ncclComm_t");
  int not_a_comm = 0;
  EXPECT_INVALID(get_symm_buffer_for_mega_moe(small_config(), "local", &not_a_comm), "nccl_comm",
                 "must be null");
  EXPECT_INVALID(make_local_peer_memory(0, 1024), "num_ranks", "must be >= 1");
  EXPECT_INVALID(make_local_peer_memory(2, 0), "bytes_per_rank", "must be > 0");
  EXPECT_INVALID(make_nccl_peer_memory(nullptr, 1024), "comm", "must be an ncclComm_t");
}

TEST(PeerMemoryCpu, MissingNcclIsAClearCudaError) {
  // This process has not opened NCCL yet; point it at a library that does not exist.
  test::ScopedEnv env("MEGAMOE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2");
  std::string why;
  EXPECT_FALSE(nccl::available(&why));
  EXPECT_NE(why.find("/nonexistent/libnccl.so.2"), std::string::npos) << why;
  int not_a_comm = 0;
  try {
    make_nccl_peer_memory(&not_a_comm, 1024);
    FAIL() << "a missing NCCL was accepted";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NCCL unavailable"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/libnccl.so.2"), std::string::npos) << what;
  }
}

TEST(PeerMemoryCpu, PreDispatchRejectsBadInputWithoutTouchingTheGpu) {
  const MoEConfig c = small_config();
  const SymmBuffer b = test::fake_buffer(c);
  test::FakeAllocator alloc;
  PreDispatchInputs in;
  in.x = alloc.tensor(DType::bf16, {16, c.shape.hidden});
  in.topk_idx = alloc.tensor(DType::i32, {16, c.shape.top_k});
  in.topk_weights = alloc.tensor(DType::f32, {16, c.shape.top_k});
  PreDispatchInputs wrong_k = in;
  wrong_k.topk_weights = alloc.tensor(DType::f32, {16, c.shape.top_k - 1});
  const PreDispatchInputs bad[] = {wrong_k};
  EXPECT_THROW(mega_moe_pre_dispatch(b, bad, nullptr), InvalidArgument);
  PreDispatchInputs wrong_rank = in;
  wrong_rank.rank = 3;
  const PreDispatchInputs bad_rank[] = {wrong_rank};
  EXPECT_THROW(mega_moe_pre_dispatch(b, bad_rank, nullptr), InvalidArgument);
}

TEST(PeerMemoryCpu, PreDispatchKernelBuildsForEveryFormatWithoutSpills) {
  if (!jit::nvrtc_available()) GTEST_SKIP() << "built without NVRTC";
  for (const Format f : {Format::nvfp4, Format::mxfp4, Format::fp8}) {
    for (const std::int64_t h : {2048, 7168}) {
      MoEConfig c = small_config(f);
      c.shape.hidden = h;
      for (const bool hw : {false, true}) {
        const jit::KernelRequest r =
            runtime::pre_dispatch_request(c, runtime::PreDispatchVariant{true, true, hw});
        SCOPED_TRACE(r.entry);
        const auto k = jit::compile(r);
        test::expect_no_spills(*k);
        if (f != Format::fp8) break;  // the e4m3 mode only matters for FP8
      }
    }
  }
  EXPECT_TRUE(runtime::pre_dispatch_kernels(small_config(Format::bf16)).empty());
  EXPECT_EQ(runtime::pre_dispatch_kernels(small_config()).size(), 4u);
}

}  // namespace
}  // namespace megamoe
