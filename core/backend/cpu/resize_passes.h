#pragma once

// One axis's pass of Note [Separable resize] (resize_plan.h) and its adjoint, in float or double: the loops the
// Resize and ResizeGrad kernels run. Tensors are viewed as [outer, axis, inner] around the pass's axis.

#include <cstdint>
#include <vector>

#include "resize_plan.h"

namespace strata::cpu::resize {

inline constexpr int kMaxAdjointTaps = 16;

// A pass's tables in the element type (weights rounded once, at plan time).
template <typename T>
struct TypedPass {
  std::int64_t axis = 0;
  std::int64_t inSize = 0;
  std::int64_t outSize = 0;
  int taps = 1;
  std::vector<std::int32_t> index;  // [taps][outSize]
  std::vector<T> weight;            // [taps][outSize]
  AxisAdjoint adjoint;              // filled for ResizeGrad only
  std::vector<T> adjointWeight;
  // The adjoint again with every input position's list padded to adjointTaps entries of weight 0 ([taps][inSize],
  // as index and weight): the innermost axis's adjoint then gathers like the forward pass. Empty when some list is
  // longer than kMaxAdjointTaps (large upsampling factors), which keep the compressed lists.
  int adjointTaps = 0;
  std::vector<std::int32_t> adjointIndex;
  std::vector<T> adjointFixedWeight;
  std::vector<std::int64_t> extrapolated;
};

template <typename T>
TypedPass<T> typedPass(const AxisTaps& taps, bool withAdjoint);

// dst [outer, outSize, inner] = the pass of src [outer, inSize, inner].
template <typename T>
void forwardPass(const TypedPass<T>& pass, const T* src, T* dst, std::int64_t outer, std::int64_t inner);

// dst [outer, inSize, inner] = the adjoint pass of src [outer, outSize, inner]: every input position gets the
// weighted sum of the output positions that read it (dst is overwritten).
template <typename T>
void adjointPass(const TypedPass<T>& pass, const T* src, T* dst, std::int64_t outer, std::int64_t inner);

// Note [Fused resize passes]: two resized axes (H and W, in either layout) run as one loop over the output rows of
// the outer axis a: each output row blends its input rows along a (whole rows, vectorised) into a scratch row that
// stays in cache, and resamples that along b straight into the output. The adjoint is the same per input row of a:
// it blends the output-gradient rows that read it, then applies b's adjoint. Neither writes the intermediate tensor
// of two separate passes, and every destination row is still one task's, summed in a fixed order.
// Tensors are [outer, a, mid, b, inner] (mid: the axes between a and b).
template <typename T>
void fusedForward(const TypedPass<T>& a, const TypedPass<T>& b, const T* src, T* dst, std::int64_t outer,
                  std::int64_t mid, std::int64_t inner);
template <typename T>
void fusedAdjoint(const TypedPass<T>& a, const TypedPass<T>& b, const T* src, T* dst, std::int64_t outer,
                  std::int64_t mid, std::int64_t inner);

// Sets every element of dst (of `shape`, the whole output) at an extrapolated position of the pass to `value`.
template <typename T>
void fillExtrapolated(const TypedPass<T>& pass, T* dst, const Shape& shape, T value);

}  // namespace strata::cpu::resize
