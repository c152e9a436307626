#include "ps_protocol.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace strata::ps {
namespace {

struct LayoutEntry {
  std::uint32_t dtype = 0;
  std::uint32_t reserved = 0;
  std::int64_t numel = 0;
};
static_assert(sizeof(LayoutEntry) == 16);

bool knownKind(std::uint16_t kind) {
  return kind >= static_cast<std::uint16_t>(Kind::Init) && kind <= static_cast<std::uint16_t>(Kind::Rejoined);
}

bool decodeLayout(Frame frame, FlatLayout& layout, std::string& why) {
  if (frame.size() < 8) {
    why = fmt::format("layout frame of {} bytes is shorter than its 8-byte count", frame.size());
    return false;
  }
  std::uint32_t counts[2] = {0, 0};
  std::memcpy(counts, frame.data(), sizeof counts);
  if (counts[0] == 0 || counts[0] > kMaxGroups || counts[1] > kMaxGroups) {
    why = fmt::format("layout of {} groups and {} buffers (1 to {} groups, at most {} buffers)", counts[0], counts[1],
                      kMaxGroups, kMaxGroups);
    return false;
  }
  const std::size_t entries = std::size_t{counts[0]} + counts[1];
  if (frame.size() != 8 + entries * sizeof(LayoutEntry)) {
    why = fmt::format("layout frame of {} bytes for {} entries (expected {})", frame.size(), entries,
                      8 + entries * sizeof(LayoutEntry));
    return false;
  }
  layout = FlatLayout{};
  for (std::size_t i = 0; i < entries; ++i) {
    LayoutEntry entry;
    std::memcpy(&entry, frame.data() + 8 + i * sizeof(LayoutEntry), sizeof entry);
    const bool buffer = i >= counts[0];
    const bool floating = entry.dtype == static_cast<std::uint32_t>(DType::Float32) ||
                          entry.dtype == static_cast<std::uint32_t>(DType::Float64);
    // 2^40 elements: far beyond any model, and small enough that byte counts cannot overflow.
    if (!floating || entry.numel <= 0 || entry.numel > (std::int64_t{1} << 40)) {
      why = fmt::format("layout {} {}: dtype code {} and {} elements (float32 or float64, 1 to 2^40 elements)",
                        buffer ? "buffer" : "group", buffer ? i - counts[0] : i, entry.dtype, entry.numel);
      return false;
    }
    (buffer ? layout.buffers : layout.groups)
        .push_back(FlatLayout::Buffer{static_cast<DType>(entry.dtype), entry.numel});
  }
  return true;
}

}  // namespace

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::Init:
      return "init";
    case Kind::Pull:
      return "pull";
    case Kind::Push:
      return "push";
    case Kind::Params:
      return "params";
    case Kind::Error:
      return "error";
    case Kind::StatsRequest:
      return "stats-request";
    case Kind::Stats:
      return "stats";
    case Kind::Idle:
      return "idle";
    case Kind::StateRequest:
      return "state-request";
    case Kind::State:
      return "state";
    case Kind::RestoreState:
      return "restore-state";
    case Kind::Rejoin:
      return "rejoin";
    case Kind::Rejoined:
      return "rejoined";
  }
  return "unknown";
}

std::vector<std::byte> encodeHeader(const Header& header) {
  std::vector<std::byte> bytes(sizeof(Header));
  std::memcpy(bytes.data(), &header, sizeof(Header));
  return bytes;
}

std::vector<std::byte> encodeLayout(const FlatLayout& layout) {
  const std::uint32_t counts[2] = {static_cast<std::uint32_t>(layout.groups.size()),
                                   static_cast<std::uint32_t>(layout.buffers.size())};
  std::vector<std::byte> bytes(8 + (layout.groups.size() + layout.buffers.size()) * sizeof(LayoutEntry));
  std::memcpy(bytes.data(), counts, sizeof counts);
  std::size_t at = 8;
  for (const auto* list : {&layout.groups, &layout.buffers}) {
    for (const FlatLayout::Buffer& b : *list) {
      const LayoutEntry entry{static_cast<std::uint32_t>(b.dtype), 0, b.numel};
      std::memcpy(bytes.data() + at, &entry, sizeof entry);
      at += sizeof entry;
    }
  }
  return bytes;
}

std::vector<std::size_t> dataFrameSizes(const FlatLayout& layout, const std::vector<Segment>& segments,
                                        bool withBuffers) {
  std::vector<std::size_t> sizes;
  for (const Segment& s : segments) {
    sizes.push_back(static_cast<std::size_t>(s.count) * dtypeSize(layout.groups.at(s.group).dtype));
  }
  if (withBuffers) {
    for (const FlatLayout::Buffer& b : layout.buffers) {
      sizes.push_back(static_cast<std::size_t>(b.numel) * dtypeSize(b.dtype));
    }
  }
  return sizes;
}

