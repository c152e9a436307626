// ScaledDotProductAttention and its gradient (Note [Fused attention], graphs/attention_fusion.h): softmax(scale Q K^T,
// causally masked) V without the [T, T] matrices in memory.
//
// Note [Attention in row blocks]: each (batch, head) slice is one thread's: for a block of kRows queries it forms
// the scores against the keys the block may see (all of them, or up to its last row when causal: later keys are
// never touched), takes an exact softmax per row and multiplies by V, through oneDNN's sgemm (single-threaded inside
// the slice's thread; a loop GEMM for float64, which serves reference checks). The block's scores live in a scratch
// of kRows x T per thread, so memory grows with T, not T^2; the forward keeps each row's log-sum-exp (LSE) for the
// backward, which recomputes the block's probabilities from it (FlashAttention's recomputation) and accumulates
// dK and dV in the slice's own rows: no two threads write the same element, and the sums run in a fixed order.
#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu_ops.h"
#include "elementwise_common.h"
#include "strata/error.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using elementwise_detail::dispatch;
using elementwise_detail::expOf;
using elementwise_detail::FloatTypes;

constexpr std::int64_t kRows = 64;

// Row-major C = alpha op(A) op(B) + beta C.
template <typename T>
void gemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
          const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success) {
      fail("ScaledDotProductAttention: a GEMM failed (oneDNN status {})", static_cast<int>(status));
    }
  } else {
    for (std::int64_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      for (std::int64_t j = 0; j < n; ++j) {
        row[j] = beta == T(0) ? T(0) : beta * row[j];
      }
      for (std::int64_t p = 0; p < k; ++p) {
        const T av = alpha * (ta == 'N' ? a[i * lda + p] : a[p * lda + i]);
        if (tb == 'N') {
          const T* brow = b + p * ldb;
          for (std::int64_t j = 0; j < n; ++j) {
            row[j] += av * brow[j];
          }
        } else {
          for (std::int64_t j = 0; j < n; ++j) {
            row[j] += av * b[j * ldb + p];
          }
        }
      }
    }
  }
}

// The [.., T, D] operands seen as `slices` contiguous [T, D] matrices.
struct AttentionShape {
  std::int64_t slices = 0;
  std::int64_t queries = 0;  // T of Q (and Y)
  std::int64_t keys = 0;     // T of K and V
  std::int64_t width = 0;    // D of Q and K
  std::int64_t valueWidth = 0;
};

AttentionShape shapeOf(const Shape& q, const Shape& k, const Shape& v) {
  AttentionShape s;
  s.queries = q[q.size() - 2];
  s.width = q.back();
  s.keys = k[k.size() - 2];
  s.valueWidth = v.back();
  s.slices = numElements(q) / std::max<std::int64_t>(s.queries * s.width, 1);
  return s;
}

// How many keys query row `row` sees (causal attention is square: row r sees keys 0..r).
std::int64_t visibleKeys(bool causal, std::int64_t row, const AttentionShape& s) {
  return causal ? row + 1 : s.keys;
}

template <typename T>
void attentionForward(const T* q, const T* k, const T* v, T* y, T* lse, const AttentionShape& s, T scale, bool causal) {
  parallelFor(0, s.slices, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> scores(static_cast<std::size_t>(kRows * s.keys));
    for (std::int64_t slice = first; slice < last; ++slice) {
      const T* qs = q + slice * s.queries * s.width;
      const T* ks = k + slice * s.keys * s.width;
      const T* vs = v + slice * s.keys * s.valueWidth;
      T* ys = y + slice * s.queries * s.valueWidth;
      for (std::int64_t r0 = 0; r0 < s.queries; r0 += kRows) {
        const std::int64_t rows = std::min(kRows, s.queries - r0);
        const std::int64_t cols = visibleKeys(causal, r0 + rows - 1, s);
        gemm<T>('N', 'T', rows, cols, s.width, scale, qs + r0 * s.width, s.width, ks, s.width, T(0), scores.data(),
                cols);
        for (std::int64_t r = 0; r < rows; ++r) {
          T* row = scores.data() + r * cols;
          const std::int64_t seen = visibleKeys(causal, r0 + r, s);
          T top = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : top)
          for (std::int64_t c = 0; c < seen; ++c) {
            top = std::max(top, row[c]);
          }
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (std::int64_t c = 0; c < seen; ++c) {
            row[c] = expOf<T>(row[c] - top);
            sum += row[c];
          }
          const T inverse = T(1) / sum;
#pragma omp simd
          for (std::int64_t c = 0; c < seen; ++c) {
            row[c] *= inverse;
          }
          std::fill(row + seen, row + cols, T(0));
          if (lse != nullptr) {
            lse[slice * s.queries + r0 + r] = top + std::log(sum);
          }
        }
        gemm<T>('N', 'N', rows, s.valueWidth, cols, T(1), scores.data(), cols, vs, s.valueWidth, T(0),
                ys + r0 * s.valueWidth, s.valueWidth);
      }
    }
  });
}

