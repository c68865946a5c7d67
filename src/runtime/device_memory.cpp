#include "runtime/device_memory.hpp"

#include <cstdint>
#include <utility>

#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"

namespace megamoe::runtime {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) MEGAMOE_CU(cuda::driver().cuMemAlloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  // Errors cannot leave a destructor; a failing free means a broken context, reported elsewhere.
  if (ptr_ != 0) cuda::driver().cuMemFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::copy_from_host(std::span<const std::byte> host) {
  if (host.size() != bytes_) {
    throw_invalid("host", "must hold exactly the buffer's " + std::to_string(bytes_) + " bytes",
                  std::to_string(host.size()) + " bytes");
  }
  if (bytes_ > 0) MEGAMOE_CU(cuda::driver().cuMemcpyHtoD(ptr_, host.data(), bytes_));
}

void DeviceBuffer::copy_to_host(std::span<std::byte> host) const {
  if (host.size() != bytes_) {
    throw_invalid("host", "must hold exactly the buffer's " + std::to_string(bytes_) + " bytes",
                  std::to_string(host.size()) + " bytes");
  }
  if (bytes_ > 0) MEGAMOE_CU(cuda::driver().cuMemcpyDtoH(host.data(), ptr_, bytes_));
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ == 0) return;
  const cuda::Driver& d = cuda::driver();
  MEGAMOE_CU(d.cuMemsetD8Async(ptr_, value, bytes_, nullptr));
  MEGAMOE_CU(d.cuCtxSynchronize());
}

Stream::Stream() {
  MEGAMOE_CU(cuda::driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}

Stream::~Stream() {
  if (stream_ != nullptr) cuda::driver().cuStreamDestroy(stream_);
}

void Stream::synchronize() const {
  MEGAMOE_CU(cuda::driver().cuStreamSynchronize(stream_));
}

Event::Event() {
  MEGAMOE_CU(cuda::driver().cuEventCreate(&event_, CU_EVENT_DEFAULT));
}

Event::~Event() {
  if (event_ != nullptr) cuda::driver().cuEventDestroy(event_);
}

void Event::record(CUstream stream) {
  MEGAMOE_CU(cuda::driver().cuEventRecord(event_, stream));
}

void Event::synchronize() const {
  MEGAMOE_CU(cuda::driver().cuEventSynchronize(event_));
}

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  MEGAMOE_CU(cuda::driver().cuEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

DeviceProperties device_properties(int device) {
  const cuda::Driver& d = cuda::driver();
  int count = 0;
  MEGAMOE_CU(d.cuDeviceGetCount(&count));
  if (device < 0 || device >= count) {
    throw_invalid("device", "must be in [0, " + std::to_string(count) + ")",
                  std::to_string(device));
  }
  CUdevice dev = 0;
  MEGAMOE_CU(d.cuDeviceGet(&dev, device));
  DeviceProperties p;
  char name[256] = {};
  MEGAMOE_CU(d.cuDeviceGetName(name, static_cast<int>(sizeof(name)), dev));
  p.name = name;
  auto attribute = [&](CUdevice_attribute a) {
    int v = 0;
    MEGAMOE_CU(d.cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  p.major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p.minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p.arch = "sm_" + std::to_string(p.major * 10 + p.minor);
  p.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p.max_shared_memory_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  MEGAMOE_CU(d.cuDeviceTotalMem(&p.total_memory, dev));
  p.driver_version = d.driver_version;
  return p;
}

}  // namespace megamoe::runtime
