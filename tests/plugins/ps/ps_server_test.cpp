// The parameter server's keys, message validation and server loop, in process (plugins/ps).
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ps_keys.h"
#include "ps_test_support.h"

namespace strata::ps {
namespace {

using testing::bytesOf;
using testing::floatsOf;
using testing::Frames;
using testing::header;
using testing::headerOf;
using testing::RawClient;
using testing::ServerThread;

TEST(PsKeysTest, BalancedByBytesAndEveryElementOnce) {
  FlatLayout layout;
  layout.groups = {{DType::Float32, 1000}, {DType::Float64, 10}, {DType::Float32, 7}};
  const std::int64_t total = layout.parameterBytes();
  const auto keys = partitionKeys(layout, 3);
  ASSERT_EQ(keys.size(), 3U);
  std::vector<std::vector<int>> seen(3);
  for (std::size_t g = 0; g < 3; ++g) {
    seen[g].assign(static_cast<std::size_t>(layout.groups[g].numel), 0);
  }
  std::set<std::uint32_t> groupsOfServer0;
  for (std::size_t s = 0; s < keys.size(); ++s) {
    std::int64_t bytes = 0;
    for (const Segment& segment : keys[s]) {
      bytes += segment.count * static_cast<std::int64_t>(dtypeSize(layout.groups[segment.group].dtype));
      for (std::int64_t i = segment.offset; i < segment.offset + segment.count; ++i) {
        ++seen[segment.group][static_cast<std::size_t>(i)];
      }
    }
    EXPECT_LE(std::abs(bytes - total / 3), 8) << "server " << s;  // within one element of a third
  }
  for (const auto& group : seen) {
    for (int count : group) {
      ASSERT_EQ(count, 1);
    }
  }
  // The 4000-byte tensor is larger than a server's third (1357 bytes): it is split, not given whole to one.
  EXPECT_EQ(keys[0].size(), 1U);
  EXPECT_EQ(keys[1].front().group, 0U);
}

// Note [Segments of at most 4 MiB]: a large range travels in frames of at most kMaxSegmentBytes, in order and
// contiguous, so the concatenation of a server's segments is what it was before the cut.
TEST(PsKeysTest, LargeRangesAreCutIntoSegmentsOfAtMost4MiB) {
  FlatLayout layout;
  layout.groups = {{DType::Float32, 5'000'000}, {DType::Float64, 600'000}};
  const auto keys = partitionKeys(layout, 2);
  for (std::size_t s = 0; s < keys.size(); ++s) {
    for (std::size_t i = 0; i < keys[s].size(); ++i) {
      const Segment& segment = keys[s][i];
      EXPECT_LE(segment.count * static_cast<std::int64_t>(dtypeSize(layout.groups[segment.group].dtype)),
                kMaxSegmentBytes);
      if (i > 0 && keys[s][i - 1].group == segment.group) {
        EXPECT_EQ(keys[s][i - 1].offset + keys[s][i - 1].count, segment.offset) << "server " << s << ", segment " << i;
      }
    }
  }
  // 24.8 MB over 2 servers: server 0 holds elements [0, 3.1M) of group 0, in 3 segments (two of 1Mi elements).
  ASSERT_EQ(keys[0].size(), 3U);
  EXPECT_EQ(keys[0][0].offset, 0);
  EXPECT_EQ(keys[0][0].count, 1 << 20);
  EXPECT_EQ(keys[0][2].offset + keys[0][2].count, 3'100'000);
}

TEST(PsKeysTest, RefusesWhatServersCannotUpdate) {
  FlatLayout layout;
  layout.groups = {{DType::Int64, 4}};
  EXPECT_THROW(partitionKeys(layout, 1), Error);
  EXPECT_THROW(partitionKeys(FlatLayout{}, 1), Error);
}

// A view of frames for validateRequest.
Verdict validate(const Frames& frames, const ServerView& view) {
  std::vector<Frame> spans;
  for (const auto& f : frames) {
    spans.emplace_back(f.data(), f.size());
  }
  return validateRequest(spans, view);
}

FlatLayout smallLayout() {
  FlatLayout layout;
  layout.groups = {{DType::Float32, 4}};
  layout.buffers = {{DType::Float32, 2}};
  return layout;
}

ServerView initializedView() {
  ServerView view;
  view.workers = 2;
  view.holdsBuffers = true;
  view.initialized = true;
  view.layout = smallLayout();
  view.segments = partitionKeys(view.layout, 1)[0];
  return view;
}

TEST(PsProtocolTest, RejectsMalformedRequestsWithTheReason) {
  const ServerView view = initializedView();
  const auto grads = bytesOf(std::vector<float>{1, 2, 3, 4});
  const auto buffers = bytesOf(std::vector<float>{0, 0});
  auto wrongVersion = header(Kind::Push, 0, 2);
  wrongVersion[4] = std::byte{9};
  auto wrongMagic = header(Kind::Push, 0, 2);
  wrongMagic[0] = std::byte{0};
  auto unknownKind = header(Kind::Push, 0, 2);
  unknownKind[6] = std::byte{77};
  auto truncated = header(Kind::Push, 0, 2);
  truncated.resize(56);
  const std::vector<std::pair<Frames, std::string>> cases = {
      {{}, "empty message"},
      {{truncated, grads, buffers}, "header frame of 56 bytes"},
      {{wrongMagic, grads, buffers}, "bad magic"},
      {{wrongVersion, grads, buffers}, "protocol version 9"},
      {{unknownKind, grads, buffers}, "unknown message kind 77"},
      {{header(Kind::Params, 0, 2), grads, buffers}, "is a reply"},
      {{header(Kind::Push, 5, 2), grads, buffers}, "worker id 5"},
      {{header(Kind::Push, -1, 2), grads, buffers}, "worker id -1"},
      {{header(Kind::Push, 0, 3), grads, buffers}, "announces 3 frames"},
      {{header(Kind::Push, 0, 1), grads}, "1 data frames, this server expects 2"},
      {{header(Kind::Push, 0, 2), bytesOf(std::vector<float>{1, 2, 3}), buffers}, "data frame 0 has 12 bytes"},
      {{header(Kind::Push, 0, 2, 1, -1.0), grads, buffers}, "learning rate -1"},
      {{header(Kind::Pull, 0, 1), grads}, "carries no data"},
      {{header(Kind::Init, 1, 3), encodeLayout(smallLayout()), grads, buffers}, "only worker 0"},
      {{header(Kind::Init, 0, 1), std::vector<std::byte>(5)}, "shorter than its 8-byte count"},
  };
  for (const auto& [frames, reason] : cases) {
    const Verdict verdict = validate(frames, view);
    EXPECT_FALSE(verdict.ok) << reason;
    EXPECT_NE(verdict.error.find(reason), std::string::npos) << "expected '" << reason << "', got: " << verdict.error;
  }
  EXPECT_TRUE(validate({header(Kind::Push, 1, 2), grads, buffers}, view).ok);
  EXPECT_TRUE(validate({header(Kind::Pull, 1, 0)}, view).ok);
}

// Note [PS checkpoints]: only worker 0 saves and restores the servers' optimizer state, and a restore must fit it.
TEST(PsProtocolTest, ChecksStateRequestsAndRestores) {
  ServerView view = initializedView();
  view.stateSizes = {16};
  const std::string json = R"({"optimizer_steps":3,"state_bytes":[16]})";
  const std::vector<std::byte> description(reinterpret_cast<const std::byte*>(json.data()),
                                           reinterpret_cast<const std::byte*>(json.data()) + json.size());
  const auto momentum = bytesOf(std::vector<float>{1, 2, 3, 4});
  const std::vector<std::pair<Frames, std::string>> cases = {
      {{header(Kind::StateRequest, 1, 0)}, "only worker 0 saves and restores"},
      {{header(Kind::StateRequest, 0, 1), momentum}, "a state-request carries 0 frames"},
      {{header(Kind::RestoreState, 0, 1), description}, "a restore-state carries 2 frames"},
      {{header(Kind::RestoreState, 0, 2), description, bytesOf(std::vector<float>{1, 2, 3})},
       "optimizer state frame 0 has 12 bytes, this server's has 16"},
      {{header(Kind::RestoreState, 0, 2), std::vector<std::byte>(5000), momentum}, "state description of 5000 bytes"},
      {{header(Kind::State, 0, 0)}, "is a reply"},
  };
  for (const auto& [frames, reason] : cases) {
    const Verdict verdict = validate(frames, view);
    EXPECT_FALSE(verdict.ok) << reason;
    EXPECT_NE(verdict.error.find(reason), std::string::npos) << "expected '" << reason << "', got: " << verdict.error;
  }
  EXPECT_TRUE(validate({header(Kind::StateRequest, 0, 0)}, view).ok);
  EXPECT_TRUE(validate({header(Kind::RestoreState, 0, 2), description, momentum}, view).ok);
  view.initialized = false;
  EXPECT_NE(validate({header(Kind::StateRequest, 0, 0)}, view).error.find("before the server was initialised"),
            std::string::npos);
}

TEST(PsProtocolTest, ChecksAnInitsLayout) {
  ServerView view;
  view.workers = 1;
  view.holdsBuffers = true;
  const auto values = bytesOf(std::vector<float>{1, 2, 3, 4});
  const auto buffers = bytesOf(std::vector<float>{0, 0});
  FlatLayout intLayout;
  intLayout.groups = {{DType::Int64, 4}};
  std::vector<std::byte> badCount = encodeLayout(smallLayout());
  badCount.pop_back();
  EXPECT_NE(validate({header(Kind::Init, 0, 3), encodeLayout(intLayout), values, buffers}, view).error.find("dtype"),
            std::string::npos);
  EXPECT_NE(validate({header(Kind::Init, 0, 3), badCount, values, buffers}, view).error.find("layout frame of"),
            std::string::npos);
  EXPECT_NE(validate({header(Kind::Push, 0, 2), values, buffers}, view).error.find("before the server was"),
            std::string::npos);
  const Verdict ok = validate({header(Kind::Init, 0, 3), encodeLayout(smallLayout()), values, buffers}, view);
  ASSERT_TRUE(ok.ok) << ok.error;
  EXPECT_EQ(ok.segments.size(), 1U);
}

Frames initFrames() {
  return {header(Kind::Init, 0, 3), encodeLayout(smallLayout()), bytesOf(std::vector<float>{1, 2, 3, 4}),
          bytesOf(std::vector<float>{10, 20})};
}

TEST(PsServerTest, AnswersMalformedMessagesWithErrorsAndKeepsServing) {
  ServerThread server(2, {{"auth", "off"}});
  RawClient client(server.endpoint());
  const Frames bad[] = {
      {std::vector<std::byte>(7)},
      {header(Kind::Push, 0, 2), bytesOf(std::vector<float>{1, 2, 3, 4}), bytesOf(std::vector<float>{0, 0})},
      {header(Kind::Push, 9, 0)},
  };
  for (const Frames& frames : bad) {
    client.send(frames);
    const auto reply = client.receive();
    ASSERT_EQ(reply.size(), 2U);
    EXPECT_EQ(headerOf(reply).kind, static_cast<std::uint16_t>(Kind::Error));
    EXPECT_NE(reply[1].to_string().find("ps-server 0:"), std::string::npos) << reply[1].to_string();
  }
  client.send(initFrames());
  const auto reply = client.receive();
  ASSERT_EQ(reply.size(), 3U);
  EXPECT_EQ(headerOf(reply).kind, static_cast<std::uint16_t>(Kind::Params));
  EXPECT_EQ(floatsOf(reply[1]), (std::vector<float>{1, 2, 3, 4}));
}

// A store that fails every call once closed, as the TCP store does once rank 0, which hosts it, has left.
class ClosableStore final : public Store {
 public:
  void close() { closed_ = true; }
  void set(const std::string& key, const Bytes& value) override {
    open();
    inner_.set(key, value);
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    open();
    return inner_.get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    open();
    return inner_.add(key, delta);
  }
  bool check(const std::vector<std::string>& keys) override {
    open();
    return inner_.check(keys);
  }
  std::vector<std::string> tryWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    open();
    return inner_.tryWait(keys, timeout);
  }

 private:
  void open() const {
    if (closed_)
      fail("store connection closed by the server (has rank 0 exited?)");
  }
  InMemoryStore inner_;
  std::atomic<bool> closed_{false};
};

// Note [Store gone at the end]: async and ssp servers look for departed workers in the store every second; once the
// run is over rank 0 closes the store before the launcher stops the servers, and the server must keep serving then
// (it exited with status 1, and the launcher reported a finished run as failed).
TEST(PsServerTest, AStoreClosedAtTheEndOfARunDoesNotStopTheServer) {
  for (const std::string mode : {"async", "ssp"}) {
    SCOPED_TRACE(mode);
    ClosableStore store;
    const std::map<std::string, std::string> options{{"auth", "off"}, {"mode", mode}};
    testing::TestRoleContext context(store, 2, options);
    PsServer server(parsePsOptions(options), context);
    server.start();
    store.close();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < until) {
      ASSERT_NO_THROW(server.serveOnce(50));
    }
  }
}

TEST(PsServerTest, SyncAveragesEveryWorkersPushAndAResendIsNotAppliedTwice) {
  ServerThread server(2, {{"auth", "off"}});
  RawClient worker0(server.endpoint());
  RawClient worker1(server.endpoint());
  worker0.send(initFrames());
  ASSERT_EQ(worker0.receive().size(), 3U);
  const Frames push0 = {header(Kind::Push, 0, 2), bytesOf(std::vector<float>{1, 1, 1, 1}),
                        bytesOf(std::vector<float>{2, 4})};
  worker0.send(push0);
  EXPECT_TRUE(worker0.receive(std::chrono::milliseconds(200)).empty()) << "sync answers only a full round";
  worker1.send({header(Kind::Push, 1, 2), bytesOf(std::vector<float>{3, 3, 3, 3}), bytesOf(std::vector<float>{4, 8})});
  for (RawClient* client : {&worker0, &worker1}) {
    const auto reply = client->receive();
    ASSERT_EQ(reply.size(), 3U);
    EXPECT_EQ(headerOf(reply).modelVersion, 1);
    // SGD with lr 0.5 on the mean gradient 2: 1 - 1, 2 - 1, ...; buffers averaged.
    EXPECT_EQ(floatsOf(reply[1]), (std::vector<float>{0, 1, 2, 3}));
    EXPECT_EQ(floatsOf(reply[2]), (std::vector<float>{3, 6}));
  }
  worker0.send(push0);  // the same sequence number again: answered, not applied
  const auto again = worker0.receive();
  ASSERT_EQ(again.size(), 3U);
  EXPECT_EQ(headerOf(again).modelVersion, 1);
  EXPECT_EQ(floatsOf(again[1]), (std::vector<float>{0, 1, 2, 3}));
}

// Note [PS checkpoints]: what a State reply gives, a RestoreState puts back (a resumed run's momentum).
TEST(PsServerTest, OptimizerStateRoundTripsThroughStateAndRestoreState) {
  ServerThread server(1, {{"auth", "off"}}, OptimizerOptions{.momentum = 0.9});
  RawClient worker0(server.endpoint());
  worker0.send(initFrames());
  ASSERT_EQ(worker0.receive().size(), 3U);
  worker0.send({header(Kind::Push, 0, 2), bytesOf(std::vector<float>{1, 2, 3, 4}), bytesOf(std::vector<float>{0, 0})});
  ASSERT_EQ(worker0.receive().size(), 3U);
  worker0.send({header(Kind::StateRequest, 0, 0, 2)});
  const auto state = worker0.receive();
  ASSERT_EQ(state.size(), 3U);  // header, description, the one momentum buffer
  EXPECT_EQ(headerOf(state).kind, static_cast<std::uint16_t>(Kind::State));
  const nlohmann::json description = nlohmann::json::parse(state[1].to_string());
  EXPECT_EQ(description["optimizer_steps"], 1);
  EXPECT_EQ(description["state_bytes"], nlohmann::json::array({16}));
  EXPECT_EQ(floatsOf(state[2]), (std::vector<float>{1, 2, 3, 4}));  // the first step's buffer is the gradient

  const std::string restored = R"({"optimizer_steps":7,"state_bytes":[16]})";
  std::vector<std::byte> restoredBytes(reinterpret_cast<const std::byte*>(restored.data()),
                                       reinterpret_cast<const std::byte*>(restored.data()) + restored.size());
  worker0.send({header(Kind::RestoreState, 0, 2, 3), restoredBytes, bytesOf(std::vector<float>{5, 5, 5, 5})});
  const auto after = worker0.receive();
  ASSERT_EQ(after.size(), 3U);
  EXPECT_EQ(nlohmann::json::parse(after[1].to_string())["optimizer_steps"], 7);
  EXPECT_EQ(floatsOf(after[2]), (std::vector<float>{5, 5, 5, 5}));
  // The next push uses the restored buffer: 0.9 * 5 + 1 = 5.5, times lr 0.5 off the values (0.5, 1, 1.5, 2).
  worker0.send(
      {header(Kind::Push, 0, 2, 4), bytesOf(std::vector<float>{1, 1, 1, 1}), bytesOf(std::vector<float>{0, 0})});
  const auto pushed = worker0.receive();
  ASSERT_EQ(pushed.size(), 3U);
  EXPECT_EQ(floatsOf(pushed[1]), (std::vector<float>{-2.25F, -1.75F, -1.25F, -0.75F}));
  worker0.send({header(Kind::RestoreState, 0, 2, 5), std::vector<std::byte>{std::byte{'x'}},
                bytesOf(std::vector<float>{5, 5, 5, 5})});
  const auto refused = worker0.receive();
  ASSERT_EQ(refused.size(), 2U);
  EXPECT_EQ(headerOf(refused).kind, static_cast<std::uint16_t>(Kind::Error));
}

TEST(PsServerTest, SspHoldsAWorkerMoreThanKPushesAhead) {
  ServerThread server(2, {{"auth", "off"}, {"mode", "ssp"}, {"staleness", "1"}});
  RawClient worker0(server.endpoint());
  RawClient worker1(server.endpoint());
  worker0.send(initFrames());
  ASSERT_EQ(worker0.receive().size(), 3U);
  const auto push = [](int worker, std::uint64_t sequence) {
    return Frames{header(Kind::Push, worker, 2, sequence), bytesOf(std::vector<float>{1, 1, 1, 1}),
                  bytesOf(std::vector<float>{0, 0})};
  };
  worker0.send(push(0, 1));
  EXPECT_EQ(worker0.receive().size(), 3U) << "one ahead of the slowest: within K = 1";
  worker0.send(push(0, 2));
  EXPECT_TRUE(worker0.receive(std::chrono::milliseconds(300)).empty()) << "two ahead: held";
  worker1.send(push(1, 1));
  EXPECT_EQ(worker1.receive().size(), 3U);
  const auto released = worker0.receive();
  ASSERT_EQ(released.size(), 3U);
  EXPECT_EQ(headerOf(released).modelVersion, 3);  // async updates: one per push
}

Frames pushOf(int worker, std::uint64_t sequence, float g, std::int64_t modelVersion) {
  auto h = header(Kind::Push, worker, 2, sequence);
  Header decoded;
  std::memcpy(&decoded, h.data(), sizeof decoded);
  decoded.modelVersion = modelVersion;
  return {encodeHeader(decoded), bytesOf(std::vector<float>(4, g)), bytesOf(std::vector<float>{0, 0})};
}

TEST(PsServerTest, AsyncCorrectsStaleGradients) {
  // lr_staleness: a push computed on version 0 and applied at version 1 has staleness 1; one applied at version 2
  // (computed on 0) has staleness 2 and half the learning rate.
  {
    ServerThread server(2, {{"auth", "off"}, {"mode", "async"}, {"lr_staleness", "on"}});
    RawClient worker0(server.endpoint());
    RawClient worker1(server.endpoint());
    worker0.send(initFrames());
    ASSERT_EQ(worker0.receive().size(), 3U);
    worker1.send(pushOf(1, 1, 1.0F, 0));  // staleness 0: lr 0.5 -> 1 - 0.5
    ASSERT_EQ(headerOf(worker1.receive()).staleness, 0);
    worker1.send(pushOf(1, 2, 1.0F, 1));  // staleness 0 again -> 0.5 - 0.5
    ASSERT_EQ(worker1.receive().size(), 3U);
    worker0.send(pushOf(0, 2, 1.0F, 0));  // computed on version 0, applied at 2: lr 0.5 / 2
    const auto reply = worker0.receive();
    ASSERT_EQ(reply.size(), 3U);
    EXPECT_EQ(headerOf(reply).staleness, 2);
    EXPECT_EQ(floatsOf(reply[1]), (std::vector<float>{-0.25F, 0.75F, 1.75F, 2.75F}));
  }
  // DC-ASGD: worker 0's gradient g, computed on the values it pulled (v0), is applied as g + lambda g^2 (v - v0).
  {
    ServerThread server(2, {{"auth", "off"}, {"mode", "async"}, {"dc_asgd", "0.1"}, {"lr_scale", "none"}});
    RawClient worker0(server.endpoint());
    RawClient worker1(server.endpoint());
    worker0.send(initFrames());  // worker 0 holds v0 = 1, 2, 3, 4
    ASSERT_EQ(worker0.receive().size(), 3U);
    worker1.send(pushOf(1, 1, 1.0F, 0));  // never pulled: no compensation; v1 = v0 - 0.5
    ASSERT_EQ(worker1.receive().size(), 3U);
    worker0.send(pushOf(0, 2, 2.0F, 0));  // 2 + 0.1 * 4 * (-0.5) = 1.8; v2 = v1 - 0.9
    const auto reply = worker0.receive();
    ASSERT_EQ(reply.size(), 3U);
    const std::vector<float> values = floatsOf(reply[1]);
    const std::vector<float> expected{-0.4F, 0.6F, 1.6F, 2.6F};
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(values[i], expected[i], 1e-6) << i;
    }
  }
}

// Note [Async learning rate]: by default an async or ssp push is applied at lr / W (W = 2 here), the learning rate
// per sample of a synchronous round; lr_scale=none applies lr as given; lr_staleness alone divides by the staleness.
TEST(PsServerTest, AsyncAppliesEachPushAtTheLearningRateOverTheWorkers) {
  struct Case {
    std::map<std::string, std::string> options;
    float expectedStep;
  };
  const std::vector<Case> cases = {
      {{{"mode", "async"}}, 0.25F},
      {{{"mode", "ssp"}, {"staleness", "2"}}, 0.25F},
      {{{"mode", "async"}, {"lr_scale", "none"}}, 0.5F},
      {{{"mode", "async"}, {"lr_scale", "workers"}}, 0.25F},
      {{{"mode", "async"}, {"lr_staleness", "on"}}, 0.5F},  // staleness 0 counts as 1
      {{{"mode", "async"}, {"lr_staleness", "on"}, {"lr_scale", "workers"}}, 0.25F},
  };
  for (const Case& c : cases) {
    std::map<std::string, std::string> options = c.options;
    options["auth"] = "off";
    SCOPED_TRACE(::testing::PrintToString(options));
    ServerThread server(2, options);
    RawClient worker0(server.endpoint());
    worker0.send(initFrames());  // values 1, 2, 3, 4; SGD at lr 0.5
    ASSERT_EQ(worker0.receive().size(), 3U);
    worker0.send(pushOf(0, 1, 1.0F, 0));
    const auto reply = worker0.receive();
    ASSERT_EQ(reply.size(), 3U);
    const float step = c.expectedStep;
    EXPECT_EQ(floatsOf(reply[1]), (std::vector<float>{1 - step, 2 - step, 3 - step, 4 - step}));
  }
}

std::string writeSecret(const std::filesystem::path& dir) {
  char publicKey[41];
  char secretKey[41];
  zmq_curve_keypair(publicKey, secretKey);
  const std::filesystem::path path = dir / "secret";
  std::ofstream(path) << secretKey << "\n";
  return path.string();
}

TEST(PsServerTest, CurveAdmitsOnlyClientsWithTheJobsKey) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ps_curve_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string keyFile = writeSecret(dir);
  ServerThread server(1, {{"key_file", keyFile}});
  const CurveKeys job = loadJobKeys(parsePsOptions({{"key_file", keyFile}}));

