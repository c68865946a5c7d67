// run_process_group: spawn, relay collectives, enforce the deadline, report (process_group.hpp).
#include "runtime/process_group.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "megamoe/error.hpp"
#include "runtime/process_group_wire.hpp"

extern char** environ;

namespace megamoe::runtime {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  int pid = -1;
  int fd = -1;  // parent's end; -1 once the child closed its end
  bool exited = false;
  bool killed_at_deadline = false;
  bool aborted = false;  // the parent told it a collective cannot complete
  int wait_status = 0;
  int next_round = 0;  // index of the next collective it will join
  Clock::time_point start, end;
  std::string phase, result, message;
  std::string inbox;  // bytes received but not yet a whole frame
};

struct Round {
  int root = -1;
  std::vector<std::optional<std::string>> payloads;
  int arrived = 0;
};

std::string env_name(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

// The parent's environment minus the names we set, then our defaults, then the caller's extras.
std::vector<std::string> child_environment(const ProcessGroupOptions& o, int rank, int fd) {
  std::vector<std::string> mine = {
      "MEGAMOE_PG_RANK=" + std::to_string(rank),
      "MEGAMOE_PG_SIZE=" + std::to_string(o.ranks),
      "MEGAMOE_PG_FD=" + std::to_string(fd),
      "MEGAMOE_DEVICE=" + std::to_string(rank),
      // NVLink multicast (NVLS) stays off: the machines we are lent must not create multicast
      // objects (docs/multi_gpu.md).
      "NCCL_NVLS_ENABLE=0",
      "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
  };
  mine.insert(mine.end(), o.env.begin(), o.env.end());
  std::set<std::string> overridden;
  for (const std::string& e : mine) overridden.insert(env_name(e));
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (overridden.count(env_name(entry)) == 0) out.push_back(entry);
  }
  // Later entries of ours win over earlier ones with the same name (caller extras last).
  std::map<std::string, std::string> last;
  for (const std::string& e : mine) last[env_name(e)] = e;
  std::set<std::string> emitted;
  for (const std::string& e : mine) {
    const std::string n = env_name(e);
    if (emitted.insert(n).second) out.push_back(last[n]);
  }
  return out;
}

class Group {
 public:
  explicit Group(const ProcessGroupOptions& o)
      : o_(o), children_(static_cast<std::size_t>(o.ranks)) {}

  GroupReport run() {
    spawn_all();
    const Clock::time_point deadline = Clock::now() + o_.timeout;
    while (!all_exited()) {
      const auto now = Clock::now();
      if (now >= deadline) {
        kill_stragglers();
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      // Short polls: exits are noticed by waitpid, not only by the socket closing.
      serve(static_cast<int>(std::min<std::int64_t>(left.count() + 1, 20)));
      reap(false);
    }
    return report();
  }

  ~Group() {
    for (Child& c : children_) {
      if (c.fd >= 0) ::close(c.fd);
    }
  }

 private:
  void spawn_all() {
    for (int r = 0; r < o_.ranks; ++r) spawn(r);
  }

  void spawn(int rank) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      throw Error(std::string("process group: socketpair: ") + std::strerror(errno));
    }
    // Everything the child needs is built before fork: after fork only exec-safe calls.
    const std::vector<std::string> env = child_environment(o_, rank, sv[1]);
    std::vector<char*> envp, argv;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    for (const std::string& a : o_.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    Child& c = children_[static_cast<std::size_t>(rank)];
    c.start = Clock::now();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      throw Error(std::string("process group: fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      // The child keeps only its end across exec (the others are close-on-exec).
      ::fcntl(sv[1], F_SETFD, 0);
      ::execve(argv[0], argv.data(), envp.data());
      static const char msg[] = "process group: execve failed\n";
      [[maybe_unused]] const ssize_t w = ::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    ::close(sv[1]);
    c.pid = pid;
    c.fd = sv[0];
  }

  bool all_exited() const {
    return std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.exited; });
  }

