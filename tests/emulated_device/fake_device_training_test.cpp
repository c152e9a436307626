// The training paths outside the CUDA backend on a device tensor, without a GPU: a fake CUDA device whose memory is
// host memory holding every byte XOR-ed with a mask (as in GlooStagingTest). Its op kernels run the CPU kernels on
// unscrambled host copies (like the CUDA backend's host fallback) and its optimizer kernels apply the CPU rules on
// host copies, each checking that every tensor it is handed lives on the fake device. Host code that dereferences
// device memory (a loss, a norm, a checkpoint, an export) reads scrambled bytes, and a tensor left on the CPU where the
// plan expects the device fails the check, so results equal to a CPU run show that the executor, TrainingPlan,
// ParameterStore, Optimizer, in-place gradient accumulation and checkpoints move device tensors correctly.
//
// Build it as its own executable (it replaces the registry's CUDA kernels): sources this file plus
// cli/run/checkpoint.cpp, cli/run/durable_files.cpp, cli/run/run_outputs.cpp and cli/launch/process_group_factory.cpp;
// include directories cli/ and tests/; link strata::loaders, onnx_proto, protobuf, nlohmann_json, CLI11::CLI11,
// GTest::gtest_main (not strata::cuda, and without STRATA_HAS_CUDA).

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>

#include <gtest/gtest.h>

#include "core/train/trainer_fixtures.h"
#include "launch/process_group_factory.h"
#include "plugins/ps/ps_test_support.h"
#include "run/checkpoint.h"
#include "strata/allocator.h"
#include "strata/comm/in_memory_store.h"
#include "strata/device_backend.h"
#include "strata/error.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/op_registry.h"
#include "strata/optim/device_optimizer.h"
#include "strata/optim/optimizer.h"
#include "support/scrambled_device.h"
#include "test_models.h"

namespace strata {
namespace {

const Device kFake = Device::cuda(61);
constexpr unsigned char kMask = 0xA5;

void requireFake(const Tensor& t, const std::string& what) {
  if (t.defined() && t.device() != kFake) {
    fail("{} is on {}, not on the plan's device {}", what, t.device().toString(), kFake.toString());
  }
}

class FakeBackend final : public DeviceBackend {
 public:
  void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes) override {
    if (dstDevice == kFake && srcDevice == kFake) {
      std::memmove(dst, src, bytes);
    } else if ((dstDevice == kFake && srcDevice.type == DeviceType::CPU) ||
               (srcDevice == kFake && dstDevice.type == DeviceType::CPU)) {
      testing::scrambledCopy(dst, src, bytes, kMask);
    } else {
      fail("fake backend: copy from {} to {}", srcDevice.toString(), dstDevice.toString());
    }
  }
  void fillZero(void* dst, Device device, std::size_t bytes) override {
    STRATA_CHECK(device == kFake, "fake backend: fill on {}", device.toString());
    std::memset(dst, kMask, bytes);
  }
};

// Records like ExecutorRecordingTest's stand-in: a replay calls the work again.
class FakeStream final : public Stream {
 public:
  bool recordable = false;
  int recordings = 0;

  Device device() const override { return kFake; }
  void synchronize() override {}
  std::unique_ptr<RecordedWork> record(const std::function<void()>& work, std::string* whyNot) override {
    if (!recordable) {
      return Stream::record(work, whyNot);
    }
    ++recordings;
    return std::make_unique<Replay>(work);
  }

 private:
  struct Replay final : RecordedWork {
    explicit Replay(std::function<void()> work) : work_(std::move(work)) {}
    void replay() override { work_(); }
    std::function<void()> work_;
  };
};

Tensor toHost(const Tensor& t, const std::string& what) {
  requireFake(t, what);
  return t.to(Device::cpu());
}

// A CPU kernel on host copies of the device operands (the CUDA backend's host fallback, with checks).
class StagedKernel final : public OpKernel {
 public:
  StagedKernel(std::unique_ptr<OpKernel> cpu, std::string node) : cpu_(std::move(cpu)), node_(std::move(node)) {}

