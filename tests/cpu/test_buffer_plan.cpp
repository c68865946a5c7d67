// plan_symm_buffer: a hand-worked layout, structural properties on random configurations,
// pool rows against a brute-force worst case, and the `megamoe plan` command.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer_plan_detail.hpp"
#include "jit_test_support.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/presets.hpp"
#include "preset_config.hpp"
#include "validation_test_support.hpp"

namespace megamoe {
namespace {

std::size_t align128(std::size_t v) {
  return (v + 127) / 128 * 128;
}

// nvfp4 x nvfp4, H=256, I=128, E=4 (2 per rank), K=2, R=2, T_max=4. Every t <= 4 has
// t*R*K/E <= 8 -> BLOCK_M 8. Worst case at t=4: each expert can get R*t = 8 routes, one tile
// each -> 16 pool rows.
TEST(BufferPlan, HandWorkedLayout) {
  MoEConfig c;
  c.shape = {256, 128, 4, 2};
  c.num_ranks = 2;
  c.max_tokens_per_rank = 4;
  const SymmBufferPlan p = plan_symm_buffer(c);
  EXPECT_EQ(p.pool_rows, 16);
  struct Want {
    const char* name;
    std::size_t offset, bytes, rows, pitch;
  };
  const Want want[] = {
      {"x", 0, 512, 4, 128},        // 4 rows of H/2
      {"x_sf", 512, 64, 4, 16},     // H/16 = 16 ue4m3 per row
      {"x_global", 640, 16, 4, 4},  // f32 per token
      {"topk_idx", 768, 32, 4, 8},  // K i32
      {"topk_weights", 896, 32, 4, 8},
      {"num_tokens", 1024, 4, 0, 0},
      {"error_count", 1152, 4, 0, 0},
      {"route_list", 1280, 192, 16, 12},
      {"fc1_pool", 1536, 2048, 16, 128},
      {"fc1_pool_sf", 3584, 256, 16, 16},
      {"fc1_pool_global", 3840, 64, 16, 4},
      {"fc2_pool", 3968, 1024, 16, 64},    // I/2
      {"fc2_pool_sf", 4992, 256, 16, 16},  // I/16 = 8 bytes padded to a 16-byte pitch
      {"combine", 5248, 4096, 8, 512},     // [K, T_max, H] bf16
      {"sync", 9344, 772, 0, 0},
  };
  ASSERT_EQ(p.regions.size(), std::size(want));
  for (std::size_t i = 0; i < std::size(want); ++i) {
    SCOPED_TRACE(want[i].name);
    const BufferRegion& r = p.regions[i];
    EXPECT_EQ(r.name, want[i].name);
    EXPECT_EQ(r.offset, want[i].offset);
    EXPECT_EQ(r.bytes, want[i].bytes);
    EXPECT_EQ(r.rows, want[i].rows);
    EXPECT_EQ(r.row_pitch, want[i].pitch);
    EXPECT_EQ(r.alignment, 128u);
  }
  EXPECT_EQ(p.total_bytes, 10240u);
  // sync: rank_barrier 64 B, grid_barrier 8, send_counts R*E_local*4 = 16,
  // expert_offsets (E_local+1)*4 = 12, block_ready (16/8+1)*4 = 12, status 16, tile_choice 4.
  const std::pair<const char*, std::size_t> fields[] = {
      {"rank_barrier", 64}, {"grid_barrier", 8}, {"send_counts", 16}, {"expert_offsets", 12},
      {"block_ready", 12},  {"status", 16},      {"tile_choice", 4}};
  ASSERT_EQ(p.sync_fields.size(), std::size(fields));
  for (std::size_t i = 0; i < std::size(fields); ++i) {
    EXPECT_EQ(p.sync_fields[i].name, fields[i].first);
    EXPECT_EQ(p.sync_fields[i].offset, 128 * i);
    EXPECT_EQ(p.sync_fields[i].bytes, fields[i].second);
  }
}

// Bytes of one row of n values in an activation format, written out independently of the
// planner.
std::size_t row_bytes(Format f, std::int64_t n) {
  const auto u = static_cast<std::size_t>(n);
  return f == Format::bf16 ? 2 * u : f == Format::fp8 ? u : u / 2;
}
std::size_t sf_bytes(const MoEConfig& c, std::int64_t n) {
  const auto u = static_cast<std::size_t>(n);
  switch (c.act_format) {
    case Format::nvfp4:
      return u / 16;
    case Format::mxfp4:
      return u / 32;
    case Format::fp8:
      return u / 128 * (c.fp8_scale == Fp8ScaleKind::f32 ? 4 : 1);
    case Format::bf16:
      return 0;
  }
  return 0;
}

MoEConfig random_config(test::Seeded& s) {
  const std::pair<Format, Format> pairs[] = {
      {Format::nvfp4, Format::nvfp4}, {Format::mxfp4, Format::mxfp4}, {Format::mxfp4, Format::fp8},
      {Format::mxfp4, Format::bf16},  {Format::fp8, Format::fp8},     {Format::bf16, Format::bf16}};
  MoEConfig c;
  const auto [w, a] = pairs[s.uniform(0, 5)];
  c.weight_format = w;
  c.act_format = a;
  c.fp8_scale = s.uniform(0, 1) ? Fp8ScaleKind::f32 : Fp8ScaleKind::ue8m0;
  c.num_ranks = 1 << s.uniform(0, 3);
  c.shape.hidden = 128 * s.uniform(2, 64);
  c.shape.intermediate = 128 * s.uniform(1, 32);
  c.shape.num_experts = c.num_ranks * s.uniform(1, 64);
  c.shape.top_k = static_cast<int>(s.uniform(1, std::min<std::int64_t>(c.shape.num_experts, 16)));
  c.max_tokens_per_rank = s.uniform(1, 4096);
  c.fp8_combine = s.uniform(0, 3) == 0;
  return c;
}

TEST(BufferPlan, StructureOnRandomConfigs) {
  test::Seeded s;
  for (int iter = 0; iter < 300; ++iter) {
    const MoEConfig c = random_config(s);
    SCOPED_TRACE(describe(c));
    const SymmBufferPlan p = plan_symm_buffer(c);
    // The formula equals the sum of the views: every view starts where the previous one ends,
    // rounded up to 128, and the total covers the last one.
    std::size_t expected_offset = 0;
    for (const BufferRegion& r : p.regions) {
      SCOPED_TRACE(r.name);
      EXPECT_EQ(r.offset, expected_offset);
      EXPECT_EQ(r.offset % 128, 0u);
      EXPECT_EQ(r.alignment, 128u);
      EXPECT_GT(r.bytes, 0u);
      if (r.rows > 0) {
        EXPECT_EQ(r.bytes, r.rows * r.row_pitch);
      }
      expected_offset += align128(r.bytes);
    }
    EXPECT_EQ(p.total_bytes, expected_offset);
    // No overlap (checked directly as well, in case the regions were not in order).
    for (std::size_t i = 0; i < p.regions.size(); ++i) {
      for (std::size_t j = i + 1; j < p.regions.size(); ++j) {
        const BufferRegion &a = p.regions[i], &b = p.regions[j];
        EXPECT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
            << a.name << " overlaps " << b.name;
      }
    }
    // Regions present exactly for the formats that need them.
    const bool quantized = c.act_format != Format::bf16;
    const bool nvfp4 = c.act_format == Format::nvfp4;
    EXPECT_EQ(p.has("x_sf"), quantized);
    EXPECT_EQ(p.has("fc1_pool_sf"), quantized);
    EXPECT_EQ(p.has("fc2_pool_sf"), quantized);
    EXPECT_EQ(p.has("x_global"), nvfp4);
    EXPECT_EQ(p.has("fc1_pool_global"), nvfp4);
    EXPECT_EQ(p.has("combine_sf"), c.fp8_combine);
    // TMA-read rows: 16-byte pitch, at least the logical row.
    const auto t_max = static_cast<std::size_t>(c.max_tokens_per_rank);
    const auto rows = static_cast<std::size_t>(p.pool_rows);
    const std::int64_t h = c.shape.hidden, inter = c.shape.intermediate;
    struct Rowed {
      const char* name;
      std::size_t rows, min_pitch;
    };
    std::vector<Rowed> tma = {{"x", t_max, row_bytes(c.act_format, h)},
                              {"fc1_pool", rows, row_bytes(c.act_format, h)},
                              {"fc2_pool", rows, row_bytes(c.act_format, inter)}};
    if (quantized) {
      tma.push_back({"x_sf", t_max, sf_bytes(c, h)});
      tma.push_back({"fc1_pool_sf", rows, sf_bytes(c, h)});
      tma.push_back({"fc2_pool_sf", rows, sf_bytes(c, inter)});
    }
    const auto k = static_cast<std::size_t>(c.shape.top_k);
    tma.push_back({"combine", k * t_max, static_cast<std::size_t>(h) * (c.fp8_combine ? 1 : 2)});
    if (c.fp8_combine)
      tma.push_back({"combine_sf", k * t_max, static_cast<std::size_t>(h / 128) * 4});
    for (const Rowed& want : tma) {
      const BufferRegion& r = p.region(want.name);
      EXPECT_EQ(r.rows, want.rows) << want.name;
      EXPECT_EQ(r.row_pitch % 16, 0u) << want.name;
      EXPECT_GE(r.row_pitch, want.min_pitch) << want.name;
      EXPECT_LT(r.row_pitch, want.min_pitch + 16) << want.name;
    }
    EXPECT_EQ(p.region("topk_idx").bytes, t_max * k * 4);
    EXPECT_EQ(p.region("route_list").bytes, rows * 12);
    // Sync fields inside "sync", 128-aligned, non-overlapping.
    const BufferRegion& sync = p.region("sync");
    std::size_t end = 0;
    for (const BufferRegion& f : p.sync_fields) {
      EXPECT_EQ(f.offset % 128, 0u) << f.name;
      EXPECT_GE(f.offset, end) << f.name;
      end = f.offset + f.bytes;
    }
    EXPECT_EQ(end, sync.bytes);
    const auto e_local = static_cast<std::size_t>(c.experts_per_rank());
    EXPECT_EQ(p.sync_fields[2].bytes, static_cast<std::size_t>(c.num_ranks) * e_local * 4);
    EXPECT_EQ(p.sync_fields[3].bytes, (e_local + 1) * 4);
  }
}

// The most padded rows, by dynamic programming over experts: maximize sum_e
// ceil(n_e/bm)*bm over n_e in [0, cap], sum n_e <= budget. Independent of the closed form.
std::int64_t brute_force_rows(std::int64_t experts, std::int64_t cap, std::int64_t budget,
                              std::int64_t bm) {
  std::vector<std::int64_t> best(static_cast<std::size_t>(budget) + 1, 0);
  for (std::int64_t e = 0; e < experts; ++e) {
    std::vector<std::int64_t> next(best.size(), 0);
    for (std::int64_t used = 0; used <= budget; ++used) {
      for (std::int64_t n = 0; n <= std::min(cap, used); ++n) {
        const std::int64_t v = best[static_cast<std::size_t>(used - n)] + (n + bm - 1) / bm * bm;
        next[static_cast<std::size_t>(used)] = std::max(next[static_cast<std::size_t>(used)], v);
      }
    }
    best = std::move(next);
  }
  return best.back();
}

// A configuration small enough for brute_force_rows: 2^[min_log_ranks, 3] ranks, 1..6 experts a
// rank, top-k up to 8, T_max up to 40.
MoEConfig small_random_config(test::Seeded& s, int min_log_ranks, std::int64_t intermediate) {
  MoEConfig c;
  c.shape.hidden = 256;
  c.shape.intermediate = intermediate;
  c.num_ranks = 1 << s.uniform(min_log_ranks, 3);
  c.shape.num_experts = c.num_ranks * s.uniform(1, 6);
  c.shape.top_k = static_cast<int>(s.uniform(1, std::min<std::int64_t>(c.shape.num_experts, 8)));
  c.max_tokens_per_rank = s.uniform(1, 40);
  return c;
}

TEST(BufferPlan, PoolRowsEqualBruteForceWorstCase) {
  test::Seeded s;
  for (int iter = 0; iter < 60; ++iter) {
    const MoEConfig c = small_random_config(s, 0, 128);
    SCOPED_TRACE(describe(c));
    const std::int64_t e_local = c.experts_per_rank();
    std::int64_t want = 0;
    for (std::int64_t t = 1; t <= c.max_tokens_per_rank; ++t) {
      const int bm = get_block_m_for_mega_moe(c, t);
      const std::int64_t cap = c.num_ranks * t;
      const std::int64_t budget = cap * std::min<std::int64_t>(c.shape.top_k, e_local);
      const std::int64_t rows = brute_force_rows(e_local, cap, budget, bm);
      EXPECT_EQ(worst_case_pool_rows(c, t, bm), rows) << "t=" << t << " bm=" << bm;
      want = std::max(want, rows);
    }
    EXPECT_EQ(plan_symm_buffer(c).pool_rows, want);
  }
}

// Ragged batches (docs/api.md §1): a rank's BLOCK_M comes from its own count t (or the tile
// choice's alternative at t), while its peers may send the routes of up to T_max tokens each. The
// plan must hold those tiles too: the worst padded rows of T_max tokens per rank at any tile a
// count t can pick, by the brute force above on small configurations, and by the closed form on the
// presets.
TEST(BufferPlan, PoolsHoldRaggedBatches) {
  test::Seeded s;
  const auto tiles_at = [](const MoEConfig& c, std::int64_t t) {
    std::vector<int> bms = {get_block_m_for_mega_moe(c, t)};
    if (const std::optional<int> alt = get_device_choice_block_m_for_mega_moe(c, t)) {
      bms.push_back(*alt);
    }
    return bms;
  };
  for (int iter = 0; iter < 40; ++iter) {
    const MoEConfig c = small_random_config(s, 1, 256);
    SCOPED_TRACE(describe(c));
    const std::int64_t pool = plan_symm_buffer(c).pool_rows;
    const std::int64_t e_local = c.experts_per_rank();
    const std::int64_t cap = c.num_ranks * c.max_tokens_per_rank;
    const std::int64_t budget = cap * std::min<std::int64_t>(c.shape.top_k, e_local);
    for (std::int64_t t = 1; t <= c.max_tokens_per_rank; ++t) {
      for (const int bm : tiles_at(c, t)) {
        EXPECT_LE(brute_force_rows(e_local, cap, budget, bm), pool) << "t=" << t << " bm=" << bm;
      }
    }
  }
  for (const char* preset : {"dsv4-flash", "h6144-e256-k8", "dsv3"}) {
    for (int ranks : {2, 4, 8}) {
      for (std::int64_t t_max : {8, 128, 512, 4096}) {
        const MoEConfig c = test::preset_config(preset, ranks, t_max);
        SCOPED_TRACE(describe(c));
        const std::int64_t pool = plan_symm_buffer(c).pool_rows;
        for (std::int64_t t : block_m_regime_ends(c)) {
          for (const int bm : tiles_at(c, t)) {
            EXPECT_LE(worst_case_pool_rows(c, t_max, bm), pool) << "t=" << t << " bm=" << bm;
          }
        }
      }
    }
  }
}

// The point of regime-aware sizing: a production shape needs fewer rows than the worst
// BLOCK_M's worst case at T_max (the largest tile pads most).
TEST(BufferPlan, ReachableRegimesOnly) {
  const MoEConfig c = test::preset_config("h6144-e256-k8", 8, 128);
  const SymmBufferPlan p = plan_symm_buffer(c);
  // t <= 128 -> expected tokens per expert <= 32 -> BLOCK_M 32; 32 local experts get at most
  // 8192 routes: 32 first tiles + (8192 - 32) / 32 = 255 more -> 287 tiles of 32 rows.
  EXPECT_EQ(p.pool_rows, 287 * 32);
  EXPECT_LT(p.pool_rows, worst_case_pool_rows(c, 128, 128));
}

// "token_f16" holds the wide NVFP4 kernel's chunks in every layout it can pick (chunks of 256, 384
// or 512 k that divide H and I: pool rows x max(H, I) / CK chunks of CK + 8 f16), exists exactly
// where the plan says the wide kernel applies, with either combine format.
TEST(BufferPlan, TokenF16HoldsEveryChunkLayout) {
  for (const char* name : {"dsv4-flash", "h6144-e256-k8", "qwen3-235b", "dsv3"}) {
    for (int ranks : {1, 8}) {
      for (std::int64_t t_max : {std::int64_t{1}, std::int64_t{512}, std::int64_t{4096}}) {
        MoEConfig c = test::preset_config(name, ranks, t_max);
        const SymmBufferPlan p = plan_symm_buffer(c);
        SCOPED_TRACE(describe(c));
        ASSERT_EQ(p.has("token_f16"), plan_has_token_f16(c));
        if (!p.has("token_f16")) continue;
        const std::int64_t kmax = std::max(c.shape.hidden, c.shape.intermediate);
        for (std::int64_t ck : {256, 384, 512}) {
          if (c.shape.hidden % ck != 0 || c.shape.intermediate % ck != 0) continue;
          const auto need = static_cast<std::size_t>(p.pool_rows * (kmax / ck) * (ck + 8) * 2);
          EXPECT_LE(need, p.region("token_f16").bytes) << "chunks of " << ck;
        }
        c.fp8_combine = true;
        EXPECT_EQ(plan_symm_buffer(c).region("token_f16").bytes, p.region("token_f16").bytes);
      }
    }
  }
}

// "token_f16" exists only where the wide kernel can run: from the first T_max whose BLOCK_M is 16
// (dsv4-flash: 129, three expected tokens per expert being the 8-token regime's end), from the
// first T_max with a tile choice on the device (dsv4-flash: 43, one route per expert), or at any
// T_max when MEGAMOE_NVFP4_KERNEL=wide is set while planning; never where the wide kernel is not
// supported (FP8 weights, side-LoRA).
TEST(BufferPlan, TokenF16OnlyWhereTheWideKernelCanRun) {
  const MoEConfig low = test::preset_config("dsv4-flash", 1, 42);
  ASSERT_EQ(reachable_block_ms(low), std::vector<int>{8});
  EXPECT_FALSE(plan_symm_buffer(low).has("token_f16"));
  const MoEConfig choice = test::preset_config("dsv4-flash", 1, 43);
  ASSERT_EQ(reachable_block_ms(choice), (std::vector<int>{8, 32}));
  EXPECT_TRUE(plan_symm_buffer(choice).has("token_f16"));
  const MoEConfig decode = test::preset_config("dsv4-flash", 1, 128);
  const test::ScopedEnv no_choice("MEGAMOE_TILE_CHOICE", "0");
  ASSERT_EQ(reachable_block_ms(decode), std::vector<int>{8});
  EXPECT_FALSE(plan_symm_buffer(decode).has("token_f16"));
  EXPECT_FALSE(plan_has_token_f16(decode));
  EXPECT_TRUE(wide_kernel_supported(decode));
  const MoEConfig prefill = test::preset_config("dsv4-flash", 1, 129);
  EXPECT_EQ(reachable_block_ms(prefill).back(), 16);
  EXPECT_TRUE(plan_symm_buffer(prefill).has("token_f16"));
  {
    const test::ScopedEnv forced("MEGAMOE_NVFP4_KERNEL", "wide");
    EXPECT_TRUE(plan_symm_buffer(decode).has("token_f16"));
  }
  {
    const test::ScopedEnv forced("MEGAMOE_NVFP4_KERNEL", "pipelined");
    EXPECT_FALSE(plan_symm_buffer(decode).has("token_f16"));
    EXPECT_TRUE(plan_symm_buffer(prefill).has("token_f16"));  // the default may still pick it
  }
  MoEConfig fp8 = test::preset_config("dsv4-flash", 1, 4096);
  fp8.weight_format = fp8.act_format = Format::fp8;
  EXPECT_FALSE(plan_symm_buffer(fp8).has("token_f16"));
  // The region is most of a decode plan: without it dsv4-flash T_max = 128 is well under half.
  EXPECT_LT(plan_symm_buffer(decode).total_bytes * 2, [&] {
    const test::ScopedEnv forced("MEGAMOE_NVFP4_KERNEL", "wide");
    return plan_symm_buffer(decode).total_bytes;
  }());
}

// A launch's BLOCK_M must fit the pools the plan sized: always so under the heuristic (every token
// count, its BLOCK_M), not when MEGAMOE_BLOCK_M changed after planning.
TEST(BufferPlan, LaunchBlockMMustFitThePools) {
  const MoEConfig c = test::preset_config("dsv4-flash", 2, 512);
  const SymmBufferPlan plan = plan_symm_buffer(c);
  for (std::int64_t t = 1; t <= c.max_tokens_per_rank; ++t) {
    EXPECT_NO_THROW(check_pools_fit(plan, t, get_block_m_for_mega_moe(c, t))) << "t = " << t;
  }
  EXPECT_INVALID(check_pools_fit(plan, c.max_tokens_per_rank, 128), "MEGAMOE_BLOCK_M",
                 "must be what the buffer was planned with");
}

TEST(BufferPlan, RegionLookup) {
  MoEConfig c;
  c.shape = {512, 256, 8, 2};
  c.weight_format = Format::fp8;
  c.act_format = Format::fp8;
  c.max_tokens_per_rank = 8;
  const SymmBufferPlan p = plan_symm_buffer(c);
  EXPECT_TRUE(p.has("x_sf"));
  EXPECT_FALSE(p.has("x_global"));
  EXPECT_EQ(&p.region("combine"), &p.regions[p.regions.size() - 2]);
  EXPECT_INVALID(p.region("x_global"), "region", "must name a region of this plan");
}

TEST(BufferPlan, RejectsInvalidConfig) {
  MoEConfig c;
  c.shape = {512, 256, 8, 2};
  c.max_tokens_per_rank = 0;
  EXPECT_INVALID(plan_symm_buffer(c), "config.max_tokens_per_rank", "must be in [1, 131072]");
}

// `megamoe plan` prints every region with its offset and size, and the plan's total.
TEST(BufferPlan, PlanCommandPrintsEveryRegion) {
  const std::string cmd = std::string(MEGAMOE_TOOL_PATH) +
                          " plan --preset dsv4-flash --ranks 4 --max-tokens 256 --weights mxfp4"
                          " --acts fp8 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << out;
  MoEConfig c = test::preset_config("dsv4-flash", 4, 256);
  c.weight_format = Format::mxfp4;
  c.act_format = Format::fp8;
  const SymmBufferPlan p = plan_symm_buffer(c);
  for (const BufferRegion& r : p.regions) {
    const std::string line_start = "\n" + r.name + " ";
    const auto at = out.find(line_start);
    ASSERT_NE(at, std::string::npos) << r.name << "\n" << out;
    const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find(" " + std::to_string(r.offset) + " "), std::string::npos) << line;
    EXPECT_NE(line.find(" " + std::to_string(r.bytes) + " "), std::string::npos) << line;
  }
  EXPECT_NE(out.find("total: " + std::to_string(p.total_bytes) + " bytes"), std::string::npos)
      << out;
}

TEST(BufferPlan, PlanCommandRejectsBadOptions) {
  const std::string cmd = std::string(MEGAMOE_TOOL_PATH) + " plan --preset dsv3 --ranks 3 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  EXPECT_NE(pclose(pipe), 0);
  EXPECT_NE(out.find("'config.num_ranks': must be 1, 2, 4 or 8"), std::string::npos) << out;
}

}  // namespace
}  // namespace megamoe
