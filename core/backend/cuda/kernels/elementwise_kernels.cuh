#pragma once

// Shared pieces of the elementwise CUDA kernels (elementwise_*.cu): device math for float and double, dispatch
// over the dtype sets the CPU kernels accept, and one broadcasting map kernel over any number of inputs. Each op
// is a functor over the accumulation type (float for the 16-bit floats), mirroring the CPU lambda of the same op.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../cpu/broadcast.h"
#include "kernel_utils.cuh"

namespace strata::cuda {

// Registration of each family (one per elementwise_*.cu); registerElementwiseKernels and
// registerElementwiseGradKernels (cuda_ops.h) call them.
void registerUnaryElementwiseKernels(OpRegistry& registry);
void registerBinaryElementwiseKernels(OpRegistry& registry);
void registerMiscElementwiseKernels(OpRegistry& registry);

namespace elementwise {

// ---- Math for float and double: the single-precision function for float (never a silent promotion). Host
// callable too, so the op functors can be checked against the CPU kernels without a GPU.

#define STRATA_EW_MATH1(name, floatFn, doubleFn)     \
  __host__ __device__ inline float name(float x) {   \
    return floatFn(x);                               \
  }                                                  \
  __host__ __device__ inline double name(double x) { \
    return doubleFn(x);                              \
  }

STRATA_EW_MATH1(dExp, expf, ::exp)
STRATA_EW_MATH1(dLog, logf, ::log)
STRATA_EW_MATH1(dLog1p, log1pf, ::log1p)
STRATA_EW_MATH1(dSqrt, sqrtf, ::sqrt)
STRATA_EW_MATH1(dTanh, tanhf, ::tanh)
STRATA_EW_MATH1(dErf, erff, ::erf)
STRATA_EW_MATH1(dSin, sinf, ::sin)
STRATA_EW_MATH1(dCos, cosf, ::cos)
STRATA_EW_MATH1(dTan, tanf, ::tan)
STRATA_EW_MATH1(dAsin, asinf, ::asin)
STRATA_EW_MATH1(dAcos, acosf, ::acos)
STRATA_EW_MATH1(dAtan, atanf, ::atan)
STRATA_EW_MATH1(dSinh, sinhf, ::sinh)
STRATA_EW_MATH1(dCosh, coshf, ::cosh)
STRATA_EW_MATH1(dAsinh, asinhf, ::asinh)
STRATA_EW_MATH1(dAcosh, acoshf, ::acosh)
STRATA_EW_MATH1(dAtanh, atanhf, ::atanh)
STRATA_EW_MATH1(dCeil, ceilf, ::ceil)
STRATA_EW_MATH1(dFloor, floorf, ::floor)
STRATA_EW_MATH1(dRint, rintf, ::rint)  // halves to even, like std::nearbyint under the default rounding mode
STRATA_EW_MATH1(dFabs, fabsf, ::fabs)

#undef STRATA_EW_MATH1

__host__ __device__ inline float dPow(float x, float y) {
  return powf(x, y);
}
__host__ __device__ inline double dPow(double x, double y) {
  return ::pow(x, y);
}
__host__ __device__ inline float dFmod(float x, float y) {
  return fmodf(x, y);
}
__host__ __device__ inline double dFmod(double x, double y) {
  return ::fmod(x, y);
}

// std::min / std::max exactly (which operand wins on NaN matters: the CPU kernels use these).
template <typename T>
__host__ __device__ inline T stdMin(T a, T b) {
  return (b < a) ? b : a;
}
template <typename T>
__host__ __device__ inline T stdMax(T a, T b) {
  return (a < b) ? b : a;
}

template <typename A>
__host__ __device__ inline A sigmoid(A x) {
  // Split by sign so exp never overflows.
  if (x >= A(0)) {
    return A(1) / (A(1) + dExp(-x));
  }
  const A e = dExp(x);
  return e / (A(1) + e);
}

template <typename A>
__host__ __device__ inline A softplus(A x) {
  // log(1 + exp(x)) without overflow for large x.
  return x > A(0) ? x + dLog1p(dExp(-x)) : dLog1p(dExp(x));
}

// ---- Dtype dispatch over the CPU kernels' type lists, each widened with the 16-bit floats (computed in float).

constexpr unsigned kFloatBit = 1;                               // float, double, float16, bfloat16
constexpr unsigned kInt32Int64Bit = 2;                          // int32, int64
constexpr unsigned kInt8Bit = 4;                                // int8
constexpr unsigned kUInt8Bit = 8;                               // uint8
constexpr unsigned kBoolBit = 16;                               // bool
constexpr unsigned kFloatTypes = kFloatBit;                     // FloatTypes
constexpr unsigned kPowBaseTypes = kFloatBit | kInt32Int64Bit;  // Pow's base
constexpr unsigned kSignedTypes = kPowBaseTypes | kInt8Bit;     // SignedTypes
constexpr unsigned kNumericTypes = kSignedTypes | kUInt8Bit;    // NumericTypes
constexpr unsigned kAllTypes = kNumericTypes | kBoolBit;        // AllTypes

// Calls fn(T{}) with the device type T of dtype when the set holds it; only those types are instantiated.
template <unsigned Set, typename Fn>
void dispatchTypes(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Float32:
      if constexpr ((Set & kFloatBit) != 0) {
        fn(float{});
        return;
      }
      break;
    case DType::Float64:
      if constexpr ((Set & kFloatBit) != 0) {
        fn(double{});
        return;
      }
      break;
    case DType::Float16:
      if constexpr ((Set & kFloatBit) != 0) {
        fn(__half{});
        return;
      }
      break;
    case DType::BFloat16:
      if constexpr ((Set & kFloatBit) != 0) {
        fn(__nv_bfloat16{});
        return;
      }
      break;
    case DType::Int64:
      if constexpr ((Set & kInt32Int64Bit) != 0) {
        fn(std::int64_t{});
        return;
      }
      break;
    case DType::Int32:
      if constexpr ((Set & kInt32Int64Bit) != 0) {
        fn(std::int32_t{});
        return;
      }
      break;
    case DType::Int8:
      if constexpr ((Set & kInt8Bit) != 0) {
        fn(std::int8_t{});
        return;
      }
      break;
    case DType::UInt8:
      if constexpr ((Set & kUInt8Bit) != 0) {
        fn(std::uint8_t{});
        return;
      }
      break;
    case DType::Bool:
      if constexpr ((Set & kBoolBit) != 0) {
        fn(bool{});
        return;
      }
      break;
  }
  fail("{}: dtype {} is not supported", op, dtypeName(dtype));
}

template <typename T>
using Acc = typename AccTypeOf<T>::type;

// Wraps an op functor written over accumulation types: widens every input and narrows the result to Out.
template <typename Out, typename F>
struct AccFn {
  F f;
  template <typename... Ts>
  __host__ __device__ Out operator()(Ts... xs) const {
    return fromAcc<Out>(f(toAcc(xs)...));
  }
};

// A value given in double (an attribute) as the op's element type T would hold it, widened to Acc<T>: what the
// CPU kernels' static_cast<T>(attr) gives.
template <typename T>
Acc<T> accFromDouble(double value) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<float>(T(static_cast<float>(value)));
  } else {
    return static_cast<T>(value);
  }
}