  void compute(KernelContext& ctx) override {
    STRATA_CHECK(ctx.stream != nullptr && ctx.stream->device() == kFake, "node {}: not on the device's stream", node_);
    KernelContext host;
    host.training = ctx.training;
    host.step = ctx.step;
    host.stream = &defaultStream(Device::cpu());
    std::vector<Tensor> inputs(ctx.inputs.size());
    for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
      host.inputs.push_back(nullptr);
      if (ctx.inputs[i] != nullptr) {
        inputs[i] = toHost(*ctx.inputs[i], fmt::format("input {} of node {}", i, node_));
        host.inputs[i] = &inputs[i];
      }
    }
    std::vector<Tensor> outputs(ctx.outputs.size());
    for (std::size_t o = 0; o < ctx.outputs.size(); ++o) {
      host.outputs.push_back(nullptr);
      if (ctx.outputs[o] != nullptr) {
        outputs[o] = toHost(*ctx.outputs[o], fmt::format("output {} of node {}", o, node_));
        host.outputs[o] = &outputs[o];
      }
    }
    cpu_->compute(host);
    for (std::size_t o = 0; o < ctx.outputs.size(); ++o) {
      if (ctx.outputs[o] != nullptr) {
        ctx.outputs[o]->copyFrom(outputs[o]);
      }
    }
  }

 private:
  std::unique_ptr<OpKernel> cpu_;
  std::string node_;
};

template <typename Fn>
void forFloat(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::Float64) {
    fn(double{});
  } else {
    STRATA_CHECK(t.dtype() == DType::Float32, "fake optimizer kernels: {}", dtypeName(t.dtype()));
    fn(float{});
  }
}

// The CPU loops of optimizer.cpp and trainer_context.cpp on host copies.
class FakeOptimizerKernels final : public DeviceOptimizerKernels {
 public:
  int normReads = 0;
  int sgdCalls = 0;

  double sumOfSquares(const Tensor& flat) override {
    ++normReads;
    const Tensor h = toHost(flat, "gradients (norm)");
    double total = 0;
    forFloat(h, [&](auto tag) {
      using T = decltype(tag);
      for (std::int64_t i = 0; i < h.numel(); ++i) {
        total += static_cast<double>(h.data<T>()[i]) * static_cast<double>(h.data<T>()[i]);
      }
    });
    return total;
  }

  void sgd(const Tensor& param, const Tensor& grad, const Tensor& momentum, const SgdStepScalars& s) override {
    ++sgdCalls;
    Tensor p = toHost(param, "parameters");
    const Tensor g = toHost(grad, "gradients");
    Tensor buf = momentum.defined() ? toHost(momentum, "momentum") : Tensor();
    forFloat(p, [&](auto tag) {
      using T = decltype(tag);
      T* pd = p.data<T>();
      const T* gd = g.data<T>();
      T* bd = buf.defined() ? buf.data<T>() : nullptr;
      const T wd = static_cast<T>(s.weightDecay);
      const T mom = static_cast<T>(s.momentum);
      const T damp = static_cast<T>(1.0 - s.dampening);
      const T rate = static_cast<T>(s.lr);
      const T scale = static_cast<T>(s.gradScale);
      for (std::int64_t i = 0; i < p.numel(); ++i) {
        T d = gd[i] * scale + wd * pd[i];
        if (bd != nullptr) {
          bd[i] = s.firstStep ? d : mom * bd[i] + damp * d;
          d = s.nesterov ? d + mom * bd[i] : bd[i];
        }
        pd[i] -= rate * d;
      }
    });
    Tensor(param).copyFrom(p);
    if (buf.defined()) {
      Tensor(momentum).copyFrom(buf);
    }
  }

  void adam(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
            const AdamStepScalars& s) override {
    Tensor p = toHost(param, "parameters");
    const Tensor g = toHost(grad, "gradients");
    Tensor mh = toHost(m, "first moments");
    Tensor vh = toHost(v, "second moments");
    forFloat(p, [&](auto tag) {
      using T = decltype(tag);
      T* pd = p.data<T>();
      const T* gd = g.data<T>();
      T* md = mh.data<T>();
      T* vd = vh.data<T>();
      const T b1 = static_cast<T>(s.beta1);
      const T b2 = static_cast<T>(s.beta2);
      const T wd = static_cast<T>(s.weightDecay);
      const T stepSize = static_cast<T>(s.lr / s.correction1);
      const T sqrtCorrection2 = static_cast<T>(std::sqrt(s.correction2));
      const T eps = static_cast<T>(s.epsilon);
      const T decay = static_cast<T>(1.0 - s.lr * s.weightDecay);
      const T scale = static_cast<T>(s.gradScale);
      for (std::int64_t i = 0; i < p.numel(); ++i) {
        T d = gd[i] * scale;
        if (s.decoupled) {
          pd[i] *= decay;
        } else {
          d += wd * pd[i];
        }
        md[i] = b1 * md[i] + (T(1) - b1) * d;
        vd[i] = b2 * vd[i] + (T(1) - b2) * d * d;
        pd[i] -= stepSize * md[i] / (std::sqrt(vd[i]) / sqrtCorrection2 + eps);
      }
    });
    Tensor(param).copyFrom(p);
    Tensor(m).copyFrom(mh);
    Tensor(v).copyFrom(vh);
  }
};

