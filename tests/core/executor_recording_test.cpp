// The executor's record-and-replay policy (Note [Recorded runs]) on the CPU, with a stand-in stream whose
// "recording" runs the work's host side again at each replay. CUDA graphs themselves are checked by
// gpu.CudaDeviceRecording* (tests/core/backend/cuda/cuda_recording_test.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "strata/executor.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

// Records by keeping `work`, and a replay calls it: the device work happens once per replay, as with a CUDA
// graph (whose recording enqueues nothing), though here the host side runs each time too. synchronize() sleeps after
// node-by-node work (slowEager) or after replays (slowReplay), so the auto policy has a clear winner: 200 ms plus
// four times what the run itself took, so that the slow side stays the slower however loaded the machine is (a
// fixed 200 ms lost to a loaded machine's 300 ms steps under ctest -j2 beside a build).
class StandInStream final : public Stream {
 public:
  bool refuse = false;
  bool slowEager = false;
  bool slowReplay = false;
  int recordings = 0;
  int replays = 0;

  Device device() const override { return Device::cpu(); }
  void synchronize() override {
    if ((lastWasReplay_ && slowReplay) || (!lastWasReplay_ && slowEager)) {
      const auto took = std::chrono::steady_clock::now() - lastSynchronized_;
      std::this_thread::sleep_for(std::chrono::milliseconds(200) + 4 * took);
    }
    lastWasReplay_ = false;
    lastSynchronized_ = std::chrono::steady_clock::now();
  }
  std::unique_ptr<RecordedWork> record(const std::function<void()>& work, std::string* whyNot) override {
    if (refuse) {
      *whyNot = "the stand-in refuses";
      return nullptr;
    }
    ++recordings;
    return std::make_unique<Replay>(*this, work);
  }

 private:
  class Replay final : public RecordedWork {
   public:
    Replay(StandInStream& stream, std::function<void()> work) : stream_(stream), work_(std::move(work)) {}
    void replay() override {
      ++stream_.replays;
      work_();
      stream_.lastWasReplay_ = true;
    }

   private:
    StandInStream& stream_;
    std::function<void()> work_;
  };

  bool lastWasReplay_ = false;
  std::chrono::steady_clock::time_point lastSynchronized_ = std::chrono::steady_clock::now();
};

struct Batch {
  Tensor images;
  Tensor labels;
};

Batch batch(unsigned seed) {
  Batch b;
  b.images = testing::randomTensor({4, 3, 8, 8}, seed);
  b.labels = Tensor::empty(DType::Int64, {4});
  for (std::int64_t i = 0; i < 4; ++i) {
    b.labels.data<std::int64_t>()[i] = (seed + 3 * static_cast<unsigned>(i)) % 10;
  }
  return b;
}

TrainingPlan smallCnnPlan(const testing::TempDir& dir) {
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {4, 3, 8, 8}}};
  return TrainingPlan(importOnnx(testing::save(testing::smallCnnModel(), dir / "cnn.onnx")), options);
}

void expectSameValues(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.meta(), expected.meta()) << what;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_EQ(actual.data<float>()[i], expected.data<float>()[i]) << what << " element " << i;
  }
}

TEST(ExecutorRecordingTest, ReplaysGiveTheNodeByNodeResultsForNewInputs) {
  testing::TempDir dir;
  TrainingPlan reference = smallCnnPlan(dir);
  TrainingPlan recorded = smallCnnPlan(dir);
  StandInStream stream;
  recorded.executor().setStream(stream);
  recorded.executor().setRecording(Recording::On);
  std::vector<Tensor> earlierLosses;
  for (unsigned run = 0; run < 6; ++run) {
    const Batch b = batch(run + 1);
    const StepResult expected = reference.step({b.images}, b.labels);
    const StepResult actual = recorded.step({b.images}, b.labels);
    expectSameValues(actual.loss, expected.loss, "loss of run " + std::to_string(run));
    expectSameValues(actual.outputs.at(0), expected.outputs.at(0), "logits of run " + std::to_string(run));
    for (std::size_t p = 0; p < reference.parameters().size(); ++p) {
      expectSameValues(recorded.parameters().gradient(p), reference.parameters().gradient(p),
                       reference.parameterNames()[p] + " gradient, run " + std::to_string(run));
    }
    EXPECT_EQ(recorded.executor().recording().replaying, run >= 2) << "two warm-up runs, then replays";
    earlierLosses.push_back(actual.loss);
  }
  EXPECT_EQ(stream.recordings, 1);
  EXPECT_EQ(stream.replays, 4);
  EXPECT_EQ(recorded.executor().runCount(), 6u);
  // Outputs are the caller's copies: later replays did not overwrite them.
  for (std::size_t run = 2; run + 1 < earlierLosses.size(); ++run) {
    EXPECT_NE(earlierLosses[run].storage(), earlierLosses[run + 1].storage());
    EXPECT_NE(*earlierLosses[run].data<float>(), *earlierLosses[run + 1].data<float>());
  }
  for (std::size_t p = 0; p < reference.buffers().size(); ++p) {
    expectSameValues(recorded.buffers()[p].second, reference.buffers()[p].second, reference.buffers()[p].first);
  }
}

