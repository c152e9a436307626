#pragma once

// Helpers shared by the reduction-family CPU ops (reduction_*.cpp). Internal to the CPU backend.

#include <cstdint>

#include "elementwise_common.h"
#include "reduction_plan.h"

namespace strata::cpu::reduction_detail {

using elementwise_detail::addOp;
using elementwise_detail::ComputeFn;
using elementwise_detail::dispatch;
using elementwise_detail::FloatTypes;
using elementwise_detail::repeatMeta;
using elementwise_detail::requireDType;

// (Log)softmax over the middle axis of an [outer, axis, inner] view; instantiated for float and double.
template <typename T>
void softmaxAlongAxis(const T* src, T* dst, const AxisSplit& split, bool logSoftmax);

void registerSoftmaxOps(OpRegistry& registry);  // Softmax, LogSoftmax, LayerNormalization
void registerLossOps(OpRegistry& registry);     // SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss

}  // namespace strata::cpu::reduction_detail
