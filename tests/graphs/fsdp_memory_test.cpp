// The FSDP memory prediction (graphs/fsdp_memory.h) on a small conv net with units by module: conv1 (448 elements),
// conv2 (2320) and fc (10250), in that forward order. The per-category peaks each level must have follow from the
// schedule by hand; the activations come from the plan's liveness, checked against a real step.
#include <gtest/gtest.h>

#include <algorithm>

#include "strata/graphs/fsdp_memory.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

constexpr std::int64_t kBatch = 4;
constexpr std::int64_t kConv1 = 448, kConv2 = 2320, kFc = 10250, kAll = kConv1 + kConv2 + kFc;
constexpr std::int64_t kFloat = 4;

onnx::ModelProto convNet() {
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3, 8, 8});
  testing::addInitializer(model, "conv1.weight", {16, 3, 3, 3}, testing::randomValues(432, 1, 0.3f));
  testing::addInitializer(model, "conv1.bias", {16}, testing::randomValues(16, 2, 0.1f));
  testing::addInitializer(model, "conv2.weight", {16, 16, 3, 3}, testing::randomValues(2304, 3, 0.1f));
  testing::addInitializer(model, "conv2.bias", {16}, testing::randomValues(16, 4, 0.1f));
  testing::addInitializer(model, "fc.weight", {10, 1024}, testing::randomValues(10240, 5, 0.05f));
  testing::addInitializer(model, "fc.bias", {10}, testing::randomValues(10, 6, 0.1f));
  testing::setInts(testing::addNode(model, "Conv", {"x", "conv1.weight", "conv1.bias"}, {"c1"}, "conv1"), "pads",
                   {1, 1, 1, 1});
  testing::addNode(model, "Relu", {"c1"}, {"r1"}, "relu1");
  testing::setInts(testing::addNode(model, "Conv", {"r1", "conv2.weight", "conv2.bias"}, {"c2"}, "conv2"), "pads",
                   {1, 1, 1, 1});
  testing::addNode(model, "Relu", {"c2"}, {"r2"}, "relu2");
  testing::addNode(model, "Flatten", {"r2"}, {"flat"}, "flatten");
  testing::setInt(testing::addNode(model, "Gemm", {"flat", "fc.weight", "fc.bias"}, {"y"}, "fc"), "transB", 1);
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 10});
  return model;
}

class FsdpMemoryTest : public ::testing::Test {
 protected:
  FsdpMemoryPrediction predict(FsdpLevel level, int ranks, int maxInflight, std::size_t states = 1, int micro = 1) {
    FsdpMemoryOptions options;
    options.level = level;
    options.ranks = ranks;
    options.maxInflight = maxInflight;
    options.optimizerStates = states;
    options.microBatches = micro;
    return predictFsdpMemory(plan_.executor().program(), plan_.parameters(), options);
  }

  static TrainingPlanOptions planOptions() {
    TrainingPlanOptions options;
    options.inputMetas = {TensorMeta{DType::Float32, {kBatch, 3, 8, 8}}};
    options.units = UnitPartition{UnitPartition::Kind::ByModule, 0};
    return options;
  }

  testing::TempDir dir_;
  TrainingPlan plan_{importOnnx(testing::save(convNet(), dir_ / "convnet.onnx")), planOptions()};
};

TEST_F(FsdpMemoryTest, UnitsAreTheModules) {
  const FsdpMemoryPrediction p = predict(FsdpLevel::Full, 3, 1);
  EXPECT_EQ(p.units, 3);
  EXPECT_EQ(p.largestUnitElements, kFc);
  // 3 ranks: shards of 150, 774 and 3417 elements pad 2, 2 and 1.
  EXPECT_EQ(p.paddingElements, 5);
}

// shard=none (and any level on one rank): everything replicated, the optimizer's state created on the first step.
TEST_F(FsdpMemoryTest, NoneHoldsTheWholeModelState) {
  for (const auto& [level, ranks] : {std::pair{FsdpLevel::None, 2}, std::pair{FsdpLevel::Full, 1}}) {
    const FsdpMemoryPrediction p = predict(level, ranks, 2, 2);
    EXPECT_EQ(p.peakOf(MemoryCategory::Parameters), kAll * kFloat);
    EXPECT_EQ(p.peakOf(MemoryCategory::Gradients), kAll * kFloat);
    EXPECT_EQ(p.peakOf(MemoryCategory::OptimizerState), 2 * kAll * kFloat);
    EXPECT_EQ(p.peakOf(MemoryCategory::Communication), 0);
  }
}

