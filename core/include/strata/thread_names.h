#pragma once

#include <string_view>

namespace strata {

// Note [Thread names]: Strata names the threads it starts, so that top -H, perf and /proc tell them apart, and so
// that a rank can measure what its communication costs in CPU: the threads that move collectives' bytes (a process
// group's worker, Gloo's event loop, which takes the name of the thread that creates Gloo's device, the store
// server) are all named kCommunicationThread. On 2 cores they took 37% of a core beside the compute thread's 35% in
// FSDP's many-unit case (docs/plan.md, "The communication threads and the scheduler").
inline constexpr std::string_view kCommunicationThread = "strata-comm";

// Names the calling thread (Linux keeps the first 15 characters); threads it starts afterwards inherit the name.
void nameThisThread(std::string_view name);

// User plus system CPU seconds of this process's live threads whose name starts with `prefix`, from
// /proc/self/task; 0 where /proc cannot be read. Threads that have exited are not counted.
double cpuSecondsOfThreadsNamed(std::string_view prefix);

}  // namespace strata
