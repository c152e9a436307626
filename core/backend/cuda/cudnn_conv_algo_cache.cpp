#include "cudnn_conv_algo_cache.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "cuda_check.h"
#include "cuda_context.h"
#include "cudnn_common.h"

namespace strata::cuda {
namespace {

// The per-direction cuDNN entry points behind one interface.
struct ForwardApi {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static cudnnStatus_t maxCount(cudnnHandle_t handle, int* count) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count);
  }
  static cudnnStatus_t workspace(const ConvAlgoProblem& p, Algo algo, std::size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(p.handle, p.x, p.w, p.conv, p.y, algo, bytes);
  }
  static cudnnStatus_t find(const ConvAlgoProblem& p, int requested, int* returned, Perf* perf, void* ws,
                            std::size_t wsBytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(p.handle, p.x, p.xData, p.w, p.wData, p.conv, p.y, p.yData, requested,
                                                  returned, perf, ws, wsBytes);
  }
  static cudnnStatus_t heuristic(const ConvAlgoProblem& p, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(p.handle, p.x, p.w, p.conv, p.y, requested, returned, perf);
  }
};

struct BackwardDataApi {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static cudnnStatus_t maxCount(cudnnHandle_t handle, int* count) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, count);
  }
  static cudnnStatus_t workspace(const ConvAlgoProblem& p, Algo algo, std::size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(p.handle, p.w, p.y, p.conv, p.x, algo, bytes);
  }
  static cudnnStatus_t find(const ConvAlgoProblem& p, int requested, int* returned, Perf* perf, void* ws,
                            std::size_t wsBytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(p.handle, p.w, p.wData, p.y, p.yData, p.conv, p.x, p.xData,
                                                       requested, returned, perf, ws, wsBytes);
  }
  static cudnnStatus_t heuristic(const ConvAlgoProblem& p, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(p.handle, p.w, p.y, p.conv, p.x, requested, returned, perf);
  }
};

struct BackwardFilterApi {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kAlgoCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static cudnnStatus_t maxCount(cudnnHandle_t handle, int* count) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, count);
  }
  static cudnnStatus_t workspace(const ConvAlgoProblem& p, Algo algo, std::size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(p.handle, p.x, p.y, p.conv, p.w, algo, bytes);
  }
  static cudnnStatus_t find(const ConvAlgoProblem& p, int requested, int* returned, Perf* perf, void* ws,
                            std::size_t wsBytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(p.handle, p.x, p.xData, p.y, p.yData, p.conv, p.w, p.wData,
                                                         requested, returned, perf, ws, wsBytes);
  }
  static cudnnStatus_t heuristic(const ConvAlgoProblem& p, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(p.handle, p.x, p.y, p.conv, p.w, requested, returned, perf);
  }
};

const char* directionName(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward:
      return "forward";
    case ConvDirection::BackwardData:
      return "backward-data";
    case ConvDirection::BackwardFilter:
      return "backward-filter";
  }
  return "?";
}

std::mutex& cacheMutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, ConvAlgoChoice>& cache() {
  static auto* table = new std::map<std::string, ConvAlgoChoice>();  // leaked: used until process exit
  return *table;
}

