#pragma once

namespace strata {

// Returns the CPU allocator's cached free blocks to the system (Note [CPU block cache] in core/src/cpu_allocator.h).
// For a point where what was freed will not be asked for again: once a training plan is built, the imported
// model's initializers (copied into the plan's parameter buffers) are free, and a cache keyed by exact size would
// keep them resident, unused, for the whole run.
void releaseCachedHostMemory();

}  // namespace strata
