// BLOCK_M table, reachable regimes, and the SM budget rule, table-driven on the CPU.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer_plan_detail.hpp"
#include "core/heuristics_state.hpp"
#include "jit_test_support.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/heuristics.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

MoEConfig config(std::int64_t e, int r, int k, std::int64_t t_max) {
  MoEConfig c;
  // H and I multiples of 256 but not of 384 or 512: the plain regime table (see
  // BlockMWideKernelTable for the other).
  c.shape = {1280, 768, e, k};
  c.num_ranks = r;
  c.max_tokens_per_rank = t_max;
  return c;
}

// Expected tokens per expert = t*R*K/E; <= 8 -> 8, <= 16 -> 16, <= 32 -> 32, <= 64 -> 64,
// else 128. Rows straddle each edge.
TEST(Heuristics, BlockMTable) {
  struct Row {
    std::int64_t e;
    int r, k;
    std::int64_t t;
    int block_m;
  };
  const Row rows[] = {
      // E=256, R=8, K=8: 0.25 tokens per expert per token.
      {256, 8, 8, 1, 8},
      {256, 8, 8, 32, 8},
      {256, 8, 8, 33, 16},
      {256, 8, 8, 64, 16},
      {256, 8, 8, 65, 32},
      {256, 8, 8, 128, 32},
      {256, 8, 8, 129, 64},
      {256, 8, 8, 256, 64},
      {256, 8, 8, 257, 128},
      {256, 8, 8, 4096, 128},
      // E=256, R=1, K=6: 6/256 per token; 8 tokens per expert at t = 341.33.
      {256, 1, 6, 341, 8},
      {256, 1, 6, 342, 16},
      {256, 1, 6, 682, 16},
      {256, 1, 6, 683, 32},
      // One expert, top-1, one rank: t tokens per expert.
      {1, 1, 1, 1, 8},
      {1, 1, 1, 8, 8},
      {1, 1, 1, 9, 16},
      {1, 1, 1, 16, 16},
      {1, 1, 1, 17, 32},
      {1, 1, 1, 64, 64},
      {1, 1, 1, 65, 128},
  };
  for (const Row& row : rows) {
    const MoEConfig c = config(row.e, row.r, row.k, 8192);
    EXPECT_EQ(get_block_m_for_mega_moe(c, row.t), row.block_m)
        << "E=" << row.e << " R=" << row.r << " K=" << row.k << " t=" << row.t;
  }
}

// Where the wide NVFP4 kernel runs 32-token sub-tiles with 384-k or 512-k stages (H and I
// multiples of 384 or of 512, either combine format): 8 up to 3 expected tokens per expert, 16 up
// to 8, 32 up to 32; elsewhere (256-k stages only) the plain table above.
TEST(Heuristics, BlockMWideKernelTable) {
  MoEConfig c = config(256, 1, 8, 8192);  // 1/32 expected tokens per expert per token
  for (auto [h, inter] : {std::pair{6144, 3072}, std::pair{4096, 2048}}) {
    c.shape.hidden = h;
    c.shape.intermediate = inter;
    EXPECT_EQ(get_block_m_for_mega_moe(c, 1), 8);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 96), 8);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 97), 16);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 256), 16);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 257), 32);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 1024), 32);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 1025), 64);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 2049), 128);
    EXPECT_EQ(reachable_block_ms(c), (std::vector<int>{8, 16, 32, 64, 128}));
    EXPECT_EQ(block_m_regime_ends(c), (std::vector<std::int64_t>{96, 256, 1024, 2048, 8192}));
  }
  // dsv4-flash (top-6): T = 128 is 3 expected tokens per expert (8), T = 512 is 12 (32).
  c.shape.top_k = 6;
  EXPECT_EQ(get_block_m_for_mega_moe(c, 128), 8);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 129), 16);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 341), 16);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 342), 32);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 512), 32);
  c.shape.top_k = 8;
  c.fp8_combine = true;  // the wide kernel has FP8 combine slots too: the same table
  EXPECT_EQ(get_block_m_for_mega_moe(c, 97), 16);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 512), 32);
  EXPECT_EQ(block_m_regime_ends(c), (std::vector<std::int64_t>{96, 256, 1024, 2048, 8192}));
  c.fp8_combine = false;
  c.shape.hidden = 1280;
  c.shape.intermediate = 768;
  EXPECT_EQ(get_block_m_for_mega_moe(c, 97), 8);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 512), 16);
  c.shape.hidden = 1536;
  EXPECT_EQ(get_block_m_for_mega_moe(c, 97), 16);
  EXPECT_EQ(get_block_m_for_mega_moe(c, 512), 32);
}

