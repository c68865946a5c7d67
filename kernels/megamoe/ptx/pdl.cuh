#pragma once
// Programmatic dependent launch (sm90). A kernel launched with the programmatic stream
// serialization attribute may start while the previous kernel on the stream still runs; it must
// wait before it touches memory that kernel reads or writes.
#include "megamoe/common.cuh"

namespace megamoe::device::ptx {

// Blocks until every prerequisite grid has completed and its writes are visible. A no-op when
// the kernel was launched without the attribute.
MEGAMOE_DEVICE void griddep_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the next kernel on the stream start its prologue. Its griddep_wait still waits for this
// whole grid, so calling this early never exposes partial results.
MEGAMOE_DEVICE void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace megamoe::device::ptx
