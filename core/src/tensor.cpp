#include "strata/tensor.h"

#include <cstring>

#include "strata/device_backend.h"

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

Tensor Tensor::zeros(DType dtype, Shape shape, MemoryCategory category, Device device) {
  Tensor t = empty(dtype, std::move(shape), category, device);
  t.zero();
  return t;
}

namespace {

DeviceBackend& backendFor(Device device) {
  DeviceBackend* backend = deviceBackend(device.type);
  STRATA_CHECK(backend != nullptr, "no backend is initialised for device {}", device.toString());
  return *backend;
}

}  // namespace

void Tensor::zero() {
  if (bytes() == 0) {
    return;
  }
  if (device().type == DeviceType::CPU) {
    std::memset(rawData(), 0, bytes());
  } else {
    backendFor(device()).fillZero(rawData(), device(), bytes());
  }
}

Tensor Tensor::to(Device device, MemoryCategory category) const {
  if (device == this->device()) {
    return *this;
  }
  Tensor t = empty(meta_, category, device);
  t.copyFrom(*this);
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
  if (bytes() == 0) {
    return;
  }
  if (device().type == DeviceType::CPU && src.device().type == DeviceType::CPU) {
    std::memmove(rawData(), src.rawData(), bytes());
    return;
  }
  const Device backendDevice = device().type != DeviceType::CPU ? device() : src.device();
  backendFor(backendDevice).copy(rawData(), device(), src.rawData(), src.device(), bytes());
}

}  // namespace strata
