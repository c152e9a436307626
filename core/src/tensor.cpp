#include "strata/tensor.h"

#include <cstring>

namespace strata {

std::string TensorMeta::toString() const {
  return std::string(dtypeName(dtype)) + shapeToString(shape);
}

Tensor Tensor::empty(const TensorMeta& meta, MemoryCategory category, Device device) {
  STRATA_CHECK(isStatic(meta.shape), "cannot allocate a tensor of dynamic shape {}", shapeToString(meta.shape));
  auto storage = std::make_shared<Storage>(allocatorFor(device), meta.bytes(), category);
  return Tensor(std::move(storage), 0, meta);
}

Tensor Tensor::empty(DType dtype, Shape shape, MemoryCategory category, Device device) {
  return empty(TensorMeta{dtype, std::move(shape)}, category, device);
}

Tensor Tensor::zeros(DType dtype, Shape shape, MemoryCategory category) {
  Tensor t = empty(dtype, std::move(shape), category);
  std::memset(t.rawData(), 0, t.bytes());
  return t;
}

std::int64_t Tensor::dim(std::int64_t axis) const {
  return meta_.shape.at(normalizeAxis(axis, rank()));
}

Tensor Tensor::reshape(Shape shape) const {
  STRATA_CHECK(numElements(shape) == numel(), "cannot reshape {} into {}: element counts differ",
               shapeToString(meta_.shape), shapeToString(shape));
  return Tensor(storage_, offset_, TensorMeta{meta_.dtype, std::move(shape)});
}

Tensor Tensor::flatSlice(std::int64_t start, std::int64_t count) const {
  return viewAs(start, TensorMeta{meta_.dtype, {count}});
}

Tensor Tensor::viewAs(std::int64_t start, const TensorMeta& meta) const {
  STRATA_CHECK(meta.dtype == meta_.dtype, "a view must keep the dtype ({} vs {})", dtypeName(meta.dtype),
               dtypeName(meta_.dtype));
  STRATA_CHECK(start >= 0 && start + meta.numel() <= numel(),
               "view of {} elements at {} is outside a tensor of {} elements", meta.numel(), start, numel());
  return Tensor(storage_, offset_ + static_cast<std::size_t>(start) * dtypeSize(meta_.dtype), meta);
}

Tensor Tensor::clone(MemoryCategory category) const {
  Tensor t = empty(meta_, category, device());
  t.copyFrom(*this);
  return t;
}

void Tensor::copyFrom(const Tensor& src) {
  STRATA_CHECK(src.dtype() == dtype() && src.numel() == numel(), "cannot copy {} into {}", src.meta().toString(),
               meta_.toString());
  STRATA_CHECK(device().type == DeviceType::CPU && src.device().type == DeviceType::CPU,
               "Tensor::copyFrom copies host tensors only; device copies go through the backend");
  if (bytes() > 0) {
    std::memmove(rawData(), src.rawData(), bytes());
  }
}

}  // namespace strata
