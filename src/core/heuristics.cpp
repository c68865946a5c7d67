// BLOCK_M from the expected tokens per expert, and the SM budget rule (docs/api.md,
// "Heuristics"). Everything here is pure host logic; get_num_sms lives in runtime/num_sms.cpp.
#include "megamoe/heuristics.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "core/buffer_plan_detail.hpp"
#include "core/heuristics_state.hpp"
#include "core/validate.hpp"
#include "megamoe/error.hpp"

namespace megamoe {
namespace {

// Swap-AB decode kernels put tokens on the MMA N side, so the token tile can be as small as
// the smallest wgmma N (8). A regime table: BLOCK_M = block_m of the first row whose
// max_expected_tokens is >= the expected tokens per expert t*R*K/E; above the last row
// kLargestBlockM.
struct Regime {
  std::int64_t max_expected_tokens;
  int block_m;
};
constexpr int kLargestBlockM = 128;

// Where the wide NVFP4 kernel runs 32-token sub-tiles with 384-k or 512-k stages (wide_tiles_of_32,
// below), measured side by side at both presets (runs 80, 81, bench/NOTES.md "Tenth session"):
// - 8 (the pipelined kernel) only up to 3 tokens per expert: it wins by ~1 % there (dsv4-flash
//   T = 128, h6144 T = 96), ties at 3.75 and loses from 4 on (16 takes 1 % less time at h6144
//   T = 128, 11 % at T = 192 (6 per expert), 23 % at T = 256 (8)): each further 8-token tile of an
//   expert streams and decodes its weights again, where the wide kernel's 16-token tile does it
//   once;
// - 16 up to 8 per expert (uniform: 1-4 % ahead of 32 at 4..8, level at 9-10, behind from 12);
// - 32 above 8 up to 32 (12 per expert: -4 % uniform, -9 % zipf1.2 against 16). Skewed routing
//   favours the larger tiles everywhere (zipf1.2: 16 beats 8 from 1-2 per expert, 32 beats 16
//   from ~2); the table follows uniform routing, whose expected count it is.
constexpr Regime kWideRegimes[] = {{3, 8}, {8, 16}, {32, 32}, {64, 64}};
// Elsewhere (side-LoRA, H or I not a multiple of 384 or 512): the table the pipelined
// kernel was tuned with; the wide kernel's 256-k stages there stream at ~0.75x the rate of 512-k
// ones (run 57), so its earlier edges are not assumed to carry over.
constexpr Regime kPlainRegimes[] = {{8, 8}, {16, 16}, {32, 32}, {64, 64}};

std::atomic<int> g_pinned_num_sms{0};

// Routes a rank's tokens generate in total, t * R * K: kept in integers so the comparison
// with limit * E is exact (no rounding at the regime edges).
std::int64_t global_routes(const MoEConfig& c, std::int64_t t) {
  return t * c.num_ranks * c.shape.top_k;
}

// The wide NVFP4 kernel (the default from BLOCK_M 16 on) with stages of 384 or 512 k beside
// 32-token sub-tiles (H and I multiples of either; 256-k stages stream slower).
bool wide_tiles_of_32(const MoEConfig& c) {
  const auto whole = [&](int k) {
    return c.shape.hidden % k == 0 && c.shape.intermediate % k == 0;
  };
  return wide_kernel_supported(c) && (whole(384) || whole(512));
}

std::span<const Regime> regimes_of(const MoEConfig& c) {
  return wide_tiles_of_32(c) ? kWideRegimes : kPlainRegimes;
}

// MEGAMOE_BLOCK_M=8|16|32|64|128 forces one BLOCK_M at every token count: a tuning override that
// lets one build measure the table's choices side by side. The plan (pool rows, reachable
// kernels) and the launch read it alike, so it must be set before the buffer is planned.
std::optional<int> forced_block_m() {
  const char* v = std::getenv("MEGAMOE_BLOCK_M");
  if (v == nullptr || *v == '\0') return std::nullopt;
  for (int bm : {8, 16, 32, 64, 128}) {
    if (std::string_view(v) == std::to_string(bm)) return bm;
  }
  throw_invalid("MEGAMOE_BLOCK_M", "must be 8, 16, 32, 64 or 128 (or unset)", v);
}

// MEGAMOE_TILE_CHOICE: unset or empty -> the default ratio, "0" -> off, N in [100, 1000] -> N %.
// The default, from run 179 (bench/NOTES.md, twenty-first session): at dsv4-flash T = 64 / 128
// and h6144 T = 64 the 32-token tiles win from a pass ratio of ~1.02-1.08 on (Zipf exponents
// 0.6-1.2), while uniform routing stays at 1.00-1.01 (where they cost up to 10-15 %).
constexpr int kDefaultTileChoicePercent = 105;
// The value MEGAMOE_TILE_CHOICE sets explicitly (validated), or nullopt when it is unset or empty.
std::optional<int> explicit_tile_choice() {
  const char* v = std::getenv("MEGAMOE_TILE_CHOICE");
  if (v == nullptr || *v == '\0') return std::nullopt;
  int n = -1;
  const std::string_view s(v);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || (n != 0 && (n < 100 || n > 1000))) {
    throw_invalid("MEGAMOE_TILE_CHOICE",
                  "must be 0 (off) or a weight-pass ratio in percent, 100..1000 (or unset)", v);
  }
  return n;
}

int tile_choice_setting() {
  return explicit_tile_choice().value_or(kDefaultTileChoicePercent);
}

}  // namespace