FakeStream& fakeStream() {
  static auto* stream = new FakeStream();  // leaked, like the backends' streams
  return *stream;
}

FakeOptimizerKernels& fakeOptimizerKernels() {
  static auto* kernels = new FakeOptimizerKernels();
  return *kernels;
}

class FakeDeviceTrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    registerAllocator(kFake, new testing::ScrambledDeviceAllocator(kFake));
    registerDefaultStream(kFake, &fakeStream());
    static FakeBackend backend;
    registerDeviceBackend(DeviceType::CUDA, &backend);
    registerDeviceOptimizerKernels(DeviceType::CUDA, &fakeOptimizerKernels());
    OpRegistry& registry = OpRegistry::instance();
    for (const std::string& type : registry.opTypes()) {
      const KernelFactory* cpu = registry.kernel(type, DeviceType::CPU);
      if (cpu == nullptr) {
        continue;
      }
      registry.addKernel(type, DeviceType::CUDA, [cpu = *cpu](const KernelInit& init) {
        // Plan-time constants on the device are parameters: run-time inputs for the CPU kernel.
        std::vector<InputInfo> inputs = init.inputs;
        for (InputInfo& input : inputs) {
          if (input.constant != nullptr && input.constant->device().type != DeviceType::CPU) {
            input.constant = nullptr;
          }
        }
        return std::make_unique<StagedKernel>(
            cpu(KernelInit{inputs, init.outputs, init.attrs, init.nodeName, init.training}), init.nodeName);
      });
    }
  }

  void SetUp() override { fakeStream().recordable = false; }
};

struct Batch {
  Tensor images;
  Tensor labels;
};

Batch batchOf(std::int64_t rows, unsigned seed) {
  Batch b;
  b.images = testing::randomTensor({rows, 3, 8, 8}, seed);
  b.labels = Tensor::empty(DType::Int64, {rows});
  for (std::int64_t i = 0; i < rows; ++i) {
    b.labels.data<std::int64_t>()[i] = (seed + 3 * static_cast<unsigned>(i)) % 10;
  }
  return b;
}

TrainingPlanOptions optionsOn(Device device, std::optional<DType> low = std::nullopt, bool scaledLoss = false) {
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {4, 3, 8, 8}}};
  options.device = device;
  options.mixedPrecision = low;
  options.scaledLoss = scaledLoss;
  return options;
}

TrainingPlan smallCnnPlan(const testing::TempDir& dir, const TrainingPlanOptions& options,
                          const std::string& pool = "MaxPool") {
  return TrainingPlan(importOnnx(testing::save(testing::smallCnnModel(pool), dir / ("cnn_" + pool + ".onnx"))),
                      options);
}

void expectEqualOnHost(const Tensor& actual, const Tensor& expected, const std::string& what, double tolerance = 1e-6) {
  const Tensor a = actual.to(Device::cpu());
  const Tensor e = expected.to(Device::cpu());
  ASSERT_EQ(a.meta(), e.meta()) << what;
  for (std::int64_t i = 0; i < e.numel(); ++i) {
    const double x = a.dtype() == DType::Float64 ? a.data<double>()[i] : a.data<float>()[i];
    const double y = e.dtype() == DType::Float64 ? e.data<double>()[i] : e.data<float>()[i];
    ASSERT_TRUE(std::isfinite(y)) << what << " element " << i << " (the CPU reference)";
    ASSERT_NEAR(x, y, tolerance * (1.0 + std::abs(y))) << what << " element " << i;
  }
}

// Both plans take step `step`'s batch at their own scalers' loss scales; their losses must agree.
void stepAtTheirScales(TrainingPlan& cpu, const LossScaler& cpuScaler, TrainingPlan& device,
                       const LossScaler& deviceScaler, unsigned step) {
  const Batch b = batchOf(4, step + 1);
  cpu.setLossScale(cpuScaler.scale());
  device.setLossScale(deviceScaler.scale());
  const StepResult expected = cpu.step({b.images}, b.labels);
  const StepResult actual = device.step({b.images}, b.labels);
  expectEqualOnHost(actual.loss, expected.loss, "loss of step " + std::to_string(step));
}

