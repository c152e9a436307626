#include "graphs/gradient_check.h"

#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "strata/executor.h"
#include "strata/graphs/autodiff.h"
#include "strata/graphs/gradient_registry.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/op_registry.h"
#include "support/test_device.h"

namespace strata::testing {
namespace {

double elementAsDouble(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
}

void addToElement(Tensor& t, std::int64_t i, double delta) {
  if (t.dtype() == DType::Float64) {
    t.data<double>()[i] += delta;
  } else {
    t.data<float>()[i] = static_cast<float>(t.data<float>()[i] + delta);
  }
}

// L = sum_k sum(R_k * Y_k) in double, over the floating-point outputs.
double projectedLoss(const std::vector<Tensor>& outputs, const std::vector<Tensor>& projections) {
  double loss = 0;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (!projections[k].defined()) {
      continue;
    }
    for (std::int64_t i = 0; i < outputs[k].numel(); ++i) {
      loss += elementAsDouble(outputs[k], i) * elementAsDouble(projections[k], i);
    }
  }
  return loss;
}

}  // namespace

Tensor toFloat32(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
  }
  return out;
}

void expectFloat32MatchesFloat64(const std::string& opType, const std::vector<Tensor>& inputs64,
                                 const Attributes& attrs, std::size_t outputCount, double rtol) {
  SCOPED_TRACE(opType);
  // Note [Test device]: on a GPU the float32 kernel under test is the device's; the float64 reference stays the
  // CPU's.
  const TestDevice& device = testDevice();
  if (!device.skipReason.empty()) {
    GTEST_SKIP() << device.skipReason;
  }
  std::vector<Tensor> inputs32;
  inputs32.reserve(inputs64.size());
  for (const Tensor& t : inputs64) {
    inputs32.push_back(t.defined() && t.dtype() == DType::Float64 ? toFloat32(t) : t);
  }
  std::vector<const Tensor*> p64;
  std::vector<const Tensor*> p32;
  for (std::size_t i = 0; i < inputs64.size(); ++i) {
    p64.push_back(inputs64[i].defined() ? &inputs64[i] : nullptr);
    p32.push_back(inputs32[i].defined() ? &inputs32[i] : nullptr);
  }
  const std::vector<Tensor> expected = runOpEagerly(opType, p64, attrs, outputCount, true);
  const std::vector<Tensor> actual = runOpEagerly(opType, p32, attrs, outputCount, true, device.device);
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    ASSERT_EQ(expected[k].shape(), actual[k].shape()) << "output " << k;
    ASSERT_EQ(actual[k].dtype(), DType::Float32);
    double scale = 0;
    for (std::int64_t i = 0; i < expected[k].numel(); ++i) {
      scale = std::max(scale, std::fabs(expected[k].data<double>()[i]));
    }
    const double tol = rtol * std::max(scale, 1e-3);
    for (std::int64_t i = 0; i < expected[k].numel(); ++i) {
      ASSERT_NEAR(actual[k].data<float>()[i], expected[k].data<double>()[i], tol)
          << "output " << k << " at flat index " << i;
    }
  }
}

ConvGradientInputs expectConvGradientsMatchFloat64(const Shape& xShape, const Shape& wShape, const Attributes& attrs,
                                                   unsigned seed) {
  const Tensor x = randomTensor(DType::Float64, xShape, seed);
  const Tensor w = randomTensor(DType::Float64, wShape, seed + 1);
  const Tensor y = runOpEagerly("Conv", {&x, &w}, attrs).at(0);
  const Tensor dy = randomTensor(DType::Float64, y.shape(), seed + 2);
  ConvGradientInputs inputs{toFloat32(dy), toFloat32(x), toFloat32(w), attrs, attrs};
  inputs.inputAttrs.set("input_shape", xShape);
  inputs.weightAttrs.set("weight_shape", wShape);
  expectFloat32MatchesFloat64("ConvGrad", {dy, x, w}, attrs, 3);
  expectFloat32MatchesFloat64("ConvGrad", {dy, x, w}, attrs, 2);
  expectFloat32MatchesFloat64("ConvGradInput", {dy, w}, inputs.inputAttrs, 1);
  expectFloat32MatchesFloat64("ConvGradWeight", {dy, x}, inputs.weightAttrs, 2);
  expectFloat32MatchesFloat64("ConvGradWeight", {dy, x}, inputs.weightAttrs, 1);
  return inputs;
}

