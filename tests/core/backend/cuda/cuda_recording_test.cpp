// CUDA graph recording (CudaStream::record, the allocator's recording pool, a training step replayed). They run as
// gpu.CudaDeviceRecording* with a GPU and skip with the reason elsewhere. The policy around it is checked on the
// CPU by ExecutorRecordingTest (tests/core/executor_recording_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <thread>

#include "strata/allocator.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/stream.h"
#include "support/test_device.h"
#include "test_models.h"

namespace strata {
namespace {

class CudaDeviceRecordingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::testDevice().skipReason.empty() || testing::testDevice().device.type != DeviceType::CUDA) {
      GTEST_SKIP() << (testing::testDevice().skipReason.empty() ? "run with STRATA_TEST_DEVICE=cuda (ctest -L gpu)"
                                                                : testing::testDevice().skipReason);
    }
    device_ = testing::testDevice().device;
  }

  Tensor onDevice(const std::vector<float>& values) const {
    Tensor host = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
    std::copy(values.begin(), values.end(), host.data<float>());
    return host.to(device_);
  }

  Device device_;
};

std::vector<float> hostValues(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  return {host.data<float>(), host.data<float>() + host.numel()};
}

TEST_F(CudaDeviceRecordingTest, ReplayRepeatsTheRecordedCopiesOnNewContents) {
  Stream& stream = defaultStream(device_);
  Tensor src = onDevice({1, 2, 3, 4});
  Tensor dst = Tensor::zeros(DType::Float32, {4}, MemoryCategory::Other, device_);
  std::string whyNot;
  std::unique_ptr<RecordedWork> work = stream.record([&] { dst.copyFrom(src); }, &whyNot);
  ASSERT_NE(work, nullptr) << whyNot;
  stream.synchronize();
  EXPECT_EQ(hostValues(dst), (std::vector<float>{0, 0, 0, 0})) << "recording enqueues nothing";
  work->replay();
  EXPECT_EQ(hostValues(dst), (std::vector<float>{1, 2, 3, 4}));
  src.copyFrom(onDevice({5, 6, 7, 8}));
  work->replay();
  EXPECT_EQ(hostValues(dst), (std::vector<float>{5, 6, 7, 8}));
}

TEST_F(CudaDeviceRecordingTest, AHostSynchronisationRefusesTheRecordingAndLeavesTheStreamUsable) {
  Stream& stream = defaultStream(device_);
  const Tensor src = onDevice({1, 2});
  Tensor dst = Tensor::zeros(DType::Float32, {2}, MemoryCategory::Other, device_);
  std::string whyNot;
  std::unique_ptr<RecordedWork> work = stream.record(
      [&] {
        dst.copyFrom(src);
        stream.synchronize();
      },
      &whyNot);
  EXPECT_EQ(work, nullptr);
  EXPECT_FALSE(whyNot.empty());
  dst.copyFrom(src);
  EXPECT_EQ(hostValues(dst), (std::vector<float>{1, 2}));
}

TEST_F(CudaDeviceRecordingTest, RecordedBlocksAreNotHandedOutUntilTheRecordingIsDestroyed) {
  Stream& stream = defaultStream(device_);
  const std::int64_t elements = 777 * 128;  // an unusual size, so the shared cache holds no block of it
  const void* recordedBlock = nullptr;
  const void* otherThreadBlock = nullptr;
  std::string whyNot;
  std::unique_ptr<RecordedWork> work = stream.record(
      [&] {
        Tensor scratch = Tensor::empty(DType::Float32, {elements}, MemoryCategory::Workspace, device_);
        scratch.zero();
        recordedBlock = scratch.rawData();
        // Another thread meanwhile allocates from the shared cache, not from the recording's pool.
        std::thread([&] {
          Tensor other = Tensor::empty(DType::Float32, {elements}, MemoryCategory::Workspace, device_);
          otherThreadBlock = other.rawData();
        }).join();
      },
      &whyNot);
  ASSERT_NE(work, nullptr) << whyNot;
  EXPECT_NE(otherThreadBlock, recordedBlock);
  {
    const Tensor after = Tensor::empty(DType::Float32, {elements}, MemoryCategory::Workspace, device_);
    EXPECT_NE(after.rawData(), recordedBlock) << "the recording's block was handed out while it may replay";
  }
  work->replay();
  work.reset();
  std::set<const void*> reused;
  const Tensor a = Tensor::empty(DType::Float32, {elements}, MemoryCategory::Workspace, device_);
  const Tensor b = Tensor::empty(DType::Float32, {elements}, MemoryCategory::Workspace, device_);
  reused = {a.rawData(), b.rawData()};
  EXPECT_TRUE(reused.count(recordedBlock) == 1) << "a destroyed recording's blocks return to the shared cache";
}

