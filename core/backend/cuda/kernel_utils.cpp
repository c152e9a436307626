#include "kernel_utils.cuh"

#include <exception>

namespace strata::cuda {

Indexer broadcastIndexer(const Shape& inShape, const Shape& outShape) {
  STRATA_CHECK(outShape.size() <= static_cast<std::size_t>(kMaxDims), "CUDA kernels take at most {} dimensions, got {}",
               kMaxDims, outShape.size());
  STRATA_CHECK(inShape.size() <= outShape.size(), "cannot broadcast {} to {}", shapeToString(inShape),
               shapeToString(outShape));
  Indexer indexer;
  indexer.rank = static_cast<int>(outShape.size());
  const std::size_t lead = outShape.size() - inShape.size();
  std::int64_t stride = 1;
  for (int d = indexer.rank - 1; d >= 0; --d) {
    const auto ud = static_cast<std::size_t>(d);
    indexer.sizes[d] = outShape[ud];
    if (ud < lead) {
      indexer.strides[d] = 0;
      continue;
    }
    const std::int64_t inSize = inShape[ud - lead];
    STRATA_CHECK(inSize == outShape[ud] || inSize == 1, "cannot broadcast {} to {}", shapeToString(inShape),
                 shapeToString(outShape));
    indexer.strides[d] = inSize == 1 ? 0 : stride;
    stride *= inSize;
  }
  return indexer;
}

Indexer permuteIndexer(const Shape& inShape, const std::vector<std::int64_t>& perm) {
  STRATA_CHECK(inShape.size() <= static_cast<std::size_t>(kMaxDims), "CUDA kernels take at most {} dimensions, got {}",
               kMaxDims, inShape.size());
  STRATA_CHECK(perm.size() == inShape.size(), "a permutation of {} axes for a tensor of rank {}", perm.size(),
               inShape.size());
  std::vector<std::int64_t> inStrides(inShape.size(), 1);
  for (std::size_t d = inShape.size(); d-- > 1;) {
    inStrides[d - 1] = inStrides[d] * inShape[d];
  }
  Indexer indexer;
  indexer.rank = static_cast<int>(perm.size());
  for (std::size_t d = 0; d < perm.size(); ++d) {
    const auto axis = static_cast<std::size_t>(perm[d]);
    indexer.sizes[d] = inShape.at(axis);
    indexer.strides[d] = inStrides.at(axis);
  }
  return indexer;
}

void addCudaKernel(OpRegistry& registry, const std::string& type, std::function<void(KernelContext&)> compute) {
  STRATA_CHECK(registry.schema(type) != nullptr, "CUDA kernel for '{}', an op with no schema", type);
  registry.addKernel(type, DeviceType::CUDA,
                     [compute = std::move(compute)](const KernelInit&) { return makeFunctionKernel(compute); });
}

void addCudaKernelFactory(OpRegistry& registry, const std::string& type, KernelFactory factory,
                          std::function<bool(const KernelInit&)> nativeChannelsLast) {
  STRATA_CHECK(registry.schema(type) != nullptr, "CUDA kernel for '{}', an op with no schema", type);
  if (nativeChannelsLast) {
    nativeChannelsLast = [native = std::move(nativeChannelsLast)](const KernelInit& init) {
      try {
        return native(init);
      } catch (const std::exception&) {
        return false;
      }
    };
  }
  registry.addKernel(type, DeviceType::CUDA, std::move(factory), std::move(nativeChannelsLast));
}

}  // namespace strata::cuda
