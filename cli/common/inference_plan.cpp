#include "common/inference_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "strata/graphs/attention_fusion.h"
#include "strata/graphs/batch_norm_folding.h"
#include "strata/graphs/channels_last.h"
#include "strata/graphs/gelu_fusion.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/matmul_bias_fusion.h"
#include "strata/graphs/mish_fusion.h"
#include "strata/graphs/relu_fusion.h"
#include "strata/graphs/silu_fusion.h"
#include "strata/graphs/specialize.h"

namespace strata::cli {

std::unique_ptr<Executor> buildInferenceExecutor(const Graph& specialised, const std::vector<TensorMeta>& inputs,
                                                 Device device, const DeviceOptions& options, bool verbose) {
  LowerOptions lowerOptions;
  lowerOptions.device = device;
  // --channels-last: convolutions, pooling and batch norm on NHWC activations (strata/graphs/channels_last.h).
  const bool float32 = std::all_of(inputs.begin(), inputs.end(), [](const TensorMeta& t) {
    return !isFloatingPoint(t.dtype) || t.dtype == DType::Float32;
  });
  // Note [Gelu fusion]: an exported GELU's five elementwise nodes run as one; on the CPU also SiLU's two and Mish's
  // three, and a batch norm, an Add or a Conv with the Relu that alone reads it (Notes [SiLU fusion], [Mish fusion],
  // [Fused ReLU]; their kernels are the CPU's), as the training plans' evaluation does.
  const SpecializeOptions again{.inputMetas = inputs, .foldParameters = true};
  int fusedGelus = 0;
  int fusedSilus = 0;
  int fusedMishes = 0;
  int fusedRelus = 0;
  int fusedBiases = 0;
  // Note [Batch norm folded into the convolution]: first, so that a Relu after the pair can fuse into the Conv.
  int foldedNorms = 0;
  Graph fused = fuseGelu(foldBatchNormIntoConv(specialised, &foldedNorms), &fusedGelus);
  if (foldedNorms > 0) {
    fused = specialize(fused, again);
    if (verbose) {
      fmt::print("plan: {} batch norm{} folded into {} convolution{}\n", foldedNorms, foldedNorms == 1 ? "" : "s",
                 foldedNorms == 1 ? "its" : "their", foldedNorms == 1 ? "" : "s");
    }
  }
  if (device.type == DeviceType::CPU) {
    fused = fuseMish(fuseSilu(fuseRelu(fused, &fusedRelus), &fusedSilus), &fusedMishes);
    int fusedClips = 0;  // a forward-only plan: Clip's gradient is never needed
    fused = fuseClipIntoConv(fused, &fusedClips);
    fusedRelus += fusedClips;
    int fusedAttention = 0;
    fused = fuseAttention(fused, &fusedAttention);    // Note [Fused attention]
    fused = fuseBiasIntoMatMul(fused, &fusedBiases);  // Note [MatMul bias fusion]: the CPU's MatMul takes the bias
    fusedBiases += fusedAttention;
  }
  if (fusedGelus + fusedSilus + fusedMishes + fusedRelus + fusedBiases > 0)
    fused = specialize(fused, again);
  const Graph planned =
      channelsLastForInference(options, device, float32) ? specialize(channelsLast(fused), again) : fused;
  return std::make_unique<Executor>(lowerToProgram(planned, lowerOptions), device);
}

}  // namespace strata::cli
