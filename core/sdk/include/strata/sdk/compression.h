#pragma once

// Gradient compression: what a strategy hands a compressor and what a compressor must do.
//
// Note [Gradient compression]: a compressor averages one bucket of gradients across a process group with fewer
// bytes than a plain all-reduce, at the cost of precision. It keeps whatever state its method needs (error-feedback
// residuals, PowerSGD's warm-started Q, a step count) in tensors allocated under MemoryCategory::Compression, so the
// run's memory figures show it, and exposes them through state() so a checkpoint saves them and a resumed run
// continues exactly. Every rank calls allReduce for the same buckets in the same order (collectives inside it must
// match across ranks); the call blocks, so a strategy that overlaps communication with backward calls it from a
// thread of its own. Strata's built-in compressors (fp16, bf16, topk, randomk, sign, powersgd) live in
// plugins/compression (the static library strata::compression); a third-party strategy may link them or implement
// this interface itself.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "strata/comm/process_group.h"
#include "strata/tensor.h"

namespace strata {

// One parameter's place in a bucket: elements [offset, offset + rows * cols) of the bucket's flat gradient, seen as
// a rows x cols matrix (the first dimension by the rest; a vector or scalar is numel x 1).
struct GradientSegment {
  std::int64_t offset = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool matrix = false;  // the parameter has two or more dimensions
  std::int64_t numel() const { return rows * cols; }
};

struct GradientBucket {
  // Stable across steps and the same on every rank: the key of the compressor's state for this bucket.
  int index = 0;
  // A contiguous view of the flat gradient buffer: this rank's gradient on entry, the (approximate) average on return.
  Tensor gradient;
  // The parameters it holds, in offset order, covering it.
  std::vector<GradientSegment> segments;
};

// Bytes of one bucket's reduction as this rank handed them to collectives (measured from the buffers it sent).
struct CompressionTraffic {
  std::int64_t sentBytes = 0;
  std::int64_t uncompressedBytes = 0;  // the plain all-reduce's payload: the bucket's own bytes
};

class GradientCompressor {
 public:
  virtual ~GradientCompressor() = default;
  // The specification it was made from ("powersgd:rank=4"), for logs and errors.
  virtual std::string describe() const = 0;
  // Once, before the first step, on every rank, with every bucket (gradients may hold anything yet): allocates the
  // state so that a checkpoint can be loaded into it.
  virtual void prepare(const std::vector<GradientBucket>& buckets) = 0;
  // Averages bucket.gradient over the group in place. Blocking; collectives wait at most `timeout`.
  virtual CompressionTraffic allReduce(GradientBucket& bucket, ProcessGroup& group,
                                       std::chrono::milliseconds timeout) = 0;
  // The state to checkpoint, by name (views: loading writes into them). Empty for a stateless compressor.
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;
};

}  // namespace strata