  RawClient plain(server.endpoint());  // no CURVE at all
  plain.send(initFrames());
  EXPECT_TRUE(plain.receive(std::chrono::milliseconds(500)).empty());

  char otherPublic[41];
  char otherSecret[41];
  zmq_curve_keypair(otherPublic, otherSecret);
  RawClient stranger(server.endpoint(), [&](zmq::socket_t& s) {  // knows the server's key, not the job's secret
    s.set(zmq::sockopt::curve_serverkey, job.publicKey);
    s.set(zmq::sockopt::curve_publickey, std::string(otherPublic));
    s.set(zmq::sockopt::curve_secretkey, std::string(otherSecret));
  });
  stranger.send(initFrames());
  EXPECT_TRUE(stranger.receive(std::chrono::milliseconds(500)).empty());

  RawClient member(server.endpoint(), [&](zmq::socket_t& s) { makeCurveClient(s, job); });
  member.send({header(Kind::StatsRequest, 0, 0)});
  const auto stats = member.receive();
  ASSERT_EQ(stats.size(), 2U);
  // Nothing the others sent was applied, and the stranger's handshake was refused and counted.
  EXPECT_NE(stats[1].to_string().find(R"("version":0)"), std::string::npos) << stats[1].to_string();
  EXPECT_EQ(stats[1].to_string().find(R"("refused":0)"), std::string::npos) << stats[1].to_string();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::ps