  void serve(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    for (std::size_t r = 0; r < children_.size(); ++r) {
      if (children_[r].fd >= 0) {
        fds.push_back({children_[r].fd, POLLIN, 0});
        ranks.push_back(static_cast<int>(r));
      }
    }
    if (fds.empty()) {
      ::usleep(static_cast<useconds_t>(timeout_ms) * 1000u);
      return;
    }
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n <= 0) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) drain(ranks[i]);
    }
  }

  // Reads what is available and handles every whole frame.
  void drain(int rank) {
    Child& c = children_[static_cast<std::size_t>(rank)];
    if (c.fd < 0) return;  // closed by a nested reap while the poll results were handled
    char buf[65536];
    const ssize_t got = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) {
      ::close(c.fd);
      c.fd = -1;
      reap(false);
      return;
    }
    c.inbox.append(buf, static_cast<std::size_t>(got));
    while (c.inbox.size() >= sizeof(wire::Header)) {
      wire::Header h;
      std::memcpy(&h, c.inbox.data(), sizeof(h));
      if (h.length > wire::kMaxPayload) {
        c.message = "sent a malformed frame";
        ::close(c.fd);
        c.fd = -1;
        return;
      }
      const std::size_t whole = sizeof(h) + static_cast<std::size_t>(h.length);
      if (c.inbox.size() < whole) break;
      std::string payload = c.inbox.substr(sizeof(h), static_cast<std::size_t>(h.length));
      c.inbox.erase(0, whole);
      handle(rank, h, std::move(payload));
    }
  }

  void handle(int rank, const wire::Header& h, std::string payload) {
    Child& c = children_[static_cast<std::size_t>(rank)];
    switch (static_cast<wire::Type>(h.type)) {
      case wire::Type::phase:
        c.phase = std::move(payload);
        break;
      case wire::Type::result:
        c.result = std::move(payload);
        break;
      case wire::Type::fail:
        c.message = std::move(payload);
        break;
      case wire::Type::collective:
        join(rank, h.arg, std::move(payload));
        break;
      default:
        c.message = "sent an unknown frame type " + std::to_string(h.type);
        break;
    }
  }

  void join(int rank, int root, std::string payload) {
    Child& c = children_[static_cast<std::size_t>(rank)];
    const int index = c.next_round++;
    Round& round = rounds_[index];
    if (round.payloads.empty()) {
      round.payloads.resize(children_.size());
      round.root = root;
    }
    if (round.root != root) {
      abort_one(rank, "collective #" + std::to_string(index) + ": rank " + std::to_string(rank) +
                          " used root " + std::to_string(root) + " where other ranks used " +
                          std::to_string(round.root));
      return;
    }
    round.payloads[static_cast<std::size_t>(rank)] = std::move(payload);
    ++round.arrived;
    if (round.arrived == static_cast<int>(children_.size())) {
      complete(index);
      return;
    }
    // A rank that is gone will never arrive: say so now rather than at the deadline.
    if (const std::optional<std::string> why = missing_forever(index)) abort_one(rank, *why);
  }

  // Why collective `index` cannot complete, if a rank that has not joined it has exited.
  std::optional<std::string> missing_forever(int index) const {
    for (std::size_t r = 0; r < children_.size(); ++r) {
      const Child& o = children_[r];
      if (o.exited && o.next_round <= index) {
        return "collective #" + std::to_string(index) + " cannot complete: rank " +
               std::to_string(r) + " " + describe_exit(o) + " in phase '" + o.phase + "'";
      }
    }
    return std::nullopt;
  }

  void complete(int index) {
    Round& round = rounds_[index];
    std::vector<std::string> all;
    for (auto& p : round.payloads) all.push_back(std::move(*p));
    const std::string everything = wire::encode_list(all);
    const std::string nothing = wire::encode_list({});
    for (std::size_t r = 0; r < children_.size(); ++r) {
      Child& c = children_[r];
      if (c.fd < 0) continue;
      const bool gets_all = round.root < 0 || round.root == static_cast<int>(r);
      wire::send_frame(c.fd, wire::Type::collective_done, 0, gets_all ? everything : nothing);
    }
    rounds_.erase(index);
  }

  void abort_one(int rank, const std::string& why) {
    Child& c = children_[static_cast<std::size_t>(rank)];
    c.aborted = true;
    if (c.fd >= 0) wire::send_frame(c.fd, wire::Type::abort, 0, why);
  }

  // Collects exits; a rank that exits strands the ranks waiting in collectives it never joined.
  void reap(bool block) {
    for (std::size_t r = 0; r < children_.size(); ++r) {
      Child& c = children_[r];
      if (c.exited) continue;
      int status = 0;
      const pid_t w = ::waitpid(c.pid, &status, block ? 0 : WNOHANG);
      if (w != c.pid) continue;
      c.exited = true;
      c.wait_status = status;
      c.end = Clock::now();
      // Frames it sent before exiting are still in the socket.
      while (c.fd >= 0) {
        pollfd p{c.fd, POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) break;
        drain(static_cast<int>(r));
      }
      strand_waiters();
    }
  }

  void strand_waiters() {
    for (auto& [index, round] : rounds_) {
      const std::optional<std::string> why = missing_forever(index);
      if (!why) continue;
      for (std::size_t r = 0; r < children_.size(); ++r) {
        if (round.payloads[r].has_value() && !children_[r].aborted) {
          abort_one(static_cast<int>(r), *why);
        }
      }
    }
  }

  void kill_stragglers() {
    for (Child& c : children_) {
      if (c.exited) continue;
      c.killed_at_deadline = true;
      ::kill(c.pid, SIGTERM);
    }
    const Clock::time_point grace_end = Clock::now() + o_.kill_grace;
    while (!all_exited() && Clock::now() < grace_end) {
      serve(10);
      reap(false);
    }
    for (Child& c : children_) {
      if (!c.exited) ::kill(c.pid, SIGKILL);
    }
    reap(true);
  }

  static std::string describe_exit(const Child& c) {
    if (WIFEXITED(c.wait_status)) {
      return "exited with status " + std::to_string(WEXITSTATUS(c.wait_status));
    }
    if (WIFSIGNALED(c.wait_status)) {
      return std::string("was killed by signal ") + std::to_string(WTERMSIG(c.wait_status));
    }
    return "ended";
  }

  GroupReport report() const {
    GroupReport g;
    for (std::size_t r = 0; r < children_.size(); ++r) {
      const Child& c = children_[r];
      RankReport rr;
      rr.rank = static_cast<int>(r);
      rr.pid = c.pid;
      rr.phase = c.phase;
      rr.result = c.result;
      rr.message = c.message;
      rr.seconds = std::chrono::duration<double>(c.end - c.start).count();
      if (WIFEXITED(c.wait_status)) rr.exit_code = WEXITSTATUS(c.wait_status);
      if (WIFSIGNALED(c.wait_status)) rr.term_signal = WTERMSIG(c.wait_status);
      if (c.killed_at_deadline) {
        rr.state = RankState::timed_out;
      } else if (WIFEXITED(c.wait_status) && rr.exit_code == 0) {
        rr.state = RankState::ok;
      } else if (c.aborted) {
        rr.state = RankState::aborted;
      } else if (WIFSIGNALED(c.wait_status)) {
        rr.state = RankState::crashed;
      } else {
        rr.state = RankState::failed;
      }
      g.ranks.push_back(std::move(rr));
    }
    g.timeout_ms = o_.timeout.count();
    return g;
  }

  const ProcessGroupOptions& o_;
  std::vector<Child> children_;
  std::map<int, Round> rounds_;
};