TEST(ExecutorRecordingTest, OnFailsWithTheStreamsReasonAndAutoFallsBack) {
  testing::TempDir dir;
  TrainingPlan plan = smallCnnPlan(dir);
  StandInStream stream;
  stream.refuse = true;
  plan.executor().setStream(stream);
  plan.executor().setRecording(Recording::On);
  const Batch b = batch(1);
  plan.step({b.images}, b.labels);
  plan.step({b.images}, b.labels);
  try {
    plan.step({b.images}, b.labels);
    FAIL() << "recording on must fail when the run cannot be recorded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot record the run on cpu for replay: the stand-in refuses"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(plan.executor().recording().replaying);

  plan.executor().setRecording(Recording::Auto);
  for (int run = 0; run < 8; ++run) {
    plan.step({b.images}, b.labels);
  }
  EXPECT_FALSE(plan.executor().recording().replaying);
  EXPECT_EQ(plan.executor().recording().detail, "node by node: the stand-in refuses");
}

TEST(ExecutorRecordingTest, AutoKeepsWhicheverIsFaster) {
  testing::TempDir dir;
  for (const bool replayIsFaster : {true, false}) {
    TrainingPlan plan = smallCnnPlan(dir);
    StandInStream stream;
    stream.slowEager = replayIsFaster;
    stream.slowReplay = !replayIsFaster;
    plan.executor().setStream(stream);
    plan.executor().setRecording(Recording::Auto);
    const Batch b = batch(2);
    for (int run = 0; run < 12; ++run) {
      plan.step({b.images}, b.labels);
    }
    const RecordingStatus& status = plan.executor().recording();
    EXPECT_EQ(status.replaying, replayIsFaster) << status.detail;
    EXPECT_GT(status.eagerMs, 0.0);
    EXPECT_GT(status.replayMs, 0.0);
    EXPECT_EQ(status.eagerMs < status.replayMs, !replayIsFaster) << status.detail;
    EXPECT_EQ(stream.recordings, 1);
    // 2 warm-up and 3 timed node-by-node runs, then replays: 3 timed, and the rest only if kept.
    EXPECT_EQ(stream.replays, replayIsFaster ? 7 : 4) << status.detail;
  }
}

TEST(ExecutorRecordingTest, HooksKeepRunsNodeByNode) {
  testing::TempDir dir;
  TrainingPlan plan = smallCnnPlan(dir);
  StandInStream stream;
  stream.slowEager = true;  // auto keeps the recording
  plan.executor().setStream(stream);
  plan.executor().setRecording(Recording::Auto);
  const Batch b = batch(3);
  for (int run = 0; run < 9; ++run) {
    plan.step({b.images}, b.labels);
  }
  ASSERT_TRUE(plan.executor().recording().replaying) << plan.executor().recording().detail;
  // A hook installed after recording must see every later run: the recording is dropped.
  int fired = 0;
  plan.executor().addGradientReadyHook([&](int) { ++fired; });
  plan.step({b.images}, b.labels);
  EXPECT_EQ(fired, static_cast<int>(plan.parameters().size()));
  EXPECT_FALSE(plan.executor().recording().replaying);
  EXPECT_NE(plan.executor().recording().detail.find("hooks"), std::string::npos) << plan.executor().recording().detail;

  plan.executor().setRecording(Recording::On);
  plan.step({b.images}, b.labels);
  plan.step({b.images}, b.labels);
  EXPECT_THROW(plan.step({b.images}, b.labels), Error);
}

// The CPU's Dropout takes its seed on the host (the CUDA one reads it from
// device memory and is recorded: gpu.CudaDeviceRecordingTest.DropoutDrawsNewMasksInEachReplay).
TEST(ExecutorRecordingTest, RandomOpsWithHostSeedsAreNotRecorded) {
  testing::TempDir dir;
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {2, 4}}};
  TrainingPlan plan(importOnnx(testing::save(testing::dropoutModel(), dir / "dropout.onnx")), options);
  StandInStream stream;
  plan.executor().setStream(stream);
  plan.executor().setRecording(Recording::On);
  const Tensor x = Tensor::zeros(DType::Float32, {2, 4});
  Tensor labels = Tensor::zeros(DType::Int64, {2});
  plan.step({x}, labels);
  plan.step({x}, labels);
  try {
    plan.step({x}, labels);
    FAIL() << "a plan with dropout must not be recorded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'drop' (Dropout) draws new random numbers at every run from a seed "
                                         "its cpu kernel takes on the host"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(stream.recordings, 0);
}

TEST(ExecutorRecordingTest, ParsesModesAndRejectsOthers) {
  EXPECT_EQ(parseRecording("off"), Recording::Off);
  EXPECT_EQ(parseRecording("on"), Recording::On);
  EXPECT_EQ(parseRecording("auto"), Recording::Auto);
  EXPECT_THROW(parseRecording("yes"), Error);
  EXPECT_STREQ(recordingName(Recording::Auto), "auto");
  std::string whyNot;
  EXPECT_EQ(defaultStream(Device::cpu()).record([] {}, &whyNot), nullptr);
  EXPECT_EQ(whyNot, "cpu runs work as it is enqueued, so there is nothing to record");
}

}  // namespace
}  // namespace strata
