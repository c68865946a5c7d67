// The child's end of run_process_group (process_group.hpp): collectives are a frame up and a
// frame down; the parent does the matching.
#include <charconv>
#include <cstdlib>
#include <string>

#include "megamoe/error.hpp"
#include "runtime/process_group.hpp"
#include "runtime/process_group_wire.hpp"

namespace megamoe::runtime {
namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  int out = 0;
  const char* end = v + std::char_traits<char>::length(v);
  const auto [p, ec] = std::from_chars(v, end, out);
  if (ec != std::errc() || p != end) {
    throw_invalid(name, "must be a decimal integer (set by run_process_group)", v);
  }
  return out;
}

}  // namespace

std::optional<RankChannel> RankChannel::from_environment() {
  const auto rank = env_int("MEGAMOE_PG_RANK");
  const auto size = env_int("MEGAMOE_PG_SIZE");
  const auto fd = env_int("MEGAMOE_PG_FD");
  if (!rank || !size || !fd) return std::nullopt;
  if (*size < 1 || *rank < 0 || *rank >= *size) {
    throw_invalid("MEGAMOE_PG_RANK", "must be in [0, MEGAMOE_PG_SIZE)",
                  std::to_string(*rank) + " of " + std::to_string(*size));
  }
  return RankChannel(*rank, *size, *fd);
}

void RankChannel::phase(std::string_view name) {
  if (!wire::send_frame(fd_, wire::Type::phase, 0, name)) {
    throw Error("process group: rank " + std::to_string(rank_) + " lost its parent");
  }
}

std::vector<std::string> RankChannel::collective(std::string_view payload, int root) {
  if (root < -1 || root >= size_) {
    throw_invalid("root", "must be a rank in [0, " + std::to_string(size_) + ")",
                  std::to_string(root));
  }
  if (!wire::send_frame(fd_, wire::Type::collective, root, payload)) {
    throw Error("process group: rank " + std::to_string(rank_) + " lost its parent");
  }
  wire::Header h;
  std::string body;
  if (!wire::recv_frame(fd_, h, body)) {
    throw Error("process group: rank " + std::to_string(rank_) +
                " lost its parent while waiting in a collective");
  }
  if (h.type == static_cast<std::uint32_t>(wire::Type::abort)) throw DeviceFault(body);
  if (h.type != static_cast<std::uint32_t>(wire::Type::collective_done)) {
    throw Error("process group: unexpected frame type " + std::to_string(h.type));
  }
  return wire::decode_list(body);
}

std::vector<std::string> RankChannel::all_gather(std::string_view payload) {
  return collective(payload, -1);
}

std::vector<std::string> RankChannel::gather(std::string_view payload, int root) {
  if (root < 0) throw_invalid("root", "must be a rank >= 0", std::to_string(root));
  return collective(payload, root);
}

std::string RankChannel::broadcast(std::string_view payload, int root) {
  if (root < 0 || root >= size_) {
    throw_invalid("root", "must be a rank in [0, " + std::to_string(size_) + ")",
                  std::to_string(root));
  }
  // Only the root's bytes matter; the others send nothing to keep the relay small.
  const std::vector<std::string> all = all_gather(rank_ == root ? payload : std::string_view{});
  return all[static_cast<std::size_t>(root)];
}

void RankChannel::barrier() {
  all_gather({});
}

void RankChannel::report(std::string_view result) {
  if (!wire::send_frame(fd_, wire::Type::result, 0, result)) {
    throw Error("process group: rank " + std::to_string(rank_) + " lost its parent");
  }
}

void RankChannel::fail(std::string_view message) {
  // Best effort: the caller exits non-zero either way.
  wire::send_frame(fd_, wire::Type::fail, 0, message);
}

}  // namespace megamoe::runtime