void expectSameState(TrainingPlan& device, TrainingPlan& cpu, const std::string& when) {
  for (std::size_t p = 0; p < cpu.parameters().size(); ++p) {
    EXPECT_EQ(device.parameters().parameter(p).device(), kFake);
    expectEqualOnHost(device.parameters().parameter(p), cpu.parameters().parameter(p),
                      cpu.parameterNames()[p] + " " + when);
    expectEqualOnHost(device.parameters().gradient(p), cpu.parameters().gradient(p),
                      cpu.parameterNames()[p] + " gradient " + when);
  }
  for (std::size_t b = 0; b < cpu.buffers().size(); ++b) {
    EXPECT_EQ(device.buffers()[b].second.device(), kFake);
    expectEqualOnHost(device.buffers()[b].second, cpu.buffers()[b].second, cpu.buffers()[b].first + " " + when);
  }
}

TEST_F(FakeDeviceTrainingTest, StepsUpdatesEvaluationAndExportMatchTheCpu) {
  testing::TempDir dir;
  TrainingPlan cpu = smallCnnPlan(dir, optionsOn(Device::cpu()));
  TrainingPlan device = smallCnnPlan(dir, optionsOn(kFake));
  const OptimizerOptions sgd{.momentum = 0.9, .weightDecay = 1e-4, .maxGradNorm = 0.5};
  Optimizer cpuOptimizer(cpu.parameters(), sgd);
  Optimizer deviceOptimizer(device.parameters(), sgd);
  for (const Tensor& state : deviceOptimizer.stateBuffers()) {
    EXPECT_EQ(state.device(), kFake) << "optimizer state lives beside the parameters";
  }
  const int normReads = fakeOptimizerKernels().normReads;
  for (unsigned step = 0; step < 3; ++step) {
    const Batch b = batchOf(4, step + 1);
    const StepResult expected = cpu.step({b.images}, b.labels);
    const StepResult actual = device.step({b.images}, b.labels);
    EXPECT_EQ(actual.loss.device(), kFake);
    expectEqualOnHost(actual.loss, expected.loss, "loss of step " + std::to_string(step));
    expectEqualOnHost(actual.outputs.at(0), expected.outputs.at(0), "logits of step " + std::to_string(step));
    EXPECT_NEAR(deviceOptimizer.step(0.05), cpuOptimizer.step(0.05), 1e-5) << "gradient norm of step " << step;
    expectSameState(device, cpu, "after step " + std::to_string(step));
  }
  EXPECT_EQ(fakeOptimizerKernels().normReads, normReads + 3) << "clipping reads the norm on the device";

  // Evaluation: a host batch of another size builds its own plan on the device.
  const Batch eval = batchOf(3, 11);
  const std::vector<Tensor> expected = cpu.evaluate({eval.images});
  const std::vector<Tensor> actual = device.evaluate({eval.images});
  EXPECT_EQ(actual.at(0).device(), kFake);
  expectEqualOnHost(actual.at(0), expected.at(0), "evaluation logits");

  // Export: host copies of the trained weights.
  const Graph exported = device.modelWithCurrentWeights();
  const Graph reference = cpu.modelWithCurrentWeights();
  for (std::size_t v = 0; v < reference.values.size(); ++v) {
    const Tensor& constant = exported.values[v].constant;
    if (constant.defined()) {
      EXPECT_EQ(constant.device(), Device::cpu()) << exported.values[v].name;
      if (isFloatingPoint(constant.dtype())) {
        expectEqualOnHost(constant, reference.values[v].constant, "exported " + exported.values[v].name);
      }
    }
  }
}