// ---- Broadcasting.

// Indexers that read inputs of `inShapes` at each linear index of `outShape` (numpy rules), from the CPU's
// makeBroadcastLayout: size-1 output dims dropped and dims every input walks as one run merged, so index math stays
// cheap and ranks above kMaxDims still work in the common cases. An input read at one element gets rank 0.
inline std::vector<Indexer> broadcastIndexers(const Shape& outShape, std::span<const Shape> inShapes) {
  const cpu::BroadcastLayout layout = cpu::makeBroadcastLayout(outShape, inShapes);
  STRATA_CHECK(layout.dims.size() <= static_cast<std::size_t>(kMaxDims),
               "CUDA elementwise kernels broadcast over at most {} dimensions, got {} (output shape {})", kMaxDims,
               layout.dims.size(), shapeToString(outShape));
  std::vector<Indexer> result(inShapes.size());
  for (std::size_t k = 0; k < inShapes.size(); ++k) {
    const std::vector<std::int64_t>& strides = layout.strides[k];
    if (std::all_of(strides.begin(), strides.end(), [](std::int64_t s) { return s == 0; })) {
      continue;  // rank 0: always offset 0
    }
    Indexer& indexer = result[k];
    indexer.rank = static_cast<int>(layout.dims.size());
    for (std::size_t d = 0; d < layout.dims.size(); ++d) {
      indexer.sizes[d] = layout.dims[d];
      indexer.strides[d] = strides[d];
    }
  }
  return result;
}