// Tile choice on the device: where the table runs 8- or 16-token tiles for at least one route
// per expert on average, and the wide kernel runs 32-token sub-tiles (H and I multiples of 384 or
// 512), the call may switch to 32 on the device; nowhere else, and not when a tuning override
// pins the tile or the kernel.
TEST(Heuristics, DeviceTileChoice) {
  MoEConfig c = config(256, 1, 6, 8192);
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 128), std::nullopt);  // plain table shape
  c.shape.hidden = 4096;
  c.shape.intermediate = 2048;  // dsv4-flash
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 1), std::nullopt);
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 42), std::nullopt);  // 252 routes < E
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 43), 32);
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 128), 32);
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 129), 32);  // the table's 16: wide decides
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 341), 32);
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 342), std::nullopt);  // the table's 32
  c.num_ranks = 2;
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 21), std::nullopt);
  EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 22), 32);
  c.num_ranks = 1;
  c.max_tokens_per_rank = 128;
  EXPECT_EQ(reachable_block_ms(c), (std::vector<int>{8, 32}));
  EXPECT_NO_THROW(check_pools_fit(plan_symm_buffer(c), 128, 32));
  for (auto [var, value] :
       {std::pair{"MEGAMOE_TILE_CHOICE", "0"}, std::pair{"MEGAMOE_BLOCK_M", "8"},
        std::pair{"MEGAMOE_NVFP4_KERNEL", "pipelined"}}) {
    const test::ScopedEnv off(var, value);
    EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 128), std::nullopt) << var;
    EXPECT_EQ(reachable_block_ms(c), std::vector<int>{8}) << var;
  }
  {
    const test::ScopedEnv off("MEGAMOE_TILE_CHOICE", "0");
    EXPECT_INVALID(check_pools_fit(plan_symm_buffer(c), 128, 32), "MEGAMOE_BLOCK_M",
                   "must be what the buffer was planned with");
  }
  EXPECT_EQ(tile_choice_percent(), 105);
  {
    const test::ScopedEnv ratio("MEGAMOE_TILE_CHOICE", "130");
    EXPECT_EQ(tile_choice_percent(), 130);
    EXPECT_EQ(get_device_choice_block_m_for_mega_moe(c, 128), 32);
  }
  for (const char* bad : {"99", "1001", "x", "12a", "-5"}) {
    const test::ScopedEnv ratio("MEGAMOE_TILE_CHOICE", bad);
    EXPECT_INVALID(tile_choice_percent(), "MEGAMOE_TILE_CHOICE", "must be 0 (off)");
    EXPECT_INVALID(get_device_choice_block_m_for_mega_moe(c, 128), "MEGAMOE_TILE_CHOICE",
                   "must be 0 (off)");
  }
}

// The device's rule computed on the host: weight passes sum(ceil(c / tile)), integers, the
// alternative from tile_choice_percent() / 100 times its passes on (so the edge itself switches).
TEST(Heuristics, TileChoiceForRouteCounts) {
  using V = std::vector<std::int64_t>;
  // No routes: 0 passes >= 0, as on the GPU.
  EXPECT_EQ(tile_choice_for_route_counts(V{}, 8, 32), 32);
  EXPECT_EQ(tile_choice_for_route_counts(V{1, 1, 1, 1}, 8, 32), 8);  // 4 passes each way
  EXPECT_EQ(tile_choice_for_route_counts(V{32}, 8, 32), 32);         // 4 passes against 1
  EXPECT_EQ(tile_choice_for_route_counts(V{0, 0, 9}, 8, 32), 32);    // 2 against 1
  // 20 experts of 1 route and one of 9: 22 passes of 8 against 21 of 32, 104.8 % < 105 %.
  V edge(20, 1);
  edge.push_back(9);
  EXPECT_EQ(tile_choice_for_route_counts(edge, 8, 32), 8);
  edge.push_back(0);
  edge.push_back(17);  // 25 passes against 22: 113.6 %
  EXPECT_EQ(tile_choice_for_route_counts(edge, 8, 32), 32);
  {
    const test::ScopedEnv ratio("MEGAMOE_TILE_CHOICE", "120");
    EXPECT_EQ(tile_choice_for_route_counts(edge, 8, 32), 8);
  }
  // 20 experts of 1 route and three of 17: 26 passes of 16 against 23 of 32, 113 %.
  V sixteen(20, 1);
  for (int i = 0; i < 3; ++i) sixteen.push_back(17);
  EXPECT_EQ(tile_choice_for_route_counts(sixteen, 16, 32), 32);
  EXPECT_INVALID(tile_choice_for_route_counts(V{1}, 32, 32), "block_m, alternative",
                 "must satisfy 1 <= block_m < alternative");
  EXPECT_INVALID(tile_choice_for_route_counts(V{1}, 0, 32), "block_m, alternative",
                 "must satisfy 1 <= block_m < alternative");
  EXPECT_INVALID(tile_choice_for_route_counts(V{1, -1}, 8, 32), "route_counts[1]", "must be >= 0");
  // A minimum gain: 25 passes against 22 clears 105 % plus 1 pass, not plus 2 (2500 < 2310 + 200).
  EXPECT_EQ(tile_choice_for_route_counts(edge, 8, 32, 1), 32);
  EXPECT_EQ(tile_choice_for_route_counts(edge, 8, 32, 2), 8);
  EXPECT_INVALID(tile_choice_for_route_counts(edge, 8, 32, -1), "min_gain_passes", "must be >= 0");
}

