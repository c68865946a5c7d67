#pragma once
// Helpers for the validation tests: rejection checks on InvalidArgument, fake device tensors
// (validation never dereferences them) and a fake peer memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/validate.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"

namespace megamoe::test {

// Runs `f` and requires an InvalidArgument naming `argument` whose rule contains `rule`; the
// message (what()) must carry both, since that is what users read.
template <typename F>
void expect_invalid(F&& f, std::string_view argument, std::string_view rule, const char* file,
                    int line) {
  SCOPED_TRACE(testing::Message() << "from " << file << ":" << line);
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument for '" << argument << "': " << rule;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(e.rule().find(rule), std::string::npos) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + std::string(argument) + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(rule), std::string::npos) << what;
  }
}

#define EXPECT_INVALID(stmt, argument, rule) \
  ::megamoe::test::expect_invalid([&] { stmt; }, argument, rule, __FILE__, __LINE__)

// Seeds from std::random_device; the seed goes into every failure message.
class Seeded {
 public:
  Seeded() : seed_(std::random_device{}()), rng_(seed_), trace_(__FILE__, __LINE__, msg()) {}
  std::mt19937_64& rng() { return rng_; }
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }

 private:
  std::string msg() const { return "seed " + std::to_string(seed_); }
  unsigned seed_;
  std::mt19937_64 rng_;
  testing::ScopedTrace trace_;
};

// Hands out distinct, 256-byte aligned fake device addresses.
class FakeAllocator {
 public:
  explicit FakeAllocator(std::uint64_t base = 0x7f0000000000ull) : next_(base) {}
  void* take(std::size_t bytes) {
    void* p = reinterpret_cast<void*>(next_);
    next_ += (bytes + 255) / 256 * 256 + 256;
    return p;
  }
  TensorView tensor(DType dtype, std::initializer_list<std::int64_t> shape, int gpu = 0) {
    TensorView t = TensorView::contiguous(nullptr, dtype, shape, {DeviceKind::cuda, gpu});
    t.data = take(t.nbytes());
    return t;
  }

 private:
  std::uint64_t next_;
};

class FakePeerMemory final : public PeerMemory {
 public:
  FakePeerMemory(int num_ranks, std::vector<int> driven, std::size_t bytes)
      : num_ranks_(num_ranks), driven_(std::move(driven)), bytes_(bytes) {}
  std::string_view kind() const override { return "fake"; }
  int num_ranks() const override { return num_ranks_; }
  std::vector<int> driven_ranks() const override { return driven_; }
  std::size_t bytes_per_rank() const override { return bytes_; }
  void* base(int rank) const override {
    return reinterpret_cast<void*>(std::uintptr_t{0x100000000000ull} * (rank + 1));
  }

 private:
  int num_ranks_;
  std::vector<int> driven_;
  std::size_t bytes_;
};

// A buffer for `config` whose memory drives every rank (the local provider's shape).
inline SymmBuffer fake_buffer(const MoEConfig& config) {
  SymmBuffer b;
  b.plan = plan_symm_buffer(config);
  std::vector<int> all;
  for (int r = 0; r < config.num_ranks; ++r) all.push_back(r);
  b.memory = std::make_shared<FakePeerMemory>(config.num_ranks, all, b.plan.total_bytes);
  return b;
}

inline constexpr Device kGpu0{DeviceKind::cuda, 0};

}  // namespace megamoe::test
