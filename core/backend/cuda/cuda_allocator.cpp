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
  int pool = 0;
  {
    std::lock_guard lock(mutex_);
    pool = poolOfCallerLocked();
    FreeBlocks& free = freeListLocked(pool);
    auto it = free.lower_bound(rounded);
    if (it != free.end() && it->first - rounded <= it->first / kMaxWasteDivisor) {
      block = it->second;
      liveBlocks_[block] = LiveBlock{it->first, pool};
      free.erase(it);
    }
  }
  if (block == nullptr) {
    block = mallocOrThrow(rounded, bytes, category);
    std::lock_guard lock(mutex_);
    liveBlocks_[block].pool = pool;
  }
  stats_.onAllocate(category, bytes);
  return block;
}

void* CudaAllocator::mallocOrThrow(std::size_t rounded, std::size_t requested, MemoryCategory category) {
  makeCurrent(deviceIndex_);
  void* block = nullptr;
  bool recording = false;
  {
    std::lock_guard lock(mutex_);
    recording = poolOfCallerLocked() != 0;
  }
  cudaError_t status = cudaSuccess;
  if (recording) {
    // cudaMalloc is not stream-ordered, so stream capture calls it unsafe; the block is reserved for the recording
    // (Note [Recording pool]), which is what makes it safe here (PyTorch's allocator does the same).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    STRATA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    status = cudaMalloc(&block, rounded);
    STRATA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  } else {
    status = cudaMalloc(&block, rounded);
  }
  // Releasing the cache frees and synchronises, which a recording cannot hold: it then fails and runs eagerly.
  if (status == cudaErrorMemoryAllocation && !recording) {
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
  if (status != cudaSuccess) {
    throwCudaError(status, "cudaMalloc", __FILE__, __LINE__);  // the macro would name `status`, not the call
  }
  std::lock_guard lock(mutex_);
  liveBlocks_[block] = LiveBlock{rounded, 0};
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
  auto it = liveBlocks_.find(ptr);
  if (it == liveBlocks_.end()) {
    return;  // not ours: a bug elsewhere; never hand a foreign pointer to cudaFree
  }
  freeListLocked(it->second.pool).emplace(it->second.size, ptr);
  liveBlocks_.erase(it);
}

CudaAllocator::FreeBlocks& CudaAllocator::freeListLocked(int pool) {
  if (pool == 0) {
    return freeBlocks_;
  }
  auto it = recordingPools_.find(pool);
  return it != recordingPools_.end() ? it->second : freeBlocks_;  // a released pool's blocks are shared again
}

int CudaAllocator::poolOfCallerLocked() const {
  return recordingPool_ != 0 && std::this_thread::get_id() == recordingThread_ ? recordingPool_ : 0;
}

int CudaAllocator::beginRecordingPool() {
  std::lock_guard lock(mutex_);
  STRATA_CHECK(recordingPool_ == 0, "cuda:{}: a CUDA graph is already being recorded", deviceIndex_);
  recordingPool_ = nextPool_++;
  recordingThread_ = std::this_thread::get_id();
  recordingPools_[recordingPool_];
  return recordingPool_;
}

void CudaAllocator::endRecordingPool() {
  std::lock_guard lock(mutex_);
  recordingPool_ = 0;
  recordingThread_ = {};
}

void CudaAllocator::releaseRecordingPool(int pool) {
  std::lock_guard lock(mutex_);
  auto it = recordingPools_.find(pool);
  if (it == recordingPools_.end()) {
    return;
  }
  freeBlocks_.merge(it->second);
  recordingPools_.erase(it);
  for (auto& [block, live] : liveBlocks_) {
    if (live.pool == pool) {
      live.pool = 0;  // still held by a tensor: freed into the shared cache later
    }
  }
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
