// Einsum (opset 12+) on float32 and float64: the steps of Note [Einsum as products] (einsum_plan.h), planned once per
// node; its batched products run on the MatMul kernel (oneDNN's GEMM for float32) and its sums on ReduceSum's.

#include <algorithm>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cpu_ops.h"
#include "einsum_plan.h"
#include "shape_ops_common.h"
#include "strata/einsum_equation.h"
#include "strata/thread_pool.h"

namespace strata::cpu {

namespace {

using shape_detail::copyBytes;
using shape_detail::kParallelBytes;
using shape_detail::stridedCopy;
using shape_detail::transposeBytes;
using shape_detail::withNodeErrors;

bool isEinsumDType(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64;
}

std::vector<TensorMeta> inferEinsum(const ShapeContext& ctx) {
  if (ctx.inputs.empty())
    ctx.error("needs at least one input");
  std::vector<std::size_t> ranks;
  std::vector<Shape> shapes;
  const DType dtype = ctx.input(0).meta.dtype;
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorMeta& meta = ctx.input(i).meta;
    if (meta.dtype != dtype) {
      ctx.error(fmt::format("input {} has type {}, input 0 has {}", i, dtypeName(meta.dtype), dtypeName(dtype)));
    }
    ranks.push_back(meta.shape.size());
    shapes.push_back(meta.shape);
  }
  if (!isEinsumDType(dtype))
    ctx.error(fmt::format("type {} is not supported (float32 and float64 only)", dtypeName(dtype)));
  return withNodeErrors(ctx, [&] {
    const EinsumEquation equation = parseEinsum(ctx.attrs.getString("equation"), ranks);
    return std::vector<TensorMeta>{TensorMeta{dtype, einsumOutputShape(equation, shapes)}};
  });
}

// out[b, i, j] = a[b, i] * c[b, j]: a product with nothing contracted.
template <typename T>
void outerProducts(const T* a, const T* c, T* out, std::int64_t batch, std::int64_t m, std::int64_t n) {
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(sizeof(T) * n));
  parallelFor(0, batch * m, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const T scale = a[row];
      const T* right = c + (row / m) * n;
      T* dst = out + row * n;
      for (std::int64_t j = 0; j < n; ++j)
        dst[j] = scale * right[j];
    }
  });
}

// out[b] = sum_k a[b, k] * c[b, k]: a product whose own dims are all 1.
template <typename T>
void dotProducts(const T* a, const T* c, T* out, std::int64_t batch, std::int64_t k) {
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(sizeof(T) * k));
  parallelFor(0, batch, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const T* x = a + b * k;
      const T* y = c + b * k;
      T acc[4] = {T(0), T(0), T(0), T(0)};
      std::int64_t i = 0;
      for (; i + 4 <= k; i += 4) {
        for (int u = 0; u < 4; ++u)
          acc[u] += x[i + u] * y[i + u];
      }
      for (; i < k; ++i)
        acc[0] += x[i] * y[i];
      out[b] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
  });
}

class EinsumKernel final : public OpKernel {
 public:
  explicit EinsumKernel(const KernelInit& init) : nodeName_(init.nodeName), dtype_(init.inputs.at(0).meta.dtype) {
    std::vector<std::size_t> ranks;
    std::vector<Shape> shapes;
    for (const InputInfo& input : init.inputs) {
      ranks.push_back(input.meta.shape.size());
      shapes.push_back(input.meta.shape);
    }
    try {
      if (!isEinsumDType(dtype_))
        fail("type {} is not supported (float32 and float64 only)", dtypeName(dtype_));
      plan_ = einsum::makePlan(parseEinsum(init.attrs.getString("equation"), ranks), shapes);
    } catch (const Error& e) {
      fail("node '{}' (Einsum): {}", nodeName_, e.what());
    }
    const OpRegistry& registry = OpRegistry::instance();
    kernels_.resize(plan_.steps.size());
    for (std::size_t s = 0; s < plan_.steps.size(); ++s) {
      const einsum::Step& step = plan_.steps[s];
      const TensorMeta out{dtype_, step.shape};
      if (step.kind == einsum::StepKind::Sum) {
        Attributes attrs;
        attrs.set("axes", step.axes);
        attrs.set("keepdims", std::int64_t{0});
        const std::vector<InputInfo> inputs{InputInfo{true, meta(step.inputs[0]), nullptr}};
        kernels_[s] = (*registry.kernel("ReduceSum", DeviceType::CPU))(
            KernelInit{inputs, {out}, attrs, nodeName_ + "/sum", init.training});
      } else if (step.kind == einsum::StepKind::Product && usesMatmul(step)) {
        const std::vector<InputInfo> inputs{InputInfo{true, TensorMeta{dtype_, productShape(step, step.m, step.k)}},
                                            InputInfo{true, TensorMeta{dtype_, productShape(step, step.k, step.n)}}};
        const TensorMeta y{dtype_, productShape(step, step.m, step.n)};
        kernels_[s] = (*registry.kernel("MatMul", DeviceType::CPU))(
            KernelInit{inputs, {y}, Attributes{}, nodeName_ + "/matmul", init.training});
      }
    }
  }

