// ParameterStore with units (ParameterGroups' groups): the grouping, and a unit released and re-materialised with
// exact accounting.
#include "strata/optim/parameter_store.h"

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata {
namespace {

std::int64_t currentBytes(MemoryCategory category) {
  return allocatorFor(Device::cpu()).stats().snapshot().current[static_cast<std::size_t>(category)];
}

std::vector<std::pair<std::string, Tensor>> fiveParameters() {
  std::vector<std::pair<std::string, Tensor>> initial;
  const std::vector<std::int64_t> sizes = {6, 2, 12, 3, 5};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Tensor t = Tensor::empty(DType::Float32, {sizes[i]});
    for (std::int64_t k = 0; k < sizes[i]; ++k) {
      t.data<float>()[k] = static_cast<float>(10 * i + static_cast<std::size_t>(k));
    }
    initial.emplace_back(fmt::format("p{}", i), t);
  }
  return initial;
}

TEST(ParameterStoreTest, EveryUnitGetsFlatBuffersOfItsOwnInParameterOrder) {
  ParameterStore store(fiveParameters(), Device::cpu(), {0, 0, 1, 1, 2});
  ASSERT_EQ(store.groupCount(), 3u);
  EXPECT_EQ(store.groupMembers(0), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(store.groupMembers(1), (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(store.groupMembers(2), (std::vector<std::size_t>{4}));
  EXPECT_EQ(store.flatParameters(1).numel(), 15);
  EXPECT_EQ(store.info(3).group, 1u);
  EXPECT_EQ(store.info(3).offset, 12);
  EXPECT_EQ(store.parameter(3).data<float>()[1], 31.0f);
  EXPECT_EQ(store.totalElements(), 28);
}

TEST(ParameterStoreTest, UnitsMustBeContiguousInParameterOrder) {
  EXPECT_THROW(ParameterStore(fiveParameters(), Device::cpu(), {0, 1, 0, 1, 2}), Error);
  EXPECT_THROW(ParameterStore(fiveParameters(), Device::cpu(), {0, 1}), Error);
}

TEST(ParameterStoreTest, AReleasedUnitReturnsExactlyItsBytesAndComesBackAsANewVersion) {
  ParameterStore store(fiveParameters(), Device::cpu(), {0, 0, 1, 1, 2});
  const std::int64_t unitBytes = 15 * 4;
  const std::int64_t parameters = currentBytes(MemoryCategory::Parameters);
  const std::int64_t gradients = currentBytes(MemoryCategory::Gradients);
  const Tensor view = store.parameter(2);
  const std::uint64_t version = view.storage()->version();

  store.releaseParameters(1);
  EXPECT_FALSE(store.parametersMaterialized(1));
  EXPECT_TRUE(store.parametersMaterialized(0));
  EXPECT_EQ(currentBytes(MemoryCategory::Parameters), parameters - unitBytes);
  store.releaseGradients(1);
  EXPECT_EQ(currentBytes(MemoryCategory::Gradients), gradients - unitBytes);
  store.zeroGradients();  // skips released gradients
  store.bumpVersion();    // and released parameters are no obstacle either

  store.materializeParameters(1);
  store.materializeGradients(1);
  EXPECT_TRUE(store.parametersMaterialized(1));
  EXPECT_EQ(currentBytes(MemoryCategory::Parameters), parameters);
  EXPECT_EQ(currentBytes(MemoryCategory::Gradients), gradients);
  EXPECT_GT(view.storage()->version(), version);

  // Views taken before the release see the new memory.
  Tensor fresh = Tensor::empty(DType::Float32, {12});
  for (std::int64_t k = 0; k < 12; ++k) {
    fresh.data<float>()[k] = -static_cast<float>(k);
  }
  store.parameter(2).copyFrom(fresh);
  EXPECT_EQ(view.data<float>()[5], -5.0f);
  EXPECT_EQ(store.parameter(0).data<float>()[5], 5.0f) << "other units keep their values";
}

}  // namespace
}  // namespace strata
