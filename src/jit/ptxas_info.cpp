#include "jit/ptxas_info.hpp"

#include <algorithm>
#include <charconv>

namespace megamoe::jit {
namespace {

// The integer that ends right before `suffix` at `at` in `line` (e.g. "8" in "8 bytes stack").
std::size_t number_before(std::string_view line, std::size_t at) {
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  std::size_t v = 0;
  std::from_chars(line.data() + begin, line.data() + end, v);
  return v;
}

// Value of the number preceding each occurrence of `suffix` in `line`, summed.
std::size_t sum_before(std::string_view line, std::string_view suffix) {
  std::size_t total = 0;
  for (std::size_t at = line.find(suffix); at != std::string_view::npos;
       at = line.find(suffix, at + suffix.size())) {
    total += number_before(line, at);
  }
  return total;
}

}  // namespace

PtxasInfo parse_ptxas_info(std::string_view log) {
  PtxasInfo info;
  std::size_t pos = 0;
  while (pos < log.size()) {
    std::size_t end = log.find('\n', pos);
    if (end == std::string_view::npos) end = log.size();
    const std::string_view line = log.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with("ptxas")) continue;
    if (line.find(" registers") != std::string_view::npos &&
        line.find("Used ") != std::string_view::npos) {
      info.found = true;
      info.registers = std::max(info.registers, static_cast<int>(sum_before(line, " registers")));
      info.local_bytes = std::max(info.local_bytes, sum_before(line, " bytes lmem"));
    }
    info.local_bytes = std::max(info.local_bytes, sum_before(line, " bytes stack frame"));
    info.spill_bytes +=
        sum_before(line, " bytes spill stores") + sum_before(line, " bytes spill loads");
  }
  return info;
}

}  // namespace megamoe::jit
