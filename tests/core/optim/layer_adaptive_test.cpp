// LARS and LAMB against references written plainly here from the papers' formulas, five steps, per layer.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strata/optim/optimizer.h"
#include "strata/optim/run_optimizers.h"

namespace strata::layer_adaptive_test {
namespace {

using Vector = std::vector<double>;

struct Layer {
  std::string name;
  Shape shape;
  Vector w;
  bool adapted() const { return shape.size() >= 2; }
};

std::vector<Layer> initialLayers() {
  std::vector<Layer> layers = {{"fc.weight", {3, 4}, {}}, {"fc.bias", {4}, {}}, {"conv.weight", {2, 2, 2}, {}}};
  int k = 0;
  for (Layer& layer : layers) {
    for (std::int64_t i = 0; i < numElements(layer.shape); ++i) {
      layer.w.push_back(0.3 * std::cos(0.7 * ++k) + (layer.adapted() ? 0.0 : 0.05));
    }
  }
  return layers;
}

// A gradient that depends on the weights, so the steps differ from each other.
double gradientAt(int step, int element, double w) {
  return std::sin(1.3 * step + 0.4 * element) * (1.0 + 0.5 * w) + 0.01 * element;
}

double norm(const Vector& v) {
  double sum = 0;
  for (double x : v) {
    sum += x * x;
  }
  return std::sqrt(sum);
}

// The references: one layer's update per step, in double.
struct LarsReference {
  double lr, momentum, weightDecay, eta;
  std::vector<Vector> buffers;
  void step(std::vector<Layer>& layers, const std::vector<Vector>& grads, int t) {
    buffers.resize(layers.size());
    for (std::size_t l = 0; l < layers.size(); ++l) {
      Vector& w = layers[l].w;
      const double wd = layers[l].adapted() ? weightDecay : 0.0;
      Vector d(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        d[i] = grads[l][i] + wd * w[i];
      }
      const double ratio = layers[l].adapted() ? eta * norm(w) / norm(d) : 1.0;
      buffers[l].resize(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        d[i] *= ratio;
        buffers[l][i] = t == 1 ? d[i] : momentum * buffers[l][i] + d[i];
        w[i] -= lr * buffers[l][i];
      }
    }
  }
};

struct LambReference {
  double lr, beta1, beta2, epsilon, weightDecay;
  std::vector<Vector> m, v;
  void step(std::vector<Layer>& layers, const std::vector<Vector>& grads, int t) {
    m.resize(layers.size());
    v.resize(layers.size());
    for (std::size_t l = 0; l < layers.size(); ++l) {
      Vector& w = layers[l].w;
      m[l].resize(w.size(), 0.0);
      v[l].resize(w.size(), 0.0);
      const double wd = layers[l].adapted() ? weightDecay : 0.0;
      Vector u(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        m[l][i] = beta1 * m[l][i] + (1 - beta1) * grads[l][i];
        v[l][i] = beta2 * v[l][i] + (1 - beta2) * grads[l][i] * grads[l][i];
        const double mHat = m[l][i] / (1 - std::pow(beta1, t));
        const double vHat = v[l][i] / (1 - std::pow(beta2, t));
        u[i] = mHat / (std::sqrt(vHat) + epsilon) + wd * w[i];
      }
      const double ratio = layers[l].adapted() ? norm(w) / norm(u) : 1.0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        w[i] -= lr * ratio * u[i];
      }
    }
  }
};

// Five steps of Strata's optimizer on a store of the layers (dtype), beside the reference; the worst difference.
template <typename Reference>
double worstDifference(const OptimizerOptions& options, Reference reference, DType dtype) {
  std::vector<Layer> expected = initialLayers();
  std::vector<std::pair<std::string, Tensor>> initial;
  for (const Layer& layer : expected) {
    Tensor t = Tensor::empty(dtype, layer.shape);
    for (std::size_t i = 0; i < layer.w.size(); ++i) {
      if (dtype == DType::Float64) {
        t.data<double>()[i] = layer.w[i];
      } else {
        t.data<float>()[i] = static_cast<float>(layer.w[i]);
      }
    }
    initial.emplace_back(layer.name, t);
  }
  ParameterStore store(initial);
  RunOptimizers optimizers(store, options, nullptr);
  const auto value = [&](const Tensor& t, std::size_t i) {
    return dtype == DType::Float64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
  };
  double worst = 0;
  for (int t = 1; t <= 5; ++t) {
    std::vector<Vector> grads(expected.size());
    int element = 0;
    for (std::size_t l = 0; l < expected.size(); ++l) {
      const Tensor g = store.gradient(l);
      for (std::size_t i = 0; i < expected[l].w.size(); ++i) {
        grads[l].push_back(gradientAt(t, element++, expected[l].w[i]));
        if (dtype == DType::Float64) {
          g.data<double>()[i] = grads[l].back();
        } else {
          g.data<float>()[i] = static_cast<float>(grads[l].back());
        }
      }
    }
    optimizers.full().step(reference.lr);
    reference.step(expected, grads, t);
    for (std::size_t l = 0; l < expected.size(); ++l) {
      for (std::size_t i = 0; i < expected[l].w.size(); ++i) {
        worst = std::max(worst, std::abs(value(store.parameter(l), i) - expected[l].w[i]));
      }
    }
  }
  return worst;
}

TEST(LayerAdaptiveTest, LarsMatchesThePapersRuleOverFiveSteps) {
  const OptimizerOptions options{
      .kind = OptimizerKind::Lars, .momentum = 0.9, .weightDecay = 0.01, .trustCoefficient = 0.02};
  const LarsReference reference{.lr = 2.0, .momentum = 0.9, .weightDecay = 0.01, .eta = 0.02, .buffers = {}};
  EXPECT_LT(worstDifference(options, reference, DType::Float64), 1e-12);
  // Float32 rounds each step's terms (and the compiler's FMA contraction differs between builds: 1.5e-6 under the
  // sanitizer build's flags, against 1e-12 in float64), so 1e-5 there.
  EXPECT_LT(worstDifference(options, reference, DType::Float32), 1e-5);
}

TEST(LayerAdaptiveTest, LambMatchesThePapersRuleOverFiveSteps) {
  const OptimizerOptions options{
      .kind = OptimizerKind::Lamb, .weightDecay = 0.01, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6};
  const LambReference reference{
      .lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6, .weightDecay = 0.01, .m = {}, .v = {}};
  EXPECT_LT(worstDifference(options, reference, DType::Float64), 1e-12);
  EXPECT_LT(worstDifference(options, reference, DType::Float32), 1e-5);
}

TEST(LayerAdaptiveTest, SlicesWithoutLayersAreRefused) {
  Tensor p = Tensor::zeros(DType::Float32, {4});
  Tensor g = Tensor::zeros(DType::Float32, {4});
  for (const OptimizerKind kind : {OptimizerKind::Lars, OptimizerKind::Lamb}) {
    try {
      Optimizer optimizer({ParameterSlice{p, g}}, OptimizerOptions{.kind = kind});
      ADD_FAILURE() << "a layer-wise optimizer over bare slices was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("do not say which layer they hold"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parseOptimizerKind("lars"), OptimizerKind::Lars);
  EXPECT_EQ(parseOptimizerKind("lamb"), OptimizerKind::Lamb);
}

}  // namespace
}  // namespace strata::layer_adaptive_test
