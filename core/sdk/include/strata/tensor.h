#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "strata/dtype.h"
#include "strata/error.h"
#include "strata/memory_category.h"
#include "strata/shape.h"
#include "strata/storage.h"

namespace strata {

struct TensorMeta {
  DType dtype = DType::Float32;
  Shape shape;
  bool operator==(const TensorMeta&) const = default;
  std::int64_t numel() const { return numElements(shape); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtypeSize(dtype); }
  std::string toString() const;
};

// A contiguous, row-major n-dimensional array in a Storage. Views (reshape, flat slices) share the storage:
// parameters are views into flat buffers, which is what lets strategies bucket and shard without copies.
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const TensorMeta& meta, MemoryCategory category = MemoryCategory::Other,
                      Device device = Device::cpu());
  static Tensor empty(DType dtype, Shape shape, MemoryCategory category = MemoryCategory::Other,
                      Device device = Device::cpu());
  static Tensor zeros(DType dtype, Shape shape, MemoryCategory category = MemoryCategory::Other,
                      Device device = Device::cpu());
  template <typename T>
  static Tensor scalar(T value) {
    Tensor t = empty(dtypeOf<T>(), {});
    *t.data<T>() = value;
    return t;
  }

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return meta_.dtype; }
  const Shape& shape() const { return meta_.shape; }
  const TensorMeta& meta() const { return meta_; }
  std::int64_t dim(std::int64_t axis) const;
  std::int64_t rank() const { return static_cast<std::int64_t>(meta_.shape.size()); }
  std::int64_t numel() const { return meta_.numel(); }
  std::size_t bytes() const { return meta_.bytes(); }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::size_t byteOffset() const { return offset_; }

  void* rawData() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(rawData());
  }

  // A view with another shape of the same element count.
  Tensor reshape(Shape shape) const;
  // A 1-D view of elements [start, start + count) of the flattened tensor.
  Tensor flatSlice(std::int64_t start, std::int64_t count) const;
  // A view of `meta` starting at element `start` of the flattened tensor (for parameters inside a flat buffer).
  Tensor viewAs(std::int64_t start, const TensorMeta& meta) const;
  Tensor clone(MemoryCategory category = MemoryCategory::Other) const;
  // A copy on `device` (this tensor itself when it already lives there).
  Tensor to(Device device, MemoryCategory category = MemoryCategory::Other) const;
  // Copies src's elements into this tensor; shapes must have the same element count and dtype. Either side may
  // live on a device; copies into host memory are complete on return.
  void copyFrom(const Tensor& src);
  // Sets every byte to zero (on whichever device the tensor lives).
  void zero();
  // this = src, or this += src with `accumulate`, element by element, converting between the floating dtypes
  // (float32, float64, float16, bfloat16; rounding to nearest even). Both on the same device, where it runs
  // (a device kernel on CUDA, ordered with the device's other work), so a strategy can cast or add flat buffers
  // without moving them through the host.
  void convertFrom(const Tensor& src, bool accumulate = false);

 private:
  Tensor(std::shared_ptr<Storage> storage, std::size_t offset, TensorMeta meta)
      : storage_(std::move(storage)), offset_(offset), meta_(std::move(meta)) {}

  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;
  TensorMeta meta_;
};

}  // namespace strata
