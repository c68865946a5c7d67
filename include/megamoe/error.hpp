#pragma once
// Errors of the public API. Every function of megamoe reports failure by throwing one of these;
// nothing is launched and no output is written once an argument is rejected.
#include <stdexcept>
#include <string>
#include <string_view>

namespace megamoe {

// Base of every megamoe error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input caught on the host: names the argument and the rule it broke.
// what() reads "megamoe: argument 'topk_idx': <rule> (got <what was passed>)".
class InvalidArgument : public Error {
 public:
  InvalidArgument(std::string argument, std::string rule, std::string got = {});
  const std::string& argument() const noexcept { return argument_; }
  const std::string& rule() const noexcept { return rule_; }

 private:
  std::string argument_;
  std::string rule_;
};

// A request the library understands but does not (yet) support, e.g. a format pair.
class Unsupported : public Error {
 public:
  using Error::Error;
};

// The CUDA driver, NVRTC or NCCL failed, or no GPU is present where one is needed.
class CudaError : public Error {
 public:
  using Error::Error;
};

// A fault detected on the device: bad expert ids counted by a kernel, a cross-rank timeout.
class DeviceFault : public Error {
 public:
  using Error::Error;
};

// Throws InvalidArgument; the helpers keep call sites to one line.
[[noreturn]] void throw_invalid(std::string_view argument, std::string_view rule,
                                std::string_view got = {});

}  // namespace megamoe
