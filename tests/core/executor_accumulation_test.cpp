// The executor's gradient accumulation mode (Note [Accumulated gradients]) on a hand-built plan: y = x * 2 written
// into a bound gradient view and a bound non-gradient buffer.
#include <gtest/gtest.h>

#include "strata/executor.h"

namespace strata {
namespace {

const TensorMeta kMeta{DType::Float32, {4}};

Tensor filled(float value) {
  Tensor t = Tensor::empty(kMeta);
  for (std::int64_t i = 0; i < 4; ++i) {
    t.data<float>()[i] = value * static_cast<float>(i + 1);
  }
  return t;
}

// Values: 0 = x (input), 1 = the constant 2, 2 = x * 2 into `gradient`, 3 = x * 2 into `buffer`.
Program doublingProgram(const Tensor& gradient, const Tensor& buffer) {
  Program program;
  program.values.push_back(ProgramValue{"x", kMeta, Tensor(), Tensor(), true, false});
  program.values.push_back(
      ProgramValue{"two", TensorMeta{DType::Float32, {}}, Tensor::scalar(2.0f), Tensor(), false, false});
  program.values.push_back(ProgramValue{"x/grad", kMeta, Tensor(), gradient, false, true});
  program.values.push_back(ProgramValue{"running", kMeta, Tensor(), buffer, false, false});
  program.inputs = {0};
  const KernelFactory& mul = *OpRegistry::instance().kernel("Mul", DeviceType::CPU);
  const Attributes none;
  for (int output : {2, 3}) {
    ProgramStep step;
    step.nodeName = "double" + std::to_string(output);
    step.opType = "Mul";
    step.inputs = {0, 1};
    step.outputs = {output};
    step.kernel =
        mul(KernelInit{{InputInfo{true, kMeta, nullptr}, InputInfo{true, TensorMeta{DType::Float32, {}}, nullptr}},
                       {kMeta},
                       none,
                       step.nodeName,
                       false});
    program.steps.push_back(std::move(step));
  }
  return program;
}

void expectValues(const Tensor& t, float scale, const std::string& what) {
  for (std::int64_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(t.data<float>()[i], scale * static_cast<float>(i + 1)) << what << " element " << i;
  }
}

TEST(ExecutorAccumulationTest, AddsIntoBoundGradientsOnlyWhileOn) {
  const Tensor gradient = Tensor::zeros(DType::Float32, {4});
  const Tensor buffer = Tensor::zeros(DType::Float32, {4});
  Executor executor(doublingProgram(gradient, buffer));
  executor.run({filled(1.0f)});
  expectValues(gradient, 2.0f, "first run");

  executor.setAccumulateGradients(true);
  EXPECT_TRUE(executor.accumulatesGradients());
  executor.run({filled(3.0f)});
  expectValues(gradient, 8.0f, "2 + 6");
  expectValues(buffer, 6.0f, "a bound buffer that is no gradient is overwritten");
  executor.run({filled(1.0f)});
  expectValues(gradient, 10.0f, "8 + 2");

  executor.setAccumulateGradients(false);
  executor.run({filled(1.0f)});
  expectValues(gradient, 2.0f, "overwritten again");
}

TEST(ExecutorAccumulationTest, TemporariesAreGradientsFreedWithinTheStep) {
  const Tensor gradient = Tensor::zeros(DType::Float32, {4});
  const Tensor buffer = Tensor::zeros(DType::Float32, {4});
  Executor executor(doublingProgram(gradient, buffer));
  executor.setAccumulateGradients(true);
  MemoryStats& stats = allocatorFor(Device::cpu()).stats();
  const std::int64_t before = stats.snapshot().current[static_cast<std::size_t>(MemoryCategory::Gradients)];
  stats.resetPeaks();
  executor.run({filled(1.0f)});
  const MemorySnapshot after = stats.snapshot();
  EXPECT_EQ(after.current[static_cast<std::size_t>(MemoryCategory::Gradients)], before);
  EXPECT_EQ(after.peak[static_cast<std::size_t>(MemoryCategory::Gradients)], before + 16);
}

TEST(ExecutorAccumulationTest, ChangingTheModeStartsRecordingOver) {
  const Tensor gradient = Tensor::zeros(DType::Float32, {4});
  const Tensor buffer = Tensor::zeros(DType::Float32, {4});
  Executor executor(doublingProgram(gradient, buffer));
  executor.setRecording(Recording::Auto);
  executor.run({filled(1.0f)});
  executor.setAccumulateGradients(true);
  EXPECT_EQ(executor.recording().mode, Recording::Auto);
  EXPECT_EQ(executor.recording().detail, "warming up");
}

}  // namespace
}  // namespace strata
