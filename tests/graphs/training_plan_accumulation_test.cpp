// Gradient accumulation in the plan (Note [Accumulated gradients]): K micro-batches added into the gradient
// buffers with the loss gradient scaled by 1/K give the gradients of one batch of all their samples, without a
// full-size copy of the gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "strata/error.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

constexpr std::int64_t kMicroBatch = 2;
constexpr int kMicroBatches = 3;

void addFloat64Initializer(onnx::ModelProto& model, const std::string& name, std::vector<std::int64_t> dims,
                           unsigned seed, float scale) {
  auto* init = model.mutable_graph()->add_initializer();
  init->set_name(name);
  init->set_data_type(onnx::TensorProto::DOUBLE);
  std::int64_t count = 1;
  for (std::int64_t d : dims) {
    init->add_dims(d);
    count *= d;
  }
  for (float v : testing::randomValues(static_cast<std::size_t>(count), seed, scale)) {
    init->add_double_data(static_cast<double>(v));
  }
}

// x[N,2,6,6] -> conv -> Relu -> Flatten -> fc -> y[N,5], in float64 and without batch norm, so a batch's gradient
// is exactly the mean of its samples' gradients.
onnx::ModelProto float64ConvNet() {
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::DOUBLE, {-1, 2, 6, 6});
  addFloat64Initializer(model, "conv.weight", {4, 2, 3, 3}, 1, 0.4f);
  addFloat64Initializer(model, "conv.bias", {4}, 2, 0.1f);
  addFloat64Initializer(model, "fc.weight", {5, 144}, 3, 0.1f);
  addFloat64Initializer(model, "fc.bias", {5}, 4, 0.1f);
  testing::setInts(testing::addNode(model, "Conv", {"x", "conv.weight", "conv.bias"}, {"c"}, "conv"), "pads",
                   {1, 1, 1, 1});
  testing::addNode(model, "Relu", {"c"}, {"r"}, "relu");
  testing::addNode(model, "Flatten", {"r"}, {"flat"}, "flatten");
  testing::setInt(testing::addNode(model, "Gemm", {"flat", "fc.weight", "fc.bias"}, {"y"}, "fc"), "transB", 1);
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::DOUBLE, {-1, 5});
  return model;
}

TrainingPlan planFor(const testing::TempDir& dir, std::int64_t batch, bool seededLoss) {
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float64, {batch, 2, 6, 6}}};
  options.seededLoss = seededLoss;
  return TrainingPlan(importOnnx(testing::save(float64ConvNet(), dir / "net.onnx")), options);
}

// Samples [first, first + count) of a fixed data set.
Tensor images(std::int64_t first, std::int64_t count) {
  Tensor t = Tensor::empty(DType::Float64, {count, 2, 6, 6});
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<double>()[i] = std::sin(0.37 * static_cast<double>(first * 72 + i));
  }
  return t;
}

Tensor labels(std::int64_t first, std::int64_t count) {
  Tensor t = Tensor::empty(DType::Int64, {count});
  for (std::int64_t i = 0; i < count; ++i) {
    t.data<std::int64_t>()[i] = (first + i) * 3 % 5;
  }
  return t;
}

MemorySnapshot snapshot() {
  return allocatorFor(Device::cpu()).stats().snapshot();
}

std::int64_t category(const MemorySnapshot& s, MemoryCategory c, bool peak) {
  return (peak ? s.peak : s.current)[static_cast<std::size_t>(c)];
}

// The most gradient bytes one step of the plan writes (a node may finalise several parameters' gradients).
std::int64_t largestStepGradientBytes(const Program& program) {
  std::int64_t largest = 0;
  for (const ProgramStep& step : program.steps) {
    std::int64_t bytes = 0;
    for (int v : step.outputs) {
      if (v >= 0 && program.values[static_cast<std::size_t>(v)].gradient) {
        bytes += static_cast<std::int64_t>(program.values[static_cast<std::size_t>(v)].meta.bytes());
      }
    }
    largest = std::max(largest, bytes);
  }
  return largest;
}