TEST_F(FakeDeviceTrainingTest, AdamWithFloat16LossScalingSkipsTheSameSteps) {
  testing::TempDir dir;
  TrainingPlan cpu = smallCnnPlan(dir, optionsOn(Device::cpu(), DType::Float16, true), "AveragePool");
  TrainingPlan device = smallCnnPlan(dir, optionsOn(kFake, DType::Float16, true), "AveragePool");
  const OptimizerOptions adam{.kind = OptimizerKind::Adam, .weightDecay = 1e-3};
  Optimizer cpuOptimizer(cpu.parameters(), adam);
  Optimizer deviceOptimizer(device.parameters(), adam);
  // Starts far too high: the first steps overflow and are skipped, then the scale settles.
  const LossScalerOptions scaling{.initialScale = 1e30, .backoffFactor = 1e-12, .growthInterval = 2};
  LossScaler cpuScaler(scaling);
  LossScaler deviceScaler(scaling);
  cpuOptimizer.setLossScaler(&cpuScaler);
  deviceOptimizer.setLossScaler(&deviceScaler);
  for (unsigned step = 0; step < 6; ++step) {
    stepAtTheirScales(cpu, cpuScaler, device, deviceScaler, step);
    cpuOptimizer.step(1e-3);
    deviceOptimizer.step(1e-3);
    EXPECT_EQ(deviceOptimizer.lastStepSkipped(), cpuOptimizer.lastStepSkipped()) << "step " << step;
    EXPECT_EQ(deviceScaler.scale(), cpuScaler.scale()) << "step " << step;
  }
  EXPECT_GT(deviceScaler.skippedSteps(), 0);
  EXPECT_LT(deviceScaler.skippedSteps(), 6);
  expectSameState(device, cpu, "after six steps");
}

// A checkpoint of a plan's parameters, buffers and optimizer state through the trainer's checkpoint store.
void saveState(cli::TensorProtoCheckpoints& checkpoints, TrainingPlan& plan, const Optimizer& optimizer) {
  {
    std::unique_ptr<StateWriter> writer = checkpoints.beginWrite();
    for (std::size_t p = 0; p < plan.parameters().size(); ++p) {
      writer->putTensor("param/" + plan.parameterNames()[p], plan.parameters().parameter(p));
    }
    for (const auto& [name, tensor] : plan.buffers()) {
      writer->putTensor("buffer/" + name, tensor);
    }
    for (std::size_t k = 0; k < optimizer.stateBuffers().size(); ++k) {
      writer->putTensor("optimizer/" + std::to_string(k), optimizer.stateBuffers()[k]);
    }
  }
  checkpoints.commit();
}

void loadState(cli::TensorProtoCheckpoints& checkpoints, TrainingPlan& plan, const Optimizer& optimizer) {
  std::unique_ptr<StateReader> reader = checkpoints.open();
  for (std::size_t p = 0; p < plan.parameters().size(); ++p) {
    reader->getTensor("param/" + plan.parameterNames()[p], plan.parameters().parameter(p));
  }
  for (const auto& [name, tensor] : plan.buffers()) {
    reader->getTensor("buffer/" + name, tensor);
  }
  for (std::size_t k = 0; k < optimizer.stateBuffers().size(); ++k) {
    reader->getTensor("optimizer/" + std::to_string(k), optimizer.stateBuffers()[k]);
  }
  plan.parameters().bumpVersion();
}

TEST_F(FakeDeviceTrainingTest, GradientAccumulationAndCheckpointsMatchTheCpu) {
  testing::TempDir dir;
  TrainingPlanOptions cpuOptions = optionsOn(Device::cpu());
  TrainingPlanOptions deviceOptions = optionsOn(kFake);
  cpuOptions.seededLoss = deviceOptions.seededLoss = true;
  TrainingPlan cpu = smallCnnPlan(dir, cpuOptions);
  TrainingPlan device = smallCnnPlan(dir, deviceOptions);
  const OptimizerOptions sgd{.momentum = 0.9};
  Optimizer cpuOptimizer(cpu.parameters(), sgd);
  Optimizer deviceOptimizer(device.parameters(), sgd);
  // Two micro-batches per step, added into the gradient buffers in place (the device's add kernel), each at 1/2.
  cpu.setGradientScale(0.5);
  device.setGradientScale(0.5);
  for (unsigned step = 0; step < 2; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      const Batch b = batchOf(4, 10 * step + static_cast<unsigned>(micro));
      cpu.executor().setAccumulateGradients(micro > 0);
      device.executor().setAccumulateGradients(micro > 0);
      cpu.step({b.images}, b.labels);
      device.step({b.images}, b.labels);
    }
    cpuOptimizer.step(0.05);
    deviceOptimizer.step(0.05);
    expectSameState(device, cpu, "after accumulated step " + std::to_string(step));
  }
  cpu.executor().setAccumulateGradients(false);
  device.executor().setAccumulateGradients(false);

  // A checkpoint written from the device resumes on the device and on the CPU.
  cli::TensorProtoCheckpoints checkpoints(dir / "checkpoint", 0, 1);
  saveState(checkpoints, device, deviceOptimizer);
  TrainingPlan resumedDevice = smallCnnPlan(dir, deviceOptions);
  TrainingPlan resumedCpu = smallCnnPlan(dir, cpuOptions);
  Optimizer resumedDeviceOptimizer(resumedDevice.parameters(), sgd);
  Optimizer resumedCpuOptimizer(resumedCpu.parameters(), sgd);
  loadState(checkpoints, resumedDevice, resumedDeviceOptimizer);
  loadState(checkpoints, resumedCpu, resumedCpuOptimizer);
  for (TrainingPlan* plan : {&resumedDevice, &resumedCpu}) {
    for (std::size_t p = 0; p < cpu.parameters().size(); ++p) {
      expectEqualOnHost(plan->parameters().parameter(p), cpu.parameters().parameter(p),
                        "resumed " + cpu.parameterNames()[p]);
    }
    for (std::size_t b = 0; b < cpu.buffers().size(); ++b) {
      expectEqualOnHost(plan->buffers()[b].second, cpu.buffers()[b].second, "resumed " + cpu.buffers()[b].first);
    }
  }
  for (std::size_t k = 0; k < cpuOptimizer.stateBuffers().size(); ++k) {
    expectEqualOnHost(resumedDeviceOptimizer.stateBuffers()[k], cpuOptimizer.stateBuffers()[k], "momentum");
    expectEqualOnHost(resumedCpuOptimizer.stateBuffers()[k], cpuOptimizer.stateBuffers()[k], "momentum");
  }
  const Batch b = batchOf(4, 99);
  expectEqualOnHost(resumedDevice.step({b.images}, b.labels).loss, cpu.step({b.images}, b.labels).loss,
                    "loss after resuming");
}

