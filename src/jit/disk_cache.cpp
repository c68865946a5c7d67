#include "jit/disk_cache.hpp"

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "jit/sha256.hpp"

namespace megamoe::jit {
namespace {

constexpr std::string_view kMagic = "megamoe-jit-cache 1";

std::string one_line(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::optional<std::size_t> to_size(const std::string& s) {
  std::size_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
         std::to_string(rd());
}

}  // namespace

std::filesystem::path entry_path(const std::filesystem::path& dir, std::string_view key) {
  return dir / (std::string(key) + ".jit");
}

std::string write_entry(const std::filesystem::path& dir, const CompiledKernel& kernel) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "cannot create " + dir.string() + ": " + ec.message();

  std::ostringstream header;
  header << kMagic << '\n'
         << "key " << kernel.key << '\n'
         << "name " << one_line(kernel.name) << '\n'
         << "lowered_name " << one_line(kernel.lowered_name) << '\n'
         << "registers " << kernel.registers << '\n'
         << "local_bytes " << kernel.local_bytes << '\n'
         << "spill_bytes " << kernel.spill_bytes << '\n'
         << "compile_us " << static_cast<long long>(kernel.compile_ms * 1000.0) << '\n'
         << "cubin_bytes " << kernel.cubin.size() << '\n'
         << "cubin_sha256 " << sha256_hex(kernel.cubin) << '\n'
         << "log_bytes " << kernel.log.size() << '\n'
         << "end\n";

  const std::filesystem::path final_path = entry_path(dir, kernel.key);
  const std::filesystem::path temp_path = dir / ("." + kernel.key + ".tmp." + unique_suffix());
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    if (!out) return "cannot write " + temp_path.string();
    const std::string h = header.str();
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    out.write(kernel.cubin.data(), static_cast<std::streamsize>(kernel.cubin.size()));
    out.write(kernel.log.data(), static_cast<std::streamsize>(kernel.log.size()));
    out.flush();
    if (!out) {
      std::filesystem::remove(temp_path, ec);
      return "short write to " + temp_path.string();
    }
  }
  // rename(2) replaces the target atomically within one file system.
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    std::filesystem::remove(temp_path, ec);
    return "cannot rename into " + final_path.string();
  }
  return {};
}

std::optional<CompiledKernel> read_entry(const std::filesystem::path& dir, std::string_view key,
                                         std::string* why) {
  auto fail = [why](std::string reason) -> std::optional<CompiledKernel> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  std::ifstream in(entry_path(dir, key), std::ios::binary);
  if (!in) return fail("absent");
  std::string line;
  if (!std::getline(in, line) || line != kMagic) return fail("not a megamoe cache entry");
  std::map<std::string, std::string> fields;
  bool ended = false;
  while (std::getline(in, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    const std::size_t space = line.find(' ');
    if (space == std::string::npos) return fail("malformed header line");
    fields[line.substr(0, space)] = line.substr(space + 1);
  }
  if (!ended) return fail("truncated header");
  auto field = [&fields](const char* name) -> std::string {
    auto it = fields.find(name);
    return it == fields.end() ? std::string() : it->second;
  };
  if (field("key") != key) return fail("entry holds another key");
  const auto cubin_bytes = to_size(field("cubin_bytes"));
  const auto log_bytes = to_size(field("log_bytes"));
  const auto registers = to_size(field("registers"));
  const auto local_bytes = to_size(field("local_bytes"));
  const auto spill_bytes = to_size(field("spill_bytes"));
  const auto compile_us = to_size(field("compile_us"));
  if (!cubin_bytes || !log_bytes || !registers || !local_bytes || !spill_bytes || !compile_us) {
    return fail("malformed numeric field");
  }
  CompiledKernel k;
  k.cubin.resize(*cubin_bytes);
  k.log.resize(*log_bytes);
  in.read(k.cubin.data(), static_cast<std::streamsize>(k.cubin.size()));
  in.read(k.log.data(), static_cast<std::streamsize>(k.log.size()));
  if (!in) return fail("truncated body");
  if (in.peek() != std::char_traits<char>::eof()) return fail("trailing bytes");
  if (sha256_hex(k.cubin) != field("cubin_sha256")) return fail("cubin checksum mismatch");
  if (k.cubin.size() < 4 || k.cubin.compare(0, 4,
                                            "\x7f"
                                            "ELF") != 0)
    return fail("not an ELF cubin");
  k.key = std::string(key);
  k.name = field("name");
  k.lowered_name = field("lowered_name");
  if (k.lowered_name.empty()) return fail("no lowered name");
  k.registers = static_cast<int>(*registers);
  k.local_bytes = *local_bytes;
  k.spill_bytes = *spill_bytes;
  k.compile_ms = static_cast<double>(*compile_us) / 1000.0;
  k.from_cache = true;
  return k;
}

}  // namespace megamoe::jit
