// Storage::release() and materialize() (Note [Released storage]): the accounting a released block leaves and
// regains, and the version bump that keeps kernel caches from serving what the block held before.
#include "strata/storage.h"

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata {
namespace {

std::int64_t currentBytes(MemoryCategory category) {
  return allocatorFor(Device::cpu()).stats().snapshot().current[static_cast<std::size_t>(category)];
}

TEST(StorageTest, ReleaseAndMaterializeMoveTheAccountingByExactlyItsBytes) {
  Storage storage(allocatorFor(Device::cpu()), 4096, MemoryCategory::Parameters);
  const std::int64_t held = currentBytes(MemoryCategory::Parameters);
  const std::uint64_t version = storage.version();

  storage.release();
  EXPECT_FALSE(storage.materialized());
  EXPECT_EQ(storage.data(), nullptr);
  EXPECT_EQ(currentBytes(MemoryCategory::Parameters), held - 4096);
  storage.release();  // releasing twice frees nothing twice
  EXPECT_EQ(currentBytes(MemoryCategory::Parameters), held - 4096);

  storage.materialize();
  EXPECT_TRUE(storage.materialized());
  EXPECT_NE(storage.data(), nullptr);
  EXPECT_EQ(currentBytes(MemoryCategory::Parameters), held);
  EXPECT_GT(storage.version(), version) << "a cache keyed on the storage must not serve the old contents";
}

TEST(StorageTest, DestroyingReleasedStorageFreesNothingMore) {
  const std::int64_t before = currentBytes(MemoryCategory::Gradients);
  {
    Storage storage(allocatorFor(Device::cpu()), 512, MemoryCategory::Gradients);
    storage.release();
  }
  EXPECT_EQ(currentBytes(MemoryCategory::Gradients), before);
}

TEST(StorageTest, ExternalMemoryCannotBeReleased) {
  float external[4] = {};
  Storage storage(external, sizeof(external), Device::cpu());
  EXPECT_THROW(storage.release(), Error);
  EXPECT_THROW(storage.materialize(), Error);
  EXPECT_TRUE(storage.materialized());
}

}  // namespace
}  // namespace strata