// Resume across device kinds (issue 17): a run of three epochs, stopped after each and resumed on the other kind
// of device, through the Trainer, the `single` plugin and the checkpoints `strata train` writes (format 3 on
// disk): epoch 1 on the CPU, epoch 2 resumed on the device, epoch 3 resumed on the CPU again. Its weights must
// equal an uninterrupted CPU run's within 1e-5 (the device runs the CPU's op kernels; its optimizer kernel rounds
// differently in the last bit). A lost momentum or a stale weight after either resume is off by far more.
TEST_F(FakeDeviceTrainingTest, ARunResumedFromTheCpuOntoTheDeviceAndBackMatchesAnUninterruptedOne) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(64, 1);
  testing::RowBatches batches(rows.first, rows.second, 8);
  testing::KeptRecords records;
  auto optionsFor = [](std::int64_t stopAfter) {
    TrainerOptions options;
    options.epochs = 3;
    options.schedule.kind = LrScheduleKind::Constant;
    options.schedule.baseLr = 0.1;
    options.optimizer.momentum = 0.9;
    options.saveEachEpoch = stopAfter > 0;
    options.stopAfterEpoch = stopAfter;
    return options;
  };
  TrainingPlan full = testing::mlpPlan(dir, 8);
  {
    auto strategy = testing::loadStrategy("single");
    Trainer(TrainerParts{.program = full, .train = batches, .strategy = *strategy, .recorder = records}, optionsFor(0))
        .run();
  }
  cli::TensorProtoCheckpoints checkpoints(dir / "run" / "checkpoint", 0, 1);
  // One leg: on `device`, resumed unless it is the first, stopped after epoch `stopAfter` (3: the end).
  auto leg = [&](Device device, std::int64_t stopAfter) {
    TrainingPlan plan = testing::mlpPlan(dir, 8, {}, device);
    auto strategy = testing::loadStrategy("single");
    TrainerOptions options = optionsFor(stopAfter < 3 ? stopAfter : 0);
    options.resume = stopAfter > 1;
    Trainer trainer(
        TrainerParts{
            .program = plan, .train = batches, .strategy = *strategy, .recorder = records, .checkpoints = &checkpoints},
        options);
    EXPECT_EQ(trainer.startEpoch(), stopAfter - 1) << "on " << device.toString();
    trainer.run();
    EXPECT_EQ(plan.parameters().parameter(0).device(), device);
    return device.type == DeviceType::CPU ? testing::parametersOf(plan) : std::vector<float>{};
  };
  leg(Device::cpu(), 1);
  const int sgdCallsBefore = fakeOptimizerKernels().sgdCalls;
  leg(kFake, 2);
  EXPECT_GE(fakeOptimizerKernels().sgdCalls - sgdCallsBefore, 8) << "epoch 2's 8 steps ran on the device";
  const std::vector<float> resumed = leg(Device::cpu(), 3);
  const std::vector<float> expected = testing::parametersOf(full);
  ASSERT_EQ(resumed.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    // The device's optimizer kernel is a scalar loop, the CPU's a vectorised one: last-bit differences only.
    ASSERT_NEAR(resumed[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i])))
        << "parameter element " << i << " after CPU, the device, then the CPU again";
  }
}

