#include "strata/storage.h"

namespace strata {

Storage::Storage(Allocator& allocator, std::size_t bytes, MemoryCategory category)
    : allocator_(&allocator),
      data_(allocator.allocate(bytes, category)),
      bytes_(bytes),
      device_(allocator.device()),
      category_(category) {}

Storage::Storage(void* external, std::size_t bytes, Device device) : data_(external), bytes_(bytes), device_(device) {}

Storage::~Storage() {
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, bytes_, category_);
  }
}

}  // namespace strata
