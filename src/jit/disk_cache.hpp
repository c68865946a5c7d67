#pragma once
// The on-disk JIT cache: one file per kernel, <dir>/<key>.jit, holding a short text header
// (fields, sizes, SHA-256 of the cubin) followed by the cubin and the compile log. One file per
// entry means one rename installs it: a reader sees the whole entry or none. Entries are written
// to a unique temporary file in the same directory and renamed over the final name, so processes
// racing on a key leave one valid entry (the last rename wins; both wrote identical bytes).
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "jit/compiler.hpp"

namespace megamoe::jit {

std::filesystem::path entry_path(const std::filesystem::path& dir, std::string_view key);

// Writes `kernel` under its key; creates `dir` when needed. Returns "" or the reason it failed
// (a failed write only costs a recompile later, so callers warn and continue).
std::string write_entry(const std::filesystem::path& dir, const CompiledKernel& kernel);

// The entry for `key`, or nullopt when absent or invalid (truncated, wrong key, checksum
// mismatch, not an ELF cubin); `why` then says which.
std::optional<CompiledKernel> read_entry(const std::filesystem::path& dir, std::string_view key,
                                         std::string* why = nullptr);

}  // namespace megamoe::jit
