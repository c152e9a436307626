#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/allocator.h"

namespace strata {

// A block of device memory owned by one allocation; tensors and their views share it through shared_ptr.
class Storage {
 public:
  Storage(Allocator& allocator, std::size_t bytes, MemoryCategory category);
  // Wraps memory Strata does not own (no accounting, never freed by Strata).
  Storage(void* external, std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }
  // Counts in-place changes made through bumpVersion() (optimizer steps), so caches derived from the contents
  // (a convolution's reordered weights) know when to refresh.
  std::uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void bumpVersion() { version_.fetch_add(1, std::memory_order_acq_rel); }

  // Note [Released storage]: release() returns the memory to its allocator (the accounting drops by bytes()) while
  // the Storage object, and every view of it, stays alive; materialize() allocates it again, uninitialised, and
  // bumps the version so that no cache keyed on this storage serves what it held before. Only allocator-owned
  // storage can be released.
  void release();
  void materialize();
  bool materialized() const { return data_ != nullptr || bytes_ == 0; }

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  MemoryCategory category_ = MemoryCategory::Other;
  std::atomic<std::uint64_t> version_{0};
};

}  // namespace strata
