// run_process_group / RankChannel on the CPU: children are this test executable again, started
// with MEGAMOE_PG_TEST_ROLE set; a static initializer runs the role before GoogleTest starts and
// exits. Checks the relay of a token only rank 0 knows, all_gather / gather contents, the child
// environment (multicast off, device = rank), a rank that never reports timed out and named with
// its phase, a rank that dies while another waits (the waiter gets DeviceFault naming it), and
// the wire list codec on random bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "megamoe/error.hpp"
#include "runtime/process_group.hpp"
#include "runtime/process_group_wire.hpp"

namespace megamoe::runtime {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// ---- child roles (run in the spawned processes) ----------------------------------------------

int role_exchange(RankChannel& ch) {
  ch.phase("exchange");
  std::string token;
  if (ch.rank() == 0) {
    std::random_device rd;
    token = "token-" + std::to_string(rd()) + "-" + std::to_string(::getpid());
  }
  const std::string got = ch.broadcast(token, 0);
  const std::vector<std::string> all = ch.all_gather("pid " + std::to_string(::getpid()));
  const std::vector<std::string> at_last =
      ch.gather("r" + std::to_string(ch.rank()), ch.size() - 1);
  std::string joined;
  for (const std::string& s : all) joined += s + ";";
  std::string gathered;
  for (const std::string& s : at_last) gathered += s + ",";
  ch.report(got + "|" + joined + "|" + gathered + "|" + env_or_empty("NCCL_NVLS_ENABLE") + "," +
            env_or_empty("TORCH_SYMM_MEM_DISABLE_MULTICAST") + "," +
            env_or_empty("MEGAMOE_DEVICE") + "," + env_or_empty("MEGAMOE_PG_TEST_EXTRA"));
  return 0;
}

// Payloads of a few MB (the launcher gathers whole outputs): byte j of rank r's payload is
// (j * 131 + r * 7 + salt) & 0xFF; each rank checks what it receives.
std::string bulk_payload(int rank, std::size_t bytes, int salt) {
  std::string s(bytes, '\0');
  for (std::size_t j = 0; j < bytes; ++j) {
    s[j] = static_cast<char>((j * 131 + static_cast<std::size_t>(rank) * 7 + salt) & 0xFF);
  }
  return s;
}

int role_bulk(RankChannel& ch) {
  const std::size_t bytes = 3u << 20;
  std::string verdict;
  const std::vector<std::string> all = ch.all_gather(bulk_payload(ch.rank(), bytes, 1));
  for (int r = 0; r < ch.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != bulk_payload(r, bytes, 1)) {
      verdict += "all_gather:bad" + std::to_string(r) + ";";
    }
  }
  const std::vector<std::string> at0 = ch.gather(bulk_payload(ch.rank(), bytes + 5, 2), 0);
  if (ch.rank() == 0) {
    if (at0.size() != static_cast<std::size_t>(ch.size())) verdict += "gather:count;";
    for (std::size_t r = 0; r < at0.size(); ++r) {
      if (at0[r] != bulk_payload(static_cast<int>(r), bytes + 5, 2)) {
        verdict += "gather:bad" + std::to_string(r) + ";";
      }
    }
  } else if (!at0.empty()) {
    verdict += "gather:non-root-got-data;";
  }
  ch.report(verdict.empty() ? "ok" : verdict);
  return 0;
}

int role_silent(RankChannel& ch) {
  if (ch.rank() == ch.size() - 1) {
    ch.phase("stuck-in-compute");
    std::this_thread::sleep_for(std::chrono::seconds(60));  // never reports
    return 0;
  }
  ch.phase("done");
  ch.report("finished");
  return 0;
}

int role_dies(RankChannel& ch) {
  if (ch.rank() == 1) {
    ch.phase("loading-weights");
    ch.fail("weights missing");
    return 7;
  }
  ch.phase("waiting-for-peers");
  try {
    ch.barrier();
  } catch (const DeviceFault& e) {
    ch.report(e.what());
    return 3;
  }
  ch.report("barrier passed (wrong)");
  return 0;
}