// full, 2 ranks (no padding), max_inflight=1: the forward gathers conv1 and prefetches conv2, then conv2 prefetches
// fc after conv1 was freed; backward starts from fc with conv2 prefetched. So at most conv2 + fc at once.
// Gradients: fc's buffer is still being reduced (one reduction in flight) while conv2's is written. Communication:
// the Gloo ring's scratch, two parts of the largest shard reduced.
TEST_F(FsdpMemoryTest, FullHoldsShardsAndTheUnitsInFlight) {
  const std::int64_t shards = kAll / 2;
  const FsdpMemoryPrediction p = predict(FsdpLevel::Full, 2, 1);
  EXPECT_EQ(p.peakOf(MemoryCategory::Parameters), (shards + kConv2 + kFc) * kFloat);
  EXPECT_EQ(p.peakOf(MemoryCategory::Gradients), (shards + kConv2 + kFc) * kFloat);
  EXPECT_EQ(p.peakOf(MemoryCategory::OptimizerState), shards * kFloat);
  EXPECT_EQ(p.peakOf(MemoryCategory::Communication), 2 * (kFc / 2) * kFloat);
  // grad_op keeps a unit gathered from its forward to its last backward use; conv1 has none (the plan needs no
  // gradient of the input), so it is freed after its forward as under full, and the peak is the same here.
  EXPECT_EQ(predict(FsdpLevel::GradOp, 2, 1).peakOf(MemoryCategory::Parameters), (shards + kConv2 + kFc) * kFloat);
  // With max_inflight=2 all three units are gathered at once in the forward.
  EXPECT_EQ(predict(FsdpLevel::Full, 2, 2).peakOf(MemoryCategory::Parameters), (shards + kAll) * kFloat);
  // On 4 ranks with Adam, sharding saves more than the gathered units cost.
  EXPECT_LT(predict(FsdpLevel::Full, 4, 1, 2).modelState(), predict(FsdpLevel::None, 4, 1, 2).modelState());
}

// Padding: on 3 ranks a unit is gathered into a padded communication buffer and reduced from a padded copy.
TEST_F(FsdpMemoryTest, PaddedUnitsNeedCommunicationBuffers) {
  const FsdpMemoryPrediction p = predict(FsdpLevel::Full, 3, 1);
  EXPECT_GE(p.peakOf(MemoryCategory::Communication), 3 * ((kFc + 2) / 3) * kFloat);
  EXPECT_EQ(p.peakOf(MemoryCategory::OptimizerState), (150 + 774 + 3417) * kFloat);
}

// Accumulation in place keeps every unit's full gradients from the first micro-batch to the last.
TEST_F(FsdpMemoryTest, LocalAccumulationKeepsTheFullGradients) {
  const FsdpMemoryPrediction p = predict(FsdpLevel::Full, 2, 1, 1, 2);
  EXPECT_GE(p.peakOf(MemoryCategory::Gradients), (kAll / 2 + kAll) * kFloat);
}

// The activations predicted for a step are what the executor allocates: one real step on one process.
TEST_F(FsdpMemoryTest, ActivationsMatchARealStep) {
  const FsdpMemoryPrediction p = predict(FsdpLevel::None, 1, 1);
  Tensor x = Tensor::zeros(DType::Float32, {kBatch, 3, 8, 8});
  Tensor labels = Tensor::zeros(DType::Int64, {kBatch});
  MemoryStats& stats = allocatorFor(Device::cpu()).stats();
  stats.resetPeaks();
  const auto before = stats.snapshot().current[static_cast<std::size_t>(MemoryCategory::Activations)];
  plan_.step({x}, labels);
  const auto peak = stats.snapshot().peak[static_cast<std::size_t>(MemoryCategory::Activations)];
  EXPECT_EQ(peak - before, p.peakOf(MemoryCategory::Activations));
}

// Note [Held constants]: a BatchNormalization's running mean and variance (16 channels each) are the plan's own
// Parameters-category copies, held beside the flat buffers: 128 bytes more than the trainable elements.
TEST(FsdpMemoryHeldConstantsTest, RunningStatisticsCountAsParameters) {
  onnx::ModelProto model = convNet();
  for (const char* name : {"bn.scale", "bn.shift", "bn.mean", "bn.var"}) {
    const bool ones = std::string(name) == "bn.scale" || std::string(name) == "bn.var";
    testing::addInitializer(model, name, {16}, std::vector<float>(16, ones ? 1.0f : 0.0f));
  }
  // conv1 -> bn -> relu1: the Relu reads the norm's output instead of the convolution's.
  onnx::NodeProto* relu = model.mutable_graph()->mutable_node(1);
  ASSERT_EQ(relu->op_type(), "Relu");
  relu->set_input(0, "b1");
  testing::setInt(testing::addNode(model, "BatchNormalization", {"c1", "bn.scale", "bn.shift", "bn.mean", "bn.var"},
                                   {"b1", "bn.mean_out", "bn.var_out"}, "bn"),
                  "training_mode", 1);
  // Nodes in topological order: the norm right after conv1.
  auto* nodes = model.mutable_graph()->mutable_node();
  std::rotate(nodes->begin() + 1, nodes->end() - 1, nodes->end());
  testing::TempDir dir;
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {kBatch, 3, 8, 8}}};
  TrainingPlan plan(importOnnx(testing::save(model, dir / "bn.onnx")), options);
  FsdpMemoryOptions replay;
  replay.level = FsdpLevel::None;
  replay.optimizerStates = 0;
  const FsdpMemoryPrediction p = predictFsdpMemory(plan.executor().program(), plan.parameters(), replay);
  EXPECT_EQ(plan.parameters().totalElements(), kAll + 32);  // the norm's scale and shift train
  EXPECT_EQ(p.peakOf(MemoryCategory::Parameters), (kAll + 32) * kFloat + 2 * 16 * kFloat);
}

}  // namespace
}  // namespace strata