void validate(const ProcessGroupOptions& o) {
  if (o.ranks < 1) throw_invalid("options.ranks", "must be >= 1", std::to_string(o.ranks));
  if (o.argv.empty() || o.argv[0].empty()) {
    throw_invalid("options.argv", "must name the executable in argv[0]");
  }
  if (o.timeout.count() <= 0) {
    throw_invalid("options.timeout", "must be > 0 ms", std::to_string(o.timeout.count()));
  }
  for (const std::string& e : o.env) {
    if (e.find('=') == std::string::npos || e.front() == '=') {
      throw_invalid("options.env", "entries must be NAME=value", e);
    }
  }
}

}  // namespace

std::string_view rank_state_name(RankState state) {
  switch (state) {
    case RankState::ok:
      return "ok";
    case RankState::failed:
      return "failed";
    case RankState::crashed:
      return "crashed";
    case RankState::timed_out:
      return "timed_out";
    case RankState::aborted:
      return "aborted";
  }
  return "unknown";
}

bool GroupReport::ok() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [](const RankReport& r) { return r.state == RankState::ok; });
}

std::string GroupReport::summary() const {
  if (ok()) return "all " + std::to_string(ranks.size()) + " ranks ok";
  std::string s;
  for (const RankReport& r : ranks) {
    if (r.state == RankState::ok) continue;
    if (!s.empty()) s += "\n";
    s += "rank " + std::to_string(r.rank) + " " + std::string(rank_state_name(r.state)) +
         " in phase '" + (r.phase.empty() ? "(none announced)" : r.phase) + "'";
    if (r.state == RankState::timed_out) {
      s += " (killed after " + std::to_string(timeout_ms) + " ms)";
    } else if (r.term_signal != 0) {
      s += " (signal " + std::to_string(r.term_signal) + ")";
    } else {
      s += " (exit status " + std::to_string(r.exit_code) + ")";
    }
    if (!r.message.empty()) s += ": " + r.message;
  }
  return s;
}

GroupReport run_process_group(const ProcessGroupOptions& options) {
  validate(options);
  Group g(options);
  return g.run();
}

}  // namespace megamoe::runtime