// The wide kernel's later start against the pipelined kernel's with expert parallelism, in
// passes of one expert's weights: ~48 us at ~3.7 TB/s. None with one rank, from the table's 16,
// or with an explicit MEGAMOE_TILE_CHOICE ratio.
TEST(Heuristics, TileChoiceMinGainPasses) {
  MoEConfig c = config(256, 2, 6, 128);
  c.shape.hidden = 4096;
  c.shape.intermediate = 2048;  // dsv4-flash: 14.2 MB an expert
  EXPECT_EQ(tile_choice_min_gain_passes(c, 8), 13);
  EXPECT_EQ(tile_choice_min_gain_passes(c, 16), 0);
  {
    const test::ScopedEnv ratio("MEGAMOE_TILE_CHOICE", "105");
    EXPECT_EQ(tile_choice_min_gain_passes(c, 8), 0);
  }
  {
    const test::ScopedEnv bad("MEGAMOE_TILE_CHOICE", "7");
    EXPECT_INVALID(tile_choice_min_gain_passes(c, 8), "MEGAMOE_TILE_CHOICE", "must be 0 (off)");
  }
  c.num_ranks = 1;
  EXPECT_EQ(tile_choice_min_gain_passes(c, 8), 0);
  c.num_ranks = 8;
  c.shape.hidden = 6144;
  c.shape.intermediate = 3072;  // h6144-e256-k8: 31.9 MB
  EXPECT_EQ(tile_choice_min_gain_passes(c, 8), 6);
  EXPECT_INVALID(tile_choice_min_gain_passes(c, 0), "table_block_m", "must be >= 1");
  c.shape.top_k = 0;
  EXPECT_INVALID(tile_choice_min_gain_passes(c, 8), "config.shape.top_k", "must be in [1");
}

TEST(Heuristics, BlockMTokenRange) {
  const MoEConfig c = config(256, 8, 8, 128);
  EXPECT_INVALID(get_block_m_for_mega_moe(c, 0), "num_tokens_per_rank",
                 "must be in [1, max_tokens_per_rank = 128]");
  EXPECT_INVALID(get_block_m_for_mega_moe(c, 129), "num_tokens_per_rank",
                 "must be in [1, max_tokens_per_rank = 128]");
}

// MEGAMOE_BLOCK_M forces one BLOCK_M at every token count, for the plan and the launch alike;
// anything but the five tile sizes is rejected by name before anything is planned.
TEST(Heuristics, BlockMOverride) {
  const MoEConfig c = config(256, 1, 8, 512);
  const std::int64_t default_pool_rows = plan_symm_buffer(c).pool_rows;
  {
    test::ScopedEnv forced("MEGAMOE_BLOCK_M", "128");
    EXPECT_EQ(get_block_m_for_mega_moe(c, 1), 128);
    EXPECT_EQ(get_block_m_for_mega_moe(c, 512), 128);
    EXPECT_EQ(reachable_block_ms(c), std::vector<int>{128});
    EXPECT_EQ(block_m_regime_ends(c), std::vector<std::int64_t>{512});
    // Every expert may now pad to 128 rows: the pools grow with it.
    EXPECT_GT(plan_symm_buffer(c).pool_rows, default_pool_rows);
  }
  EXPECT_EQ(get_block_m_for_mega_moe(c, 1), 8);
  {
    test::ScopedEnv empty("MEGAMOE_BLOCK_M", "");
    EXPECT_EQ(get_block_m_for_mega_moe(c, 1), 8);
  }
  for (const char* bad : {"24", "0", "16 ", "x"}) {
    test::ScopedEnv forced("MEGAMOE_BLOCK_M", bad);
    EXPECT_INVALID(get_block_m_for_mega_moe(c, 1), "MEGAMOE_BLOCK_M",
                   "must be 8, 16, 32, 64 or 128");
    EXPECT_INVALID(plan_symm_buffer(c), "MEGAMOE_BLOCK_M", "must be 8, 16, 32, 64 or 128");
  }
}

