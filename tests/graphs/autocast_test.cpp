#include "strata/graphs/autocast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/optim/optimizer.h"
#include "test_models.h"

namespace strata {
namespace {

Graph importSmallCnn(const testing::TempDir& dir, const std::string& pool = "MaxPool") {
  return importOnnx(testing::save(testing::smallCnnModel(pool), dir / (pool + ".onnx")));
}

const Node& nodeNamed(const Graph& graph, const std::string& name) {
  for (const Node& node : graph.nodes) {
    if (node.name == name) {
      return node;
    }
  }
  throw std::runtime_error("no node " + name);
}

DType inputDType(const Graph& graph, const std::string& node, std::size_t input) {
  return graph.values[static_cast<std::size_t>(nodeNamed(graph, node).inputs.at(input))].meta.dtype;
}

DType outputDType(const Graph& graph, const std::string& node) {
  return graph.values[static_cast<std::size_t>(nodeNamed(graph, node).outputs.at(0))].meta.dtype;
}

Graph autocastSmallCnn(const testing::TempDir& dir, DType low) {
  const SpecializeOptions options{.inputMetas = {TensorMeta{DType::Float32, {2, 3, 8, 8}}}, .training = true};
  const Graph specialised = specialize(importSmallCnn(dir), options);
  return specialize(autocast(specialised, low), options);
}

TEST(AutocastTest, ClassifiesTheOpsLikePyTorchAutocast) {
  EXPECT_EQ(autocastClassOf("Conv"), AutocastClass::LowPrecision);
  EXPECT_EQ(autocastClassOf("MatMul"), AutocastClass::LowPrecision);
  EXPECT_EQ(autocastClassOf("Relu"), AutocastClass::Follow);
  EXPECT_EQ(autocastClassOf("Softmax"), AutocastClass::Float32);
  EXPECT_EQ(autocastClassOf("BatchNormalization"), AutocastClass::Follow);
  EXPECT_EQ(autocastClassOf("LayerNormalization"), AutocastClass::Float32);
  EXPECT_EQ(autocastClassOf("SoftmaxCrossEntropyLoss"), AutocastClass::Float32);
}

TEST(AutocastTest, RunsProductsAndTheOpsAfterThemIn16Bits) {
  testing::TempDir dir;
  const Graph graph = autocastSmallCnn(dir, DType::BFloat16);
  for (const char* node : {"conv1", "conv2", "conv3", "fc"}) {
    EXPECT_EQ(inputDType(graph, node, 0), DType::BFloat16) << node;
    EXPECT_EQ(inputDType(graph, node, 1), DType::BFloat16) << node;
    EXPECT_EQ(outputDType(graph, node), DType::BFloat16) << node;
  }
  EXPECT_EQ(inputDType(graph, "conv1", 2), DType::BFloat16);  // the bias too
  // Batch norm normalises the 16-bit data with float32 scale, bias and statistics.
  EXPECT_EQ(inputDType(graph, "bn1", 0), DType::BFloat16);
  for (std::size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(inputDType(graph, "bn1", i), DType::Float32) << i;
  }
  EXPECT_EQ(outputDType(graph, "bn1"), DType::BFloat16);
  EXPECT_EQ(outputDType(graph, "relu1"), DType::BFloat16);
  EXPECT_EQ(outputDType(graph, "pool1"), DType::BFloat16);
  EXPECT_EQ(outputDType(graph, "residual"), DType::BFloat16);
  // bias2 is a float32 parameter: the Add promotes to float32, as PyTorch does.
  EXPECT_EQ(inputDType(graph, "bias", 0), DType::Float32);
  EXPECT_EQ(inputDType(graph, "bias", 1), DType::Float32);
  EXPECT_EQ(outputDType(graph, "bias"), DType::Float32);
  EXPECT_EQ(graph.values[static_cast<std::size_t>(graph.outputs.at(0))].meta.dtype, DType::Float32);
  EXPECT_EQ(graph.values[static_cast<std::size_t>(graph.outputs.at(0))].name, "y");
}

TEST(AutocastTest, CastsEachValueOncePerDirection) {
  testing::TempDir dir;
  const Graph graph = autocastSmallCnn(dir, DType::Float16);
  std::map<int, int> castsOf;
  for (const Node& node : graph.nodes) {
    if (node.opType == "Cast") {
      ++castsOf[node.inputs.at(0)];
    }
  }
  for (const auto& [value, count] : castsOf) {
    EXPECT_EQ(count, 1) << graph.values[static_cast<std::size_t>(value)].name;
  }
  // w2 feeds conv2 and conv3: one Cast serves both.
  EXPECT_EQ(nodeNamed(graph, "conv2").inputs[1], nodeNamed(graph, "conv3").inputs[1]);
  EXPECT_EQ(castsOf.count(graph.findValue("w2")), 1U);
}

TEST(AutocastTest, LeavesFloat64ModelsAlone) {
  testing::TempDir dir;
  onnx::ModelProto model = testing::reluChainModel();
  model.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::DOUBLE);
  model.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::DOUBLE);
  Graph graph = specialize(importOnnx(testing::save(model, dir / "relu.onnx")),
                           SpecializeOptions{.inputMetas = {TensorMeta{DType::Float64, {2, 4}}}});
  const Graph cast = autocast(graph, DType::BFloat16);
  EXPECT_EQ(cast.nodes.size(), graph.nodes.size());
}

