// A worker's key-value API (plugins/ps/ps_worker.h) against an in-process server: tickets, the versions the pushes
// report, and the errors of a ticket misused.
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ps_test_support.h"
#include "ps_worker.h"
#include "strata/comm/in_memory_store.h"
#include "strata/error.h"

namespace strata::ps {
namespace {

using testing::floatsOf;

std::span<const std::byte> spanOf(const std::vector<float>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(float)};
}

TEST(PsWorkerTest, PushesAndPullsByTicketAndReportsTheVersionItLastReceived) {
  auto store = std::make_shared<InMemoryStore>();
  testing::ServerThread server(2, {{"auth", "off"}, {"mode", "async"}, {"lr_scale", "none"}}, {}, store);
  const PsOptions options = parsePsOptions({{"auth", "off"}, {"mode", "async"}});
  std::vector<std::string> figures;
  const auto addFigure = [&](const std::string& name, double) { figures.push_back(name); };
  PsWorker worker0(options, 0, *store, "ps-server", addFigure);
  PsWorker worker1(options, 1, *store, "ps-server", addFigure);

  // Rank 0's Init: the layout, the values 1, 2, 3, 4 and the buffer 0, 0.
  const std::vector<std::byte> layout = encodeLayout(FlatLayout{{{DType::Float32, 4}}, {{DType::Float32, 2}}});
  const std::vector<float> values{1, 2, 3, 4};
  const std::vector<float> buffer{0, 0};
  const std::vector<Reply> initialised = worker0.wait(worker0.init({{layout, spanOf(values), spanOf(buffer)}}, false));
  ASSERT_EQ(initialised.size(), 1U);
  EXPECT_EQ(floatsOf(initialised[0].data.at(0)), values);

  // Worker 1 pushes twice (SGD at lr 0.5 on gradient 1): versions 1 and 2.
  const std::vector<float> ones(4, 1.0F);
  for (int step = 0; step < 2; ++step) {
    const std::vector<Reply> replies = worker1.wait(worker1.push(step, 0.5, {{spanOf(ones), spanOf(buffer)}}));
    EXPECT_EQ(replies.at(0).header.modelVersion, step + 1);
    EXPECT_EQ(replies[0].header.staleness, 0) << "worker 1 reports the version of its last answer";
  }
  // Worker 0 last received version 0: its push is two versions stale.
  const std::vector<Reply> stale = worker0.wait(worker0.push(0, 0.5, {{spanOf(ones), spanOf(buffer)}}));
  EXPECT_EQ(stale.at(0).header.staleness, 2);
  EXPECT_EQ(floatsOf(stale[0].data.at(0)), (std::vector<float>{-0.5F, 0.5F, 1.5F, 2.5F}));
  const std::vector<Reply> pulled = worker1.wait(worker1.pull());
  EXPECT_EQ(pulled.at(0).header.modelVersion, 3);
  EXPECT_TRUE(figures.empty()) << "no server restarted";
}

TEST(PsWorkerTest, AMisusedTicketIsRefusedNamingIt) {
  auto store = std::make_shared<InMemoryStore>();
  testing::ServerThread server(1, {{"auth", "off"}}, {}, store);
  PsWorker worker(parsePsOptions({{"auth", "off"}}), 0, *store, "ps-server", [](const std::string&, double) {});
  const std::vector<float> values{1, 2, 3, 4};
  const std::vector<float> buffer{0, 0};
  const std::vector<std::byte> layout = encodeLayout(FlatLayout{{{DType::Float32, 4}}, {{DType::Float32, 2}}});
  const Ticket ticket = worker.init({{layout, spanOf(values), spanOf(buffer)}}, false);
  try {
    worker.pull();
    FAIL() << "a second request while a ticket is awaited";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("still awaited"), std::string::npos) << e.what();
  }
  EXPECT_THROW(worker.wait(ticket + 1), Error);
  EXPECT_EQ(worker.wait(ticket).size(), 1U);
  EXPECT_THROW(worker.wait(ticket), Error) << "a ticket is awaited once";
  EXPECT_THROW(worker.push(1, 0.5, {}), Error) << "frames for 0 servers, the job has 1";
}

}  // namespace
}  // namespace strata::ps
