#include "strata/storage.h"

#include "strata/error.h"

namespace strata {

Storage::Storage(Allocator& allocator, std::size_t bytes, MemoryCategory category)
    : allocator_(&allocator),
      data_(allocator.allocate(bytes, category)),
      bytes_(bytes),
      device_(allocator.device()),
      category_(category) {}

Storage::Storage(void* external, std::size_t bytes, Device device) : data_(external), bytes_(bytes), device_(device) {}

Storage::~Storage() {
  if (allocator_ != nullptr && data_ != nullptr) {
    allocator_->deallocate(data_, bytes_, category_);
  }
}

void Storage::release() {
  STRATA_CHECK(allocator_ != nullptr, "cannot release storage that Strata does not own ({} bytes on {})", bytes_,
               device_.toString());
  if (data_ != nullptr) {
    allocator_->deallocate(data_, bytes_, category_);
    data_ = nullptr;
  }
}

void Storage::materialize() {
  STRATA_CHECK(allocator_ != nullptr, "cannot materialize storage that Strata does not own ({} bytes on {})", bytes_,
               device_.toString());
  if (data_ == nullptr && bytes_ > 0) {
    data_ = allocator_->allocate(bytes_, category_);
  }
  bumpVersion();
}

}  // namespace strata
