#pragma once

namespace strata {

// Note [Giving way to communication]
// A process group's collectives run on its own threads (the worker, Gloo's event loop), which share the cores with
// the compute threads. A communication thread that wakes on a core a compute thread holds may wait for the rest of
// that thread's time slice (milliseconds) while the peer that needs its bytes idles: FSDP's EfficientNetV2-S on 2
// ranks x 1 thread on 2 cores had its communication threads runnable but queued for 1.5 s of every 3 s with the other
// core idle (`perf sched`, bench/sched_waits.py; docs/plan.md, "Giving way to communication"). So a CPU executor
// yields its core between nodes, with sched_yield(), while this process has a collective in flight: a queued
// communication thread runs at the next node boundary, and with none runnable the yield returns at once (0.55 us).
// Real-time priority for the communication threads does more, but needs privileges and slowed DDP.

// Counts this process's collectives between their launch and their completion (AsyncWork does the counting).
void beginCommunication() noexcept;
void endCommunication() noexcept;
int communicationInFlight() noexcept;

// Yields the calling thread's core when a collective is in flight and STRATA_GIVE_WAY is not "0"; returns whether
// it yielded.
bool giveWayToCommunication() noexcept;

// How many times giveWayToCommunication() has yielded in this process.
long long communicationYields() noexcept;

}  // namespace strata
