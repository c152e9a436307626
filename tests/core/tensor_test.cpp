#include "strata/tensor.h"

#include <gtest/gtest.h>

#include "strata/allocator.h"

namespace strata {
namespace {

std::int64_t currentBytes(MemoryCategory category) {
  return allocatorFor(Device::cpu()).stats().snapshot().current[static_cast<std::size_t>(category)];
}

TEST(TensorTest, ViewsShareStorage) {
  Tensor flat = Tensor::zeros(DType::Float32, {10});
  Tensor view = flat.viewAs(4, TensorMeta{DType::Float32, {2, 3}});
  view.data<float>()[0] = 7.0f;
  EXPECT_EQ(flat.data<float>()[4], 7.0f);
  EXPECT_EQ(view.storage(), flat.storage());
  Tensor reshaped = flat.reshape({2, 5});
  EXPECT_EQ(reshaped.data<float>()[4], 7.0f);
  EXPECT_EQ(flat.flatSlice(4, 1).data<float>()[0], 7.0f);
}

TEST(TensorTest, ViewOutsideStorageFails) {
  Tensor flat = Tensor::zeros(DType::Float32, {10});
  EXPECT_THROW(flat.viewAs(8, TensorMeta{DType::Float32, {3}}), Error);
  EXPECT_THROW(flat.reshape({3, 3}), Error);
  EXPECT_THROW(flat.viewAs(0, TensorMeta{DType::Int32, {2}}), Error);
}

TEST(TensorTest, AllocationsAreCountedPerCategoryExactly) {
  const std::int64_t before = currentBytes(MemoryCategory::Gradients);
  {
    Tensor a = Tensor::empty(DType::Float32, {3, 5}, MemoryCategory::Gradients);
    EXPECT_EQ(currentBytes(MemoryCategory::Gradients) - before, 60);
    Tensor view = a.reshape({15});  // views allocate nothing
    EXPECT_EQ(currentBytes(MemoryCategory::Gradients) - before, 60);
  }
  EXPECT_EQ(currentBytes(MemoryCategory::Gradients), before);
}

TEST(TensorTest, HalfAndBFloat16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(halfToFloat(floatToHalf(v)), v) << v;
  }
  EXPECT_EQ(bfloat16ToFloat(floatToBFloat16(1.5f)), 1.5f);
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 4096.0f), floatToHalf(1.0f));  // rounds to nearest even
}

TEST(TensorTest, BroadcastShapes) {
  EXPECT_EQ(broadcastShapes({2, 1, 4}, {3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcastShapes({}, {5}), (Shape{5}));
  EXPECT_THROW(broadcastShapes({2, 3}, {4}), Error);
}

}  // namespace
}  // namespace strata
