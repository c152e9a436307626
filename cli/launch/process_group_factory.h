#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "strata/comm/process_group.h"
#include "strata/comm/store.h"
#include "strata/device.h"

namespace strata::cli {

// The collectives a job's ranks use: NCCL when every rank on this node has a GPU of its own, Gloo otherwise (CPU
// training, or ranks sharing a GPU, whose device tensors Gloo stages through host memory).
std::unique_ptr<ProcessGroup> createProcessGroup(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                                 Device device, std::chrono::milliseconds timeout);

// A Gloo group over some of the job's ranks (StrategyContext::subgroup), with its own keys in the store. Device
// tensors are staged through host memory.
std::unique_ptr<ProcessGroup> createSubgroup(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                             Device device, std::chrono::milliseconds timeout,
                                             const std::vector<int>& ranks);

// Which of the job's ranks are silent, from the heartbeats of the job's Gloo group (an NCCL group keeps none, and
// the answer says so); nullptr without a store.
std::function<std::string()> describeSilentRanksOf(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                                   std::chrono::milliseconds timeout);

}  // namespace strata::cli
