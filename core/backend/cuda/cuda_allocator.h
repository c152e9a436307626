#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "strata/allocator.h"

namespace strata::cuda {

// Device memory from cudaMalloc (never managed memory) with a cache of freed blocks.
// Note [CUDA block cache]: cudaMalloc and cudaFree synchronise the device, so a training step must not call them.
// A static plan asks for the same sizes every step: freed blocks are kept by size (rounded to 512 bytes) and
// handed out again. All work runs on the device's one compute stream, in order, so a block freed by the host
// while kernels that use it are still queued can be reused at once by work queued after them; buffers that other
// streams touch (communication) are long-lived flat buffers, never cached activations.
// Accounting is the CPU allocator's: exact requested bytes per category, current and peak; `reserved` counts
// every byte obtained from cudaMalloc, cached free blocks included. When cudaMalloc fails the cache is released
// and the call retried once before an out-of-memory error that gives the figures.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int deviceIndex) : deviceIndex_(deviceIndex) {}
  ~CudaAllocator() override;
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* ptr, std::size_t bytes, MemoryCategory category) override;
  Device device() const override { return Device::cuda(deviceIndex_); }
  // Returns every cached block to the driver (synchronises the device).
  void emptyCache();

  // Note [Recording pool]: while a thread records a CUDA graph, its allocations come from, and its frees return to,
  // a private pool, so no block the recorded work uses is handed to anything else while replays may run. The
  // pool's blocks join the shared cache when the recording is destroyed (releaseRecordingPool). Other threads keep
  // using the shared cache meanwhile.
  int beginRecordingPool();  // routes the calling thread's allocations to a new pool; returns its id
  void endRecordingPool();   // stops routing (the pool keeps its blocks)
  void releaseRecordingPool(int pool);

  static std::size_t roundSize(std::size_t bytes);

 private:
  void* mallocOrThrow(std::size_t rounded, std::size_t requested, MemoryCategory category);
  void releaseCachedLocked();

  using FreeBlocks = std::multimap<std::size_t, void*>;  // rounded size -> block
  struct LiveBlock {
    std::size_t size;  // rounded
    int pool;          // 0: the shared cache
  };

  FreeBlocks& freeListLocked(int pool);
  int poolOfCallerLocked() const;

  int deviceIndex_;
  std::mutex mutex_;
  FreeBlocks freeBlocks_;
  std::unordered_map<void*, LiveBlock> liveBlocks_;
  std::map<int, FreeBlocks> recordingPools_;  // pool id -> its free blocks
  std::thread::id recordingThread_;
  int recordingPool_ = 0;
  int nextPool_ = 1;
  std::int64_t reservedBytes_ = 0;
};

}  // namespace strata::cuda