// dlse: the gradient of the log-sum-exp output, when something reads it (nullptr otherwise): d LSE_r / d S_rc is
// P_rc, so it joins the row term D_r.
template <typename T>
void attentionBackward(const T* dy, const T* q, const T* k, const T* v, const T* y, const T* lse, const T* dlse, T* dq,
                       T* dk, T* dv, const AttentionShape& s, T scale, bool causal) {
  parallelFor(0, s.slices, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> probs(static_cast<std::size_t>(kRows * s.keys));
    std::vector<T> dprobs(static_cast<std::size_t>(kRows * s.keys));
    std::vector<T> rowDot(static_cast<std::size_t>(kRows));
    for (std::int64_t slice = first; slice < last; ++slice) {
      const T* qs = q + slice * s.queries * s.width;
      const T* ks = k + slice * s.keys * s.width;
      const T* vs = v + slice * s.keys * s.valueWidth;
      const T* ys = y + slice * s.queries * s.valueWidth;
      const T* dys = dy + slice * s.queries * s.valueWidth;
      const T* lses = lse + slice * s.queries;
      T* dqs = dq + slice * s.queries * s.width;
      T* dks = dk + slice * s.keys * s.width;
      T* dvs = dv + slice * s.keys * s.valueWidth;
      std::fill(dks, dks + s.keys * s.width, T(0));
      std::fill(dvs, dvs + s.keys * s.valueWidth, T(0));
      for (std::int64_t r0 = 0; r0 < s.queries; r0 += kRows) {
        const std::int64_t rows = std::min(kRows, s.queries - r0);
        const std::int64_t cols = visibleKeys(causal, r0 + rows - 1, s);
        // P = exp(scale Q K^T - LSE), recomputed; masked entries 0.
        gemm<T>('N', 'T', rows, cols, s.width, scale, qs + r0 * s.width, s.width, ks, s.width, T(0), probs.data(),
                cols);
        for (std::int64_t r = 0; r < rows; ++r) {
          T* row = probs.data() + r * cols;
          const std::int64_t seen = visibleKeys(causal, r0 + r, s);
          const T shift = lses[r0 + r];
#pragma omp simd
          for (std::int64_t c = 0; c < seen; ++c) {
            row[c] = expOf<T>(row[c] - shift);
          }
          std::fill(row + seen, row + cols, T(0));
          // D_r = dY_r . Y_r, the softmax gradient's row term.
          const T* dyr = dys + (r0 + r) * s.valueWidth;
          const T* yr = ys + (r0 + r) * s.valueWidth;
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (std::int64_t d = 0; d < s.valueWidth; ++d) {
            dot += dyr[d] * yr[d];
          }
          rowDot[static_cast<std::size_t>(r)] = dot - (dlse != nullptr ? dlse[slice * s.queries + r0 + r] : T(0));
        }
        // dV += P^T dY; dP = dY V^T.
        gemm<T>('T', 'N', cols, s.valueWidth, rows, T(1), probs.data(), cols, dys + r0 * s.valueWidth, s.valueWidth,
                T(1), dvs, s.valueWidth);
        gemm<T>('N', 'T', rows, cols, s.valueWidth, T(1), dys + r0 * s.valueWidth, s.valueWidth, vs, s.valueWidth, T(0),
                dprobs.data(), cols);
        // dS = P (dP - D) scale, in place of dP.
        for (std::int64_t r = 0; r < rows; ++r) {
          const T* p = probs.data() + r * cols;
          T* ds = dprobs.data() + r * cols;
          const T dot = rowDot[static_cast<std::size_t>(r)];
#pragma omp simd
          for (std::int64_t c = 0; c < cols; ++c) {
            ds[c] = p[c] * (ds[c] - dot) * scale;
          }
        }
        // dQ = dS K; dK += dS^T Q.
        gemm<T>('N', 'N', rows, s.width, cols, T(1), dprobs.data(), cols, ks, s.width, T(0), dqs + r0 * s.width,
                s.width);
        gemm<T>('T', 'N', cols, s.width, rows, T(1), dprobs.data(), cols, qs + r0 * s.width, s.width, T(1), dks,
                s.width);
      }
    }
  });
}

