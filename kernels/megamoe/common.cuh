#pragma once
// Definitions shared by every device-side file. Compiled by NVRTC (no host headers available).

#define MEGAMOE_DEVICE __device__ __forceinline__

namespace megamoe::device {

using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i32 = int;
using i64 = long long;

}  // namespace megamoe::device
