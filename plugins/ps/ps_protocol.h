#pragma once

// The wire format between parameter-server workers and servers (ZeroMQ multipart messages).
//
// Every message is a fixed 64-byte header frame, then (Init only) a layout frame, then data frames that are the
// bytes of the server's segments in order (Note [PS keys]) and, for server 0, of the buffers. Error replies carry
// one text frame; Stats replies one JSON frame. Numbers are little-endian (x86-64 and AArch64 hosts only).
//
// Note [PS validation]: a server trusts nothing it receives. validateRequest() checks the header (magic, version,
// kind, worker id), the frame count and every frame's size against what the server expects, and the layout of an
// Init, before any byte is applied; a bad message gets an Error reply naming what was wrong, never a crash.
// Sequence numbers (per worker and server, increasing) make a resent push idempotent.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ps_keys.h"

namespace strata::ps {

inline constexpr std::uint32_t kMagic = 0x31535053;  // "SPS1"
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kMaxGroups = 1 << 16;
// Header::flags of an Init: replace the values of an initialised server (resuming from a checkpoint).
inline constexpr std::uint32_t kInitOverwrites = 1;

enum class Kind : std::uint16_t {
  Init = 1,          // rank 0 -> server: layout frame, then the initial values of the server's segments and buffers
  Pull = 2,          // worker -> server: the current values (waits for Init)
  Push = 3,          // worker -> server: gradients of the server's segments (+ buffers for server 0), with lr
  Params = 4,        // server -> worker: values of the segments (+ buffers), modelVersion, staleness of the push
  Error = 5,         // server -> worker: one text frame
  StatsRequest = 6,  // worker -> server: the server's figures
  Stats = 7,         // server -> worker: one JSON frame
  Idle = 8,          // worker -> server: no more pushes this epoch, do not hold the others for me (answered: Idle)
  // Note [PS checkpoints]: the run's checkpoint carries the servers' optimizer state.
  StateRequest = 9,   // worker 0 -> server: the optimizer state (answered: State)
  State = 10,         // server -> worker 0: one JSON frame (optimizer steps, byte sizes), then each state tensor
  RestoreState = 11,  // worker 0 -> server: a State's frames, to load (answered: State, the state now held)
  // Note [Rejoining workers]: a restarted worker asks where it stands.
  Rejoin = 12,  // worker -> server (sync mode): this worker's last push and clock, and the values (answered: Rejoined)
  // server -> worker: one JSON frame (last_sequence, clock, waiting, version, previous), the values of the server's
  // segments (+ buffers on server 0) at `version`, then, when `previous`, those at version - 1.
  Rejoined = 13,
};

// The largest JSON frame of a State or RestoreState.
inline constexpr std::size_t kMaxStateJsonBytes = 4096;

const char* kindName(Kind kind);

struct Header {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t kind = 0;
  std::int32_t worker = -1;
  std::uint32_t frames = 0;  // frames after this one
  std::int64_t step = 0;
  std::int64_t modelVersion = 0;  // push: the version the gradients were computed on; reply: the version served
  std::uint64_t sequence = 0;
  double lr = 0;
  std::int32_t staleness = 0;  // reply to a push: the server's version minus the push's modelVersion
  std::uint32_t flags = 0;     // request: kInitOverwrites; reply: how often the server has been restarted
  // Reply: the last sequence number of this worker's that the server's latest checkpoint holds. A worker keeps the
  // pushes after it, to replay them to a restarted server (Note [PS recovery]).
  std::uint64_t durable = 0;
};
static_assert(sizeof(Header) == 64, "the header is a fixed 64-byte frame");

using Frame = std::span<const std::byte>;

std::vector<std::byte> encodeHeader(const Header& header);
std::vector<std::byte> encodeLayout(const FlatLayout& layout);

// What a server expects of a request: set from its layout once an Init arrived.
struct ServerView {
  int index = 0;
  int servers = 1;
  int workers = 1;
  bool initialized = false;
  FlatLayout layout;                    // valid when initialized
  std::vector<Segment> segments;        // this server's keys, valid when initialized
  bool holdsBuffers = false;            // server 0
  std::vector<std::size_t> stateSizes;  // the bytes of each optimizer state tensor, valid when initialized
};

struct Verdict {
  bool ok = false;
  std::string error;  // what was wrong, when !ok
  Header header;      // valid when the header itself decoded
  bool headerDecoded = false;
  std::optional<FlatLayout> layout;  // an Init's layout
  std::vector<Segment> segments;     // an Init's segments for this server
};

// Checks a whole request (header, layout, frame sizes) against `view` without applying anything.
Verdict validateRequest(const std::vector<Frame>& frames, const ServerView& view);

// The byte size of each data frame a Push, an Init or a Params reply carries for this server.
std::vector<std::size_t> dataFrameSizes(const FlatLayout& layout, const std::vector<Segment>& segments,
                                        bool withBuffers);

// Decodes a reply's header; nullopt (and `why`) when it is not a valid header.
std::optional<Header> decodeHeader(Frame frame, std::string& why);

}  // namespace strata::ps
