#pragma once
// A small memo for launch decisions that a layer call would otherwise recompute every time (the
// kernel request's strings, the launch shape, the function lookup): keyed by everything the
// decision reads, shared by threads.
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace megamoe::runtime {

template <class Key, class Value>
class LaunchMemo {
 public:
  // The value remembered for `key`, else make()'s, remembered. A make() that throws remembers
  // nothing, so the next call reports the same error.
  template <class Make>
  Value get(const Key& key, Make&& make) {
    {
      const std::lock_guard lock(mutex_);
      for (const auto& [k, v] : entries_) {
        if (k == key) return v;
      }
    }
    Value value = make();
    const std::lock_guard lock(mutex_);
    // Keys come from a few layer configurations; a process that keeps changing the tuning
    // variables would grow the memo without end, so it starts over past this many.
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.emplace_back(key, value);
    return value;
  }

 private:
  static constexpr std::size_t kMaxEntries = 256;
  std::mutex mutex_;
  std::vector<std::pair<Key, Value>> entries_;
};

}  // namespace megamoe::runtime