// One input of a map kernel.
template <typename T>
struct Operand {
  const T* data;
  Indexer index;
  bool contiguous;  // has the output's element count: read at the output's own index

  __host__ __device__ T operator[](std::int64_t i) const { return data[contiguous ? i : index.offset(i)]; }
};

// out[i] = f(in0[i], in1[i], ...) with every input broadcast to out.
template <typename Out, typename F, typename... Ins>
__global__ void mapKernel(Out* out, std::int64_t n, F f, Operand<Ins>... ins) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    out[i] = f(ins[i]...);
  }
}

template <typename Out, typename... Ins, typename F, std::size_t... K>
void launchMapImpl(cudaStream_t stream, Tensor& out, const F& f, const std::array<const Tensor*, sizeof...(Ins)>& in,
                   const std::vector<Indexer>& indexers, std::index_sequence<K...>) {
  const std::int64_t n = out.numel();
  mapKernel<Out, F, Ins...><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(
      out.data<Out>(), n, f,
      Operand<Ins>{static_cast<const Ins*>(in[K]->rawData()), indexers[K], in[K]->numel() == n}...);
  STRATA_CUDA_CHECK_LAUNCH();
}

// Launches out = f(inputs...) elementwise with numpy broadcasting; Out and Ins are the device element types.
// out may alias an input of its own shape (each element is read before it is written, by the same thread).
template <typename Out, typename... Ins, typename F, typename... Tensors>
void launchMap(cudaStream_t stream, Tensor& out, const F& f, const Tensors&... inputs) {
  static_assert(sizeof...(Ins) == sizeof...(Tensors), "one element type per input");
  if (out.numel() == 0) {
    return;
  }
  const std::array<const Tensor*, sizeof...(Ins)> in{&inputs...};
  const std::array<Shape, sizeof...(Ins)> shapes{inputs.shape()...};
  launchMapImpl<Out, Ins...>(stream, out, f, in, broadcastIndexers(out.shape(), shapes),
                             std::index_sequence_for<Ins...>{});
}

// A run-time count of inputs of one type (variadic ops), passed by value: keep it under the 4 KiB parameter limit.
constexpr int kMaxOperands = 16;

template <typename T>
struct OperandList {
  const T* data[kMaxOperands];
  Indexer index[kMaxOperands];
  bool contiguous[kMaxOperands];
  int count;

  __host__ __device__ T load(int k, std::int64_t i) const { return data[k][contiguous[k] ? i : index[k].offset(i)]; }
};

template <typename T>
OperandList<T> makeOperandList(const Tensor& out, const std::vector<const Tensor*>& inputs) {
  STRATA_CHECK(!inputs.empty() && inputs.size() <= static_cast<std::size_t>(kMaxOperands),
               "CUDA operand list of {} tensors (1 to {})", inputs.size(), kMaxOperands);
  std::vector<Shape> shapes;
  for (const Tensor* t : inputs) {
    shapes.push_back(t->shape());
  }
  const std::vector<Indexer> indexers = broadcastIndexers(out.shape(), shapes);
  OperandList<T> list{};
  list.count = static_cast<int>(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    list.data[k] = static_cast<const T*>(inputs[k]->rawData());
    list.index[k] = indexers[k];
    list.contiguous[k] = inputs[k]->numel() == out.numel();
  }
  return list;
}

