// The memo behind the layer calls' launch decisions (runtime/launch_memo.hpp) and the environment
// value that keys the decisions reading tuning variables (core/environment.hpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/environment.hpp"
#include "megamoe/config.hpp"
#include "runtime/launch_memo.hpp"

namespace megamoe {
namespace {

TEST(LaunchMemo, MakesEachKeyOnceAndKeepsKeysApart) {
  runtime::LaunchMemo<std::string, int> memo;
  int made = 0;
  const auto make = [&](int v) {
    return [&made, v] {
      ++made;
      return v;
    };
  };
  EXPECT_EQ(memo.get("a", make(1)), 1);
  EXPECT_EQ(memo.get("b", make(2)), 2);
  EXPECT_EQ(memo.get("a", make(3)), 1);  // remembered: make() is not called
  EXPECT_EQ(memo.get("b", make(4)), 2);
  EXPECT_EQ(made, 2);
}

TEST(LaunchMemo, RemembersNothingWhenMakeThrows) {
  runtime::LaunchMemo<int, int> memo;
  int calls = 0;
  const auto failing = [&]() -> int {
    ++calls;
    throw std::runtime_error("bad config");
  };
  EXPECT_THROW(memo.get(7, failing), std::runtime_error);
  EXPECT_THROW(memo.get(7, failing), std::runtime_error);  // the same error, made again
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(memo.get(7, [] { return 5; }), 5);
}

TEST(LaunchMemo, StaysCorrectPastItsCapacity) {
  runtime::LaunchMemo<int, int> memo;
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < 1000; ++k) EXPECT_EQ(memo.get(k, [k] { return 3 * k; }), 3 * k);
  }
}

TEST(LaunchMemo, ConfigsDifferingInAnyFieldAreDifferentKeys) {
  MoEConfig a;
  a.shape = {4096, 2048, 256, 6};
  a.max_tokens_per_rank = 512;
  MoEConfig b = a;
  EXPECT_EQ(a, b);
  b.activation.clamp = 7.0f;
  EXPECT_NE(a, b);
  b = a;
  b.fp8_combine = true;
  EXPECT_NE(a, b);
  b = a;
  b.shape.top_k = 8;
  EXPECT_NE(a, b);
  runtime::LaunchMemo<MoEConfig, int> memo;
  EXPECT_EQ(memo.get(a, [] { return 1; }), 1);
  EXPECT_EQ(memo.get(b, [] { return 2; }), 2);
}

TEST(MegamoeEnvironment, SeesAVariableSetOrChangedBetweenCalls) {
  unsetenv("MEGAMOE_TEST_MEMO_KNOB");
  const std::string before = megamoe_environment();
  EXPECT_EQ(before.find("MEGAMOE_TEST_MEMO_KNOB"), std::string::npos);
  setenv("MEGAMOE_TEST_MEMO_KNOB", "2", 1);
  const std::string two = megamoe_environment();
  EXPECT_NE(two.find("MEGAMOE_TEST_MEMO_KNOB=2\n"), std::string::npos);
  setenv("MEGAMOE_TEST_MEMO_KNOB", "3", 1);
  const std::string three = megamoe_environment();
  EXPECT_NE(three, two);
  setenv("NOT_MEGAMOE_KNOB", "1", 1);  // other variables do not change the value
  EXPECT_EQ(megamoe_environment(), three);
  unsetenv("MEGAMOE_TEST_MEMO_KNOB");
  unsetenv("NOT_MEGAMOE_KNOB");
  EXPECT_EQ(megamoe_environment(), before);
}

}  // namespace
}  // namespace megamoe
