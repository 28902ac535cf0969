// src/core/memory_ledger.h (internal): the categories of mixtrain/memory.h, one ledger per device.
// memory::allocate and memory::deallocate (allocator.cpp) count every block here after the backend
// served it, so a device's ledger total is its Stats::current_bytes and its peak is Stats::peak_bytes.
#pragma once

#include <cstddef>

#include "core/backend.h"
#include "mixtrain/memory.h"

namespace mixtrain::memory::detail {

// Counts a block the backend just allocated under the calling thread's category and op; fills `tag`.
// On a new peak, records the breakdown (with the backend's cached bytes then).
void count_allocation(size_t nbytes, Device device, Tag& tag, Backend& backend);
void count_free(size_t nbytes, Device device, const Tag& tag);
// The peak becomes the current total; the breakdown at the peak becomes the current one.
void reset_ledger_peak(Device device, Backend& backend);

}  // namespace mixtrain::memory::detail
