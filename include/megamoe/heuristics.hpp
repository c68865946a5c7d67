#pragma once
// Block sizes and the SM budget (docs/design.md, "Heuristics").
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "megamoe/config.hpp"

namespace megamoe {

// The token tile (BLOCK_M) of the fused kernels for a live token count per rank, from the
// expected tokens per expert T*R*K/E. Table in src/core/heuristics.cpp.
int get_block_m_for_mega_moe(const MoEConfig& config, std::int64_t num_tokens_per_rank);

// Tile choice on the device: where the table picks 8- or 16-token tiles for at least one route
// per expert on average and the wide kernel can run 32-token tiles, skewed routing can make the
// larger tile much faster (popular experts stream their weights once per tile): there this
// returns 32, and nvfp4_mega_moe launches two kernels -- the table's counts the call's routes on
// the device and hands the call to the second when its tile would stream at least
// tile_choice_percent() / 100 times the weight passes of 32, plus tile_choice_min_gain_passes.
// nullopt elsewhere, and when MEGAMOE_TILE_CHOICE=0, MEGAMOE_BLOCK_M or MEGAMOE_NVFP4_KERNEL is
// set (read like MEGAMOE_BLOCK_M: set it before the buffer is planned). The verdict comes from
// every rank's routes to every expert, so it is the same on every rank, whether one launch drives
// them all (`local`) or each process its own (`nccl`), and the output does not depend on the
// provider.
std::optional<int> get_device_choice_block_m_for_mega_moe(const MoEConfig& config,
                                                          std::int64_t num_tokens_per_rank);

// The weight-pass ratio, in percent, from which the device takes the larger tile:
// MEGAMOE_TILE_CHOICE=N (100..1000), else the measured default.
int tile_choice_percent();

// Weight passes the larger tile must save on top of the ratio rule, where the table's tile is
// `table_block_m`. With expert parallelism (R > 1) and the table's 8 (the pipelined kernel) the
// wide kernel's start costs ~50 us more (its route and token phases read peer rows at latency,
// and the handover between the two launches; two H200s, runs 190-193), i.e. that time in passes
// of one expert's weights (dsv4-flash 13, h6144-e256-k8 6). 0 with R = 1 (run 179's calibration
// needs none), from the table's 16 (the wide kernel either way), and where MEGAMOE_TILE_CHOICE=N
// sets the ratio explicitly (the rule is then the ratio alone). It depends on the configuration
// only, never on the provider, so every rank and R virtual ranks reach the same verdict.
int tile_choice_min_gain_passes(const MoEConfig& config, int table_block_m);

// The device's verdict, computed on the host (to predict or check it): `alternative` when the
// routes counted per expert (route_counts[e], masked routes excluded) stream at least
// tile_choice_percent() / 100 times as many weight passes (sum over experts of ceil(count / tile))
// with `block_m` as with `alternative`, plus min_gain_passes, else `block_m`. The device counts
// every expert's routes over all ranks; min_gain_passes: tile_choice_min_gain_passes.
int tile_choice_for_route_counts(std::span<const std::int64_t> route_counts, int block_m,
                                 int alternative, int min_gain_passes = 0);

// Every BLOCK_M the heuristic (and the tile choice on the device) can run for token counts
// 1..max_tokens_per_rank, ascending.
std::vector<int> reachable_block_ms(const MoEConfig& config);

// The largest token count of each reachable BLOCK_M regime, ascending; the last is
// max_tokens_per_rank. The planner sizes pools at these counts (worst cases grow with t inside
// a regime); GPU tests probe BLOCK_M - 1, BLOCK_M, BLOCK_M + 1 around them.
std::vector<std::int64_t> block_m_regime_ends(const MoEConfig& config);

// SM budget of the persistent kernels. set_num_sms(n > 0) pins the count; set_num_sms(0)
// returns to "all SMs minus headroom". Headroom comes from MEGAMOE_SM_HEADROOM, rounded up to
// an even number; out-of-range values are rejected with InvalidArgument.
void set_num_sms(int num_sms);
int get_num_sms();  // needs a GPU (reads the SM count)

// The pure rule behind get_num_sms, testable without a GPU.
int resolve_num_sms(int device_sms, int explicit_sms, std::optional<std::string_view> headroom_env);

}  // namespace megamoe