struct ChildRoleRunner {
  ChildRoleRunner() {
    const std::string role = env_or_empty("MEGAMOE_PG_TEST_ROLE");
    if (role.empty()) return;
    int code = 2;
    try {
      std::optional<RankChannel> ch = RankChannel::from_environment();
      if (!ch) std::_Exit(90);
      if (role == "exchange") code = role_exchange(*ch);
      if (role == "silent") code = role_silent(*ch);
      if (role == "dies") code = role_dies(*ch);
      if (role == "bulk") code = role_bulk(*ch);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child role %s: %s\n", role.c_str(), e.what());
      code = 91;
    }
    std::fflush(stdout);
    std::_Exit(code);
  }
};
const ChildRoleRunner run_child_role_before_gtest;

// ---- parent side -------------------------------------------------------------------------------

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<std::size_t>(n));
}

ProcessGroupOptions options_for(const std::string& role, int ranks) {
  ProcessGroupOptions o;
  o.ranks = ranks;
  o.argv = {self_exe()};
  o.env = {"MEGAMOE_PG_TEST_ROLE=" + role};
  o.timeout = std::chrono::seconds(30);
  return o;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

TEST(ProcessGroup, ChildrenExchangeATokenOnlyRankZeroKnows) {
  for (int ranks : {1, 2, 3}) {
    ProcessGroupOptions o = options_for("exchange", ranks);
    o.env.push_back("MEGAMOE_PG_TEST_EXTRA=extra-seen");
    const GroupReport g = run_process_group(o);
    ASSERT_TRUE(g.ok()) << g.summary();
    ASSERT_EQ(g.ranks.size(), static_cast<std::size_t>(ranks));
    const std::vector<std::string> r0 = split(g.ranks[0].result, '|');
    ASSERT_EQ(r0.size(), 4u) << g.ranks[0].result;
    EXPECT_TRUE(r0[0].starts_with("token-")) << r0[0];
    // Every rank's pid, in rank order, exactly as the parent saw them spawned.
    std::string pids;
    for (const RankReport& r : g.ranks) pids += "pid " + std::to_string(r.pid) + ";";
    for (const RankReport& r : g.ranks) {
      const std::vector<std::string> f = split(r.result, '|');
      ASSERT_EQ(f.size(), 4u) << r.result;
      EXPECT_EQ(f[0], r0[0]) << "rank " << r.rank << " got another broadcast token";
      EXPECT_EQ(f[1], pids) << "rank " << r.rank;
      // gather to the last rank: it holds every contribution, the others nothing.
      std::string want_gather;
      if (r.rank == ranks - 1) {
        for (int q = 0; q < ranks; ++q) want_gather += "r" + std::to_string(q) + ",";
      }
      EXPECT_EQ(f[2], want_gather) << "rank " << r.rank;
      EXPECT_EQ(f[3], "0,1," + std::to_string(r.rank) + ",extra-seen") << "rank " << r.rank;
      EXPECT_EQ(r.phase, "exchange");
      EXPECT_EQ(r.state, RankState::ok);
    }
  }
}

TEST(ProcessGroup, MegabytePayloadsArriveIntact) {
  const GroupReport g = run_process_group(options_for("bulk", 3));
  ASSERT_TRUE(g.ok()) << g.summary();
  for (const RankReport& r : g.ranks) EXPECT_EQ(r.result, "ok") << "rank " << r.rank;
}

TEST(ProcessGroup, ARankThatNeverReportsIsTimedOutAndNamedWithItsPhase) {
  ProcessGroupOptions o = options_for("silent", 2);
  o.timeout = std::chrono::milliseconds(1500);
  o.kill_grace = std::chrono::milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  const GroupReport g = run_process_group(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "the deadline did not stop the run";
  ASSERT_EQ(g.ranks.size(), 2u);
  EXPECT_EQ(g.ranks[0].state, RankState::ok);
  EXPECT_EQ(g.ranks[0].result, "finished");
  EXPECT_EQ(g.ranks[1].state, RankState::timed_out);
  EXPECT_EQ(g.ranks[1].phase, "stuck-in-compute");
  EXPECT_FALSE(g.ok());
  const std::string sum = g.summary();
  EXPECT_NE(sum.find("rank 1 timed_out in phase 'stuck-in-compute'"), std::string::npos) << sum;
  EXPECT_NE(sum.find("1500 ms"), std::string::npos) << sum;
  EXPECT_EQ(sum.find("rank 0"), std::string::npos) << sum;
}

TEST(ProcessGroup, AWaiterIsToldWhichRankDiedAndWhere) {
  const GroupReport g = run_process_group(options_for("dies", 3));
  ASSERT_EQ(g.ranks.size(), 3u);
  EXPECT_EQ(g.ranks[1].state, RankState::failed);
  EXPECT_EQ(g.ranks[1].exit_code, 7);
  EXPECT_EQ(g.ranks[1].message, "weights missing");
  for (int r : {0, 2}) {
    const RankReport& w = g.ranks[static_cast<std::size_t>(r)];
    EXPECT_EQ(w.state, RankState::aborted) << "rank " << r;
    EXPECT_EQ(w.exit_code, 3) << "rank " << r;
    EXPECT_NE(w.result.find("rank 1 exited with status 7 in phase 'loading-weights'"),
              std::string::npos)
        << w.result;
  }
  const std::string sum = g.summary();
  EXPECT_NE(sum.find("rank 1 failed in phase 'loading-weights' (exit status 7): weights missing"),
            std::string::npos)
      << sum;
}

TEST(ProcessGroup, AMissingExecutableFailsEveryRank) {
  ProcessGroupOptions o;
  o.ranks = 2;
  o.argv = {"/nonexistent/megamoe-child"};
  o.timeout = std::chrono::seconds(10);
  const GroupReport g = run_process_group(o);
  for (const RankReport& r : g.ranks) {
    EXPECT_EQ(r.state, RankState::failed);
    EXPECT_EQ(r.exit_code, 127);
    EXPECT_EQ(r.phase, "");
  }
  EXPECT_NE(g.summary().find("(none announced)"), std::string::npos) << g.summary();
}

TEST(ProcessGroup, BadOptionsNameTheArgument) {
  ProcessGroupOptions o;
  o.argv = {self_exe()};
  o.ranks = 0;
  try {
    run_process_group(o);
    FAIL() << "ranks = 0 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "options.ranks");
  }
  o.ranks = 1;
  o.argv.clear();
  EXPECT_THROW(run_process_group(o), InvalidArgument);
  o.argv = {self_exe()};
  o.env = {"NO_EQUALS_SIGN"};
  try {
    run_process_group(o);
    FAIL() << "env entry without '=' accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "options.env");
  }
}

TEST(ProcessGroup, OutsideAGroupThereIsNoChannel) {
  if (std::getenv("MEGAMOE_PG_RANK") != nullptr) GTEST_SKIP() << "running inside a group";
  EXPECT_FALSE(RankChannel::from_environment().has_value());
}

TEST(ProcessGroupWire, ListsRoundTripArbitraryBytes) {
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string> items(rng() % 6);
    for (std::string& s : items) {
      s.resize(rng() % 300);
      for (char& c : s) c = static_cast<char>(rng() & 0xFF);  // zero bytes included
    }
    const std::string enc = wire::encode_list(items);
    EXPECT_EQ(wire::decode_list(enc), items) << "seed " << seed;
    if (!enc.empty()) {
      EXPECT_THROW(wire::decode_list(std::string_view(enc).substr(0, enc.size() - 1)), Error)
          << "seed " << seed << ": a truncated list was accepted";
    }
    EXPECT_THROW(wire::decode_list(enc + "x"), Error) << "seed " << seed;
  }
  // Hand-worked: one entry "ab" = count 1, length 2, bytes.
  const std::string one = wire::encode_list({"ab"});
  ASSERT_EQ(one.size(), 4u + 8u + 2u);
  EXPECT_EQ(one[0], 1);
  EXPECT_EQ(one[4], 2);
  EXPECT_EQ(one.substr(12), "ab");
}

}  // namespace
}  // namespace megamoe::runtime
