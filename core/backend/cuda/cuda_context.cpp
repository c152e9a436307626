#include "cuda_context.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "cuda_check.h"
#include "cuda_stream.h"

namespace strata::cuda {
namespace {

constexpr int kMaxDevices = 64;
// cuBLAS would otherwise allocate its own workspace with cudaMalloc per handle and stream.
constexpr std::size_t kCublasWorkspaceBytes = 32U << 20U;

std::atomic<bool> gTf32{true};
std::atomic<std::size_t> gWorkspaceLimit{std::size_t{1} << 30U};

struct Slot {
  std::once_flag once;
  std::unique_ptr<CudaContext> context;
  void* cublasWorkspace = nullptr;
  cudaStream_t boundStream = nullptr;  // the stream the handles were last bound to
};

std::array<Slot, kMaxDevices>& slots() {
  static auto* table = new std::array<Slot, kMaxDevices>();  // leaked: handles must outlive static tensors
  return *table;
}

std::unique_ptr<CudaContext> createContext(int device, Slot& slot) {
  auto context = std::make_unique<CudaContext>();
  context->device = device;
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&context->properties, device));
  STRATA_CUDNN_CHECK(cudnnCreate(&context->cudnn));
  STRATA_CUBLAS_CHECK(cublasCreate(&context->cublas));
  STRATA_CUBLAS_CHECK(cublasLtCreate(&context->cublasLt));
  STRATA_CUDA_CHECK(cudaMalloc(&slot.cublasWorkspace, kCublasWorkspaceBytes));
  STRATA_CUBLAS_CHECK(cublasSetWorkspace(context->cublas, slot.cublasWorkspace, kCublasWorkspaceBytes));
  return context;
}

}  // namespace

CudaContext& contextFor(int device) {
  STRATA_CHECK(device >= 0 && device < kMaxDevices, "no CUDA device {}", device);
  Slot& slot = slots()[static_cast<std::size_t>(device)];
  std::call_once(slot.once, [&] { slot.context = createContext(device, slot); });
  STRATA_CHECK(slot.context != nullptr, "CUDA device {} failed to initialise earlier", device);
  return *slot.context;
}

CudaContext& contextOf(const KernelContext& ctx) {
  const cudaStream_t stream = streamOf(ctx);
  const int device = ctx.stream->device().index;
  CudaContext& context = contextFor(device);
  Slot& slot = slots()[static_cast<std::size_t>(device)];
  if (slot.boundStream != stream) {
    STRATA_CUDNN_CHECK(cudnnSetStream(context.cudnn, stream));
    STRATA_CUBLAS_CHECK(cublasSetStream(context.cublas, stream));
    // cublasSetStream resets the handle to cuBLAS's own workspace pool, which would cudaMalloc per stream.
    STRATA_CUBLAS_CHECK(cublasSetWorkspace(context.cublas, slot.cublasWorkspace, kCublasWorkspaceBytes));
    slot.boundStream = stream;
  }
  return context;
}

bool tf32Enabled() {
  return gTf32.load(std::memory_order_relaxed);
}
void setTf32Enabled(bool enabled) {
  gTf32.store(enabled, std::memory_order_relaxed);
}
std::size_t convolutionWorkspaceLimit() {
  return gWorkspaceLimit.load(std::memory_order_relaxed);
}
void setConvolutionWorkspaceLimit(std::size_t bytes) {
  gWorkspaceLimit.store(bytes, std::memory_order_relaxed);
}

}  // namespace strata::cuda