void expectConvolutionPathMatchesFloat64(const Shape& xShape, const Shape& wShape, const Attributes& attrs,
                                         const std::string& marker, bool taken, unsigned seed) {
  const auto names = [&](const std::string& implementation) {
    return implementation.find(marker) != std::string::npos;
  };
  const Tensor x = randomTensor(DType::Float64, xShape, seed);
  const Tensor w = randomTensor(DType::Float64, wShape, seed + 1);
  const Tensor b = randomTensor(DType::Float64, {wShape[0]}, seed + 2);
  expectFloat32MatchesFloat64("Conv", {x, w, b}, attrs, 1, 1e-5);
  expectFloat32MatchesFloat64("Conv", {x, w}, attrs, 1, 1e-5);
  Attributes relu = attrs;
  relu.set("fused_relu", std::int64_t{1});
  expectFloat32MatchesFloat64("Conv", {x, w, b}, relu, 1, 1e-5);
  const Tensor x32 = toFloat32(x), w32 = toFloat32(w), b32 = toFloat32(b);
  EXPECT_EQ(names(cpuKernelImplementation("Conv", {&x32, &w32, &b32}, attrs, 1)), taken) << "Conv";
  const ConvGradientInputs in = expectConvGradientsMatchFloat64(xShape, wShape, attrs, seed + 3);
  EXPECT_EQ(names(cpuKernelImplementation("ConvGrad", {&in.dy32, &in.x32, &in.w32}, attrs, 3)), taken) << "ConvGrad";
  EXPECT_EQ(names(cpuKernelImplementation("ConvGradInput", {&in.dy32, &in.w32}, in.inputAttrs, 1)), taken)
      << "ConvGradInput";
  EXPECT_EQ(names(cpuKernelImplementation("ConvGradWeight", {&in.dy32, &in.x32}, in.weightAttrs, 2)), taken)
      << "ConvGradWeight";
}

std::string cpuKernelImplementation(const std::string& type, const std::vector<const Tensor*>& inputs,
                                    const Attributes& attrs, std::size_t outputCount) {
  std::vector<InputInfo> infos;
  for (const Tensor* t : inputs)
    infos.push_back(InputInfo{true, t->meta()});
  const std::string node = "node";
  const std::vector<TensorMeta> outputs =
      OpRegistry::instance().schema(type)->inferShapes(ShapeContext{infos, attrs, outputCount, node, type});
  const KernelFactory* factory = OpRegistry::instance().kernel(type, DeviceType::CPU);
  return (*factory)(KernelInit{infos, outputs, attrs, node, true})->implementation();
}

Tensor randomTensor(DType dtype, const Shape& shape, unsigned seed, double low, double high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  Tensor t = Tensor::empty(dtype, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::Float64) {
      t.data<double>()[i] = dist(rng);
    } else if (dtype == DType::Float32) {
      t.data<float>()[i] = static_cast<float>(dist(rng));
    } else {
      ADD_FAILURE() << "randomTensor supports float32 and float64";
    }
  }
  return t;
}

