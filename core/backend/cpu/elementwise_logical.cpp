// Boolean ops (Not, And, Or, Xor) and Where.

#include <cstring>

#include "elementwise_common.h"

namespace strata::cpu::elementwise_detail {

namespace {

using BoolType = TypeList<bool>;

template <typename F>
void addLogical(OpRegistry& registry, const std::string& type, F fn) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, BoolType{});
        requireDType(ctx, 1, BoolType{});
        return repeatMeta(ctx, TensorMeta{DType::Bool, broadcastInputShapes(ctx)});
      },
      [fn](const KernelInit&) -> ComputeFn {
        return [fn](KernelContext& ctx) {
          binaryLoop<bool, bool, bool>(ctx.input(0), ctx.input(1), ctx.output(0), 1, fn);
        };
      });
}

// Where on raw elements of `Elem` bytes: the values are only copied, so any dtype of that size works.
template <typename Elem>
void whereTyped(const Tensor& cond, const Tensor& x, const Tensor& y, Tensor& out) {
  const bool* pc = cond.data<bool>();
  const Elem* px = static_cast<const Elem*>(x.rawData());
  const Elem* py = static_cast<const Elem*>(y.rawData());
  Elem* po = static_cast<Elem*>(out.rawData());
  const std::int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  if (cond.numel() == n && x.numel() == n && y.numel() == n) {
    parallelChunks(n, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        po[i] = pc[i] ? px[i] : py[i];
      }
    });
    return;
  }
  const Shape shapes[] = {cond.shape(), x.shape(), y.shape()};
  const BroadcastLayout layout = makeBroadcastLayout(out.shape(), shapes);
  const std::int64_t sc = layout.innerStride(0);
  const std::int64_t sx = layout.innerStride(1);
  const std::int64_t sy = layout.innerStride(2);
  parallelChunks(layout.rowCount(), layout.rowLength(), [&](std::int64_t begin, std::int64_t end) {
    forEachBroadcastRow(layout, begin, end, [&](std::int64_t o, const std::int64_t* offsets, std::int64_t len) {
      const bool* rc = pc + offsets[0];
      const Elem* rx = px + offsets[1];
      const Elem* ry = py + offsets[2];
      Elem* ro = po + o;
      if (sc == 0) {  // one condition for the whole row: a copy of x's or y's row
        const Elem* src = rc[0] ? rx : ry;
        const std::int64_t stride = rc[0] ? sx : sy;
        for (std::int64_t i = 0; i < len; ++i) {
          ro[i] = src[i * stride];
        }
        return;
      }
      for (std::int64_t i = 0; i < len; ++i) {
        ro[i] = rc[i] ? rx[i * sx] : ry[i * sy];
      }
    });
  });
}

void registerWhere(OpRegistry& registry) {
  addOp(
      registry, "Where",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, BoolType{});
        const DType dtype = ctx.input(1).meta.dtype;
        if (ctx.input(2).meta.dtype != dtype) {
          ctx.error(fmt::format("X has dtype {} but Y has {}", dtypeName(dtype), dtypeName(ctx.input(2).meta.dtype)));
        }
        return repeatMeta(ctx, TensorMeta{dtype, broadcastInputShapes(ctx)});
      },
      [](const KernelInit&) -> ComputeFn {
        return [](KernelContext& ctx) {
          const Tensor& x = ctx.input(1);
          switch (dtypeSize(x.dtype())) {
            case 1:
              whereTyped<std::uint8_t>(ctx.input(0), x, ctx.input(2), ctx.output(0));
              break;
            case 2:
              whereTyped<std::uint16_t>(ctx.input(0), x, ctx.input(2), ctx.output(0));
              break;
            case 4:
              whereTyped<std::uint32_t>(ctx.input(0), x, ctx.input(2), ctx.output(0));
              break;
            case 8:
              whereTyped<std::uint64_t>(ctx.input(0), x, ctx.input(2), ctx.output(0));
              break;
            default:
              fail("Where: unsupported dtype {}", dtypeName(x.dtype()));
          }
        };
      });
}

}  // namespace

void registerLogicalOps(OpRegistry& registry) {
  addOp(
      registry, "Not",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, BoolType{});
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [](const KernelInit&) -> ComputeFn {
        return [](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          unaryLoop(in.data<bool>(), ctx.output(0).data<bool>(), in.numel(), 1, [](bool x) { return !x; });
        };
      });
  addLogical(registry, "And", [](bool x, bool y) { return x && y; });
  addLogical(registry, "Or", [](bool x, bool y) { return x || y; });
  addLogical(registry, "Xor", [](bool x, bool y) { return x != y; });
  registerWhere(registry);
}

}  // namespace strata::cpu::elementwise_detail