  std::string implementation() const override { return einsum::describe(plan_); }

  void compute(KernelContext& ctx) override {
    if (!ctx.hasOutput(0))
      return;
    Tensor& output = ctx.output(0);
    std::vector<Tensor> values(plan_.valueShapes.size());
    for (std::size_t i = 0; i < ctx.inputs.size(); ++i)
      values[i] = ctx.input(i);
    const std::size_t operands = ctx.inputs.size();
    for (std::size_t s = 0; s < plan_.steps.size(); ++s) {
      const einsum::Step& step = plan_.steps[s];
      Tensor& result = values[operands + s];
      if (step.kind == einsum::StepKind::Reshape) {
        result = values[static_cast<std::size_t>(step.inputs[0])].reshape(step.shape);
        continue;
      }
      result = static_cast<int>(s) == plan_.resultStep ? output.reshape(step.shape)
                                                       : Tensor::empty(dtype_, step.shape, MemoryCategory::Workspace);
      run(s, values, result, ctx);
    }
    if (plan_.resultStep < 0 && output.numel() > 0) {
      const Tensor& value = values[static_cast<std::size_t>(plan_.result)];
      copyBytes(output.rawData(), value.rawData(), value.bytes());
    }
  }

 private:
  // MatMul for real products; the loops for the degenerate ones (nothing contracted, or 1 x 1 results).
  static bool usesMatmul(const einsum::Step& step) { return step.k != 1 && !(step.m == 1 && step.n == 1); }

  static Shape productShape(const einsum::Step& step, std::int64_t rows, std::int64_t cols) {
    return step.batch == 1 ? Shape{rows, cols} : Shape{step.batch, rows, cols};
  }

  TensorMeta meta(int value) const { return TensorMeta{dtype_, plan_.valueShapes[static_cast<std::size_t>(value)]}; }

  void run(std::size_t s, const std::vector<Tensor>& values, Tensor& result, const KernelContext& outer) {
    const einsum::Step& step = plan_.steps[s];
    const Tensor& in = values[static_cast<std::size_t>(step.inputs[0])];
    const std::size_t es = dtypeSize(dtype_);
    switch (step.kind) {
      case einsum::StepKind::Diagonal:
        stridedCopy(result.rawData(), in.rawData(), step.shape, step.viewStrides, es);
        return;
      case einsum::StepKind::Permute:
        transposeBytes(result.rawData(), in.rawData(), in.shape(), step.perm, es);
        return;
      case einsum::StepKind::Sum:
        runInner(s, {&in}, result, outer);
        return;
      case einsum::StepKind::Product: {
        const Tensor& other = values[static_cast<std::size_t>(step.inputs[1])];
        if (result.numel() == 0)
          return;
        if (usesMatmul(step)) {
          const Tensor a = in.reshape(productShape(step, step.m, step.k));
          const Tensor b = other.reshape(productShape(step, step.k, step.n));
          runInner(s, {&a, &b}, result, outer);
        } else if (dtype_ == DType::Float32) {
          product<float>(step, in, other, result);
        } else {
          product<double>(step, in, other, result);
        }
        return;
      }
      case einsum::StepKind::Reshape:
        return;
    }
  }

  template <typename T>
  static void product(const einsum::Step& step, const Tensor& a, const Tensor& b, Tensor& result) {
    if (step.k == 1) {
      outerProducts(a.data<T>(), b.data<T>(), result.data<T>(), step.batch, step.m, step.n);
    } else {
      dotProducts(a.data<T>(), b.data<T>(), result.data<T>(), step.batch, step.k);
    }
  }

  // Runs step s's inner kernel (ReduceSum or MatMul) into `result`, viewed as that kernel's output.
  void runInner(std::size_t s, std::vector<const Tensor*> inputs, Tensor& result, const KernelContext& outer) {
    const einsum::Step& step = plan_.steps[s];
    Tensor out = step.kind == einsum::StepKind::Product ? result.reshape(productShape(step, step.m, step.n)) : result;
    KernelContext ctx;
    ctx.inputs = std::move(inputs);
    ctx.outputs = {&out};
    ctx.training = outer.training;
    ctx.step = outer.step;
    ctx.stream = outer.stream;
    kernels_[s]->compute(ctx);
  }

  std::string nodeName_;
  DType dtype_ = DType::Float32;
  einsum::Plan plan_;
  std::vector<std::unique_ptr<OpKernel>> kernels_;  // per step: ReduceSum's or MatMul's, or none
};

}  // namespace

void registerEinsumOps(OpRegistry& registry) {
  registry.addSchema(OpSchema{"Einsum", inferEinsum, true});
  registry.addKernel("Einsum", DeviceType::CPU, [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<EinsumKernel>(init);
  });
}

}  // namespace strata::cpu