void checkOperands(const ShapeContext& ctx, std::size_t first, std::size_t scaleInput) {
  const TensorMeta& q = ctx.input(first).meta;
  const TensorMeta& scale = ctx.input(scaleInput).meta;
  if (scale.dtype != q.dtype || !scale.shape.empty()) {
    ctx.error(fmt::format("the scale (input {}) must be a scalar of Q's dtype {}, not {}", scaleInput,
                          dtypeName(q.dtype), scale.toString()));
  }
  const TensorMeta& k = ctx.input(first + 1).meta;
  const TensorMeta& v = ctx.input(first + 2).meta;
  if (q.dtype != DType::Float32 && q.dtype != DType::Float64) {
    ctx.error(fmt::format("Q has dtype {}; float32 or float64 expected", dtypeName(q.dtype)));
  }
  if (k.dtype != q.dtype || v.dtype != q.dtype) {
    ctx.error("Q, K and V must have one dtype");
  }
  if (q.shape.size() < 2 || k.shape.size() != q.shape.size() || v.shape.size() != q.shape.size()) {
    ctx.error(fmt::format("Q {}, K {} and V {} must be [..., T, D] of one rank", shapeToString(q.shape),
                          shapeToString(k.shape), shapeToString(v.shape)));
  }
  const std::size_t rank = q.shape.size();
  const bool batchesAgree = std::equal(q.shape.begin(), q.shape.end() - 2, k.shape.begin()) &&
                            std::equal(q.shape.begin(), q.shape.end() - 2, v.shape.begin());
  if (!batchesAgree || k.shape[rank - 1] != q.shape[rank - 1] || v.shape[rank - 2] != k.shape[rank - 2]) {
    ctx.error(fmt::format("Q {}, K {} and V {} do not fit: K must be [..., S, D] and V [..., S, Dv]",
                          shapeToString(q.shape), shapeToString(k.shape), shapeToString(v.shape)));
  }
  if (ctx.attrs.getInt("causal", 0) != 0 && k.shape[rank - 2] != q.shape[rank - 2]) {
    ctx.error("causal attention needs as many keys as queries (row r sees keys 0 to r)");
  }
}

}  // namespace

// Inputs Q [..., T, D], K [..., S, D], V [..., S, Dv] and the scale (a scalar of their dtype); attribute causal
// (0/1). Outputs Y [..., T, Dv] and, optionally, LSE [..., T] (each row's log-sum-exp, for the gradient).
// ScaledDotProductAttentionGrad: inputs dY, Q, K, V, Y, LSE, scale and optionally dLSE; outputs dQ, dK, dV.
void registerAttentionOps(OpRegistry& registry) {
  registry.addSchema(OpSchema{"ScaledDotProductAttention", [](const ShapeContext& ctx) {
                                checkOperands(ctx, 0, 3);
                                const TensorMeta& q = ctx.input(0).meta;
                                TensorMeta y = q;
                                y.shape.back() = ctx.input(2).meta.shape.back();
                                std::vector<TensorMeta> outputs{y};
                                if (ctx.outputCount > 1) {
                                  outputs.push_back(TensorMeta{q.dtype, Shape(q.shape.begin(), q.shape.end() - 1)});
                                }
                                return outputs;
                              }});
  registry.addKernel("ScaledDotProductAttention", DeviceType::CPU, [](const KernelInit& init) {
    const bool causal = init.attrs.getInt("causal", 0) != 0;
    return makeFunctionKernel([causal](KernelContext& ctx) {
      const Tensor& q = ctx.input(0);
      const AttentionShape s = shapeOf(q.shape(), ctx.input(1).shape(), ctx.input(2).shape());
      dispatch(FloatTypes{}, q.dtype(), "ScaledDotProductAttention", [&](auto tag) {
        using T = decltype(tag);
        attentionForward<T>(q.data<T>(), ctx.input(1).data<T>(), ctx.input(2).data<T>(), ctx.output(0).data<T>(),
                            ctx.hasOutput(1) ? ctx.output(1).data<T>() : nullptr, s, *ctx.input(3).data<T>(), causal);
      });
    });
  });
  registry.addSchema(OpSchema{"ScaledDotProductAttentionGrad", [](const ShapeContext& ctx) {
                                checkOperands(ctx, 1, 6);
                                return std::vector<TensorMeta>{ctx.input(1).meta, ctx.input(2).meta, ctx.input(3).meta};
                              }});
  registry.addKernel("ScaledDotProductAttentionGrad", DeviceType::CPU, [](const KernelInit& init) {
    const bool causal = init.attrs.getInt("causal", 0) != 0;
    return makeFunctionKernel([causal](KernelContext& ctx) {
      const Tensor& q = ctx.input(1);
      const AttentionShape s = shapeOf(q.shape(), ctx.input(2).shape(), ctx.input(3).shape());
      dispatch(FloatTypes{}, q.dtype(), "ScaledDotProductAttentionGrad", [&](auto tag) {
        using T = decltype(tag);
        // A gradient nobody reads still has to be formed (the others depend on the same products): a scratch.
        std::vector<Tensor> unread;
        const auto out = [&](std::size_t i) {
          if (ctx.hasOutput(i)) {
            return ctx.output(i).data<T>();
          }
          unread.push_back(Tensor::empty(ctx.input(i + 1).meta(), MemoryCategory::Workspace));
          return unread.back().data<T>();
        };
        T* dq = out(0);
        T* dk = out(1);
        T* dv = out(2);
        attentionBackward<T>(ctx.input(0).data<T>(), q.data<T>(), ctx.input(2).data<T>(), ctx.input(3).data<T>(),
                             ctx.input(4).data<T>(), ctx.input(5).data<T>(),
                             ctx.hasInput(7) ? ctx.input(7).data<T>() : nullptr, dq, dk, dv, s, *ctx.input(6).data<T>(),
                             causal);
      });
    });
  });
}

}  // namespace strata::cpu
