// A parameter server's own figures (plugins/ps/ps_server_figures.h, Note [PS server memory]): what it publishes for
// summary.json, when it publishes, and the bytes it counts that are not tensors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ps_counted_bytes.h"
#include "ps_server_figures.h"
#include "ps_test_support.h"
#include "strata/comm/in_memory_store.h"
#include "strata/sdk/roles.h"

namespace strata::ps {
namespace {

using testing::bytesOf;
using testing::header;
using testing::RawClient;
using testing::ServerThread;

// An in-memory store that counts the writes of one key.
class CountingStore final : public Store {
 public:
  explicit CountingStore(std::string key) : key_(std::move(key)) {}
  void set(const std::string& key, const Bytes& value) override {
    writes_ += key == key_ ? 1 : 0;
    inner_.set(key, value);
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override { return inner_.get(key, timeout); }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_.add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return inner_.check(keys); }
  std::vector<std::string> tryWait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return inner_.tryWait(keys, timeout);
  }
  int writes() const { return writes_; }

 private:
  std::string key_;
  InMemoryStore inner_;
  int writes_ = 0;
};

std::int64_t currentCommunication() {
  return allocatorFor(Device::cpu())
      .stats()
      .snapshot()
      .current[static_cast<std::size_t>(MemoryCategory::Communication)];
}

TEST(PsServerFiguresTest, PublishesWhenAPeakRisesAndOnlyThen) {
  const std::string key = roleFiguresKey("ps-server", 3);
  CountingStore store(key);
  ServerFigures figures(store, "ps-server", 3, 0);
  figures.setKeyRanges(2, 4096);
  figures.publishIfChanged();
  ASSERT_EQ(store.writes(), 1);
  const nlohmann::json first = nlohmann::json::parse(store.getString(key, std::chrono::seconds(1)));
  EXPECT_EQ(first["role"], "ps-server");
  EXPECT_EQ(first["index"], 3);
  EXPECT_EQ(first["key_ranges"], 2);
  EXPECT_EQ(first["key_range_bytes"], 4096);
  EXPECT_EQ(first["restarts"], 0);
  EXPECT_EQ(ServerFigures::residentStep(0), 1 << 20);
  EXPECT_EQ(ServerFigures::residentStep(std::int64_t{64} << 20), 2 << 20);
  EXPECT_GT(first["resident_peak_bytes"].get<std::int64_t>(), 0);
  ASSERT_EQ(first["memory_breakdown"].size(), kMemoryCategoryCount);
  figures.publishIfChanged();
  figures.publishIfChanged();
  // The resident peak may still rise between two calls (pages touched elsewhere in this test process, or ASan's
  // allocator), but not by ServerFigures::residentStep(); the allocator's peaks do not rise.
  EXPECT_EQ(store.writes(), 1) << "published again although nothing rose";
  const int before = store.writes();
  // A communication peak above anything this process held before.
  const std::int64_t peak =
      allocatorFor(Device::cpu()).stats().snapshot().peak[static_cast<std::size_t>(MemoryCategory::Communication)];
  {
    const CountedBytes big(MemoryCategory::Communication, static_cast<std::size_t>(peak) + 12345);
    figures.publishIfChanged();
  }
  EXPECT_EQ(store.writes(), before + 1);
  const nlohmann::json risen = nlohmann::json::parse(store.getString(key, std::chrono::seconds(1)));
  EXPECT_GE(risen["memory_breakdown"]["communication"].get<std::int64_t>(), peak + 12345);
  EXPECT_GE(risen["peak_memory_bytes"].get<std::int64_t>(), peak + 12345);
}

// Note [PS recovery]: a restarted server reports the job's peaks, its earlier process's among them.
TEST(PsServerFiguresTest, ARestartedServerKeepsItsEarlierProcesssPeaks) {
  InMemoryStore store;
  const std::string key = roleFiguresKey("ps-server", 0);
  const std::int64_t huge = std::int64_t{1} << 50;
  store.setString(key, nlohmann::json({{"peak_memory_bytes", huge},
                                       {"memory_breakdown", {{"optimizer_state", huge}}},
                                       {"resident_peak_bytes", huge}})
                           .dump());
  const nlohmann::json restarted = ServerFigures(store, "ps-server", 0, 1).json();
  EXPECT_EQ(restarted["peak_memory_bytes"], huge);
  EXPECT_EQ(restarted["memory_breakdown"]["optimizer_state"], huge);
  EXPECT_LT(restarted["memory_breakdown"]["parameters"].get<std::int64_t>(), huge);
  EXPECT_EQ(restarted["resident_peak_bytes"], huge);
  EXPECT_EQ(restarted["restarts"], 1);
  // A first process never takes over what another job left under the key.
  EXPECT_LT(ServerFigures(store, "ps-server", 0, 0).json()["peak_memory_bytes"].get<std::int64_t>(), huge);
  // A damaged record costs the earlier peaks only.
  store.setString(key, "{not json");
  EXPECT_LT(ServerFigures(store, "ps-server", 0, 2).json()["peak_memory_bytes"].get<std::int64_t>(), huge);
}

TEST(PsCountedBytesTest, CountsWhileAliveAndMovesWithItsOwner) {
  const std::int64_t before = currentCommunication();
  {
    CountedBytes a(MemoryCategory::Communication, 1000);
    EXPECT_EQ(currentCommunication(), before + 1000);
    CountedBytes b(std::move(a));
    EXPECT_EQ(currentCommunication(), before + 1000);
    b = CountedBytes(MemoryCategory::Communication, 10);
    EXPECT_EQ(currentCommunication(), before + 10);
  }
  EXPECT_EQ(currentCommunication(), before);
  {
    const std::vector<float> values{1, 2, 3};
    zmq::message_t copy = countedCopy(values.data(), values.size() * sizeof(float));
    EXPECT_EQ(currentCommunication(), before + 12);
    EXPECT_EQ(std::memcmp(copy.data(), values.data(), 12), 0);
  }
  EXPECT_EQ(currentCommunication(), before);
}

// The server publishes its figures before it answers, with its key ranges and what its tensors take.
TEST(PsServerFiguresTest, AServerPublishesItsKeyRangesBeforeItAnswers) {
  ServerThread server(1, {{"auth", "off"}}, OptimizerOptions{.kind = OptimizerKind::Adam});
  RawClient worker0(server.endpoint());
  worker0.send({header(Kind::Init, 0, 3), encodeLayout([] {
                  FlatLayout layout;
                  layout.groups = {{DType::Float32, 4}};
                  layout.buffers = {{DType::Float32, 2}};
                  return layout;
                }()),
                bytesOf(std::vector<float>{1, 2, 3, 4}), bytesOf(std::vector<float>{10, 20})});
  ASSERT_EQ(worker0.receive().size(), 3U);
  const nlohmann::json figures =
      nlohmann::json::parse(server.store().getString(roleFiguresKey("ps-server", 0), std::chrono::seconds(1)));
  EXPECT_EQ(figures["key_ranges"], 1);
  EXPECT_EQ(figures["key_range_bytes"], 16);
  // Peaks of this whole test process (the server runs in it): at least the server's own tensors.
  EXPECT_GE(figures["memory_breakdown"]["parameters"].get<std::int64_t>(), 16);
  EXPECT_GE(figures["memory_breakdown"]["optimizer_state"].get<std::int64_t>(), 32);  // Adam: two moments
  worker0.send({header(Kind::StatsRequest, 0, 0, 2)});
  const auto stats = worker0.receive();
  ASSERT_EQ(stats.size(), 2U);
  EXPECT_EQ(nlohmann::json::parse(stats[1].to_string())["figures"]["key_range_bytes"], 16);
}

}  // namespace
}  // namespace strata::ps