TEST(Heuristics, BlockMValidatesConfig) {
  MoEConfig c = config(256, 8, 8, 128);
  c.shape.top_k = 0;
  EXPECT_INVALID(get_block_m_for_mega_moe(c, 1), "config.shape.top_k", "must be in [1");
}

TEST(Heuristics, RegimesAgreeWithBruteForce) {
  test::Seeded s;
  for (int iter = 0; iter < 200; ++iter) {
    const int r = 1 << s.uniform(0, 3);
    const std::int64_t e = r * s.uniform(1, 64);
    const int k = static_cast<int>(s.uniform(1, std::min<std::int64_t>(e, 16)));
    const MoEConfig c = config(e, r, k, s.uniform(1, 3000));
    SCOPED_TRACE(describe(c));
    std::vector<int> reachable;
    std::vector<std::int64_t> ends;
    for (std::int64_t t = 1; t <= c.max_tokens_per_rank; ++t) {
      const int bm = get_block_m_for_mega_moe(c, t);
      if (t > 1) {
        EXPECT_GE(bm, get_block_m_for_mega_moe(c, t - 1)) << "t=" << t;  // non-decreasing
      }
      if (reachable.empty() || reachable.back() != bm) {
        reachable.push_back(bm);
        if (t > 1) ends.push_back(t - 1);
      }
    }
    ends.push_back(c.max_tokens_per_rank);
    EXPECT_EQ(reachable_block_ms(c), reachable);
    EXPECT_EQ(block_m_regime_ends(c), ends);
  }
}

TEST(Heuristics, ResolveNumSmsTable) {
  struct Row {
    int device, explicit_sms;
    std::optional<std::string_view> env;
    int want;
  };
  const Row rows[] = {
      {132, 0, std::nullopt, 132}, {132, 0, "", 132},    {132, 0, "0", 132},
      {132, 0, "1", 130},          {132, 0, "2", 130},   {132, 0, "7", 124},
      {132, 0, "8", 124},          {132, 0, "130", 2},   {132, 0, "0008", 124},
      {132, 100, "8", 100},        {132, 132, "8", 132}, {132, 1, std::nullopt, 1},
      {132, 77, std::nullopt, 77},  // an explicit count may be odd
  };
  for (const Row& row : rows) {
    EXPECT_EQ(resolve_num_sms(row.device, row.explicit_sms, row.env), row.want)
        << row.device << " " << row.explicit_sms << " '" << row.env.value_or("<unset>") << "'";
  }
}

TEST(Heuristics, HeadroomMustBeADecimalInteger) {
  for (std::string_view bad :
       {"-2", "abc", "8abc", " 8", "8 ", "+8", "1.5", "0x10", "99999999999999"}) {
    EXPECT_INVALID(resolve_num_sms(132, 0, bad), "MEGAMOE_SM_HEADROOM",
                   "must be a non-negative decimal integer");
  }
}

TEST(Heuristics, HeadroomMustLeaveSms) {
  EXPECT_INVALID(resolve_num_sms(132, 0, "131"), "MEGAMOE_SM_HEADROOM",
                 "rounded up to even must stay below the device's 132 SMs");
  EXPECT_INVALID(resolve_num_sms(132, 0, "132"), "MEGAMOE_SM_HEADROOM",
                 "rounded up to even must stay below the device's 132 SMs");
}

TEST(Heuristics, ExplicitSmsRange) {
  EXPECT_INVALID(resolve_num_sms(132, 133, std::nullopt), "num_sms",
                 "must not exceed the device's 132 SMs");
  EXPECT_INVALID(resolve_num_sms(132, -1, std::nullopt), "num_sms", "must be >= 0");
}

TEST(Heuristics, DeviceSmsPositive) {
  EXPECT_INVALID(resolve_num_sms(0, 0, std::nullopt), "device_sms", "must be >= 1");
}

TEST(Heuristics, SetNumSmsPinsAndUnpins) {
  set_num_sms(120);
  EXPECT_EQ(detail::pinned_num_sms(), 120);
  set_num_sms(0);
  EXPECT_EQ(detail::pinned_num_sms(), 0);
  EXPECT_INVALID(set_num_sms(-4), "num_sms", "must be >= 0");
  EXPECT_EQ(detail::pinned_num_sms(), 0);
}

}  // namespace
}  // namespace megamoe