void expectGradientsMatchFiniteDifferences(const std::string& opType, const std::vector<Tensor>& inputs,
                                           const Attributes& attrs, const GradientCheckOptions& options) {
  const TestDevice& device = testDevice();
  if (!device.skipReason.empty()) {
    GTEST_SKIP() << device.skipReason;
  }
  const GradientRuleInfo* rule = GradientRegistry::instance().find(opType);
  ASSERT_NE(rule, nullptr) << opType << " has no gradient rule";

  std::vector<std::size_t> wrt = options.wrt;
  if (wrt.empty()) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const bool nonDiff = std::find(rule->nonDifferentiableInputs.begin(), rule->nonDifferentiableInputs.end(), i) !=
                           rule->nonDifferentiableInputs.end();
      if (inputs[i].defined() && isFloatingPoint(inputs[i].dtype()) && !nonDiff) {
        wrt.push_back(i);
      }
    }
  }
  ASSERT_FALSE(wrt.empty()) << "no differentiable input to check";
  const bool f64 = inputs[wrt[0]].dtype() == DType::Float64;
  const double eps = options.eps > 0 ? options.eps : (f64 ? 1e-6 : 1e-2);
  const double rtol = options.rtol > 0 ? options.rtol : (f64 ? 1e-5 : 2e-2);
  const double atol = options.atol > 0 ? options.atol : (f64 ? 1e-7 : 1e-3);

  // The graph: checked inputs are parameters (float initializers), the others plan-time constants.
  Graph graph;
  graph.name = "gradient_check_" + opType;
  graph.sourcePath = graph.name;
  Node node;
  node.name = opType;
  node.opType = opType;
  node.attrs = attrs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      node.inputs.push_back(kNoValue);
      continue;
    }
    Value value;
    value.name = fmt::format("input_{}", i);
    value.constant = inputs[i].clone(MemoryCategory::Parameters);
    value.meta = value.constant.meta();
    value.isInitializer = std::find(wrt.begin(), wrt.end(), i) != wrt.end();
    node.inputs.push_back(graph.addValue(std::move(value)));
  }
  for (std::size_t o = 0; o < options.outputCount; ++o) {
    Value value;
    value.name = fmt::format("output_{}", o);
    value.producer = 0;
    node.outputs.push_back(graph.addValue(std::move(value)));
  }
  graph.nodes.push_back(node);
  Graph specialised = specialize(graph, SpecializeOptions{.training = options.training});

  // The loss: sum_k ReduceSum(Y_k * R_k), with R_k fixed random projections.
  std::vector<Tensor> projections(options.outputCount);
  int loss = kNoValue;
  for (std::size_t o = 0; o < options.outputCount; ++o) {
    const TensorMeta meta = specialised.values[static_cast<std::size_t>(node.outputs[o])].meta;
    if (!isFloatingPoint(meta.dtype) || meta.dtype == DType::Float16 || meta.dtype == DType::BFloat16) {
      continue;
    }
    projections[o] = randomTensor(meta.dtype, meta.shape, 1000 + static_cast<unsigned>(o));
    auto addNode = [&](const std::string& type, std::vector<int> ins, Attributes a, const TensorMeta& outMeta) {
      Value out;
      out.name = fmt::format("loss_{}_{}", type, specialised.nodes.size());
      out.meta = outMeta;
      out.producer = static_cast<int>(specialised.nodes.size());
      const int id = specialised.addValue(std::move(out));
      Node n;
      n.name = fmt::format("loss_{}_{}", type, specialised.nodes.size());
      n.opType = type;
      n.inputs = std::move(ins);
      n.outputs = {id};
      n.attrs = std::move(a);
      n.phase = NodePhase::Loss;
      specialised.nodes.push_back(std::move(n));
      return id;
    };
    Value r;
    r.name = fmt::format("projection_{}", o);
    r.meta = meta;
    r.constant = projections[o];
    const int rId = specialised.addValue(std::move(r));
    const int product = addNode("Mul", {node.outputs[o], rId}, {}, meta);
    Attributes reduceAttrs;
    reduceAttrs.set("keepdims", std::int64_t{0});
    const int sum = addNode("ReduceSum", {product}, reduceAttrs, TensorMeta{meta.dtype, {}});
    loss = loss == kNoValue ? sum : addNode("Add", {loss, sum}, {}, TensorMeta{meta.dtype, {}});
  }
  ASSERT_NE(loss, kNoValue) << "the op has no floating-point output to project";

  const TrainingGraph training = buildTrainingGraph(specialised, AutodiffOptions{.loss = loss});
  Graph stepGraph = training.graph;
  stepGraph.outputs = {loss};
  stepGraph.outputs.insert(stepGraph.outputs.end(), training.parameterGrads.begin(), training.parameterGrads.end());
  Executor executor(lowerToProgram(stepGraph, LowerOptions{.training = options.training}));
  const std::vector<Tensor> results = executor.run({});
  if (device.device.type != DeviceType::CPU) {
    // Note [Test device]: on a GPU the same step runs there and must agree with the CPU plan (whose gradients
    // the CPU run of this suite checks against finite differences).
    LowerOptions lowerOptions;
    lowerOptions.device = device.device;
    lowerOptions.training = options.training;
    Executor onDevice(lowerToProgram(stepGraph, lowerOptions), device.device);
    const std::vector<Tensor> deviceResults = onDevice.run({});
    ASSERT_EQ(deviceResults.size(), results.size());
    const double tol = f64 ? 1e-9 : 1e-4;
    for (std::size_t k = 0; k < results.size(); ++k) {
      const Tensor got = deviceResults[k].to(Device::cpu());
      ASSERT_EQ(got.meta(), results[k].meta()) << "result " << k;
      double scale = 0;
      for (std::int64_t i = 0; i < results[k].numel(); ++i) {
        scale = std::max(scale, std::abs(elementAsDouble(results[k], i)));
      }
      int failures = 0;
      for (std::int64_t i = 0; i < got.numel(); ++i) {
        const double want = elementAsDouble(results[k], i);
        const double have = elementAsDouble(got, i);
        if (std::abs(have - want) > tol * std::max(scale, 1.0) && failures++ < 5) {
          ADD_FAILURE() << opType << " on " << device.device.toString() << ": " << (k == 0 ? "loss" : "gradient")
                        << " result " << k << " element " << i << ": " << have << ", CPU " << want;
        }
      }
    }
    return;
  }

  std::vector<const Tensor*> eagerInputs;
  std::vector<Tensor> perturbed;
  perturbed.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    perturbed.push_back(t.defined() ? t.clone() : Tensor());
  }
  for (const Tensor& t : perturbed) {
    eagerInputs.push_back(t.defined() ? &t : nullptr);
  }
  auto lossAt = [&] {
    return projectedLoss(runOpEagerly(opType, eagerInputs, attrs, options.outputCount, options.training), projections);
  };
  EXPECT_NEAR(elementAsDouble(results[0], 0), lossAt(), 1e-6 * (1 + std::abs(lossAt())))
      << "the training plan's loss differs from the eager forward";

  for (std::size_t w : wrt) {
    const int valueId = node.inputs[w];
    const auto it = std::find(training.parameters.begin(), training.parameters.end(), valueId);
    ASSERT_NE(it, training.parameters.end()) << "input " << w << " got no gradient";
    const Tensor& analytic = results[1 + static_cast<std::size_t>(it - training.parameters.begin())];
    ASSERT_EQ(analytic.meta(), inputs[w].meta());
    // Every element of small tensors; a fixed random sample of large ones.
    std::vector<std::int64_t> elements;
    const std::int64_t n = inputs[w].numel();
    if (n <= 256) {
      for (std::int64_t i = 0; i < n; ++i) {
        elements.push_back(i);
      }
    } else {
      std::mt19937 rng(7);
      for (int k = 0; k < 128; ++k) {
        elements.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(n)));
      }
    }
    int failures = 0;
    for (std::int64_t i : elements) {
      addToElement(perturbed[w], i, eps);
      const double plus = lossAt();
      addToElement(perturbed[w], i, -2 * eps);
      const double minus = lossAt();
      addToElement(perturbed[w], i, eps);
      perturbed[w].copyFrom(inputs[w]);  // undo rounding drift exactly
      const double numeric = (plus - minus) / (2 * eps);
      const double got = elementAsDouble(analytic, i);
      if (std::abs(got - numeric) > atol + rtol * std::max(std::abs(got), std::abs(numeric)) && failures++ < 5) {
        ADD_FAILURE() << opType << ": d loss / d input " << w << " element " << i << ": autodiff " << got
                      << ", finite differences " << numeric;
      }
    }
    EXPECT_EQ(failures, 0) << opType << ": " << failures << " mismatching elements of input " << w;
  }
}

}  // namespace strata::testing
