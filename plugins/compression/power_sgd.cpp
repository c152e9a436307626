// powersgd:rank=R: PowerSGD (Vogels et al., 2019) with PyTorch's powerSGD_hook semantics. Each parameter of two or
// more dimensions, seen as a rows x cols matrix M (first dimension by the rest), is worth compressing when
// (rows + cols) * r * min_rate < rows * cols with r = min(rows, cols, R); the rest (vectors, small matrices) are
// all-reduced uncompressed in one buffer. For each compressed M: P = M Q, all-reduce P, orthogonalise P's columns
// (Gram-Schmidt), Q = M^T P, all-reduce Q and average it, M ~ P Q^T. Q is warm-started from the previous step's
// (warm_start=1) and starts as an orthogonalised Gaussian drawn from (seed, bucket, step), the same on every rank.
// With error feedback (error_feedback=1) the bucket keeps what this rank's gradient lost: the next step adds
// (local - result), as the hook does for the whole bucket, uncompressed parameters included. The first start_iter
// steps are plain all-reduces (PyTorch's start_powerSGD_iter; its default is 1000, Strata's 0).
//
// One deliberate difference: Gram-Schmidt zeroes a column that depends on the ones before it, where PyTorch
// normalises its rounding error (or divides by zero when epsilon=0): Note [Dependent columns].
#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "compressor_state.h"
#include "compressors.h"
#include "thin_products.h"

namespace strata::compression {
namespace {

struct CompressedMatrix {
  std::int64_t offset = 0;  // in the bucket
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t rank = 0;
  std::int64_t p = 0;  // offsets of its P in the bucket's P buffer and its Q in the bucket's Q state
  std::int64_t q = 0;
};

struct BucketPlan {
  std::vector<CompressedMatrix> matrices;
  std::vector<GradientSegment> plain;  // all-reduced uncompressed
  std::int64_t pElements = 0;
  std::int64_t qElements = 0;
  std::int64_t plainElements = 0;
};

// Orthonormalises the columns of the row-major rows x cols matrix `a` in place (modified Gram-Schmidt, PyTorch's
// _orthogonalize_gram_schmidt), computing in double.
//
// Note [Dependent columns]: a column that lies in the span of the columns before it (to 1e-10 of its own length)
// becomes zero rather than a normalised rounding error. Gradients are often rank-deficient (a linear layer's
// gradient has rank at most the batch size; a dead unit's row is zero), so P = M Q is too, and PyTorch's
// normalised noise is not orthogonal to the other columns: P P^T is then no projection, and even a full-rank
// PowerSGD misses the plain average (by 1.6e-2 of the bundled CNN's fc1 weights after one step, measured). With
// zeros the columns left are orthonormal and span what P spans, so full rank reproduces the average.
template <typename T>
void orthogonalize(T* a, std::int64_t rows, std::int64_t cols, double epsilon) {
  std::vector<double> m(static_cast<std::size_t>(rows * cols));
  std::copy(a, a + rows * cols, m.begin());
  const auto norm = [&](std::int64_t column) {
    double sum = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      sum += m[r * cols + column] * m[r * cols + column];
    }
    return std::sqrt(sum);
  };
  std::vector<double> lengths(static_cast<std::size_t>(cols));
  for (std::int64_t i = 0; i < cols; ++i) {
    lengths[static_cast<std::size_t>(i)] = norm(i);
  }
  for (std::int64_t i = 0; i < cols; ++i) {
    const double left = norm(i);
    const bool dependent = left <= 1e-10 * lengths[static_cast<std::size_t>(i)];
    const double inverse = dependent || left + epsilon == 0 ? 0.0 : 1.0 / (left + epsilon);
    for (std::int64_t r = 0; r < rows; ++r) {
      m[r * cols + i] *= inverse;
    }
    for (std::int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        dot += m[r * cols + i] * m[r * cols + j];
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        m[r * cols + j] -= dot * m[r * cols + i];
      }
    }
  }
  std::copy(m.begin(), m.end(), a);
}

