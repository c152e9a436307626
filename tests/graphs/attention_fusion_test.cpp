// Note [Fused attention]: which spellings of attention the pass fuses, which it leaves, and that the fused graph
// computes what the written-out one does.
#include "strata/graphs/attention_fusion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "graphs/graph_test_helpers.h"
#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
// A named namespace: the unity build compiles test files together, and their helpers must not meet.
namespace attention_fusion_test {

using testing::countOps;

constexpr std::int64_t kT = 6;
constexpr std::int64_t kD = 4;

enum class Spelling {
  CausalWhere,        // masked_fill(~tril, -inf) as torch.onnx writes it: Where(mask, -inf, scores)
  CausalAdd,          // an additive mask of 0 and -1e9 (HF-style finfo.min)
  NoMask,             // full attention
  DivScale,           // scores / sqrt(D)
  MergedTranspose,    // K as [N, T, H, D] transposed to [N, H, D, T] in one node
  NotCausal,          // a mask that hides one key too few: not attention this pass knows
  DropoutHalf,        // attention dropout 0.5: left as written
  ProbabilitiesRead,  // the softmax output is also a graph output
};

void addConstant(onnx::ModelProto& model, const std::string& name, int type, const std::vector<std::int64_t>& dims,
                 const std::vector<double>& values) {
  onnx::NodeProto* node = testing::addNode(model, "Constant", {}, {name}, name);
  onnx::AttributeProto* attr = node->add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = attr->mutable_t();
  t->set_data_type(type);
  for (const std::int64_t d : dims)
    t->add_dims(d);
  for (const double v : values) {
    if (type == onnx::TensorProto::DOUBLE)
      t->add_double_data(v);
    else if (type == onnx::TensorProto::BOOL)
      t->add_int32_data(v != 0.0 ? 1 : 0);
    else
      t->add_float_data(static_cast<float>(v));
  }
}

// Q [2, 3, T, D], K (or [2, T, 3, D] when merged), V [2, 3, T, D] as graph inputs, float64.
onnx::ModelProto attentionModel(Spelling spelling) {
  using namespace testing;
  constexpr int kDouble = onnx::TensorProto::DOUBLE;
  onnx::ModelProto model = emptyModel();
  const bool merged = spelling == Spelling::MergedTranspose;
  setTensorType(model.mutable_graph()->add_input(), "q", kDouble, {2, 3, kT, kD});
  if (merged)
    setTensorType(model.mutable_graph()->add_input(), "k", kDouble, {2, kT, 3, kD});
  else
    setTensorType(model.mutable_graph()->add_input(), "k", kDouble, {2, 3, kT, kD});
  setTensorType(model.mutable_graph()->add_input(), "v", kDouble, {2, 3, kT, kD});
  setInts(addNode(model, "Transpose", {"k"}, {"kt"}, "kt"), "perm",
          merged ? std::vector<std::int64_t>{0, 2, 3, 1} : std::vector<std::int64_t>{0, 1, 3, 2});
  addNode(model, "MatMul", {"q", "kt"}, {"scores"}, "scores");
  const bool div = spelling == Spelling::DivScale;
  addConstant(model, "scale", kDouble, {}, {div ? 2.0 : 0.5});
  addNode(model, div ? "Div" : "Mul", {"scores", "scale"}, {"scaled"}, "scale_scores");
  std::vector<double> hidden(kT * kT), additive(kT * kT);
  for (std::int64_t i = 0; i < kT; ++i) {
    for (std::int64_t j = 0; j < kT; ++j) {
      const bool masked = spelling == Spelling::NotCausal ? j > i + 1 : j > i;
      hidden[static_cast<std::size_t>(i * kT + j)] = masked ? 1 : 0;
      additive[static_cast<std::size_t>(i * kT + j)] = masked ? -1e9 : 0;
    }
  }
  std::string masked = "scaled";
  if (spelling == Spelling::CausalAdd) {
    addConstant(model, "mask", kDouble, {kT, kT}, additive);
    addNode(model, "Add", {"mask", "scaled"}, {"masked"}, "mask");
    masked = "masked";
  } else if (spelling != Spelling::NoMask) {
    addConstant(model, "mask", onnx::TensorProto::BOOL, {kT, kT}, hidden);
    addConstant(model, "minus_inf", kDouble, {}, {-std::numeric_limits<double>::infinity()});
    addNode(model, "Where", {"mask", "minus_inf", "scaled"}, {"masked"}, "mask");
    masked = "masked";
  }
  setInt(addNode(model, "Softmax", {masked}, {"probs"}, "softmax"), "axis", -1);
  addConstant(model, "ratio", kDouble, {}, {spelling == Spelling::DropoutHalf ? 0.5 : 0.0});
  addConstant(model, "training", onnx::TensorProto::BOOL, {}, {1});
  addNode(model, "Dropout", {"probs", "ratio", "training"}, {"dropped"}, "dropout");
  addNode(model, "MatMul", {"dropped", "v"}, {"y"}, "attend");
  setTensorType(model.mutable_graph()->add_output(), "y", kDouble, {2, 3, kT, kD});
  if (spelling == Spelling::ProbabilitiesRead)
    setTensorType(model.mutable_graph()->add_output(), "probs", kDouble, {2, 3, kT, kT});
  return model;
}

std::vector<TensorMeta> inputMetas(Spelling spelling) {
  const Shape k = spelling == Spelling::MergedTranspose ? Shape{2, kT, 3, kD} : Shape{2, 3, kT, kD};
  return {TensorMeta{DType::Float64, {2, 3, kT, kD}}, TensorMeta{DType::Float64, k},
          TensorMeta{DType::Float64, {2, 3, kT, kD}}};
}

Tensor run(const Graph& graph, const std::vector<Tensor>& inputs) {
  Executor executor(lowerToProgram(graph, LowerOptions{}));
  return executor.run(inputs).at(0);
}

TEST(AttentionFusionTest, FusesTheSpellingsOfAttentionItKnowsAndComputesTheSame) {
  testing::TempDir dir;
  const Spelling fusedSpellings[] = {Spelling::CausalWhere, Spelling::CausalAdd, Spelling::NoMask, Spelling::DivScale,
                                     Spelling::MergedTranspose};
  unsigned seed = 3;
  for (const Spelling spelling : fusedSpellings) {
    SCOPED_TRACE(static_cast<int>(spelling));
    const SpecializeOptions options{.inputMetas = inputMetas(spelling), .training = true, .foldParameters = true};
    const Graph written = specialize(importOnnx(testing::save(attentionModel(spelling), dir / "a.onnx")), options);
    int fused = 0;
    const Graph rewritten = specialize(fuseAttention(written, &fused), options);
    ASSERT_EQ(fused, 1);
    EXPECT_EQ(countOps(rewritten, "ScaledDotProductAttention"), 1);
    EXPECT_EQ(countOps(rewritten, "Softmax"), 0);
    EXPECT_EQ(countOps(rewritten, "MatMul"), 0);
    const bool causal = spelling != Spelling::NoMask;
    for (const Node& node : rewritten.nodes) {
      if (node.opType == "ScaledDotProductAttention") {
        EXPECT_EQ(node.attrs.getInt("causal", -1), causal ? 1 : 0);
      }
    }
    std::vector<Tensor> inputs;
    for (const TensorMeta& meta : inputMetas(spelling))
      inputs.push_back(testing::randomTensor(DType::Float64, meta.shape, seed++, -2.0, 2.0));
    const Tensor want = run(written, inputs);
    const Tensor got = run(rewritten, inputs);
    for (std::int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<double>()[i], want.data<double>()[i], 1e-12) << i;
  }
}

TEST(AttentionFusionTest, LeavesOtherAttentionAsWritten) {
  testing::TempDir dir;
  for (const Spelling spelling : {Spelling::NotCausal, Spelling::DropoutHalf, Spelling::ProbabilitiesRead}) {
    SCOPED_TRACE(static_cast<int>(spelling));
    const SpecializeOptions options{.inputMetas = inputMetas(spelling), .training = true, .foldParameters = true};
    const Graph written = specialize(importOnnx(testing::save(attentionModel(spelling), dir / "a.onnx")), options);
    int fused = -1;
    const Graph rewritten = fuseAttention(written, &fused);
    EXPECT_EQ(fused, 0);
    EXPECT_EQ(countOps(rewritten, "Softmax"), 1);
  }
}

}  // namespace attention_fusion_test
}  // namespace strata
