#include "ps_keys.h"

#include <algorithm>

#include "strata/error.h"

namespace strata::ps {

std::int64_t FlatLayout::parameterBytes() const {
  std::int64_t bytes = 0;
  for (const Buffer& group : groups) {
    bytes += group.numel * static_cast<std::int64_t>(dtypeSize(group.dtype));
  }
  return bytes;
}

std::vector<std::vector<Segment>> partitionKeys(const FlatLayout& layout, int servers) {
  if (servers < 1) {
    fail("ps: {} servers: at least one is needed", servers);
  }
  for (std::size_t g = 0; g < layout.groups.size(); ++g) {
    const DType dtype = layout.groups[g].dtype;
    if (dtype != DType::Float32 && dtype != DType::Float64) {
      fail("ps: parameter group {} is {}; the servers update float32 and float64 parameters only", g, dtypeName(dtype));
    }
  }
  const std::int64_t total = layout.parameterBytes();
  if (total <= 0) {
    fail("ps: the model has no parameters to serve");
  }
  std::vector<std::vector<Segment>> keys(static_cast<std::size_t>(servers));
  std::int64_t before = 0;  // bytes of the groups before this one
  for (std::size_t g = 0; g < layout.groups.size(); ++g) {
    const std::int64_t size = static_cast<std::int64_t>(dtypeSize(layout.groups[g].dtype));
    const std::int64_t numel = layout.groups[g].numel;
    for (int s = 0; s < servers; ++s) {
      // Server s holds bytes [total*s/S, total*(s+1)/S) of the concatenation, rounded to whole elements.
      const std::int64_t lo = total * s / servers;
      const std::int64_t hi = total * (s + 1) / servers;
      const std::int64_t begin = std::clamp<std::int64_t>((lo - before + size - 1) / size, 0, numel);
      const std::int64_t end = std::clamp<std::int64_t>((hi - before + size - 1) / size, 0, numel);
      // Note [Segments of at most 4 MiB]: each segment travels as one ZeroMQ frame, which the receiver's I/O
      // thread allocates with malloc. A frame above glibc's mmap threshold (32 MiB at most; a thread's arena holds
      // 64 MiB) is a fresh mapping every time, page-faulted and zeroed on every push and pull (ResNet-18's 45 MB
      // was one frame); frames of at most 4 MiB reuse the same heap memory step after step. The concatenation of a
      // server's segments, which checkpoints store, is the same however they are cut.
      const std::int64_t most = std::max<std::int64_t>(1, kMaxSegmentBytes / size);
      for (std::int64_t at = begin; at < end; at += most) {
        keys[static_cast<std::size_t>(s)].push_back(
            Segment{.group = static_cast<std::uint32_t>(g), .offset = at, .count = std::min(most, end - at)});
      }
    }
    before += numel * size;
  }
  return keys;
}

}  // namespace strata::ps