// Whether a benchmarked or suggested algorithm may be used: it ran, fits the workspace and, for true float32,
// does not use tensor-op (TF32) math; float32 and float64 never take one that down-converts to 16 bits.
template <typename Perf>
bool acceptable(const Perf& perf, std::size_t workspaceLimit, bool forbidTensorOps, bool forbidConversion) {
  if (perf.status != CUDNN_STATUS_SUCCESS || perf.memory > workspaceLimit)
    return false;
  if (forbidConversion && perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
    return false;
  return !(forbidTensorOps &&
           (perf.mathType == CUDNN_TENSOR_OP_MATH || perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

template <typename Api>
ConvAlgoChoice search(const ConvAlgoProblem& p, const std::string& key) {
  const cudnnMathType_t requested = requestedConvMathType(p.dtype);
  STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, requested));
  const bool forbidTensorOps = requested == CUDNN_FMA_MATH;
  const bool forbidConversion = p.dtype != DType::Float16 && p.dtype != DType::BFloat16;
  const std::size_t limit = convolutionWorkspaceLimit();
  int maxCount = 0;
  STRATA_CUDNN_CHECK(Api::maxCount(p.handle, &maxCount));
  maxCount = std::max(maxCount, Api::kAlgoCount);
  std::vector<typename Api::Perf> perf(static_cast<std::size_t>(maxCount));

  // The largest workspace any algorithm within the limit asks for; the search gets that much.
  std::size_t searchBytes = 0;
  for (int a = 0; a < Api::kAlgoCount; ++a) {
    std::size_t bytes = 0;
    if (Api::workspace(p, static_cast<typename Api::Algo>(a), &bytes) == CUDNN_STATUS_SUCCESS && bytes <= limit)
      searchBytes = std::max(searchBytes, bytes);
  }
  Tensor workspace;
  try {
    workspace = workspaceBytes(searchBytes, p.device);
  } catch (const Error&) {
    searchBytes = 0;  // out of memory: search among the algorithms that need none
  }

  const typename Api::Perf* chosen = nullptr;
  int returned = 0;
  if (Api::find(p, maxCount, &returned, perf.data(), workspacePointer(workspace), searchBytes) ==
      CUDNN_STATUS_SUCCESS) {
    for (int i = 0; i < returned && chosen == nullptr; ++i) {
      if (acceptable(perf[static_cast<std::size_t>(i)], searchBytes, forbidTensorOps, forbidConversion))
        chosen = &perf[static_cast<std::size_t>(i)];
    }
  }
  workspace = Tensor();
  if (chosen == nullptr) {
    returned = 0;
    STRATA_CUDNN_CHECK(Api::heuristic(p, maxCount, &returned, perf.data()));
    for (int i = 0; i < returned && chosen == nullptr; ++i) {
      if (acceptable(perf[static_cast<std::size_t>(i)], limit, forbidTensorOps, forbidConversion))
        chosen = &perf[static_cast<std::size_t>(i)];
    }
  }
  if (chosen == nullptr) {
    fail("cuDNN has no {} convolution algorithm for {} within the {}-byte workspace limit", directionName(p.direction),
         key, limit);
  }
  ConvAlgoChoice choice;
  choice.algo = static_cast<int>(chosen->algo);
  // True float32 keeps FMA math whatever the benchmark ran with.
  choice.mathType = forbidTensorOps ? CUDNN_FMA_MATH : chosen->mathType;
  STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, choice.mathType));
  STRATA_CUDNN_CHECK(Api::workspace(p, chosen->algo, &choice.workspaceBytes));
  return choice;
}

}  // namespace

cudnnMathType_t requestedConvMathType(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return tf32Enabled() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    case DType::Float16:
    case DType::BFloat16:
      return CUDNN_TENSOR_OP_MATH;
    default:
      return CUDNN_DEFAULT_MATH;
  }
}

ConvAlgoChoice chooseConvAlgo(const ConvAlgoProblem& p) {
  const std::string key =
      fmt::format("{} {} math {} {} {} device {} limit {}", directionName(p.direction), dtypeName(p.dtype),
                  static_cast<int>(requestedConvMathType(p.dtype)), p.channelsLast ? "NHWC" : "NCHW", p.geometry,
                  p.device.index, convolutionWorkspaceLimit());
  {
    std::lock_guard<std::mutex> lock(cacheMutex());
    auto it = cache().find(key);
    if (it != cache().end()) {
      STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, it->second.mathType));
      return it->second;
    }
  }
  // Searched outside the lock: two threads meeting the same new problem both search, and the choices agree in
  // kind (both fit the limit).
  ConvAlgoChoice choice;
  switch (p.direction) {
    case ConvDirection::Forward:
      choice = search<ForwardApi>(p, key);
      break;
    case ConvDirection::BackwardData:
      choice = search<BackwardDataApi>(p, key);
      break;
    case ConvDirection::BackwardFilter:
      choice = search<BackwardFilterApi>(p, key);
      break;
  }
  std::lock_guard<std::mutex> lock(cacheMutex());
  cache().emplace(key, choice);
  return choice;
}

}  // namespace strata::cuda
