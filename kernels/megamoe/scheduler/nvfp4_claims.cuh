#pragma once
// Claimed work units of the pipelined SM90 NVFP4 MegaMoE kernel's staged build
// (sm90_nvfp4_mega_moe_pipelined.cuh), host-compilable so that tests/cpu/test_nvfp4_claims.cpp
// can run many CTAs' walks against each other in random interleavings.
//
// The static schedule (nvfp4_schedule.cuh) gives every CTA an equal share of items, yet SMs
// stream at different rates: at dsv4-flash T = 128 the CTAs' FC2 phases ended 315-345 us after
// their start (bench/NOTES.md, v11). Here every CTA still starts on its own contiguous range, but
// it takes each item after the first with an atomic claim from the front, and once its range is
// used up it takes items from the back of the range of the CTA with the most left (work
// stealing). A stolen item is whole: every token sub-tile of its columns. The first item of a
// range is its owner's without a claim (thieves never see it), so a CTA starts streaming without
// waiting for a round trip to L2.
//
// Claim word of (CTA, phase), u64 in the "sync" region, over the claimable items [lo + 1, hi) of
// the range [lo, hi): the low half counts the owner's claims from the front, the high half
// thieves' claims from the back. Owner claim f targets item lo + 1 + f, thief claim b targets
// hi - 1 - b; whichever of the two claims on one item comes first in the word's atomic order wins
// it (the later one sees the earlier's count), so every item runs exactly once. Every claim, won
// or lost, moves its counter past one target, so a thief's retries end.
#include "megamoe/scheduler/nvfp4_schedule.cuh"

namespace megamoe::device::nvfp4_pipe {

using ClaimWord = unsigned long long;
inline constexpr ClaimWord kFrontClaim = 1ull;
inline constexpr ClaimWord kBackClaim = 1ull << 32;
// Claim words per rank and phase in the sync region (the host refuses more CTAs per rank).
inline constexpr int kMaxClaimCtas = 256;
// A thief takes an item only from a range with at least this many unclaimed: the owner has one
// more already claimed ahead of the one it streams, and a stolen item costs its thief a token
// tile load, so robbing the last unclaimed item of a range rarely ends the phase sooner.
inline constexpr int kStealMinItems = 2;

MEGAMOE_SCHED_FN int claims_front(ClaimWord w) {
  return static_cast<int>(w & 0xFFFFFFFFull);
}
MEGAMOE_SCHED_FN int claims_back(ClaimWord w) {
  return static_cast<int>(w >> 32);
}

// Over claimable items [lo, hi): the item an owner's claim (the word before its addition) won,
// or -1.
MEGAMOE_SCHED_FN int front_claim_item(ClaimWord old, int lo, int hi) {
  const int item = lo + claims_front(old);
  return item < hi - claims_back(old) ? item : -1;
}
// The item a thief's claim won, or -1.
MEGAMOE_SCHED_FN int back_claim_item(ClaimWord old, int lo, int hi) {
  const int item = hi - 1 - claims_back(old);
  return item >= lo + claims_front(old) ? item : -1;
}
MEGAMOE_SCHED_FN int unclaimed_items(ClaimWord w, int lo, int hi) {
  const int n = (hi - claims_back(w)) - (lo + claims_front(w));
  return n > 0 ? n : 0;
}

// Static item range [lo, hi) of CTA `cta` of `nctas` over `items` items. 32-bit unsigned
// arithmetic (the host keeps items * nctas below 2^32): a 64-bit division is a call whose frame
// spilled the producer at the 96-register cap.
MEGAMOE_SCHED_FN void claim_range(unsigned items, int cta, int nctas, int& lo, int& hi) {
  const unsigned n = static_cast<unsigned>(nctas), c = static_cast<unsigned>(cta);
  lo = static_cast<int>(items * c / n);
  hi = static_cast<int>(items * (c + 1) / n);
}
// Its claimable items [lo + 1, hi) (empty when the range is).
MEGAMOE_SCHED_FN void claimable_range(unsigned items, int cta, int nctas, int& lo, int& hi) {
  claim_range(items, cta, nctas, lo, hi);
  ++lo;
}

// Items of one phase: `group` consecutive columns of one tile (2 for FC2 with FP8 combine,
// whose 128-row blocks need both 64-row column tiles in one CTA, in order).
struct ClaimPhase {
  int phase;
  int group;
  int items_per_tile;  // columns / group
  unsigned items;      // tiles * items_per_tile
};

template <int CT1, int CT2>
MEGAMOE_SCHED_FN ClaimPhase claim_phase(int phase, int tiles, bool fp8_combine) {
  const int cols = phase == 0 ? CT1 : CT2;
  const int group = phase == 1 && fp8_combine ? 2 : 1;
  return {phase, group, cols / group, static_cast<unsigned>(tiles) * (cols / group)};
}

// The units one CTA runs in phase `p`, handed to ops.emit in order. First its own range: item lo,
// then each next item claimed from the front while the one before streams (ops.issue_front /
// ops.resolve split a claim so that its round trip overlaps that item): sub-tile 0 of each item
// as it is won, the tile's later sub-tiles of the won items when the range moves to the next
// tile (sub-tile-major: one token tile load each). Then, with `steal`, whole items from the back
// of the range ops.best_victim names, while one has kStealMinItems unclaimed.
//
// Ops: ClaimWord issue_front(); ClaimWord resolve(ClaimWord); ClaimWord claim_back(int cta);
// int best_victim(int& unclaimed); void emit(const Unit&).
template <int EL, int BM, int NS, int CT1, int CT2, class Ops>
MEGAMOE_SCHED_FN void walk_claimed_phase(const Schedule<EL, BM, NS, CT1, CT2>& sched,
                                         const ClaimPhase& p, int cta, int nctas, bool steal,
                                         Ops& ops) {
  auto emit_item = [&](int tile, int sub, int item_col) {
    for (int g = 0; g < p.group; ++g) ops.emit(Unit{tile, sub, item_col * p.group + g, p.phase});
  };
  int lo, hi;
  claim_range(p.items, cta, nctas, lo, hi);
  int cur_tile = -1, c_first = 0, c_last = -1;
  auto later_subs = [&] {
    const int live = sched.live(cur_tile);
    for (int sub = 1; sub * NS < live; ++sub) {
      for (int c = c_first; c <= c_last; ++c) emit_item(cur_tile, sub, c);
    }
  };
  for (int item = lo; item < hi;) {
    const bool more = item + 1 < hi;
    ClaimWord pending = 0;
    if (more) pending = ops.issue_front();
    const int tile = item / p.items_per_tile, c = item - tile * p.items_per_tile;
    if (tile != cur_tile) {
      if (cur_tile >= 0) later_subs();
      cur_tile = tile;
      c_first = c;
    }
    c_last = c;
    emit_item(tile, 0, c);
    if (!more) break;
    item = front_claim_item(ops.resolve(pending), lo + 1, hi);
    if (item < 0) break;
  }
  if (cur_tile >= 0) later_subs();
  while (steal) {
    int left = 0;
    const int v = ops.best_victim(left);
    if (left < kStealMinItems) break;
    int vlo, vhi;
    claimable_range(p.items, v, nctas, vlo, vhi);
    const int item = back_claim_item(ops.claim_back(v), vlo, vhi);
    if (item < 0) continue;  // another thief or the owner was first: look again
    const int tile = item / p.items_per_tile, c = item - tile * p.items_per_tile;
    const int live = sched.live(tile);
    for (int sub = 0; sub * NS < live; ++sub) emit_item(tile, sub, c);
  }
}

}  // namespace megamoe::device::nvfp4_pipe
