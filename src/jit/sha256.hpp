#pragma once
// SHA-256 (FIPS 180-4) for the JIT cache key. Written here rather than taken from OpenSSL so the
// library gains no link dependency (it must build and import wherever NVRTC does); the CPU tests
// check it against the FIPS 180-2 example vectors. Speed is irrelevant: a key hashes a few
// hundred KB of source at most, once per kernel per process.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace megamoe::jit {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  // Feeds a length prefix then the bytes, so that consecutive fields cannot run together
  // ("ab" + "c" hashes differently from "a" + "bc").
  void update_field(std::string_view bytes);
  std::array<std::uint8_t, 32> finish();  // the object must not be used afterwards
  std::string finish_hex();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace megamoe::jit