std::optional<Header> decodeHeader(Frame frame, std::string& why) {
  if (frame.size() != sizeof(Header)) {
    why = fmt::format("header frame of {} bytes (expected {})", frame.size(), sizeof(Header));
    return std::nullopt;
  }
  Header header;
  std::memcpy(&header, frame.data(), sizeof(Header));
  if (header.magic != kMagic) {
    why = fmt::format("bad magic 0x{:08x} (not a Strata parameter-server message)", header.magic);
    return std::nullopt;
  }
  if (header.version != kProtocolVersion) {
    why = fmt::format("protocol version {} (this side speaks {})", header.version, kProtocolVersion);
    return std::nullopt;
  }
  if (!knownKind(header.kind)) {
    why = fmt::format("unknown message kind {}", header.kind);
    return std::nullopt;
  }
  return header;
}

Verdict validateRequest(const std::vector<Frame>& frames, const ServerView& view) {
  Verdict v;
  if (frames.empty()) {
    v.error = "empty message";
    return v;
  }
  std::optional<Header> header = decodeHeader(frames[0], v.error);
  if (!header) {
    return v;
  }
  v.header = *header;
  v.headerDecoded = true;
  const Kind kind = static_cast<Kind>(header->kind);
  if (kind != Kind::Init && kind != Kind::Pull && kind != Kind::Push && kind != Kind::StatsRequest &&
      kind != Kind::Idle && kind != Kind::StateRequest && kind != Kind::RestoreState && kind != Kind::Rejoin) {
    v.error = fmt::format("a {} message is a reply, not a request", kindName(kind));
    return v;
  }
  if (header->worker < 0 || header->worker >= view.workers) {
    v.error = fmt::format("worker id {} is not one of the job's {} workers", header->worker, view.workers);
    return v;
  }
  if (header->frames != frames.size() - 1) {
    v.error = fmt::format("header announces {} frames after it, the message has {}", header->frames, frames.size() - 1);
    return v;
  }
  if (kind == Kind::Push && !(header->lr >= 0 && header->lr < 1e6)) {
    v.error = fmt::format("learning rate {} is not a number in [0, 1e6)", header->lr);
    return v;
  }
  const FlatLayout* layout = view.initialized ? &view.layout : nullptr;
  std::vector<Segment> segments = view.segments;
  std::size_t firstData = 1;
  if (kind == Kind::Init) {
    if (header->worker != 0) {
      v.error = fmt::format("init from worker {}: only worker 0 initialises the servers", header->worker);
      return v;
    }
    if (frames.size() < 2) {
      v.error = "init without a layout frame";
      return v;
    }
    FlatLayout decoded;
    if (!decodeLayout(frames[1], decoded, v.error)) {
      return v;
    }
    if (view.initialized && !(decoded == view.layout)) {
      v.error = "init with a layout that differs from the one this server holds (another model?)";
      return v;
    }
    v.layout = decoded;
    v.segments = partitionKeys(decoded, view.servers).at(static_cast<std::size_t>(view.index));
    segments = v.segments;
    layout = &*v.layout;
    firstData = 2;
  }
  if (kind == Kind::StateRequest || kind == Kind::RestoreState) {
    if (header->worker != 0) {
      v.error = fmt::format("{} from worker {}: only worker 0 saves and restores the servers' optimizer state",
                            kindName(kind), header->worker);
      return v;
    }
    if (!view.initialized) {
      v.error = fmt::format("{} before the server was initialised", kindName(kind));
      return v;
    }
    const std::size_t expected = kind == Kind::StateRequest ? 0 : 1 + view.stateSizes.size();
    if (frames.size() - 1 != expected) {
      v.error = fmt::format("a {} carries {} frames, this one has {}", kindName(kind), expected, frames.size() - 1);
      return v;
    }
    if (kind == Kind::RestoreState) {
      if (frames[1].size() > kMaxStateJsonBytes) {
        v.error = fmt::format("state description of {} bytes (at most {})", frames[1].size(), kMaxStateJsonBytes);
        return v;
      }
      for (std::size_t i = 0; i < view.stateSizes.size(); ++i) {
        if (frames[2 + i].size() != view.stateSizes[i]) {
          v.error = fmt::format(
              "optimizer state frame {} has {} bytes, this server's has {} (another optimizer or "
              "server count?)",
              i, frames[2 + i].size(), view.stateSizes[i]);
          return v;
        }
      }
    }
    v.ok = true;
    return v;
  }
  if (kind == Kind::Rejoin && !view.initialized) {
    v.error = "rejoin before the server was initialised: there is no job to rejoin yet";
    return v;
  }
  if (kind == Kind::Pull || kind == Kind::StatsRequest || kind == Kind::Idle || kind == Kind::Rejoin) {
    if (frames.size() != 1) {
      v.error = fmt::format("a {} carries no data, this one has {} frames", kindName(kind), frames.size() - 1);
      return v;
    }
    v.ok = true;
    return v;
  }
  if (layout == nullptr) {
    v.error = "push before the server was initialised (worker 0's init has not arrived)";
    return v;
  }
  const std::vector<std::size_t> sizes = dataFrameSizes(*layout, segments, view.holdsBuffers);
  if (frames.size() - firstData != sizes.size()) {
    v.error = fmt::format("{} data frames, this server expects {}", frames.size() - firstData, sizes.size());
    return v;
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (frames[firstData + i].size() != sizes[i]) {
      v.error = fmt::format("data frame {} has {} bytes, the server's key {} needs {}", i, frames[firstData + i].size(),
                            i, sizes[i]);
      return v;
    }
  }
  v.ok = true;
  return v;
}

}  // namespace strata::ps