class PowerSgdCompressor final : public HostCompressor<PowerSgdCompressor> {
 public:
  explicit PowerSgdCompressor(CompressorSpec& spec)
      : HostCompressor(spec.text()),
        rank_(spec.integer("rank", 1, 1, 1 << 20)),
        startIter_(spec.integer("start_iter", 0, 0, 1LL << 40)),
        minRate_(spec.number("min_rate", 2.0, 0.0, 1e30)),
        warmStart_(spec.flag("warm_start", true)),
        errorFeedback_(spec.flag("error_feedback", true)),
        seed_(static_cast<std::uint64_t>(spec.integer("seed", 0, 0, 1LL << 62))),
        epsilon_(spec.number("epsilon", 0.0, 0.0, 1.0)) {}

  void prepareBucket(const GradientBucket& bucket) {
    BucketPlan plan;
    for (const GradientSegment& segment : bucket.segments) {
      const std::int64_t r = std::min({segment.rows, segment.cols, rank_});
      const bool worth = segment.matrix && static_cast<double>((segment.rows + segment.cols) * r) * minRate_ <
                                               static_cast<double>(segment.numel());
      if (worth) {
        plan.matrices.push_back({segment.offset, segment.rows, segment.cols, r, plan.pElements, plan.qElements});
        plan.pElements += segment.rows * r;
        plan.qElements += segment.cols * r;
      } else {
        plan.plain.push_back(segment);
        plan.plainElements += segment.numel();
      }
    }
    const DType dtype = bucket.gradient.dtype();
    if (errorFeedback_) {
      state_.add("residual", bucket.index, dtype, bucket.gradient.numel());
    }
    state_.add("q", bucket.index, dtype, std::max<std::int64_t>(plan.qElements, 1));
    state_.add("q_ready", bucket.index, DType::Int64, 1);
    state_.add("steps", bucket.index, DType::Int64, 1);
    plans_[bucket.index] = std::move(plan);
  }

 private:
  friend class HostCompressor<PowerSgdCompressor>;

  template <typename T>
  CompressionTraffic reduce(GradientBucket& bucket, ProcessGroup& group, std::chrono::milliseconds timeout) {
    const auto bytes = static_cast<std::int64_t>(bucket.gradient.bytes());
    const std::int64_t step = nextStep(state_.get("steps", bucket.index));
    if (step < startIter_) {
      group.allReduce(bucket.gradient, ReduceOp::Average)->wait(timeout);
      return {bytes, bytes};
    }
    const auto found = plans_.find(bucket.index);
    if (found == plans_.end()) {
      fail("compressor '{}': bucket {} was never prepared", text_, bucket.index);
    }
    const BucketPlan& plan = found->second;
    const std::int64_t n = bucket.gradient.numel();
    const DType dtype = bucket.gradient.dtype();
    T* g = bucket.gradient.data<T>();
    T* residual = errorFeedback_ ? state_.get("residual", bucket.index).data<T>() : nullptr;
    if (residual != nullptr) {
      for (std::int64_t i = 0; i < n; ++i) {
        g[i] += residual[i];
        residual[i] = g[i];  // this rank's gradient, until the result is known
      }
    }

    Tensor plain = Tensor::empty(dtype, {std::max<std::int64_t>(plan.plainElements, 1)}, MemoryCategory::Communication);
    std::int64_t at = 0;
    for (const GradientSegment& segment : plan.plain) {
      std::copy(g + segment.offset, g + segment.offset + segment.numel(), plain.data<T>() + at);
      at += segment.numel();
    }
    WorkHandle plainWork;
    if (plan.plainElements > 0) {
      plainWork = group.allReduce(plain.flatSlice(0, plan.plainElements), ReduceOp::Average);
    }

    std::int64_t sent = plan.plainElements * static_cast<std::int64_t>(sizeof(T));
    if (!plan.matrices.empty()) {
      T* q = state_.get("q", bucket.index).data<T>();
      std::int64_t& qReady = *state_.get("q_ready", bucket.index).data<std::int64_t>();
      if (!warmStart_ || qReady == 0) {
        randomQ(plan, q, mixSeed(seed_, bucket.index, step));
        qReady = 1;
      }
      Tensor pBuffer = Tensor::empty(dtype, {plan.pElements}, MemoryCategory::Communication);
      T* p = pBuffer.data<T>();
      std::vector<double> qt;
      std::vector<double> product;
      for (const CompressedMatrix& m : plan.matrices) {  // P = M Q
        transposeQ(q + m.q, m.cols, m.rank, qt);
        product.resize(static_cast<std::size_t>(m.rows * m.rank));
        timesThin(g + m.offset, m.rows, m.cols, qt.data(), m.rank, product.data());
        std::copy(product.begin(), product.end(), p + m.p);
      }
      group.allReduce(pBuffer, ReduceOp::Sum)->wait(timeout);
      for (const CompressedMatrix& m : plan.matrices) {
        orthogonalize(p + m.p, m.rows, m.rank, epsilon_);
        qt.resize(static_cast<std::size_t>(m.rank * m.cols));  // Q = M^T P, computed transposed
        transposedTimesThin(g + m.offset, m.rows, m.cols, p + m.p, m.rank, qt.data());
        for (std::int64_t j = 0; j < m.cols; ++j) {
          for (std::int64_t c = 0; c < m.rank; ++c) {
            q[m.q + j * m.rank + c] = static_cast<T>(qt[static_cast<std::size_t>(c * m.cols + j)]);
          }
        }
      }
      Tensor qView = state_.get("q", bucket.index).flatSlice(0, plan.qElements);
      group.allReduce(qView, ReduceOp::Average)->wait(timeout);
      for (const CompressedMatrix& m : plan.matrices) {
        transposeQ(q + m.q, m.cols, m.rank, qt);  // M = P Q^T
        thinTimesThinTransposed(p + m.p, qt.data(), m.rows, m.cols, m.rank, g + m.offset);
      }
      sent += (plan.pElements + plan.qElements) * static_cast<std::int64_t>(sizeof(T));
    }
    if (plainWork) {
      plainWork->wait(timeout);
      at = 0;
      for (const GradientSegment& segment : plan.plain) {
        std::copy(plain.data<T>() + at, plain.data<T>() + at + segment.numel(), g + segment.offset);
        at += segment.numel();
      }
    }
    if (residual != nullptr) {
      for (std::int64_t i = 0; i < n; ++i) {
        residual[i] -= g[i];
      }
    }
    return {sent, bytes};
  }