TEST(AutocastTest, RejectsAWideTarget) {
  testing::TempDir dir;
  const Graph graph = importSmallCnn(dir);
  EXPECT_THROW(autocast(graph, DType::Float32), Error);
}

// The same CNN trained one step in float32 and in mixed precision, on the same batch.
struct PlanPair {
  std::vector<Tensor> inputs;
  Tensor labels;
};

PlanPair batch() {
  PlanPair pair;
  pair.inputs = {testing::randomTensor({4, 3, 8, 8}, 7)};
  pair.labels = Tensor::empty(DType::Int64, {4});
  for (std::int64_t i = 0; i < 4; ++i) {
    pair.labels.data<std::int64_t>()[i] = (3 * i + 1) % 10;
  }
  return pair;
}

TrainingPlanOptions planOptions(std::optional<DType> low, bool scaledLoss = false) {
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {4, 3, 8, 8}}};
  options.mixedPrecision = low;
  options.scaledLoss = scaledLoss;
  return options;
}

double relativeError(const Tensor& actual, const Tensor& expected) {
  double diff = 0;
  double norm = 0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double e = expected.data<float>()[i];
    diff += (actual.data<float>()[i] - e) * (actual.data<float>()[i] - e);
    norm += e * e;
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// bf16 keeps 8 significant bits (relative rounding 2^-9), fp16 11 (2^-12); a few roundings per value compound.
void expectCloseToFloat32(DType low, double lossTolerance, double gradTolerance) {
  testing::TempDir dir;
  const PlanPair data = batch();
  TrainingPlan reference(importSmallCnn(dir, "AveragePool"), planOptions(std::nullopt));
  TrainingPlan mixed(importSmallCnn(dir, "AveragePool"), planOptions(low));
  const StepResult expected = reference.step(data.inputs, data.labels);
  const StepResult actual = mixed.step(data.inputs, data.labels);
  EXPECT_EQ(actual.loss.dtype(), DType::Float32);
  EXPECT_NEAR(*actual.loss.data<float>(), *expected.loss.data<float>(), lossTolerance * *expected.loss.data<float>());
  ASSERT_EQ(mixed.parameters().size(), reference.parameters().size());
  for (std::size_t i = 0; i < reference.parameters().size(); ++i) {
    const Tensor& grad = mixed.parameters().gradient(i);
    ASSERT_EQ(grad.dtype(), DType::Float32) << "master gradients stay float32";
    const double error = relativeError(grad, reference.parameters().gradient(i));
    EXPECT_LT(error, gradTolerance) << reference.parameterNames()[i];
    EXPECT_GT(error, 0.0) << reference.parameterNames()[i] << ": 16-bit rounding must show";
  }
}

TEST(AutocastTrainingTest, Bfloat16StepMatchesFloat32WithinBfloat16Rounding) {
  expectCloseToFloat32(DType::BFloat16, 1e-2, 4e-2);
}

TEST(AutocastTrainingTest, Float16StepMatchesFloat32WithinFloat16Rounding) {
  expectCloseToFloat32(DType::Float16, 2e-3, 6e-3);
}

TEST(AutocastTrainingTest, ScaledLossScalesEveryGradient) {
  testing::TempDir dir;
  const PlanPair data = batch();
  TrainingPlan plain(importSmallCnn(dir), planOptions(std::nullopt));
  TrainingPlan scaled(importSmallCnn(dir), planOptions(std::nullopt, true));
  scaled.setLossScale(1024.0);
  plain.step(data.inputs, data.labels);
  const StepResult result = scaled.step(data.inputs, data.labels);
  EXPECT_GT(*result.loss.data<float>(), 0.0f);
  for (std::size_t i = 0; i < plain.parameters().size(); ++i) {
    const Tensor& expected = plain.parameters().gradient(i);
    const Tensor& actual = scaled.parameters().gradient(i);
    for (std::int64_t k = 0; k < expected.numel(); ++k) {
      // A power of two scales float32 exactly.
      ASSERT_EQ(actual.data<float>()[k], 1024.0f * expected.data<float>()[k]) << plain.parameterNames()[i] << " " << k;
    }
  }
  scaled.setLossScale(1.0);
  scaled.step(data.inputs, data.labels);
  EXPECT_EQ(relativeError(scaled.parameters().gradient(0), plain.parameters().gradient(0)), 0.0);
}

TEST(AutocastTrainingTest, SetLossScaleNeedsAScaledPlan) {
  testing::TempDir dir;
  TrainingPlan plan(importSmallCnn(dir), planOptions(DType::Float16));
  EXPECT_THROW(plan.setLossScale(2.0), Error);
}

TEST(AutocastTrainingTest, Float16WithLossScalingUpdatesLikeFloat32) {
  testing::TempDir dir;
  const PlanPair data = batch();
  TrainingPlan reference(importSmallCnn(dir, "AveragePool"), planOptions(std::nullopt));
  TrainingPlan mixed(importSmallCnn(dir, "AveragePool"), planOptions(DType::Float16, true));
  Optimizer referenceSgd(reference.parameters(), OptimizerOptions{.momentum = 0.9});
  Optimizer mixedSgd(mixed.parameters(), OptimizerOptions{.momentum = 0.9});
  LossScaler scaler(LossScalerOptions{.initialScale = 4096.0, .growthInterval = 2});
  mixedSgd.setLossScaler(&scaler);
  for (int step = 0; step < 3; ++step) {
    reference.step(data.inputs, data.labels);
    referenceSgd.step(0.05);
    mixed.setLossScale(scaler.scale());
    mixed.step(data.inputs, data.labels);
    mixedSgd.step(0.05);
    EXPECT_FALSE(mixedSgd.lastStepSkipped());
  }
  EXPECT_EQ(scaler.scale(), 8192.0);  // grew once, after two good steps
  EXPECT_EQ(mixedSgd.steps(), 3);
  for (std::size_t i = 0; i < reference.parameters().size(); ++i) {
    // Per-step gradient errors of ~1e-3 compound through three momentum steps (small vectors such as b1 drift by
    // ~3%, the same with a scale of 1); a scale not divided out, or divided twice, would be off by 4096x.
    EXPECT_LT(relativeError(mixed.parameters().parameter(i), reference.parameters().parameter(i)), 5e-2)
        << reference.parameterNames()[i];
  }
}

}  // namespace
}  // namespace strata
