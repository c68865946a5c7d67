// `megamoe bench --ranks R [--preset P] [--tokens 1,8,16,128] [--check-virtual] [--timeout-test]`
// (docs/multi_gpu.md): the parent spawns one child per GPU (this executable again, same
// arguments plus the seed) and waits; each child runs one rank (multi_gpu_rank.cpp). The parent
// touches no GPU.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "megamoe/error.hpp"
#include "megamoe/presets.hpp"
#include "multi_gpu_rank.hpp"
#include "options.hpp"
#include "runtime/process_group.hpp"

namespace megamoe::tool {
namespace {

const char* kHelp =
    "usage: megamoe bench --ranks R [--preset P] [--tokens 1,8,16,128] [--rank-tokens A/B,...]\n"
    "                     [--check-virtual] [--timeout-test] [--seed N] [--iters N] [--reps N]\n"
    "                     [--routing uniform|zipf|zipf-by-id|masked20] [--group-timeout-ms MS]\n"
    "                     [--peer-timeout-ms MS] [--fp8-combine] [--out PREFIX]\n"
    "\n"
    "Runs the NVFP4 MegaMoE layer with one process per GPU (ranks 0..R-1 on GPUs 0..R-1), NCCL\n"
    "symmetric memory (`nccl` provider), NVLink multicast off. Presets: dsv4-flash and\n"
    "h6144-e256-k8 unless --preset is given. Prints a Markdown table: time per call (CUDA graph\n"
    "replay, slowest rank), NVLink payload bytes and GB/s, and the current kernel's modelled\n"
    "NVLink bytes.\n"
    "  --rank-tokens     ragged rows: R counts joined by '/', one per rank (0: an idle rank);\n"
    "                    rows separated by ','. Only these rows unless --tokens is also given.\n"
    "                    Each runs twice: BLOCK_M from each rank's own count, then from the\n"
    "                    row's largest passed as max_tokens_across_ranks (\"(max N)\")\n"
    "  --check-virtual   rank 0 reruns every case with R virtual ranks on its GPU (local\n"
    "                    provider) and compares every rank's output: bitwise where every rank\n"
    "                    ran the virtual run's tile, else within the oracle gates (ragged rows\n"
    "                    can give ranks different BLOCK_M tables)\n"
    "  --timeout-test    rank R-1 skips the MoE call; the others must stop after\n"
    "                    --peer-timeout-ms (default 2000) with a fault naming rank and phase\n"
    "  --fp8-combine     e4m3 combine slots with f32 scales per 128 (config.fp8_combine)\n"
    "  --routing         zipf: Zipf(1.2) over a seeded permutation of the experts; zipf-by-id:\n"
    "                    in expert order, so rank 0 holds the hottest experts\n";

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw Error("megamoe bench: cannot find its own executable (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

// "0/37,1/512" with R = 2: {{0, 37}, {1, 512}}.
std::vector<std::vector<std::int64_t>> parse_rank_tokens(const std::string& text, int ranks) {
  std::vector<std::vector<std::int64_t>> rows;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string row = text.substr(at, comma - at);
    std::vector<std::int64_t> counts;
    std::size_t p = 0;
    while (p <= row.size()) {
      const std::size_t slash = std::min(row.find('/', p), row.size());
      const std::string v = row.substr(p, slash - p);
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9) {
        throw_invalid("--rank-tokens",
                      "each row must be R counts >= 0 joined by '/' (rows separated by ',')", row);
      }
      counts.push_back(std::stoll(v));
      p = slash + 1;
    }
    if (counts.size() != static_cast<std::size_t>(ranks)) {
      throw_invalid("--rank-tokens",
                    "each row must have one count per rank (--ranks " + std::to_string(ranks) + ")",
                    row);
    }
    rows.push_back(std::move(counts));
    at = comma + 1;
  }
  return rows;
}

}  // namespace

