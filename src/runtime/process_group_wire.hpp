#pragma once
// The framing between run_process_group and RankChannel: a 16-byte header {type, arg, length}
// then `length` payload bytes, over a Unix stream socket (both ends, so MSG_NOSIGNAL turns a dead
// peer into an error instead of SIGPIPE). Host byte order: both ends are the same executable
// family on one machine.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megamoe::runtime::wire {

enum class Type : std::uint32_t {
  // child -> parent
  phase = 1,       // payload: phase name
  collective = 2,  // arg: root rank, -1 = every rank receives; payload: the contribution
  result = 3,      // payload: the rank's result
  fail = 4,        // payload: failure message
  // parent -> child
  collective_done = 5,  // payload: encode_list of the payloads the rank receives
  abort = 6,            // payload: why the collective cannot complete
};

struct Header {
  std::uint32_t type = 0;
  std::int32_t arg = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(Header) == 16);

// Frames larger than this are refused on both ends: a corrupted length must not allocate
// gigabytes.
inline constexpr std::uint64_t kMaxPayload = std::uint64_t{1} << 32;

// Blocking send of one frame. False when the peer is gone.
bool send_frame(int fd, Type type, std::int32_t arg, std::string_view payload);
// Blocking receive of one frame. False on EOF or error before a whole frame arrived.
bool recv_frame(int fd, Header& header, std::string& payload);

// [u32 count] then per entry [u64 length][bytes].
std::string encode_list(const std::vector<std::string>& items);
// Throws Error on a malformed list.
std::vector<std::string> decode_list(std::string_view bytes);

}  // namespace megamoe::runtime::wire