// ---- Dropout's counter-based generator and run-time scalars.

// The same (seed, step, index) always gives the same number, on any thread split and on either backend (the CPU
// Dropout kernel uses this exact function).
__host__ __device__ inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

// Element 0 of a device tensor of any dtype as double (the CPU's scalarAsDouble), read inside a kernel so that
// run-time ratio / training_mode inputs need no host synchronisation.
__host__ __device__ inline double loadAsDouble(const void* p, DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return static_cast<double>(*static_cast<const float*>(p));
    case DType::Float16:
      return static_cast<double>(__half2float(*static_cast<const __half*>(p)));
    case DType::BFloat16:
      return static_cast<double>(__bfloat162float(*static_cast<const __nv_bfloat16*>(p)));
    case DType::Float64:
      return *static_cast<const double*>(p);
    case DType::Int64:
      return static_cast<double>(*static_cast<const std::int64_t*>(p));
    case DType::Int32:
      return static_cast<double>(*static_cast<const std::int32_t*>(p));
    case DType::Int8:
      return static_cast<double>(*static_cast<const std::int8_t*>(p));
    case DType::UInt8:
      return static_cast<double>(*static_cast<const std::uint8_t*>(p));
    case DType::Bool:
      return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0.0;
}

// Dropout's ratio and training decision: from inputs when present (read on the device), else the ratio attribute
// and the executor's training flag.
struct DropoutControl {
  const void* ratio = nullptr;
  DType ratioDType = DType::Float32;
  double ratioAttr = 0.5;
  const void* training = nullptr;
  DType trainingDType = DType::Bool;
  bool trainingFlag = false;

  __host__ __device__ double ratioValue() const {
    return ratio != nullptr ? loadAsDouble(ratio, ratioDType) : ratioAttr;
  }
  __host__ __device__ bool trainingValue() const {
    return training != nullptr ? loadAsDouble(training, trainingDType) != 0.0 : trainingFlag;
  }
};

// The control of a Dropout / DropoutGrad node: ratio is input ratioInput, training_mode input ratioInput + 1.
inline DropoutControl dropoutControl(const KernelContext& ctx, std::size_t ratioInput, double ratioAttr) {
  DropoutControl control;
  control.ratioAttr = ratioAttr;
  control.trainingFlag = ctx.training;
  if (ctx.hasInput(ratioInput)) {
    control.ratio = ctx.input(ratioInput).rawData();
    control.ratioDType = ctx.input(ratioInput).dtype();
  }
  if (ctx.hasInput(ratioInput + 1)) {
    control.training = ctx.input(ratioInput + 1).rawData();
    control.trainingDType = ctx.input(ratioInput + 1).dtype();
  }
  return control;
}

// Element 0 of a tensor on any device as double (a synchronous copy for device tensors: plan time only).
inline double hostScalarAsDouble(const Tensor& tensor) {
  STRATA_CHECK(tensor.numel() >= 1, "a scalar from an empty tensor of shape {}", shapeToString(tensor.shape()));
  const Tensor host = tensor.device().type == DeviceType::CPU ? tensor : tensor.to(Device::cpu());
  double value = 0.0;
  visitDType(host.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half>) {
      value = halfToFloat(host.data<std::uint16_t>()[0]);
    } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
      value = bfloat16ToFloat(host.data<std::uint16_t>()[0]);
    } else {
      value = static_cast<double>(host.data<T>()[0]);
    }
  });
  return value;
}

// Registers a kernel built per node from its attributes: makeCompute(init) returns the compute function.
template <typename MakeCompute>
void addCudaOp(OpRegistry& registry, const std::string& type, MakeCompute makeCompute) {
  addCudaKernelFactory(registry, type, [makeCompute](const KernelInit& init) {
    return makeFunctionKernel(std::function<void(KernelContext&)>(makeCompute(init)));
  });
}

// A functor factory for ops without attributes.
template <typename F>
auto plain() {
  return [](const Attributes&) { return F{}; };
}

}  // namespace elementwise
}  // namespace strata::cuda
