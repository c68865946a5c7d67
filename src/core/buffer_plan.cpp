// plan_symm_buffer: the exact byte layout of one rank's symmetric buffer (docs/api.md,
// "Buffer plan"). The region names and formats are the contract written in buffer.hpp.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer_plan_detail.hpp"
#include "core/validate.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/heuristics.hpp"

namespace megamoe {
namespace {

// Every region starts on a 128-byte boundary: the 128B-swizzled TMA tiles need it, and it
// keeps unrelated regions off shared cache lines.
constexpr std::size_t kRegionAlignment = 128;
constexpr std::size_t kRowPitchAlignment = 16;  // TMA global strides
constexpr std::size_t kRouteEntryBytes = 12;    // i32 {src_rank, token, k}
constexpr int kMaxRanks = 8;

std::size_t align_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}
std::size_t sz(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

// Bytes of one row of n values in an activation format (FP4: two per byte).
std::size_t act_row_bytes(Format f, std::int64_t n) {
  switch (f) {
    case Format::bf16:
      return sz(2 * n);
    case Format::fp8:
      return sz(n);
    case Format::mxfp4:
    case Format::nvfp4:
      return sz(n / 2);
  }
  return 0;
}

// Bytes of the block scales of one row of n values; 0 when the format has none.
std::size_t act_sf_row_bytes(const MoEConfig& c, std::int64_t n) {
  switch (c.act_format) {
    case Format::bf16:
      return 0;
    case Format::fp8:
      return sz(n / 128) * (c.fp8_scale == Fp8ScaleKind::f32 ? 4 : 1);
    case Format::mxfp4:
      return sz(n / 32);
    case Format::nvfp4:
      return sz(n / 16);
  }
  return 0;
}

class Layout {
 public:
  // A region of `rows` rows of `row_bytes`, the pitch padded to `pitch_align`.
  void rows(std::string name, std::size_t rows, std::size_t row_bytes,
            std::size_t pitch_align = 1) {
    const std::size_t pitch = align_up(row_bytes, pitch_align);
    add(std::move(name), rows * pitch, rows, pitch);
  }
  void bytes(std::string name, std::size_t bytes) { add(std::move(name), bytes, 0, 0); }
  std::size_t end() const { return align_up(offset_, kRegionAlignment); }
  std::vector<BufferRegion> take() { return std::move(regions_); }

 private:
  void add(std::string name, std::size_t bytes, std::size_t rows, std::size_t pitch) {
    offset_ = align_up(offset_, kRegionAlignment);
    regions_.push_back({std::move(name), offset_, bytes, kRegionAlignment, rows, pitch});
    offset_ += bytes;
  }
  std::size_t offset_ = 0;
  std::vector<BufferRegion> regions_;
};

// Fields of the "sync" region (offsets from its start). Kernels reset what they use before
// returning, so the host zeroes the buffer once, at allocation.
std::vector<BufferRegion> plan_sync_fields(const MoEConfig& c, std::int64_t pool_rows) {
  const std::size_t e_local = sz(c.experts_per_rank());
  Layout l;
  // Cross-rank barrier: a u32 signal per (phase, peer); two phases so that back-to-back
  // barriers never wait on the same word.
  l.bytes("rank_barrier", 2 * kMaxRanks * 4);
  // Grid barrier of the persistent kernel: u32 arrive count and u32 generation.
  l.bytes("grid_barrier", 2 * 4);
  // i32 [R, E_local]: routes each source rank sends to each local expert, written by the
  // sources over NVLink before the barrier.
  l.bytes("send_counts", sz(c.num_ranks) * e_local * 4);
  // i32 [E_local + 1]: padded start row of each local expert in the pools, then the total.
  l.bytes("expert_offsets", (e_local + 1) * 4);
  // u32 per pool block of the smallest tile (8 rows): "rows ready" counters for FC1/FC2.
  l.bytes("block_ready", sz(pool_rows / 8 + 1) * 4);
  // u32 [4]: timeout flag, rank that timed out, phase, spare (read by the host after a fault).
  l.bytes("status", 4 * 4);
  // i32: the token tile the last call with a tile choice on the device ran (written by the first
  // of its two kernels, read by the second; get_device_choice_block_m_for_mega_moe).
  l.bytes("tile_choice", 4);
  return l.take();
}

}  // namespace

bool wide_kernel_supported(const MoEConfig& c) {
  return c.weight_format == Format::nvfp4 && c.act_format == Format::nvfp4 && !c.side_lora &&
         c.shape.hidden % kTokenChunkK == 0 && c.shape.intermediate % kTokenChunkK == 0;
}

bool plan_has_token_f16(const MoEConfig& c) {
  if (!wide_kernel_supported(c)) return false;
  // Read as runtime::nvfp4_kernel_version reads it (an unknown value fails there, at launch).
  if (const char* v = std::getenv("MEGAMOE_NVFP4_KERNEL"); v != nullptr && std::string(v) == "wide")
    return true;
  const std::vector<int> reachable = reachable_block_ms(c);  // non-decreasing
  return !reachable.empty() && reachable.back() >= kWideKernelMinBlockM;
}

// Worst-case padded pool rows for t live tokens per rank with tile bm. N = R*t*min(K, E_local)
// routes reach the rank (top-k ids are distinct, so one token sends at most min(K, E_local)
// routes to one rank and at most one to each expert: n_e <= R*t). An expert's first tile costs
// one route, every further tile bm routes, so the most tiles N routes can open is
// min(E_local, N) + (N - min(E_local, N)) / bm, capped by E_local * ceil(R*t / bm).
std::int64_t worst_case_pool_rows(const MoEConfig& c, std::int64_t t, int bm) {
  const std::int64_t e_local = c.experts_per_rank();
  const std::int64_t per_expert_cap = std::int64_t{c.num_ranks} * t;
  const std::int64_t routes = per_expert_cap * std::min<std::int64_t>(c.shape.top_k, e_local);
  const std::int64_t first = std::min(e_local, routes);
  const std::int64_t tiles =
      std::min(first + (routes - first) / bm, e_local * ((per_expert_cap + bm - 1) / bm));
  return tiles * bm;
}

void check_pools_fit(const SymmBufferPlan& plan, std::int64_t t, int bm) {
  const std::int64_t need = worst_case_pool_rows(plan.config, t, bm);
  if (need > plan.pool_rows) {
    throw_invalid("MEGAMOE_BLOCK_M",
                  "must be what the buffer was planned with: BLOCK_M " + std::to_string(bm) +
                      " at " + std::to_string(t) + " tokens per rank may pad to " +
                      std::to_string(need) + " pool rows, the plan has " +
                      std::to_string(plan.pool_rows),
                  std::to_string(bm));
  }
}

SymmBufferPlan plan_symm_buffer(const MoEConfig& config) {
  validate::validate_config(config);
  const MoEConfig& c = config;
  const std::int64_t t_max = c.max_tokens_per_rank;
  const std::int64_t h = c.shape.hidden;
  const std::int64_t inter = c.shape.intermediate;
  const std::int64_t k = c.shape.top_k;

  // Inside one BLOCK_M regime the worst case grows with t, so the regime ends bound it.
  std::int64_t pool_rows = 0;
  for (std::int64_t t : block_m_regime_ends(c)) {
    pool_rows = std::max(pool_rows, worst_case_pool_rows(c, t, get_block_m_for_mega_moe(c, t)));
    if (const std::optional<int> alt = get_device_choice_block_m_for_mega_moe(c, t)) {
      pool_rows = std::max(pool_rows, worst_case_pool_rows(c, t, *alt));
    }
  }
  if (pool_rows > std::numeric_limits<std::int32_t>::max()) {
    throw_invalid("config", "expert pools exceed 2^31 rows (token indices are i32)",
                  std::to_string(pool_rows));
  }

  const bool quantized = c.act_format != Format::bf16;
  const bool nvfp4 = c.act_format == Format::nvfp4;
  const auto rows_t = sz(t_max);
  const auto rows_pool = sz(pool_rows);
  Layout l;
  l.rows("x", rows_t, act_row_bytes(c.act_format, h), kRowPitchAlignment);
  if (quantized) l.rows("x_sf", rows_t, act_sf_row_bytes(c, h), kRowPitchAlignment);
  if (nvfp4) l.rows("x_global", rows_t, 4);
  l.rows("topk_idx", rows_t, sz(4 * k));
  l.rows("topk_weights", rows_t, sz(4 * k));
  l.bytes("num_tokens", 4);
  l.bytes("error_count", 4);
  l.rows("route_list", rows_pool, kRouteEntryBytes);
  l.rows("fc1_pool", rows_pool, act_row_bytes(c.act_format, h), kRowPitchAlignment);
  if (quantized) l.rows("fc1_pool_sf", rows_pool, act_sf_row_bytes(c, h), kRowPitchAlignment);
  if (nvfp4) l.rows("fc1_pool_global", rows_pool, 4);
  l.rows("fc2_pool", rows_pool, act_row_bytes(c.act_format, inter), kRowPitchAlignment);
  if (quantized) l.rows("fc2_pool_sf", rows_pool, act_sf_row_bytes(c, inter), kRowPitchAlignment);
  // The wide NVFP4 kernel's decoded token operand: per pool tile of BLOCK_M rows, max(H, I) / 256
  // chunks of [BLOCK_M][256 + 8] f16 (docs/nvfp4_kernel.md, "wide"); rank-local scratch.
  if (plan_has_token_f16(c)) {
    const std::int64_t chunks = std::max(h, inter) / kTokenChunkK;
    l.bytes("token_f16", rows_pool * sz(chunks) * kTokenChunkRowBytes);
  }
  // Combine slots [K, T_max, H]: one row per (k, token).
  const std::size_t combine_rows = sz(k) * rows_t;
  if (c.fp8_combine) {
    l.rows("combine", combine_rows, sz(h), kRowPitchAlignment);
    l.rows("combine_sf", combine_rows, sz(h / 128) * 4, kRowPitchAlignment);
  } else {
    l.rows("combine", combine_rows, sz(2 * h), kRowPitchAlignment);
  }
  std::vector<BufferRegion> sync_fields = plan_sync_fields(c, pool_rows);
  const BufferRegion& last_field = sync_fields.back();
  l.bytes("sync", last_field.offset + last_field.bytes);

  SymmBufferPlan plan;
  plan.config = config;
  plan.total_bytes = l.end();
  plan.regions = l.take();
  plan.pool_rows = pool_rows;
  plan.sync_fields = std::move(sync_fields);
  return plan;
}

const BufferRegion& SymmBufferPlan::region(std::string_view name) const {
  for (const BufferRegion& r : regions) {
    if (r.name == name) return r;
  }
  std::string known;
  for (const BufferRegion& r : regions) known += (known.empty() ? "" : ", ") + r.name;
  throw_invalid("region", "must name a region of this plan (" + known + ")", std::string(name));
}

bool SymmBufferPlan::has(std::string_view name) const {
  return std::any_of(regions.begin(), regions.end(),
                     [&](const BufferRegion& r) { return r.name == name; });
}

}  // namespace megamoe
