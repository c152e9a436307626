#include "launch/process_group_factory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "strata/comm/collective_arrivals.h"
#include "strata/comm/gloo_process_group.h"
#include "strata/comm/staging_process_group.h"
#include "strata/comm/tcp_store.h"
#include "strata/error.h"
#ifdef STRATA_HAS_CUDA
#include "strata/cuda/backend.h"
#include "strata/cuda/nccl_process_group.h"
#endif

namespace strata::cli {
namespace {

// Every rank's kind of device: a job whose ranks disagree (--device auto on a node without a usable GPU) fails here,
// naming them, instead of GPU ranks waiting for the GPU records of CPU ranks (and CPU ranks for a Gloo group the GPU
// ranks never join) until the timeout.
void checkRanksAgreeOnDeviceType(Store& store, const RankEnvironment& rank, Device device,
                                 std::chrono::milliseconds timeout) {
  const auto kind = [](Device d) { return d.type == DeviceType::CPU ? "cpu" : "cuda"; };
  store.setString(fmt::format("device/rank/{}", rank.rank), kind(device));
  for (int r = 0; r < rank.worldSize; ++r) {
    const std::string other = store.getString(fmt::format("device/rank/{}", r), timeout);
    if (other != kind(device)) {
      fail(
          "rank {} trains on {} ({}) but rank {} on {}: every rank of a job must use the same kind of device (check "
          "--device and that every node sees its GPUs)",
          rank.rank, kind(device), device.toString(), r, other);
    }
  }
}

#ifdef STRATA_HAS_CUDA
// Whether no two ranks use the same GPU, judged by host name and PCI bus id (an explicit --device cuda:N for
// several local ranks shares one GPU; per-rank CUDA_VISIBLE_DEVICES gives each rank its own as device 0).
bool everyRankHasItsOwnGpu(Store& store, const RankEnvironment& rank, Device device,
                           std::chrono::milliseconds timeout) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  store.setString(fmt::format("gpu/rank/{}", rank.rank), fmt::format("{}|{}", host, cuda::pciBusId(device.index)));
  std::set<std::string> gpus;
  for (int r = 0; r < rank.worldSize; ++r) {
    gpus.insert(store.getString(fmt::format("gpu/rank/{}", r), timeout));
  }
  return static_cast<int>(gpus.size()) == rank.worldSize;
}
#endif

// Note [Gloo's address]: each rank's Gloo transport listens on one address and publishes it through the store; the
// other ranks connect to it. Loopback (GlooOptions' default) only works while every rank is on one host: a rank on
// another node would be told to connect to its own 127.0.0.1. The address a rank reaches the store from is the
// interface on the route to MASTER_ADDR, which the other nodes reach too on the usual flat cluster network (and
// 127.0.0.1 again on one host). GLOO_SOCKET_IFNAME (torch's variable) names an interface instead, for hosts whose
// store traffic takes another network than the collectives should.
GlooOptions glooOptionsFor(const Store& store) {
  GlooOptions options;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    options.iface = iface;
  } else if (const auto* tcp = dynamic_cast<const TcpStore*>(&store)) {
    options.hostname = tcp->localAddress();
  }
  return options;
}

}  // namespace

std::unique_ptr<ProcessGroup> createProcessGroup(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                                 Device device, std::chrono::milliseconds timeout) {
  const ProcessGroupOptions options{.timeout = timeout};
  checkRanksAgreeOnDeviceType(*store, rank, device, timeout);
#ifdef STRATA_HAS_CUDA
  if (device.type == DeviceType::CUDA) {
    if (everyRankHasItsOwnGpu(*store, rank, device, timeout)) {
      if (rank.rank == 0) {
        spdlog::info("collectives: NCCL (one GPU per rank)");
      }
      return cuda::createNcclProcessGroup(*store, rank.rank, rank.worldSize, device.index, options);
    }
    if (rank.rank == 0) {
      spdlog::info("collectives: Gloo with host staging (ranks share a GPU)");
    }
  }
#endif
  auto gloo = std::make_unique<GlooProcessGroup>(store, rank.rank, rank.worldSize, options, glooOptionsFor(*store));
  if (device.type == DeviceType::CPU) {
    return gloo;
  }
  // Gloo moves host memory only: device tensors go through host buffers (Note [host staging]).
  return std::make_unique<StagingProcessGroup>(std::move(gloo));
}

std::unique_ptr<ProcessGroup> createSubgroup(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                             Device device, std::chrono::milliseconds timeout,
                                             const std::vector<int>& ranks) {
  const auto at = std::find(ranks.begin(), ranks.end(), rank.rank);
  STRATA_CHECK(at != ranks.end(), "subgroup {}: rank {} is not a member", fmt::join(ranks, ","), rank.rank);
  GlooOptions glooOptions;
  glooOptions.groupName = fmt::format("sub-{}", fmt::join(ranks, "-"));
  auto gloo =
      std::make_unique<GlooProcessGroup>(store, static_cast<int>(at - ranks.begin()), static_cast<int>(ranks.size()),
                                         ProcessGroupOptions{.timeout = timeout}, glooOptions);
  if (device.type == DeviceType::CPU) {
    return gloo;
  }
  return std::make_unique<StagingProcessGroup>(std::move(gloo));
}

std::function<std::string()> describeSilentRanksOf(const std::shared_ptr<Store>& store, const RankEnvironment& rank,
                                                   std::chrono::milliseconds timeout) {
  if (store == nullptr || rank.worldSize <= 1) {
    return nullptr;
  }
  return [store, size = rank.worldSize, timeout] {
    return describeSilentRanks(*store, GlooProcessGroup::keyPrefix(GlooOptions{}.groupName), size,
                               heartbeatPeriodFor(timeout));
  };
}

}  // namespace strata::cli