  // Gaussian entries (Box-Muller over a 64-bit Mersenne Twister: the same numbers on every rank and library),
  // each matrix's Q then orthogonalised.
  template <typename T>
  void randomQ(const BucketPlan& plan, T* q, std::uint64_t seed) const {
    std::mt19937_64 generator(seed);
    const auto uniform = [&generator] { return (static_cast<double>(generator() >> 11) + 0.5) * 0x1.0p-53; };
    for (std::int64_t i = 0; i < plan.qElements; ++i) {
      const double radius = std::sqrt(-2.0 * std::log(uniform()));
      const double angle = 2.0 * std::numbers::pi * uniform();
      q[i] = static_cast<T>(radius * std::cos(angle));
    }
    for (const CompressedMatrix& m : plan.matrices) {
      orthogonalize(q + m.q, m.cols, m.rank, epsilon_);
    }
  }

  // Q (cols x r, row-major, as the state and the all-reduce hold it) transposed into r x cols doubles.
  template <typename T>
  static void transposeQ(const T* q, std::int64_t cols, std::int64_t r, std::vector<double>& out) {
    out.resize(static_cast<std::size_t>(r * cols));
    for (std::int64_t j = 0; j < cols; ++j) {
      for (std::int64_t c = 0; c < r; ++c) {
        out[static_cast<std::size_t>(c * cols + j)] = static_cast<double>(q[j * r + c]);
      }
    }
  }

  std::int64_t rank_;
  std::int64_t startIter_;
  double minRate_;
  bool warmStart_;
  bool errorFeedback_;
  std::uint64_t seed_;
  double epsilon_;
  std::map<int, BucketPlan> plans_;
};

}  // namespace

std::unique_ptr<GradientCompressor> makePowerSgd(CompressorSpec& spec) {
  return std::make_unique<PowerSgdCompressor>(spec);
}

}  // namespace strata::compression