TEST_F(FakeDeviceTrainingTest, RecordedStepsOnTheDeviceMatchTheCpu) {
  testing::TempDir dir;
  fakeStream().recordable = true;
  const int recordings = fakeStream().recordings;
  TrainingPlan cpu = smallCnnPlan(dir, optionsOn(Device::cpu(), DType::Float16, true), "AveragePool");
  TrainingPlanOptions recorded = optionsOn(kFake, DType::Float16, true);
  recorded.recording = Recording::On;
  TrainingPlan device = smallCnnPlan(dir, recorded, "AveragePool");
  Optimizer cpuOptimizer(cpu.parameters(), OptimizerOptions{.momentum = 0.9});
  Optimizer deviceOptimizer(device.parameters(), OptimizerOptions{.momentum = 0.9});
  // The scale grows every two steps: the seed is a run-time input of the recording.
  LossScaler cpuScaler(LossScalerOptions{.initialScale = 1024.0, .growthInterval = 2});
  LossScaler deviceScaler(LossScalerOptions{.initialScale = 1024.0, .growthInterval = 2});
  cpuOptimizer.setLossScaler(&cpuScaler);
  deviceOptimizer.setLossScaler(&deviceScaler);
  for (unsigned step = 0; step < 5; ++step) {
    stepAtTheirScales(cpu, cpuScaler, device, deviceScaler, step);
    EXPECT_EQ(device.executor().recording().replaying, step >= 2) << device.executor().recording().detail;
    cpuOptimizer.step(0.05);
    deviceOptimizer.step(0.05);
    expectSameState(device, cpu, "after step " + std::to_string(step));
  }
  EXPECT_EQ(deviceScaler.scale(), 4096.0);
  EXPECT_EQ(fakeStream().recordings, recordings + 1);
}

TEST_F(FakeDeviceTrainingTest, HostInputsAreRefusedByTheDevicePlan) {
  testing::TempDir dir;
  TrainingPlan device = smallCnnPlan(dir, optionsOn(kFake));
  const Batch b = batchOf(4, 1);
  try {
    device.executor().run({b.images, b.labels});
    FAIL() << "a device plan must refuse host inputs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is on cpu but the plan runs on cuda:61"), std::string::npos) << e.what();
  }
}

// FSDP with ranks as threads on the device (Gloo staged through host memory): sharding, gathers and
// reduce-scatters of device shards, 16-bit collectives (reduce_dtype: Tensor::convertFrom through the backend),
// accumulation into the shard (accumulate=sharded) and offloading to the host (Note [Offload to the host]: the
// host's optimizer steps, not the device's) end where the same ranks on the CPU end: within 1e-6, as the fake
// device's optimizer kernels are plain loops and the CPU's vectorised (the offloaded cases agree to the bit).
TEST_F(FakeDeviceTrainingTest, FsdpRanksOnTheDeviceEndWhereCpuRanksEnd) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 6);
  using Options = std::map<std::string, std::string>;
  struct Case {
    Options strategy;
    int micro;
    OptimizerKind optimizer;
  };
  const std::vector<Case> cases = {
      {{{"shard", "full"}, {"units", "module"}, {"reduce_dtype", "bf16"}}, 1, OptimizerKind::Adam},
      {{{"shard", "grad_op"}, {"units", "module"}, {"accumulate", "sharded"}}, 2, OptimizerKind::Adam},
      {{{"shard", "full"}, {"unit_params", "100"}, {"reduce_dtype", "fp16"}, {"accumulate", "sharded"}},
       2,
       OptimizerKind::Sgd},
      {{{"shard", "full"}, {"units", "module"}, {"offload", "params"}}, 1, OptimizerKind::Sgd},
      {{{"shard", "grad_op"}, {"unit_params", "100"}, {"offload", "optimizer"}, {"reduce_dtype", "bf16"}},
       2,
       OptimizerKind::Sgd}};
  for (const Case& c : cases) {
    TrainerOptions options;
    options.maxSteps = 4;
    options.microBatches = c.micro;
    options.schedule.kind = LrScheduleKind::Constant;
    options.schedule.baseLr = c.optimizer == OptimizerKind::Sgd ? 0.1 : 0.01;
    options.optimizer.kind = c.optimizer;
    options.optimizer.momentum = 0.9;
    options.optimizer.weightDecay = 1e-3;
    const std::string what = fmt::format("{}", fmt::join(c.strategy, ", "));
    const std::vector<testing::RankOutcome> cpu =
        testing::trainThreadRanks(dir, 2, "fsdp", c.strategy, options, rows, 6 / c.micro, nullptr, 1);
    const int sgdCalls = fakeOptimizerKernels().sgdCalls;
    const std::vector<testing::RankOutcome> device =
        testing::trainThreadRanks(dir, 2, "fsdp", c.strategy, options, rows, 6 / c.micro, nullptr, 1, kFake);
    const bool offloaded = c.strategy.contains("offload");
    if (c.optimizer == OptimizerKind::Sgd) {
      EXPECT_EQ(fakeOptimizerKernels().sgdCalls > sgdCalls, !offloaded)
          << what << ": the optimizer steps on the device unless offloaded to the host";
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_FALSE(cpu[r].parameters.empty()) << what;
      ASSERT_EQ(device[r].parameters.size(), cpu[r].parameters.size()) << what;
      for (std::size_t i = 0; i < cpu[r].parameters.size(); ++i) {
        const float expected = cpu[r].parameters[i];
        ASSERT_NEAR(device[r].parameters[i], expected, 1e-6 * (1.0 + std::abs(expected)))
            << what << ", rank " << r << ", element " << i;
      }
      EXPECT_TRUE(device[r].records.finished) << what;
      EXPECT_EQ(device[r].records.figures.strategyFigures.contains("fsdp_offload_to_host"), offloaded) << what;
    }
  }
}

