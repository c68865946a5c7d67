#pragma once
// Small RAII wrappers over the driver for tests and tools: device buffers, streams, events, and
// the properties of a device. All of them throw CudaError("no CUDA GPU: ...") without a GPU.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace megamoe::runtime {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  template <typename T>
  T* as() const noexcept {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(ptr_));
  }

  // Synchronous copies of exactly size() bytes; a span of another size is an InvalidArgument.
  void copy_from_host(std::span<const std::byte> host);
  void copy_to_host(std::span<std::byte> host) const;
  // Fills every byte with `value` (synchronous), e.g. to poison an output.
  void fill_bytes(unsigned char value);

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

// A device buffer holding a copy of `host` (synchronous).
template <typename T, std::size_t N>
DeviceBuffer upload(std::span<T, N> host) {
  DeviceBuffer b(host.size_bytes());
  b.copy_from_host(std::as_bytes(host));
  return b;
}
template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  return upload(std::span<const T>(host));
}

class Stream {
 public:
  Stream();  // a non-blocking stream of the current context
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const noexcept { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const noexcept { return event_; }
  void record(CUstream stream);
  void synchronize() const;
  // Milliseconds from `start` to this event; both must have completed.
  float elapsed_ms_since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

struct DeviceProperties {
  std::string name;          // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  std::string arch;          // "sm_90"
  int sm_count = 0;
  std::size_t total_memory = 0;         // bytes
  int max_shared_memory_per_block = 0;  // opt-in maximum, bytes
  int driver_version = 0;               // e.g. 13000
};

DeviceProperties device_properties(int device = 0);

}  // namespace megamoe::runtime
