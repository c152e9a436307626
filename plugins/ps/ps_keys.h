#pragma once

// Note [PS keys]: the servers' keys are byte ranges of the workers' flat parameter buffers, cut so every server
// holds about the same number of bytes. A range may start or end inside a tensor, and a tensor larger than a range
// is split across servers: no server gets a whole tensor just because it is one tensor. Every worker and server
// computes the same cut from the same layout (the workers send it to the servers in Init), so a key needs no name:
// a message carries the server's segments in order.

#include <cstdint>
#include <vector>

#include "strata/dtype.h"

namespace strata::ps {

// The most bytes of one segment (one frame on the wire): Note [Segments of at most 4 MiB] in ps_keys.cpp.
inline constexpr std::int64_t kMaxSegmentBytes = std::int64_t{4} << 20;

// Elements [offset, offset + count) of flat buffer `group`.
struct Segment {
  std::uint32_t group = 0;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  bool operator==(const Segment&) const = default;
};

// The flat buffers a server range may cut: the parameter groups (trained by the servers) and the buffers
// (batch-norm running statistics, averaged by server 0).
struct FlatLayout {
  struct Buffer {
    DType dtype = DType::Float32;
    std::int64_t numel = 0;
    bool operator==(const Buffer&) const = default;
  };
  std::vector<Buffer> groups;
  std::vector<Buffer> buffers;
  bool operator==(const FlatLayout&) const = default;
  std::int64_t parameterBytes() const;
};

// The segments of each of `servers` servers, balanced by bytes, in buffer order. Throws Error on an empty layout
// or a dtype a server cannot update (float32 and float64 only).
std::vector<std::vector<Segment>> partitionKeys(const FlatLayout& layout, int servers);

}  // namespace strata::ps