TEST(TrainingPlanAccumulationTest, MicroBatchesScaledByOneOverKGiveTheWholeBatchsGradients) {
  testing::TempDir dir;
  TrainingPlan whole = planFor(dir, kMicroBatch * kMicroBatches, false);
  whole.step({images(0, kMicroBatch * kMicroBatches)}, labels(0, kMicroBatch * kMicroBatches));

  TrainingPlan micro = planFor(dir, kMicroBatch, true);
  micro.setGradientScale(1.0 / kMicroBatches);
  const std::int64_t gradientBuffers = category(snapshot(), MemoryCategory::Gradients, false);
  std::int64_t overwritingActivations = 0;
  for (int m = 0; m < kMicroBatches; ++m) {
    micro.setAccumulateGradients(m > 0);  // the first micro-batch overwrites what the last step left
    const Tensor x = images(m * kMicroBatch, kMicroBatch);
    const Tensor y = labels(m * kMicroBatch, kMicroBatch);
    allocatorFor(Device::cpu()).stats().resetPeaks();
    const MemorySnapshot before = snapshot();
    micro.step({x}, y);
    const MemorySnapshot after = snapshot();
    const std::int64_t extraGradients = category(after, MemoryCategory::Gradients, true) - gradientBuffers;
    const std::int64_t activations =
        category(after, MemoryCategory::Activations, true) - category(before, MemoryCategory::Activations, false);
    EXPECT_EQ(category(after, MemoryCategory::Gradients, false), gradientBuffers) << "temporaries are freed";
    if (m == 0) {
      EXPECT_EQ(extraGradients, 0) << "overwriting needs no temporary";
      overwritingActivations = activations;
    } else {
      EXPECT_GT(extraGradients, 0) << "micro-batch " << m << " adds through a temporary";
      EXPECT_LE(extraGradients, largestStepGradientBytes(micro.executor().program()))
          << "micro-batch " << m << ": at most one node's gradients exist twice";
      EXPECT_LT(extraGradients, gradientBuffers) << "no full-size gradient copy";
      EXPECT_EQ(activations, overwritingActivations) << "accumulation costs no activation memory";
    }
  }

  ParameterStore& got = micro.parameters();
  ParameterStore& want = whole.parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t p = 0; p < want.size(); ++p) {
    const Tensor g = got.gradient(p);
    const Tensor w = want.gradient(p);
    double scale = 0;
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      scale = std::max(scale, std::abs(w.data<double>()[i]));
    }
    ASSERT_GT(scale, 0) << want.info(p).name;
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      ASSERT_NEAR(g.data<double>()[i], w.data<double>()[i], 1e-12 * scale) << want.info(p).name << " element " << i;
    }
  }
}

TEST(TrainingPlanAccumulationTest, WithAccumulationOffEveryStepOverwritesTheGradients) {
  testing::TempDir dir;
  TrainingPlan plan = planFor(dir, kMicroBatch, true);
  plan.step({images(0, kMicroBatch)}, labels(0, kMicroBatch));
  const Tensor first = plan.parameters().gradient(0).clone();
  plan.setAccumulateGradients(true);
  plan.setAccumulateGradients(false);
  plan.step({images(0, kMicroBatch)}, labels(0, kMicroBatch));
  for (std::int64_t i = 0; i < first.numel(); ++i) {
    ASSERT_EQ(plan.parameters().gradient(0).data<double>()[i], first.data<double>()[i]) << i;
  }
  plan.setAccumulateGradients(true);
  plan.step({images(0, kMicroBatch)}, labels(0, kMicroBatch));
  for (std::int64_t i = 0; i < first.numel(); ++i) {
    ASSERT_NEAR(plan.parameters().gradient(0).data<double>()[i], 2 * first.data<double>()[i], 1e-15) << i;
  }
}

TEST(TrainingPlanAccumulationTest, TheGradientScaleMultipliesTheLossScale) {
  testing::TempDir dir;
  TrainingPlan reference = planFor(dir, kMicroBatch, false);
  reference.step({images(0, kMicroBatch)}, labels(0, kMicroBatch));
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float64, {kMicroBatch, 2, 6, 6}}};
  options.scaledLoss = true;
  TrainingPlan scaled(importOnnx(dir / "net.onnx"), options);
  scaled.setLossScale(8.0);
  scaled.setGradientScale(0.25);
  scaled.step({images(0, kMicroBatch)}, labels(0, kMicroBatch));
  const Tensor want = reference.parameters().gradient(2);
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_NEAR(scaled.parameters().gradient(2).data<double>()[i], 2.0 * want.data<double>()[i], 1e-14) << i;
  }
}

TEST(TrainingPlanAccumulationTest, AGradientScaleNeedsASeededLoss) {
  testing::TempDir dir;
  TrainingPlan plan = planFor(dir, kMicroBatch, false);
  plan.setGradientScale(1.0);  // nothing to change
  EXPECT_THROW(plan.setGradientScale(0.5), Error);
  EXPECT_THROW(plan.setLossScale(2.0), Error) << "loss scaling still needs scaledLoss";
}

}  // namespace
}  // namespace strata
