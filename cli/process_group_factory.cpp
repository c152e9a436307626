#include "process_group_factory.h"

#include <spdlog/spdlog.h>

#include "strata/comm/gloo_process_group.h"
#ifdef STRATA_HAS_CUDA
#include "strata/cuda/backend.h"
#include "strata/cuda/nccl_process_group.h"
#endif

namespace strata::cli {

std::unique_ptr<ProcessGroup> createProcessGroup(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                                 Device device, std::chrono::milliseconds timeout) {
  const ProcessGroupOptions options{.timeout = timeout};
#ifdef STRATA_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    const int gpus = cuda::probeDevices().count;
    if (rank.localWorldSize <= gpus) {
      if (rank.rank == 0) {
        spdlog::info("collectives: NCCL (one GPU per rank)");
      }
      return cuda::createNcclProcessGroup(*store, rank.rank, rank.worldSize, device.index, options);
    }
    if (rank.rank == 0) {
      spdlog::info("collectives: Gloo with host staging ({} local ranks share {} GPU(s))", rank.localWorldSize, gpus);
    }
  }
#endif
  return std::make_unique<GlooProcessGroup>(store, rank.rank, rank.worldSize, options);
}

}  // namespace strata::cli
