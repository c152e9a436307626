// TrainingPlan with a unit partition: units as flat buffers of their own in first-use order, the parameters each
// step reads, and a unit released, re-materialised and refilled: the accounting moves by exactly its bytes, and
// convolutions (oneDNN caches reordered weights keyed on storage pointer and version) see the new weights.
#include <gtest/gtest.h>

#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

constexpr std::int64_t kBatch = 4;

// x[N,3,8,8] -> conv1 -> Relu -> conv2 -> Relu -> Flatten -> fc -> y[N,10], with PyTorch-style parameter names.
// 16 channels, so oneDNN prefers blocked weights and reorders them into its cache.
onnx::ModelProto moduleNamedConvNet() {
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

TrainingPlan convNetPlan(const testing::TempDir& dir, UnitPartition units) {
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {kBatch, 3, 8, 8}}};
  options.units = units;
  return TrainingPlan(importOnnx(testing::save(moduleNamedConvNet(), dir / "convnet.onnx")), options);
}

Tensor labels() {
  Tensor t = Tensor::empty(DType::Int64, {kBatch});
  for (std::int64_t i = 0; i < kBatch; ++i) {
    t.data<std::int64_t>()[i] = (3 * i + 1) % 10;
  }
  return t;
}

std::int64_t parameterBytes() {
  return allocatorFor(Device::cpu()).stats().snapshot().current[static_cast<std::size_t>(MemoryCategory::Parameters)];
}

void expectSame(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.meta(), expected.meta()) << what;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_FLOAT_EQ(actual.data<float>()[i], expected.data<float>()[i]) << what << " element " << i;
  }
}

TEST(TrainingPlanUnitsTest, UnitsAreGroupsOfTheirOwnInFirstUseOrder) {
  testing::TempDir dir;
  TrainingPlan byModule = convNetPlan(dir, UnitPartition{.kind = UnitPartition::Kind::ByModule});
  const std::vector<std::string> firstUse = {"conv1.weight", "conv1.bias", "conv2.weight",
                                             "conv2.bias",   "fc.weight",  "fc.bias"};
  EXPECT_EQ(byModule.parameterNames(), firstUse);
  ParameterStore& store = byModule.parameters();
  ASSERT_EQ(store.groupCount(), 3u);
  EXPECT_EQ(store.groupMembers(1), (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(store.flatParameters(1).numel(), 2304 + 16);

  TrainingPlan byCount =
      convNetPlan(dir, UnitPartition{.kind = UnitPartition::Kind::ByParameterCount, .parameters = 500});
  EXPECT_EQ(byCount.parameterNames(), firstUse);
  ASSERT_EQ(byCount.parameters().groupCount(), 3u);  // 432+16+2304 | 16+10240 | 10
  EXPECT_EQ(byCount.parameters().groupMembers(0), (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(byCount.parameters().groupMembers(2), (std::vector<std::size_t>{5}));

  TrainingPlan whole = convNetPlan(dir, UnitPartition{});
  EXPECT_EQ(whole.parameters().groupCount(), 1u);
  EXPECT_EQ(whole.parameterNames(), firstUse);
}

TEST(TrainingPlanUnitsTest, EveryStepListsTheParametersItReads) {
  testing::TempDir dir;
  TrainingPlan plan = convNetPlan(dir, UnitPartition{.kind = UnitPartition::Kind::ByModule});
  const Program& program = plan.executor().program();
  std::vector<int> forwardReaders(6, 0);
  std::vector<int> backwardReaders(6, 0);
  for (const ProgramStep& step : program.steps) {
    std::vector<int> expected;  // the parameters among the step's input values, by name
    for (int input : step.inputs) {
      for (std::size_t p = 0; input >= 0 && p < plan.parameterNames().size(); ++p) {
        if (program.values[static_cast<std::size_t>(input)].name == plan.parameterNames()[p]) {
          expected.push_back(static_cast<int>(p));
        }
      }
    }
    EXPECT_EQ(step.parametersRead, expected) << step.nodeName;
    for (int p : step.parametersRead) {
      ++(step.phase == NodePhase::Backward ? backwardReaders : forwardReaders)[static_cast<std::size_t>(p)];
    }
    if (step.nodeName == "conv2") {
      EXPECT_EQ(step.parametersRead, (std::vector<int>{2, 3}));
    }
  }
  EXPECT_EQ(forwardReaders, (std::vector<int>(6, 1))) << "each parameter is read by its own forward node";
  EXPECT_GE(backwardReaders[2], 1) << "conv2's input gradient reads its filter";
  EXPECT_GE(backwardReaders[4], 1) << "fc's input gradient reads its weight";
}

TEST(TrainingPlanUnitsTest, ARefilledUnitServesItsNewWeightsToConvolutions) {
  testing::TempDir dir;
  TrainingPlan plan = convNetPlan(dir, UnitPartition{.kind = UnitPartition::Kind::ByModule});
  const Tensor images = testing::randomTensor({kBatch, 3, 8, 8}, 7);
  plan.step({images}, labels());  // fills the convolutions' weight caches
  plan.evaluate({images});

  ParameterStore& store = plan.parameters();
  const std::size_t conv2 = store.info(2).group;
  const std::int64_t held = parameterBytes();
  store.releaseParameters(conv2);
  EXPECT_EQ(parameterBytes(), held - static_cast<std::int64_t>(store.flatParameters(conv2).bytes()));
  store.materializeParameters(conv2);
  EXPECT_EQ(parameterBytes(), held);
  // Refilled as an all-gather would: plain copies, no version bump of their own.
  const Tensor newWeight = testing::randomTensor({16, 16, 3, 3}, 11, 0.1f);
  const Tensor newBias = testing::randomTensor({16}, 12, 0.1f);
  store.parameter(2).copyFrom(newWeight);
  store.parameter(3).copyFrom(newBias);

  TrainingPlan fresh = convNetPlan(dir, UnitPartition{});
  fresh.parameters().parameter(2).copyFrom(newWeight);
  fresh.parameters().parameter(3).copyFrom(newBias);
  fresh.parameters().bumpVersion();  // its convolutions reordered the old weights when the plan was built

  const StepResult got = plan.step({images}, labels());
  const StepResult want = fresh.step({images}, labels());
  expectSame(got.loss, want.loss, "loss");
  expectSame(got.outputs.at(0), want.outputs.at(0), "logits");
  for (std::size_t p = 0; p < store.size(); ++p) {
    expectSame(store.gradient(p), fresh.parameters().gradient(p), plan.parameterNames()[p] + " gradient");
  }
  expectSame(plan.evaluate({images}).at(0), fresh.evaluate({images}).at(0), "evaluation logits");
}

}  // namespace
}  // namespace strata