double relativeError(const Tensor& actual, const Tensor& expected) {
  const Tensor a = actual.to(Device::cpu());
  const Tensor e = expected.to(Device::cpu());
  double diff = 0;
  double norm = 0;
  for (std::int64_t i = 0; i < e.numel(); ++i) {
    diff += (a.data<float>()[i] - e.data<float>()[i]) * (a.data<float>()[i] - e.data<float>()[i]);
    norm += e.data<float>()[i] * e.data<float>()[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// A training step on the small CNN (conv, batch norm, pooling, residual, gemm, cross-entropy) replayed from a CUDA
// graph gives the node-by-node step's loss, logits, gradients and running statistics, batch after batch.
TEST_F(CudaDeviceRecordingTest, ReplayedTrainingStepsMatchNodeByNodeSteps) {
  testing::TempDir dir;
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {4, 3, 8, 8}}};
  options.device = device_;
  TrainingPlan reference(importOnnx(testing::save(testing::smallCnnModel(), dir / "a.onnx")), options);
  options.recording = Recording::On;
  TrainingPlan recorded(importOnnx(testing::save(testing::smallCnnModel(), dir / "b.onnx")), options);
  for (unsigned run = 0; run < 6; ++run) {
    const Tensor x = testing::randomTensor({4, 3, 8, 8}, run + 11);
    Tensor labels = Tensor::empty(DType::Int64, {4});
    for (std::int64_t i = 0; i < 4; ++i) {
      labels.data<std::int64_t>()[i] = (run + 3 * static_cast<unsigned>(i)) % 10;
    }
    const StepResult expected = reference.step({x}, labels);
    const StepResult actual = recorded.step({x}, labels);
    const std::string at = " at run " + std::to_string(run);
    EXPECT_LT(relativeError(actual.loss, expected.loss), 1e-5) << "loss" << at;
    EXPECT_LT(relativeError(actual.outputs.at(0), expected.outputs.at(0)), 1e-5) << "logits" << at;
    for (std::size_t p = 0; p < reference.parameters().size(); ++p) {
      EXPECT_LT(relativeError(recorded.parameters().gradient(p), reference.parameters().gradient(p)), 1e-5)
          << reference.parameterNames()[p] << at;
    }
    for (std::size_t b = 0; b < reference.buffers().size(); ++b) {
      EXPECT_LT(relativeError(recorded.buffers()[b].second, reference.buffers()[b].second), 1e-5)
          << reference.buffers()[b].first << at;
    }
    EXPECT_EQ(recorded.executor().recording().replaying, run >= 2) << recorded.executor().recording().detail;
  }
}

// Dropout reads the run index from device memory, so a replay draws the mask node-by-node runs draw.
TEST_F(CudaDeviceRecordingTest, DropoutDrawsNewMasksInEachReplay) {
  testing::TempDir dir;
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {64, 4}}};
  options.device = device_;
  TrainingPlan reference(importOnnx(testing::save(testing::dropoutModel(), dir / "a.onnx")), options);
  options.recording = Recording::On;
  TrainingPlan recorded(importOnnx(testing::save(testing::dropoutModel(), dir / "b.onnx")), options);
  const Tensor x = testing::randomTensor({64, 4}, 5);
  const Tensor labels = Tensor::zeros(DType::Int64, {64});
  std::vector<float> previous;
  for (unsigned run = 0; run < 6; ++run) {
    const StepResult expected = reference.step({x}, labels);
    const StepResult actual = recorded.step({x}, labels);
    EXPECT_LT(relativeError(actual.outputs.at(0), expected.outputs.at(0)), 1e-6) << "run " << run;
    const std::vector<float> now = hostValues(actual.outputs.at(0).reshape({64 * 3}));
    EXPECT_NE(now, previous) << "run " << run << " drew the previous run's mask";
    previous = now;
    EXPECT_EQ(recorded.executor().recording().replaying, run >= 2) << recorded.executor().recording().detail;
  }
}

}  // namespace
}  // namespace strata