int tile_choice_percent() {
  const int n = tile_choice_setting();
  return n == 0 ? kDefaultTileChoicePercent : n;
}

int tile_choice_min_gain_passes(const MoEConfig& config, int table_block_m) {
  validate::validate_config(config);
  if (table_block_m < 1) {
    throw_invalid("table_block_m", "must be >= 1", std::to_string(table_block_m));
  }
  // Only the pipelined kernel (the table's 8) starts sooner than the wide one; from 16 on the
  // table's tile runs in the wide kernel too (runs 191-193: 16 -> 32 gains at pass ratios of
  // 1.09-1.14). An explicit MEGAMOE_TILE_CHOICE=N is the ratio rule alone.
  if (explicit_tile_choice() || config.num_ranks == 1 || table_block_m >= 16) return 0;
  // Runs 190 and 193 (two H200s, Zipf in expert order and permuted, 22-128 tokens a rank): with
  // 32-token tiles forced against the table's 8, t = a P + F fits dsv4-flash with F larger by
  // ~14 us for the wide kernel, and the two launches' handover adds ~5-10 us (run 191); the
  // break-even rows (dsv4-flash 24-28 tokens a rank, 3-10 % lost at pass ratios of 1.1-1.25) put
  // the whole at ~45-50 us. One pass of an expert's weights streams at ~3.7 TB/s in those calls
  // (dsv4-flash 3.7 us, h6144 8.8 us).
  constexpr double kExtraStartUs = 48.0;
  constexpr double kPassBytesPerUs = 3.7e6;
  const double expert_bytes = 3.0 * static_cast<double>(config.shape.hidden) *
                              static_cast<double>(config.shape.intermediate) * (0.5 + 1.0 / 16);
  return static_cast<int>(std::lround(kExtraStartUs * kPassBytesPerUs / expert_bytes));
}

int tile_choice_for_route_counts(std::span<const std::int64_t> route_counts, int block_m,
                                 int alternative, int min_gain_passes) {
  if (block_m < 1 || alternative <= block_m) {
    throw_invalid("block_m, alternative", "must satisfy 1 <= block_m < alternative",
                  std::to_string(block_m) + ", " + std::to_string(alternative));
  }
  if (min_gain_passes < 0) {
    throw_invalid("min_gain_passes", "must be >= 0", std::to_string(min_gain_passes));
  }
  std::int64_t small = 0, large = 0;
  for (std::size_t e = 0; e < route_counts.size(); ++e) {
    const std::int64_t n = route_counts[e];
    if (n < 0) {
      throw_invalid("route_counts[" + std::to_string(e) + "]", "must be >= 0", std::to_string(n));
    }
    small += (n + block_m - 1) / block_m;
    large += (n + alternative - 1) / alternative;
  }
  return small * 100 >= large * tile_choice_percent() + std::int64_t{100} * min_gain_passes
             ? alternative
             : block_m;
}

std::optional<int> get_device_choice_block_m_for_mega_moe(const MoEConfig& config,
                                                          std::int64_t num_tokens_per_rank) {
  const int bm = get_block_m_for_mega_moe(config, num_tokens_per_rank);  // validates
  constexpr int kAlternative = 32;
  if (tile_choice_setting() == 0 || forced_block_m().has_value()) return std::nullopt;
  if (const char* v = std::getenv("MEGAMOE_NVFP4_KERNEL"); v != nullptr && *v != '\0') {
    return std::nullopt;
  }
  // The table's tile (8: the pipelined kernel, 16: the wide one) decides, the wide kernel with
  // 32-token sub-tiles is the alternative; below one route per expert on average the tiles hold
  // one token either way.
  if (bm >= kAlternative || !wide_tiles_of_32(config)) return std::nullopt;
  if (global_routes(config, num_tokens_per_rank) < config.shape.num_experts) return std::nullopt;
  return kAlternative;
}

