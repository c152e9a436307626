#include "cuda_allocator.h"

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "cuda_stream.h"

namespace strata::cuda {
namespace {

constexpr std::size_t kRounding = 512;
// A cached block serves a smaller request only when it wastes at most this share of itself, so one huge free
// block is not pinned by a tiny tensor.
constexpr std::size_t kMaxWasteDivisor = 4;

std::string mib(std::int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

std::size_t CudaAllocator::roundSize(std::size_t bytes) {
  return (bytes + kRounding - 1) / kRounding * kRounding;
}

CudaAllocator::~CudaAllocator() {
  // Process exit: the driver reclaims device memory; freeing here could run after the CUDA runtime shut down.
}

void* CudaAllocator::allocate(std::size_t bytes, MemoryCategory category) {
  if (bytes == 0) {
    stats_.onAllocate(category, 0);
    return nullptr;
  }
  const std::size_t rounded = roundSize(bytes);
  void* block = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = freeBlocks_.lower_bound(rounded);
    if (it != freeBlocks_.end() && it->first - rounded <= it->first / kMaxWasteDivisor) {
      block = it->second;
      liveSizes_[block] = it->first;
      freeBlocks_.erase(it);
    }
  }
  if (block == nullptr) {
    block = mallocOrThrow(rounded, bytes, category);
  }
  stats_.onAllocate(category, bytes);
  return block;
}

void* CudaAllocator::mallocOrThrow(std::size_t rounded, std::size_t requested, MemoryCategory category) {
  makeCurrent(deviceIndex_);
  void* block = nullptr;
  cudaError_t status = cudaMalloc(&block, rounded);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::lock_guard lock(mutex_);
    releaseCachedLocked();
    status = cudaMalloc(&block, rounded);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t freeBytes = 0;
    std::size_t totalBytes = 0;
    cudaMemGetInfo(&freeBytes, &totalBytes);
    const MemorySnapshot snap = stats_.snapshot();
    fail(
        "out of GPU memory on cuda:{} allocating {} for {}: tensors hold {} (peak {}), Strata has reserved {}, "
        "the device has {} free of {}",
        deviceIndex_, mib(static_cast<std::int64_t>(requested)), memoryCategoryName(category), mib(snap.totalCurrent),
        mib(snap.totalPeak), mib(snap.reserved), mib(static_cast<std::int64_t>(freeBytes)),
        mib(static_cast<std::int64_t>(totalBytes)));
  }
  STRATA_CUDA_CHECK(status);
  std::lock_guard lock(mutex_);
  liveSizes_[block] = rounded;
  reservedBytes_ += static_cast<std::int64_t>(rounded);
  stats_.setReserved(reservedBytes_);
  return block;
}

void CudaAllocator::deallocate(void* ptr, std::size_t bytes, MemoryCategory category) {
  stats_.onFree(category, bytes);
  if (ptr == nullptr) {
    return;
  }
  std::lock_guard lock(mutex_);
  auto it = liveSizes_.find(ptr);
  if (it == liveSizes_.end()) {
    return;  // not ours: a bug elsewhere; never hand a foreign pointer to cudaFree
  }
  freeBlocks_.emplace(it->second, ptr);
  liveSizes_.erase(it);
}

void CudaAllocator::releaseCachedLocked() {
  if (freeBlocks_.empty()) {
    return;
  }
  // Queued kernels may still use cached blocks; cudaFree waits for the device, but be explicit.
  makeCurrent(deviceIndex_);
  cudaDeviceSynchronize();
  for (const auto& [size, block] : freeBlocks_) {
    cudaFree(block);
    reservedBytes_ -= static_cast<std::int64_t>(size);
  }
  freeBlocks_.clear();
  stats_.setReserved(reservedBytes_);
}

void CudaAllocator::emptyCache() {
  std::lock_guard lock(mutex_);
  releaseCachedLocked();
}

}  // namespace strata::cuda
