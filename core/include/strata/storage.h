#pragma once

#include <cstddef>
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

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  MemoryCategory category_ = MemoryCategory::Other;
};

}  // namespace strata