MultiGpuBenchOptions parse_multi_gpu_options(Args args) {
  const Options opt(args,
                    {"ranks", "preset", "tokens", "rank-tokens", "seed", "iters", "reps", "routing",
                     "group-timeout-ms", "peer-timeout-ms", "out"},
                    {"check-virtual", "timeout-test", "fp8-combine", "help"});
  MultiGpuBenchOptions o;
  o.ranks = static_cast<int>(opt.get_int("ranks", 1));
  if (o.ranks < 1 || o.ranks > 8) {
    throw_invalid("--ranks", "must be in 1..8 (one NVLink domain, at most 8 ranks)",
                  std::to_string(o.ranks));
  }
  if (auto p = opt.get("preset")) {
    find_preset(*p, "--preset");
    o.presets = {*p};
  } else {
    o.presets = {"dsv4-flash", "h6144-e256-k8"};
  }
  if (auto rows = opt.get("rank-tokens")) o.rank_tokens = parse_rank_tokens(*rows, o.ranks);
  o.tokens = opt.get_int_list("tokens", o.rank_tokens.empty() || opt.has("tokens")
                                            ? std::vector<std::int64_t>{1, 8, 16, 128}
                                            : std::vector<std::int64_t>{});
  if (o.tokens.empty() && o.rank_tokens.empty()) {
    throw_invalid("--tokens", "must list at least one token count");
  }
  for (const std::int64_t t : o.tokens) {
    if (t < 1) throw_invalid("--tokens", "token counts per rank must be >= 1", std::to_string(t));
  }
  o.check_virtual = opt.has("check-virtual");
  o.fp8_combine = opt.has("fp8-combine");
  o.timeout_test = opt.has("timeout-test");
  if (o.timeout_test && o.ranks < 2) {
    throw_invalid("--timeout-test", "needs --ranks >= 2 (a rank must be missing)",
                  std::to_string(o.ranks));
  }
  if (auto s = opt.get("seed")) {
    const std::int64_t v = opt.get_int("seed", 0);
    if (v < 0) throw_invalid("--seed", "must be >= 0", *s);
    o.seed = static_cast<std::uint64_t>(v);
    o.has_seed = true;
  }
  o.iters = static_cast<int>(opt.get_int("iters", 20));
  o.reps = static_cast<int>(opt.get_int("reps", 11));
  if (o.iters < 1) throw_invalid("--iters", "must be >= 1", std::to_string(o.iters));
  if (o.reps < 1) throw_invalid("--reps", "must be >= 1", std::to_string(o.reps));
  o.routing = opt.get_or("routing", "uniform");
  if (o.routing != "uniform" && o.routing != "zipf" && o.routing != "zipf-by-id" &&
      o.routing != "masked20") {
    throw_invalid("--routing", "must be uniform, zipf, zipf-by-id or masked20", o.routing);
  }
  o.group_timeout_ms = opt.get_int("group-timeout-ms", 600000);
  o.peer_timeout_ms = opt.get_int("peer-timeout-ms", 2000);
  if (o.group_timeout_ms < 1) {
    throw_invalid("--group-timeout-ms", "must be >= 1", std::to_string(o.group_timeout_ms));
  }
  if (o.peer_timeout_ms < 1) {
    throw_invalid("--peer-timeout-ms", "must be >= 1", std::to_string(o.peer_timeout_ms));
  }
  o.out_prefix = opt.get_or("out", "");
  return o;
}

int cmd_bench(Args args) {
  for (const std::string_view a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kHelp);
      return 0;
    }
  }
  MultiGpuBenchOptions o = parse_multi_gpu_options(args);

  // A child: run one rank.
  if (std::optional<runtime::RankChannel> ch = runtime::RankChannel::from_environment()) {
    if (ch->size() != o.ranks) {
      throw_invalid("--ranks", "must equal the process group's size " + std::to_string(ch->size()),
                    std::to_string(o.ranks));
    }
    try {
      return run_bench_rank(o, *ch);
    } catch (const std::exception& e) {
      ch->fail(e.what());
      std::fprintf(stderr, "rank %d: %s\n", ch->rank(), e.what());
      return 1;
    }
  }

  // The parent: spawn, wait, summarize.
  if (!o.has_seed) o.seed = std::random_device{}() & 0xFFFFFFFFu;
  runtime::ProcessGroupOptions g;
  g.ranks = o.ranks;
  g.argv = {self_executable(), "bench"};
  for (const std::string_view a : args) g.argv.emplace_back(a);
  if (!o.has_seed) {
    g.argv.emplace_back("--seed");
    g.argv.push_back(std::to_string(o.seed));
  }
  if (o.timeout_test)
    g.env.push_back("MEGAMOE_PEER_TIMEOUT_MS=" + std::to_string(o.peer_timeout_ms));
  g.timeout = std::chrono::milliseconds(o.group_timeout_ms);
  std::fprintf(stderr, "megamoe bench: %d rank(s), seed %llu\n", o.ranks,
               static_cast<unsigned long long>(o.seed));
  const runtime::GroupReport report = runtime::run_process_group(g);
  std::fprintf(stderr, "megamoe bench: %s\n", report.summary().c_str());
  return report.ok() ? 0 : 1;
}

}  // namespace megamoe::tool