int get_block_m_for_mega_moe(const MoEConfig& config, std::int64_t num_tokens_per_rank) {
  validate::validate_config(config);
  if (num_tokens_per_rank < 1 || num_tokens_per_rank > config.max_tokens_per_rank) {
    throw_invalid(
        "num_tokens_per_rank",
        "must be in [1, max_tokens_per_rank = " + std::to_string(config.max_tokens_per_rank) + "]",
        std::to_string(num_tokens_per_rank));
  }
  if (const std::optional<int> forced = forced_block_m()) return *forced;
  const std::int64_t routes = global_routes(config, num_tokens_per_rank);
  for (const Regime& r : regimes_of(config)) {
    if (routes <= r.max_expected_tokens * config.shape.num_experts) return r.block_m;
  }
  return kLargestBlockM;
}

std::vector<std::int64_t> block_m_regime_ends(const MoEConfig& config) {
  validate::validate_config(config);
  std::vector<std::int64_t> ends;
  const std::int64_t per_token = std::int64_t{config.num_ranks} * config.shape.top_k;
  for (const Regime& r : regimes_of(config)) {
    // Largest t with t * R * K <= limit * E.
    const std::int64_t t = r.max_expected_tokens * config.shape.num_experts / per_token;
    if (t >= 1 && t < config.max_tokens_per_rank) ends.push_back(t);
  }
  ends.push_back(config.max_tokens_per_rank);
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  // Adjacent regimes of one BLOCK_M are one regime.
  std::vector<std::int64_t> merged;
  for (std::size_t i = 0; i + 1 < ends.size(); ++i) {
    if (get_block_m_for_mega_moe(config, ends[i]) !=
        get_block_m_for_mega_moe(config, ends[i] + 1)) {
      merged.push_back(ends[i]);
    }
  }
  merged.push_back(ends.back());
  return merged;
}

std::vector<int> reachable_block_ms(const MoEConfig& config) {
  // BLOCK_M is non-decreasing in t, so every reachable regime ends at one of these token
  // counts, and each of them lies in a reachable regime.
  // The device's alternative needs enough routes per token count, which grow with t: the
  // regime's end is where it first appears if it appears at all.
  std::vector<int> out;
  for (std::int64_t t : block_m_regime_ends(config)) {
    out.push_back(get_block_m_for_mega_moe(config, t));
    if (const std::optional<int> alt = get_device_choice_block_m_for_mega_moe(config, t)) {
      out.push_back(*alt);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void set_num_sms(int num_sms) {
  if (num_sms < 0) {
    throw_invalid("num_sms", "must be >= 0 (0 = all SMs minus MEGAMOE_SM_HEADROOM)",
                  std::to_string(num_sms));
  }
  g_pinned_num_sms.store(num_sms, std::memory_order_relaxed);
}

namespace detail {
int pinned_num_sms() {
  return g_pinned_num_sms.load(std::memory_order_relaxed);
}
}  // namespace detail

int resolve_num_sms(int device_sms, int explicit_sms,
                    std::optional<std::string_view> headroom_env) {
  if (device_sms < 1) {
    throw_invalid("device_sms", "must be >= 1", std::to_string(device_sms));
  }
  if (explicit_sms < 0) {
    throw_invalid("num_sms", "must be >= 0 (0 = all SMs minus MEGAMOE_SM_HEADROOM)",
                  std::to_string(explicit_sms));
  }
  if (explicit_sms > 0) {
    // An explicit count is taken as given (odd counts too): the caller sized it on purpose.
    if (explicit_sms > device_sms) {
      throw_invalid("num_sms",
                    "must not exceed the device's " + std::to_string(device_sms) + " SMs",
                    std::to_string(explicit_sms));
    }
    return explicit_sms;
  }
  if (!headroom_env || headroom_env->empty()) return device_sms;
  const std::string_view text = *headroom_env;
  int headroom = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), headroom);
  const bool digits_only =
      std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits_only || ec != std::errc() || end != text.data() + text.size()) {
    throw_invalid("MEGAMOE_SM_HEADROOM", "must be a non-negative decimal integer",
                  "'" + std::string(text) + "'");
  }
  // Even reservations keep the persistent grid's SM pairs (TPC halves) whole.
  const int rounded = headroom + (headroom % 2);
  if (rounded >= device_sms) {
    throw_invalid(
        "MEGAMOE_SM_HEADROOM",
        "rounded up to even must stay below the device's " + std::to_string(device_sms) + " SMs",
        std::string(text));
  }
  return device_sms - rounded;
}

}  // namespace megamoe
