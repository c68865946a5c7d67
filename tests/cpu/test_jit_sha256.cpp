// SHA-256 of the JIT cache key against the FIPS 180-2 example vectors, and streaming updates.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "jit/sha256.hpp"

namespace megamoe::jit {
namespace {

TEST(JitSha256, FipsExampleVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding spills into a second block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(JitSha256, StreamingMatchesOneShotForRandomSplits) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    std::string data(std::uniform_int_distribution<std::size_t>(0, 700)(rng), '\0');
    for (char& c : data) c = static_cast<char>(rng());
    Sha256 h;
    std::size_t at = 0;
    while (at < data.size()) {
      const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 130)(rng);
      h.update(std::string_view(data).substr(at, n));
      at += n;
    }
    EXPECT_EQ(h.finish_hex(), sha256_hex(data)) << "length " << data.size();
  }
}

TEST(JitSha256, FieldsDoNotRunTogether) {
  Sha256 a, b;
  a.update_field("ab");
  a.update_field("c");
  b.update_field("a");
  b.update_field("bc");
  EXPECT_NE(a.finish_hex(), b.finish_hex());
}

}  // namespace
}  // namespace megamoe::jit
