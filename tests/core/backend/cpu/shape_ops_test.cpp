// Unit tests for the shape and data-movement CPU ops (shape_ops.cpp, data_movement_*.cpp). Expected values are
// worked out by hand or with numpy (noted where used).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "support/tensor_values.h"

namespace strata {
namespace {

Tensor ints(const std::vector<std::int64_t>& values) {
  return makeTensor<std::int64_t>({static_cast<std::int64_t>(values.size())}, values);
}

template <typename T>
Tensor iota(const Shape& shape) {
  std::vector<T> values(static_cast<std::size_t>(numElements(shape)));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<T>(i);
  return makeTensor<T>(shape, values);
}

template <typename T>
std::vector<T> valuesOf(const Tensor& t) {
  std::vector<T> values(static_cast<std::size_t>(t.numel()));
  if (!values.empty())
    std::memcpy(values.data(), t.rawData(), values.size() * sizeof(T));
  return values;
}

// Runs an op; undefined tensors in `inputs` are absent optional inputs.
std::vector<Tensor> run(const std::string& type, const std::vector<Tensor>& inputs, const Attributes& attrs = {},
                        std::size_t outputs = 1) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs)
    ptrs.push_back(t.defined() ? &t : nullptr);
  return runOpEagerly(type, ptrs, attrs, outputs);
}

Tensor run1(const std::string& type, const std::vector<Tensor>& inputs, const Attributes& attrs = {}) {
  return run(type, inputs, attrs).at(0);
}

Attributes attr(const std::string& name, AttributeValue value) {
  Attributes a;
  a.set(name, std::move(value));
  return a;
}

using I64 = std::vector<std::int64_t>;
using F32 = std::vector<float>;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// ----------------------------------------------------------------------------------------------------------------

TEST(ShapeOpsTest, ReshapeInfersMinusOneAndCopiesZero) {
  const Tensor x = iota<float>({2, 3, 4});
  Tensor y = run1("Reshape", {x, ints({0, -1})});
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(valuesOf<float>(y), valuesOf<float>(x));
  EXPECT_EQ(run1("Reshape", {x, ints({-1})}).shape(), (Shape{24}));
  EXPECT_EQ(run1("Reshape", {x, ints({4, 0, 2})}).shape(), (Shape{4, 3, 2}));
}

TEST(ShapeOpsTest, ReshapeAllowZeroKeepsZeroDims) {
  const Tensor empty = Tensor::empty(DType::Float32, {0, 3});
  EXPECT_EQ(run1("Reshape", {empty, ints({3, 0})}, attr("allowzero", std::int64_t{1})).shape(), (Shape{3, 0}));
  // allowzero with both 0 and -1 is invalid.
  EXPECT_THROW(run1("Reshape", {empty, ints({0, -1})}, attr("allowzero", std::int64_t{1})), Error);
}

