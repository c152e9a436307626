#pragma once

#include <memory>
#include <string>

#include "strata/comm/process_group.h"
#include "strata/comm/store.h"

namespace strata::cuda {

// A process group over NCCL for tensors on cuda:<device> (float32, float64, float16, bfloat16). Rank 0 creates the
// NCCL unique id and shares it through `store`, which must outlive the group; every rank must call this for the
// same groupName in the same order. The device's backend must be initialised (initializeDevice) first.
// Collectives are ordered after the work already queued on the device's compute stream; Work::wait() makes the
// compute stream wait for the collective and blocks the host until it completes (or fails, or times out: see
// core/src/comm/nccl/nccl_process_group.h).
std::unique_ptr<ProcessGroup> createNcclProcessGroup(Store& store, int rank, int size, int device,
                                                     const ProcessGroupOptions& options,
                                                     const std::string& groupName = "default");

}  // namespace strata::cuda
