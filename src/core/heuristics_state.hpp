#pragma once
// The process-wide SM count pinned by set_num_sms, shared by heuristics.cpp (which sets it, no
// GPU needed) and runtime/num_sms.cpp (which resolves it against the device).
namespace megamoe::detail {

int pinned_num_sms();  // 0 = not pinned

}  // namespace megamoe::detail
