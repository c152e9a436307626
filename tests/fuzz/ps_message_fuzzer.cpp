// Fuzz target: the parameter server's message validation (plugins/ps/ps_protocol.*, Note [PS validation]), as a
// server meets a request. The input is a multipart message: records of
//   u16 n (little-endian), n bytes of one frame
// (a short last record takes what is left). The frames are checked against three servers: one not initialised yet
// (an Init decodes and partitions its layout), one initialised with a small layout that holds the buffers, and
// the second of three servers of a larger layout. validateRequest must never throw or crash, and whatever it
// accepts must be safe to apply: every data frame exactly the size of the key it fills.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ps_protocol.h"

namespace {

using strata::DType;
using strata::ps::FlatLayout;
using strata::ps::Frame;
using strata::ps::Kind;
using strata::ps::ServerView;

ServerView initialised(FlatLayout layout, int index, int servers, bool buffers) {
  ServerView view;
  view.index = index;
  view.servers = servers;
  view.workers = 4;
  view.holdsBuffers = buffers;
  view.layout = layout;
  view.segments = strata::ps::partitionKeys(layout, servers).at(static_cast<std::size_t>(index));
  view.initialized = true;
  view.stateSizes = {16, 8};
  return view;
}

void check(const std::vector<Frame>& frames, const ServerView& view) {
  const strata::ps::Verdict verdict = strata::ps::validateRequest(frames, view);
  if (!verdict.ok) {
    return;
  }
  const auto kind = static_cast<Kind>(verdict.header.kind);
  if (kind == Kind::RestoreState) {  // must fit the optimizer state exactly
    if (frames.size() != 2 + view.stateSizes.size() || frames[1].size() > strata::ps::kMaxStateJsonBytes) {
      __builtin_trap();
    }
    for (std::size_t i = 0; i < view.stateSizes.size(); ++i) {
      if (frames[2 + i].size() != view.stateSizes[i]) {
        __builtin_trap();
      }
    }
    return;
  }
  if (kind != Kind::Push && kind != Kind::Init) {
    return;
  }
  const FlatLayout& layout = verdict.layout ? *verdict.layout : view.layout;
  const auto& segments = verdict.layout ? verdict.segments : view.segments;
  const std::vector<std::size_t> sizes = strata::ps::dataFrameSizes(layout, segments, view.holdsBuffers);
  const std::size_t first = kind == Kind::Init ? 2 : 1;
  if (frames.size() - first != sizes.size()) {
    __builtin_trap();  // accepted a message whose data does not fill the server's keys
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (frames[first + i].size() != sizes[i]) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<Frame> frames;
  std::size_t pos = 0;
  while (pos < size && frames.size() < 64) {
    std::size_t n = 0;
    if (pos + 2 <= size) {
      n = static_cast<std::size_t>(data[pos]) | (static_cast<std::size_t>(data[pos + 1]) << 8);
      pos += 2;
    } else {
      pos = size;
    }
    n = std::min(n, size - pos);
    frames.emplace_back(reinterpret_cast<const std::byte*>(data + pos), n);
    pos += n;
  }
  FlatLayout small;
  small.groups = {{DType::Float32, 4}};
  small.buffers = {{DType::Float32, 2}};
  FlatLayout larger;
  larger.groups = {{DType::Float32, 300}, {DType::Float64, 7}, {DType::Float32, 5}};
  static const ServerView fresh = [] {
    ServerView view;
    view.workers = 4;
    view.holdsBuffers = true;
    return view;
  }();
  static const ServerView first = initialised(small, 0, 1, true);
  static const ServerView second = initialised(larger, 1, 3, false);
  check(frames, fresh);
  check(frames, first);
  check(frames, second);
  return 0;
}
