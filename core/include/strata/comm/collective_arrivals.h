#pragma once

// The arrival records that process groups (GlooProcessGroup, the CUDA backend's NcclProcessGroup) keep in the
// store: each rank writes the sequence number of the last collective it joined under its arrival key, so a
// collective that fails or times out can say which ranks never arrived.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/comm/store.h"

namespace strata {

// The key under which `rank` records its last joined collective, below the group's key prefix.
std::string collectiveArrivalKey(const std::string& prefix, int rank);

// "rank 1 of 2 did not join (rank 1 last joined #16)", from the arrival records of the ranks that have not joined
// collective `seq`; never throws.
std::string describeMissingRanks(Store& store, const std::string& prefix, int size, std::int64_t seq,
                                 std::chrono::milliseconds timeout);

// "allReduce #16 (98.3 MB) at step 7": how errors and the watchdog name a collective (bytes 0: no size).
std::string describeCollective(const std::string& name, std::int64_t seq, std::size_t bytes, std::int64_t step);

}  // namespace strata