// Parameter-server workers on the device (Note [PS workers on a device]): they push host copies of their device
// gradients and buffers and copy what they pull into device memory, so they end where CPU workers end, to the bit
// (the server, in process here, updates in host memory either way). Host code reading the fake device's memory
// directly would push scrambled bytes.
TEST_F(FakeDeviceTrainingTest, ParameterServerWorkersOnTheDeviceEndWhereCpuWorkersEnd) {
  testing::TempDir dir;
  const auto rows = testing::separableRows(48, 7);
  TrainerOptions options;
  options.maxSteps = 4;
  options.schedule.kind = LrScheduleKind::Constant;
  options.schedule.baseLr = 0.1;
  const std::map<std::string, std::string> ps = {{"auth", "off"}, {"mode", "sync"}};
  auto workersOn = [&](Device device) {
    auto store = std::make_shared<InMemoryStore>();
    ps::testing::ServerThread server(2, ps, OptimizerOptions{.momentum = 0.9}, store);
    return testing::trainThreadRanks(dir, 2, "ps", ps, options, rows, 6, nullptr, 1, device, store);
  };
  const std::vector<testing::RankOutcome> cpu = workersOn(Device::cpu());
  const std::vector<testing::RankOutcome> device = workersOn(kFake);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(cpu[r].parameters.empty());
    EXPECT_EQ(device[r].parameters, cpu[r].parameters) << "rank " << r;
    EXPECT_TRUE(device[r].records.finished);
  }
  EXPECT_EQ(cpu[0].parameters, cpu[1].parameters) << "sync workers pull the same values";
}

TEST_F(FakeDeviceTrainingTest, RanksOnDifferentKindsOfDeviceFailAtOnce) {
  auto store = std::make_shared<InMemoryStore>();
  const auto start = std::chrono::steady_clock::now();
  auto rankOn = [&](int rank, Device device) {
    return std::async(std::launch::async, [store, rank, device] {
      try {
        cli::createProcessGroup(store, cli::RankEnvironment{.rank = rank, .localRank = rank, .worldSize = 2}, device,
                                std::chrono::seconds(60));
        return std::string("no error");
      } catch (const Error& e) {
        return std::string(e.what());
      }
    });
  };
  auto cpuRank = rankOn(0, Device::cpu());
  auto gpuRank = rankOn(1, kFake);
  EXPECT_NE(cpuRank.get().find("rank 0 trains on cpu (cpu) but rank 1 on cuda"), std::string::npos);
  EXPECT_NE(gpuRank.get().find("rank 1 trains on cuda (cuda:61) but rank 0 on cpu"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "not after the store's timeout";
}

}  // namespace
}  // namespace strata
