#include "runtime/process_group_wire.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "megamoe/error.hpp"

namespace megamoe::runtime::wire {
namespace {

bool send_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace

bool send_frame(int fd, Type type, std::int32_t arg, std::string_view payload) {
  if (payload.size() > kMaxPayload) {
    throw Error("process group: a frame of " + std::to_string(payload.size()) +
                " bytes exceeds the 4 GiB limit");
  }
  const Header h{static_cast<std::uint32_t>(type), arg, payload.size()};
  return send_all(fd, &h, sizeof(h)) && send_all(fd, payload.data(), payload.size());
}

bool recv_frame(int fd, Header& header, std::string& payload) {
  if (!recv_all(fd, &header, sizeof(header))) return false;
  if (header.length > kMaxPayload) return false;
  payload.resize(static_cast<std::size_t>(header.length));
  return recv_all(fd, payload.data(), payload.size());
}

std::string encode_list(const std::vector<std::string>& items) {
  std::string out;
  const auto count = static_cast<std::uint32_t>(items.size());
  out.append(reinterpret_cast<const char*>(&count), sizeof(count));
  for (const std::string& s : items) {
    const std::uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out.append(s);
  }
  return out;
}

std::vector<std::string> decode_list(std::string_view bytes) {
  auto malformed = [] { throw Error("process group: malformed collective payload"); };
  std::uint32_t count = 0;
  if (bytes.size() < sizeof(count)) malformed();
  std::memcpy(&count, bytes.data(), sizeof(count));
  bytes.remove_prefix(sizeof(count));
  std::vector<std::string> items;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint64_t n = 0;
    if (bytes.size() < sizeof(n)) malformed();
    std::memcpy(&n, bytes.data(), sizeof(n));
    bytes.remove_prefix(sizeof(n));
    if (bytes.size() < n) malformed();
    items.emplace_back(bytes.substr(0, static_cast<std::size_t>(n)));
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  if (!bytes.empty()) malformed();
  return items;
}

}  // namespace megamoe::runtime::wire
