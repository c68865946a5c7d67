#pragma once
// One process per GPU (docs/multi_gpu.md): a parent spawns R children of an executable with
// fork + exec, talks to each over a pair of inherited pipes, relays their collectives (the NCCL
// unique id travels this way), records the phase each child last announced and kills the ones
// that outlive the deadline, naming rank and phase. POSIX only; needs no GPU, so it is tested on
// the CPU.
//
// Children's environment: MEGAMOE_PG_RANK, MEGAMOE_PG_SIZE, MEGAMOE_PG_FD (the child's end of a
// Unix socket pair: a two-way pipe), MEGAMOE_DEVICE = rank (the GPU the CUDA driver loader makes
// current), and NVLink multicast off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1. Their
// stdout and stderr are the parent's.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megamoe::runtime {

struct ProcessGroupOptions {
  int ranks = 1;
  // argv[0] is the executable (a path; no PATH search), then its arguments.
  std::vector<std::string> argv;
  // Extra "NAME=value" entries for every child, applied after the defaults above (so they may
  // override them, e.g. a test that wants multicast settings checked).
  std::vector<std::string> env;
  // Deadline of the whole run. A child still running then is sent SIGTERM, and SIGKILL after
  // `kill_grace`; its report says timed_out and names its last phase.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds kill_grace{std::chrono::seconds(2)};
};

enum class RankState : std::uint8_t {
  ok,         // exited 0
  failed,     // exited non-zero (message: what it passed to RankChannel::fail, if anything)
  crashed,    // killed by a signal it did not get from the parent
  timed_out,  // still running at the deadline; killed by the parent
  aborted,    // killed by the parent because another rank failed while this one waited
};

std::string_view rank_state_name(RankState state);

struct RankReport {
  int rank = 0;
  int pid = 0;
  RankState state = RankState::ok;
  int exit_code = 0;    // when it exited
  int term_signal = 0;  // when a signal ended it
  std::string phase;    // the last phase it announced ("" = none: it never got that far)
  std::string result;   // what it passed to RankChannel::report
  std::string message;  // what it passed to RankChannel::fail
  double seconds = 0;   // from spawn to exit
};

struct GroupReport {
  std::vector<RankReport> ranks;  // index = rank
  std::int64_t timeout_ms = 0;    // the deadline the run had
  bool ok() const;
  // One line per rank that did not end ok, e.g. "rank 1 timed_out in phase 'moe' (killed after
  // 5000 ms)"; "all N ranks ok" otherwise.
  std::string summary() const;
};

// Spawns the children, serves their collectives until all have exited (or the deadline), and
// reports. InvalidArgument for ranks < 1, an empty argv or a bad env entry; CudaError never;
// Error when fork/pipe fail.
GroupReport run_process_group(const ProcessGroupOptions& options);

// The child's end. Collectives are numbered in call order: the n-th collective of every rank
// meets the n-th of every other rank (all ranks must call them in the same order). A collective
// that cannot complete because a rank exited, failed or was killed throws DeviceFault naming
// that rank and the phase it was in.
class RankChannel {
 public:
  // The channel of a process started by run_process_group; nullopt otherwise.
  static std::optional<RankChannel> from_environment();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Announces where this rank is ("nccl-init", "moe", ...): the parent names it when the rank
  // times out or when another rank waits on this one in vain.
  void phase(std::string_view name);
  // Every rank's payload, in rank order.
  std::vector<std::string> all_gather(std::string_view payload);
  // `root` receives every payload in rank order; the others receive an empty vector (they still
  // wait until every rank has contributed).
  std::vector<std::string> gather(std::string_view payload, int root);
  // Root's payload, on every rank (the others' arguments are ignored).
  std::string broadcast(std::string_view payload, int root);
  void barrier();
  // The rank's result, returned to the parent in RankReport::result (the last call wins).
  void report(std::string_view result);
  // A failure message for RankReport::message; the caller then exits non-zero.
  void fail(std::string_view message);

 private:
  RankChannel(int rank, int size, int fd) : rank_(rank), size_(size), fd_(fd) {}
  std::vector<std::string> collective(std::string_view payload, int root);

  int rank_ = 0, size_ = 1;
  int fd_ = -1;
};

}  // namespace megamoe::runtime