TEST(ShapeOpsTest, ReshapeErrorsNameBothShapes) {
  const Tensor x = iota<float>({2, 3});
  try {
    run1("Reshape", {x, ints({4, 2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 2]"), std::string::npos) << what;
  }
  EXPECT_THROW(run1("Reshape", {x, ints({-1, -1})}), Error);
  EXPECT_THROW(run1("Reshape", {x, ints({-1, 4})}), Error);
}

TEST(ShapeOpsTest, FlattenAxes) {
  const Tensor x = iota<float>({2, 3, 4});
  EXPECT_EQ(run1("Flatten", {x}).shape(), (Shape{2, 12}));
  EXPECT_EQ(run1("Flatten", {x}, attr("axis", std::int64_t{0})).shape(), (Shape{1, 24}));
  EXPECT_EQ(run1("Flatten", {x}, attr("axis", std::int64_t{-1})).shape(), (Shape{6, 4}));
  EXPECT_EQ(run1("Flatten", {x}, attr("axis", std::int64_t{3})).shape(), (Shape{24, 1}));
  EXPECT_EQ(valuesOf<float>(run1("Flatten", {x})), valuesOf<float>(x));
  EXPECT_THROW(run1("Flatten", {x}, attr("axis", std::int64_t{4})), Error);
}

TEST(ShapeOpsTest, TransposeDefaultReversesAxes) {
  const Tensor x = iota<float>({2, 3});
  Tensor y = run1("Transpose", {x});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(y), (F32{0, 3, 1, 4, 2, 5}));
}

TEST(ShapeOpsTest, TransposeThreeD) {
  const Tensor x = iota<std::int64_t>({2, 3, 4});
  // numpy: x.transpose(1, 0, 2) keeps the inner axis (row copies).
  Tensor a = run1("Transpose", {x}, attr("perm", I64{1, 0, 2}));
  EXPECT_EQ(a.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(valuesOf<std::int64_t>(a),
            (I64{0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23}));
  // numpy: x.transpose(2, 0, 1) moves the inner axis (tiled path).
  Tensor b = run1("Transpose", {x}, attr("perm", I64{2, 0, 1}));
  EXPECT_EQ(b.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(valuesOf<std::int64_t>(b),
            (I64{0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23}));
}

// Checks a transpose against the index formula out[i0..] = in[perm^-1 applied].
template <typename T>
void checkTranspose(const Shape& shape, const I64& perm) {
  const Tensor x = iota<T>(shape);
  Tensor y = run1("Transpose", {x}, attr("perm", perm));
  const std::size_t rank = shape.size();
  Shape outShape(rank);
  for (std::size_t i = 0; i < rank; ++i)
    outShape[i] = shape[static_cast<std::size_t>(perm[i])];
  ASSERT_EQ(y.shape(), outShape);
  const auto inStrides = contiguousStrides(shape);
  const auto out = valuesOf<T>(y);
  std::vector<std::int64_t> idx(rank, 0);
  for (std::size_t flat = 0; flat < out.size(); ++flat) {
    std::int64_t src = 0;
    for (std::size_t i = 0; i < rank; ++i)
      src += idx[i] * inStrides[static_cast<std::size_t>(perm[i])];
    ASSERT_EQ(out[flat], static_cast<T>(src)) << "at flat index " << flat;
    for (std::size_t k = rank; k-- > 0;) {
      if (++idx[k] < outShape[k])
        break;
      idx[k] = 0;
    }
  }
}

TEST(ShapeOpsTest, TransposeFourDLargeAllPaths) {
  checkTranspose<float>({2, 33, 17, 70}, {0, 2, 3, 1});        // NCHW -> NHWC, tiles with ragged edges
  checkTranspose<float>({2, 70, 17, 33}, {0, 3, 1, 2});        // NHWC -> NCHW
  checkTranspose<float>({3, 64, 5, 40}, {0, 2, 1, 3});         // inner axis kept: memcpy rows
  checkTranspose<std::int8_t>({4, 3, 50, 7}, {3, 1, 0, 2});    // 1-byte elements
  checkTranspose<std::int64_t>({1, 5, 1, 9}, {3, 2, 1, 0});    // unit axes dropped
  checkTranspose<double>({300, 400}, {1, 0});                  // parallel tiles
  checkTranspose<std::int32_t>({2, 64, 8, 16}, {0, 2, 3, 1});  // whole 8x8 register blocks only
  checkTranspose<std::int32_t>({5, 7, 3}, {2, 1, 0});
}

TEST(ShapeOpsTest, TransposeRejectsBadPerm) {
  const Tensor x = iota<float>({2, 3});
  EXPECT_THROW(run1("Transpose", {x}, attr("perm", I64{0, 0})), Error);
  EXPECT_THROW(run1("Transpose", {x}, attr("perm", I64{0, 1, 2})), Error);
}

TEST(ShapeOpsTest, SqueezeWithAndWithoutAxes) {
  const Tensor x = iota<float>({1, 3, 1, 2});
  EXPECT_EQ(run1("Squeeze", {x}).shape(), (Shape{3, 2}));
  EXPECT_EQ(run1("Squeeze", {x, ints({-2})}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run1("Squeeze", {x, ints({0, 2})}).shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(run1("Squeeze", {x})), valuesOf<float>(x));
  EXPECT_THROW(run1("Squeeze", {x, ints({1})}), Error);
  EXPECT_THROW(run1("Squeeze", {x, ints({4})}), Error);
}

TEST(ShapeOpsTest, UnsqueezeNegativeAndUnsortedAxes) {
  const Tensor x = iota<float>({3, 4});
  EXPECT_EQ(run1("Unsqueeze", {x, ints({0})}).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(run1("Unsqueeze", {x, ints({-1})}).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run1("Unsqueeze", {x, ints({3, 0})}).shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(run1("Unsqueeze", {x, ints({2, 0})}).shape(), (Shape{1, 3, 1, 4}));
  EXPECT_EQ(run1("Unsqueeze", {Tensor::scalar(2.0F), ints({0})}).shape(), (Shape{1}));
  EXPECT_THROW(run1("Unsqueeze", {x, ints({1, 1})}), Error);
  EXPECT_THROW(run1("Unsqueeze", {x, ints({3})}), Error);
}

TEST(ShapeOpsTest, ConcatNegativeAxisAndEmptyInput) {
  const Tensor a = iota<float>({2, 2});
  const Tensor b = makeTensor<float>({2, 1}, {10, 11});
  const Tensor empty = Tensor::empty(DType::Float32, {2, 0});
  Tensor y = run1("Concat", {a, empty, b}, attr("axis", std::int64_t{-1}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(valuesOf<float>(y), (F32{0, 1, 10, 2, 3, 11}));
  Tensor z = run1("Concat", {a, makeTensor<float>({1, 2}, {7, 8})}, attr("axis", std::int64_t{0}));
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(z), (F32{0, 1, 2, 3, 7, 8}));
}

TEST(ShapeOpsTest, ConcatLargeRowsMatch) {
  const Tensor a = iota<std::int32_t>({64, 300});
  const Tensor b = iota<std::int32_t>({64, 100});
  Tensor y = run1("Concat", {a, b}, attr("axis", std::int64_t{1}));
  const auto out = valuesOf<std::int32_t>(y);
  for (std::int64_t r = 0; r < 64; ++r) {
    EXPECT_EQ(out[static_cast<std::size_t>(r * 400)], r * 300);
    EXPECT_EQ(out[static_cast<std::size_t>(r * 400 + 300)], r * 100);
    EXPECT_EQ(out[static_cast<std::size_t>(r * 400 + 399)], r * 100 + 99);
  }
}

TEST(ShapeOpsTest, ConcatErrors) {
  const Tensor a = iota<float>({2, 2});
  EXPECT_THROW(run1("Concat", {a, iota<float>({3, 3})}, attr("axis", std::int64_t{0})), Error);
  EXPECT_THROW(run1("Concat", {a, iota<std::int64_t>({2, 2})}, attr("axis", std::int64_t{0})), Error);
  EXPECT_THROW(run1("Concat", {a, a}, attr("axis", std::int64_t{2})), Error);
}

TEST(ShapeOpsTest, SplitWithSizesInput) {
  const Tensor x = iota<float>({2, 5});
  auto outs = run("Split", {x, ints({2, 3})}, attr("axis", std::int64_t{-1}), 2);
  ASSERT_EQ(outs.size(), 2U);
  EXPECT_EQ(outs[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(valuesOf<float>(outs[0]), (F32{0, 1, 5, 6}));
  EXPECT_EQ(outs[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(valuesOf<float>(outs[1]), (F32{2, 3, 4, 7, 8, 9}));
}

TEST(ShapeOpsTest, SplitEqualPartsWhenSizesAbsent) {
  const Tensor x = iota<float>({6});
  auto outs = run("Split", {x}, {}, 3);
  ASSERT_EQ(outs.size(), 3U);
  EXPECT_EQ(valuesOf<float>(outs[0]), (F32{0, 1}));
  EXPECT_EQ(valuesOf<float>(outs[2]), (F32{4, 5}));
  // An absent split input behaves the same.
  auto again = run("Split", {x, Tensor{}}, {}, 2);
  EXPECT_EQ(valuesOf<float>(again[1]), (F32{3, 4, 5}));
  // Uneven without num_outputs is an error; opset 18's num_outputs makes the last part smaller.
  EXPECT_THROW(run("Split", {x}, {}, 4), Error);
  auto uneven = run("Split", {x}, attr("num_outputs", std::int64_t{4}), 4);
  EXPECT_EQ(uneven[0].shape(), (Shape{2}));
  EXPECT_EQ(uneven[3].shape(), (Shape{0}));
  EXPECT_THROW(run("Split", {x, ints({2, 2})}, {}, 2), Error);
}

TEST(ShapeOpsTest, SliceBasicAndAxes) {
  const Tensor x = iota<float>({3, 4});
  Tensor y = run1("Slice", {x, ints({1, 1}), ints({3, 3})});
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(valuesOf<float>(y), (F32{5, 6, 9, 10}));
  // Negative axis and negative start; only axis 1 is sliced.
  Tensor z = run1("Slice", {x, ints({-2}), ints({kMax}), ints({-1})});
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(z), (F32{2, 3, 6, 7, 10, 11}));
  // Absent optional axes with explicit steps.
  Tensor w = run1("Slice", {x, ints({0, 0}), ints({3, 4}), Tensor{}, ints({2, 3})});
  EXPECT_EQ(w.shape(), (Shape{2, 2}));
  EXPECT_EQ(valuesOf<float>(w), (F32{0, 3, 8, 11}));
}

TEST(ShapeOpsTest, SliceNegativeStepsAndClamping) {
  const Tensor x = iota<float>({2, 3, 4});
  // numpy: x[:, ::-2, 3:0:-2]
  Tensor y = run1("Slice", {x, ints({-1, 3}), ints({kMin, 0}), ints({1, 2}), ints({-2, -2})});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(valuesOf<float>(y), (F32{11, 9, 3, 1, 23, 21, 15, 13}));
  // Full reverse of a 1-D tensor.
  Tensor r = run1("Slice", {iota<float>({5}), ints({-1}), ints({kMin}), ints({0}), ints({-1})});
  EXPECT_EQ(valuesOf<float>(r), (F32{4, 3, 2, 1, 0}));
  // Out-of-range bounds clamp; an empty range gives a zero dim.
  EXPECT_EQ(run1("Slice", {x, ints({-100}), ints({100}), ints({2})}).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(run1("Slice", {x, ints({3}), ints({1}), ints({2})}).shape(), (Shape{2, 3, 0}));
  // A huge step takes one element.
  Tensor h = run1("Slice", {x, ints({1}), ints({kMax}), ints({2}), ints({kMax})});
  EXPECT_EQ(h.shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(valuesOf<float>(h), (F32{1, 5, 9, 13, 17, 21}));
}

TEST(ShapeOpsTest, SliceErrors) {
  const Tensor x = iota<float>({3, 4});
  EXPECT_THROW(run1("Slice", {x, ints({0}), ints({2}), ints({0}), ints({0})}), Error);
  EXPECT_THROW(run1("Slice", {x, ints({0, 0}), ints({2, 2}), ints({1, -1})}), Error);
  EXPECT_THROW(run1("Slice", {x, ints({0}), ints({2}), ints({2})}), Error);
}

TEST(ShapeOpsTest, ExpandIsBidirectional) {
  const Tensor x = makeTensor<float>({3, 1}, {1, 2, 3});
  Tensor y = run1("Expand", {x, ints({2, 1, 2})});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(valuesOf<float>(y), (F32{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  // A target smaller than the input keeps the input's dims.
  Tensor z = run1("Expand", {x, ints({1})});
  EXPECT_EQ(z.shape(), (Shape{3, 1}));
  Tensor row = run1("Expand", {makeTensor<std::int64_t>({3}, {7, 8, 9}), ints({2, 3})});
  EXPECT_EQ(valuesOf<std::int64_t>(row), (I64{7, 8, 9, 7, 8, 9}));
  EXPECT_THROW(run1("Expand", {x, ints({2, 4, 2})}), Error);
}

TEST(ShapeOpsTest, TileRepeatsEachAxis) {
  // numpy: np.tile(arange(6).reshape(2, 3), (2, 2))
  Tensor y = run1("Tile", {iota<std::int64_t>({2, 3}), ints({2, 2})});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(valuesOf<std::int64_t>(y), (I64{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(run1("Tile", {iota<float>({2, 3}), ints({0, 1})}).shape(), (Shape{0, 3}));
  EXPECT_THROW(run1("Tile", {iota<float>({2, 3}), ints({2})}), Error);
}

TEST(ShapeOpsTest, GatherAxesAndNegativeIndices) {
  const Tensor data = iota<float>({3, 2});
  Tensor y = run1("Gather", {data, makeTensor<std::int64_t>({2, 2}, {0, 1, 1, 2})});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(valuesOf<float>(y), (F32{0, 1, 2, 3, 2, 3, 4, 5}));
  // axis -1 with int32 indices and a negative index.
  Tensor z = run1("Gather", {data, makeTensor<std::int32_t>({2}, {-1, 0})}, attr("axis", std::int64_t{-1}));
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(z), (F32{1, 0, 3, 2, 5, 4}));
  // A scalar index drops the axis.
  Tensor s = run1("Gather", {data, Tensor::scalar(std::int64_t{2})});
  EXPECT_EQ(s.shape(), (Shape{2}));
  EXPECT_EQ(valuesOf<float>(s), (F32{4, 5}));
}

TEST(ShapeOpsTest, GatherErrors) {
  const Tensor data = iota<float>({3, 2});
  EXPECT_THROW(run1("Gather", {data, ints({3})}), Error);
  EXPECT_THROW(run1("Gather", {data, ints({-4})}), Error);
  EXPECT_THROW(run1("Gather", {data, makeTensor<float>({1}, {0})}), Error);
  EXPECT_THROW(run1("Gather", {data, ints({0})}, attr("axis", std::int64_t{2})), Error);
}

TEST(ShapeOpsTest, GatherElementsOnnxExamples) {
  // ONNX docs, example 1 (axis 1) with a negative index.
  Tensor y =
      run1("GatherElements", {makeTensor<float>({2, 2}, {1, 2, 3, 4}), makeTensor<std::int64_t>({2, 2}, {0, 0, -1, 0})},
           attr("axis", std::int64_t{1}));
  EXPECT_EQ(valuesOf<float>(y), (F32{1, 1, 4, 3}));
  // ONNX docs, example 2 (axis 0), indices smaller than data.
  Tensor z = run1("GatherElements", {iota<float>({3, 3}), makeTensor<std::int32_t>({2, 3}, {1, 2, 0, 2, 0, 0})});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(valuesOf<float>(z), (F32{3, 7, 2, 6, 1, 2}));
  EXPECT_THROW(run1("GatherElements", {iota<float>({2, 2}), makeTensor<std::int64_t>({1, 1}, {2})}), Error);
}

TEST(ShapeOpsTest, ScatterElementsWithReductions) {
  // ONNX docs: axis 1, data [[1,2,3,4,5]], indices [[1,3]], updates [[1.1,2.1]].
  const Tensor data = makeTensor<float>({1, 5}, {1, 2, 3, 4, 5});
  const Tensor indices = makeTensor<std::int64_t>({1, 2}, {1, -2});
  const Tensor updates = makeTensor<float>({1, 2}, {1.5F, 2.5F});
  Tensor y = run1("ScatterElements", {data, indices, updates}, attr("axis", std::int64_t{1}));
  EXPECT_EQ(valuesOf<float>(y), (F32{1, 1.5F, 3, 2.5F, 5}));
  // Duplicate indices accumulate with add.
  Attributes add = attr("axis", std::int64_t{1});
  add.set("reduction", std::string("add"));
  Tensor z = run1("ScatterElements", {data, makeTensor<std::int64_t>({1, 2}, {1, 1}), updates}, add);
  EXPECT_EQ(valuesOf<float>(z), (F32{1, 6, 3, 4, 5}));
  Attributes mul = attr("reduction", std::string("mul"));
  Tensor m = run1("ScatterElements", {makeTensor<std::int64_t>({3}, {2, 3, 4}), ints({2, 0}), ints({5, 6})}, mul);
  EXPECT_EQ(valuesOf<std::int64_t>(m), (I64{12, 3, 20}));
  EXPECT_THROW(run1("ScatterElements", {data, makeTensor<std::int64_t>({1, 1}, {5}), makeTensor<float>({1, 1}, {0})},
                    attr("axis", std::int64_t{1})),
               Error);
}

TEST(ShapeOpsTest, GatherNDAndScatterND) {
  // ONNX docs GatherND example 2: data [[0,1],[2,3]], indices [[1],[0]] -> [[2,3],[0,1]].
  Tensor g =
      run1("GatherND", {makeTensor<std::int64_t>({2, 2}, {0, 1, 2, 3}), makeTensor<std::int64_t>({2, 1}, {1, 0})});
  EXPECT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_EQ(valuesOf<std::int64_t>(g), (I64{2, 3, 0, 1}));
  // ONNX docs GatherND example 5 (batch_dims 1): data [[[0,1],[2,3]],[[4,5],[6,7]]], indices [[1],[0]].
  Tensor b = run1("GatherND", {iota<std::int64_t>({2, 2, 2}), makeTensor<std::int64_t>({2, 1}, {1, 0})},
                  attr("batch_dims", std::int64_t{1}));
  EXPECT_EQ(b.shape(), (Shape{2, 2}));
  EXPECT_EQ(valuesOf<std::int64_t>(b), (I64{2, 3, 4, 5}));
  // ScatterND: ONNX docs example 1.
  Tensor s =
      run1("ScatterND", {makeTensor<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8}),
                         makeTensor<std::int64_t>({4, 1}, {4, 3, 1, 7}), makeTensor<float>({4}, {9, 10, 11, 12})});
  EXPECT_EQ(valuesOf<float>(s), (F32{1, 11, 3, 10, 9, 6, 7, 12}));
}

TEST(ShapeOpsTest, PadConstantWithValueAndNegativePads) {
  const Tensor x = makeTensor<float>({2, 2}, {1, 2, 3, 4});
  Tensor y = run1("Pad", {x, ints({1, 0, 0, 1}), Tensor::scalar(9.0F)});
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(valuesOf<float>(y), (F32{9, 9, 9, 1, 2, 9, 3, 4, 9}));
  // Default constant 0 and a negative pad that crops.
  Tensor z = run1("Pad", {x, ints({0, -1, 1, 1}), Tensor{}});
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(z), (F32{2, 0, 4, 0, 0, 0}));
  // Opset 18 axes input.
  Tensor w = run1("Pad", {x, ints({1, 2}), Tensor{}, ints({-1})});
  EXPECT_EQ(valuesOf<float>(w), (F32{0, 1, 2, 0, 0, 0, 3, 4, 0, 0}));
  EXPECT_THROW(run1("Pad", {x, ints({1, 1})}), Error);
}

TEST(ShapeOpsTest, PadReflectEdgeWrap) {
  const Tensor x = iota<std::int64_t>({3, 4});
  // numpy: np.pad(x, ((1, 1), (2, 2)), mode='reflect')
  Tensor r = run1("Pad", {x, ints({1, 2, 1, 2})}, attr("mode", std::string("reflect")));
  EXPECT_EQ(r.shape(), (Shape{5, 8}));
  EXPECT_EQ(valuesOf<std::int64_t>(r), (I64{6, 5, 4, 5, 6,  7, 6, 5, 2,  1,  0,  1, 2, 3, 2, 1, 6, 5, 4, 5,
                                            6, 7, 6, 5, 10, 9, 8, 9, 10, 11, 10, 9, 6, 5, 4, 5, 6, 7, 6, 5}));
  // numpy: np.pad(x, ((0, 1), (2, 1)), mode='edge')
  Tensor e = run1("Pad", {x, ints({0, 2, 1, 1})}, attr("mode", std::string("edge")));
  EXPECT_EQ(valuesOf<std::int64_t>(e),
            (I64{0, 0, 0, 1, 2, 3, 3, 4, 4, 4, 5, 6, 7, 7, 8, 8, 8, 9, 10, 11, 11, 8, 8, 8, 9, 10, 11, 11}));
  // numpy: np.pad(x, ((1, 0), (1, 2)), mode='wrap')
  Tensor w = run1("Pad", {x, ints({1, 1, 0, 2})}, attr("mode", std::string("wrap")));
  EXPECT_EQ(valuesOf<std::int64_t>(w),
            (I64{11, 8, 9, 10, 11, 8, 9, 3, 0, 1, 2, 3, 0, 1, 7, 4, 5, 6, 7, 4, 5, 11, 8, 9, 10, 11, 8, 9}));
  EXPECT_THROW(run1("Pad", {x, ints({0, 0, 0, 0})}, attr("mode", std::string("mirror"))), Error);
}

TEST(ShapeOpsTest, ShapeWithStartAndEnd) {
  const Tensor x = iota<float>({2, 3, 4, 5});
  EXPECT_EQ(valuesOf<std::int64_t>(run1("Shape", {x})), (I64{2, 3, 4, 5}));
  Attributes a = attr("start", std::int64_t{1});
  a.set("end", std::int64_t{-1});
  EXPECT_EQ(valuesOf<std::int64_t>(run1("Shape", {x}, a)), (I64{3, 4}));
  EXPECT_EQ(valuesOf<std::int64_t>(run1("Shape", {x}, attr("start", std::int64_t{-10}))), (I64{2, 3, 4, 5}));
  EXPECT_EQ(run1("Shape", {x}, attr("start", std::int64_t{10})).shape(), (Shape{0}));
}

TEST(ShapeOpsTest, Size) {
  Tensor s = run1("Size", {iota<float>({2, 3, 4})});
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(valuesOf<std::int64_t>(s), (I64{24}));
}

TEST(ShapeOpsTest, ConstantAttributes) {
  Tensor f = run1("Constant", {}, attr("value_floats", F32{1.5F, 2.5F}));
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(valuesOf<float>(f), (F32{1.5F, 2.5F}));
  Tensor i = run1("Constant", {}, attr("value_int", std::int64_t{7}));
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.shape(), Shape{});
  EXPECT_EQ(valuesOf<std::int64_t>(i), (I64{7}));
  EXPECT_EQ(valuesOf<std::int64_t>(run1("Constant", {}, attr("value_ints", I64{3, 4}))), (I64{3, 4}));
  EXPECT_EQ(valuesOf<float>(run1("Constant", {}, attr("value_float", 0.25F))), (F32{0.25F}));
  Tensor t = run1("Constant", {}, attr("value", makeTensor<std::int32_t>({2, 1}, {5, 6})));
  EXPECT_EQ(t.shape(), (Shape{2, 1}));
  EXPECT_EQ(valuesOf<std::int32_t>(t), (std::vector<std::int32_t>{5, 6}));
  EXPECT_THROW(run1("Constant", {}, {}), Error);
}

TEST(ShapeOpsTest, ConstantOfShape) {
  Tensor z = run1("ConstantOfShape", {ints({2, 3})});
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_EQ(valuesOf<float>(z), F32(6, 0.0F));
  Tensor v = run1("ConstantOfShape", {ints({3})}, attr("value", makeTensor<std::int64_t>({1}, {4})));
  EXPECT_EQ(v.dtype(), DType::Int64);
  EXPECT_EQ(valuesOf<std::int64_t>(v), (I64{4, 4, 4}));
  // An empty shape gives a scalar; a zero dim gives an empty tensor.
  EXPECT_EQ(run1("ConstantOfShape", {ints({})}).shape(), Shape{});
  EXPECT_EQ(run1("ConstantOfShape", {ints({0, 2})}).numel(), 0);
  EXPECT_THROW(run1("ConstantOfShape", {ints({-1})}), Error);
}

TEST(ShapeOpsTest, RangeIntAndFloat) {
  Tensor a = run1("Range",
                  {Tensor::scalar(std::int64_t{1}), Tensor::scalar(std::int64_t{10}), Tensor::scalar(std::int64_t{3})});
  EXPECT_EQ(valuesOf<std::int64_t>(a), (I64{1, 4, 7}));
  Tensor b = run1(
      "Range", {Tensor::scalar(std::int32_t{10}), Tensor::scalar(std::int32_t{6}), Tensor::scalar(std::int32_t{-3})});
  EXPECT_EQ(valuesOf<std::int32_t>(b), (std::vector<std::int32_t>{10, 7}));
  Tensor c = run1("Range", {Tensor::scalar(0.0F), Tensor::scalar(1.0F), Tensor::scalar(0.25F)});
  EXPECT_EQ(valuesOf<float>(c), (F32{0, 0.25F, 0.5F, 0.75F}));
  EXPECT_EQ(run1("Range", {Tensor::scalar(5.0F), Tensor::scalar(1.0F), Tensor::scalar(1.0F)}).shape(), (Shape{0}));
  EXPECT_THROW(run1("Range", {Tensor::scalar(0.0F), Tensor::scalar(1.0F), Tensor::scalar(0.0F)}), Error);
}

TEST(ShapeOpsTest, DepthToSpaceAndSpaceToDepth) {
  const Tensor x = iota<float>({1, 8, 1, 2});
  // numpy: x.reshape(1, 2, 2, 2, 1, 2).transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 2, 4)
  Tensor dcr = run1("DepthToSpace", {x}, attr("blocksize", std::int64_t{2}));
  EXPECT_EQ(dcr.shape(), (Shape{1, 2, 2, 4}));
  EXPECT_EQ(valuesOf<float>(dcr), (F32{0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}));
  Attributes crdAttrs = attr("blocksize", std::int64_t{2});
  crdAttrs.set("mode", std::string("CRD"));
  Tensor crd = run1("DepthToSpace", {x}, crdAttrs);
  EXPECT_EQ(valuesOf<float>(crd), (F32{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15}));
  // SpaceToDepth inverts DCR DepthToSpace.
  Tensor back = run1("SpaceToDepth", {dcr}, attr("blocksize", std::int64_t{2}));
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(valuesOf<float>(back), valuesOf<float>(x));
  EXPECT_THROW(run1("DepthToSpace", {iota<float>({1, 6, 1, 1})}, attr("blocksize", std::int64_t{2})), Error);
}

TEST(ShapeOpsTest, TriluUpperAndLower) {
  Tensor x = makeTensor<float>({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_EQ(valuesOf<float>(run1("Trilu", {x})), (F32{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}));
  // numpy: np.triu(x, 1), np.tril(x, -1)
  EXPECT_EQ(valuesOf<float>(run1("Trilu", {x, Tensor::scalar(std::int64_t{1})})),
            (F32{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}));
  EXPECT_EQ(valuesOf<float>(run1("Trilu", {x, Tensor::scalar(std::int64_t{-1})}, attr("upper", std::int64_t{0}))),
            (F32{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}));
  // Batched: each matrix restarts its row count.
  Tensor batch = run1("Trilu", {iota<float>({2, 2, 2})}, attr("upper", std::int64_t{0}));
  EXPECT_EQ(valuesOf<float>(batch), (F32{0, 0, 2, 3, 4, 0, 6, 7}));
}

TEST(ShapeOpsTest, OneHotAxisAndNegativeIndices) {
  const Tensor values = makeTensor<float>({2}, {0, 5});
  // Indices [1, -1, 3]: -1 wraps to depth - 1, 3 is out of range (all off).
  Tensor y = run1("OneHot", {makeTensor<std::int64_t>({3}, {1, -1, 3}), Tensor::scalar(std::int64_t{3}), values});
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(valuesOf<float>(y), (F32{0, 5, 0, 0, 0, 5, 0, 0, 0}));
  Tensor z = run1("OneHot", {makeTensor<std::int64_t>({2}, {0, 2}), makeTensor<float>({1}, {3}), values},
                  attr("axis", std::int64_t{0}));
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(valuesOf<float>(z), (F32{5, 0, 0, 0, 0, 5}));
}

TEST(ShapeOpsTest, LargeSlicePadGatherMatchIndexFormulas) {
  // Big enough to split over threads; values checked against index arithmetic.
  const Tensor x = iota<std::int32_t>({64, 50, 40});
  Tensor s = run1("Slice", {x, ints({1, 39}), ints({kMax, 0}), ints({0, -1}), ints({2, -3})});
  ASSERT_EQ(s.shape(), (Shape{32, 50, 13}));
  const auto sv = valuesOf<std::int32_t>(s);
  for (std::int64_t i = 0; i < 32; ++i) {
    for (std::int64_t j = 0; j < 50; ++j) {
      for (std::int64_t k = 0; k < 13; ++k) {
        ASSERT_EQ(sv[static_cast<std::size_t>((i * 50 + j) * 13 + k)], ((1 + 2 * i) * 50 + j) * 40 + (39 - 3 * k));
      }
    }
  }
  Tensor p = run1("Pad", {x, ints({0, 1, 2, 0, 1, 3}), Tensor::scalar(std::int32_t{-7})});
  ASSERT_EQ(p.shape(), (Shape{64, 52, 45}));
  const auto pv = valuesOf<std::int32_t>(p);
  for (std::int64_t i = 0; i < 64; ++i) {
    for (std::int64_t j = 0; j < 52; ++j) {
      for (std::int64_t k = 0; k < 45; ++k) {
        const bool inside = j >= 1 && j < 51 && k >= 2 && k < 42;
        ASSERT_EQ(pv[static_cast<std::size_t>((i * 52 + j) * 45 + k)], inside ? (i * 50 + j - 1) * 40 + k - 2 : -7);
      }
    }
  }
  Tensor g = run1("Gather", {x, makeTensor<std::int64_t>({3}, {49, 0, -2})}, attr("axis", std::int64_t{1}));
  ASSERT_EQ(g.shape(), (Shape{64, 3, 40}));
  const auto gv = valuesOf<std::int32_t>(g);
  EXPECT_EQ(gv[static_cast<std::size_t>((5 * 3 + 0) * 40 + 7)], (5 * 50 + 49) * 40 + 7);
  EXPECT_EQ(gv[static_cast<std::size_t>((63 * 3 + 2) * 40 + 39)], (63 * 50 + 48) * 40 + 39);
}

TEST(ShapeOpsTest, OlderOpsetAttributeForms) {
  // Squeeze/Unsqueeze before opset 13 and Slice before opset 10 take attributes instead of inputs.
  const Tensor x = iota<float>({1, 3, 4});
  EXPECT_EQ(run1("Squeeze", {x}, attr("axes", I64{0})).shape(), (Shape{3, 4}));
  EXPECT_EQ(run1("Unsqueeze", {x}, attr("axes", I64{-1})).shape(), (Shape{1, 3, 4, 1}));
  Attributes slice = attr("starts", I64{1});
  slice.set("ends", I64{3});
  slice.set("axes", I64{2});
  Tensor y = run1("Slice", {x}, slice);
  EXPECT_EQ(valuesOf<float>(y), (F32{1, 2, 5, 6, 9, 10}));
  auto parts = run("Split", {iota<float>({5})}, attr("split", I64{1, 4}), 2);
  EXPECT_EQ(valuesOf<float>(parts[1]), (F32{1, 2, 3, 4}));
}

TEST(ShapeOpsTest, DataMovementKeepsEveryDtype) {
  const Tensor h = makeTensor<Half>({2, 2}, {Half{1}, Half{2}, Half{3}, Half{4}});
  Tensor t = run1("Transpose", {h});
  const auto out = valuesOf<Half>(t);
  EXPECT_EQ(out[1].bits, 3);
  EXPECT_EQ(out[2].bits, 2);
  const Tensor b = makeTensor<std::uint8_t>({3}, {1, 0, 1});
  Tensor c = run1("Concat", {b, b}, attr("axis", std::int64_t{0}));
  EXPECT_EQ(valuesOf<std::uint8_t>(c), (std::vector<std::uint8_t>{1, 0, 1, 1, 0, 1}));
  Tensor p = run1("Pad", {makeTensor<double>({1}, {2.5}), ints({1, 1}), Tensor::scalar(-1.0)});
  EXPECT_EQ(valuesOf<double>(p), (std::vector<double>{-1.0, 2.5, -1.0}));
  Tensor flags = Tensor::empty(DType::Bool, {2, 1});
  flags.data<bool>()[0] = true;
  flags.data<bool>()[1] = false;
  Tensor e = run1("Expand", {flags, ints({2, 3})});
  EXPECT_EQ(e.dtype(), DType::Bool);
  EXPECT_EQ(valuesOf<std::uint8_t>(e), (std::vector<std::uint8_t>{1, 1, 1, 0, 0, 0}));
}

}  // namespace
}  // namespace strata
