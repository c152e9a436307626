// A worker's connections to the servers (plugins/ps/ps_client.cpp), against scripted servers: ROUTER sockets that
// answer when the test says so.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "ps_client.h"
#include "ps_test_support.h"
#include "strata/comm/in_memory_store.h"
#include "strata/error.h"
#include "strata/sdk/roles.h"

namespace strata::ps {
namespace {

// A server that only answers: it takes one request and sends back a Params reply with the request's sequence.
class ScriptedServer {
 public:
  ScriptedServer(zmq::context_t& context, Store& store, int index) : socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("tcp://127.0.0.1:*");
    const std::string bound = socket_.get(zmq::sockopt::last_endpoint);
    publishRoleEndpoint(store, "ps-server", index, bound.substr(bound.find("//") + 2));
  }

  // Receives the next request and answers it at once.
  void answerNext() {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(5)), 1) << "no request reached the scripted server";
    std::vector<zmq::message_t> frames;
    do {
      zmq::message_t frame;
      (void)socket_.recv(frame);
      frames.push_back(std::move(frame));
    } while (frames.back().more());
    // frames: the DEALER's identity, then the request's header and data.
    std::string why;
    const std::optional<Header> request =
        decodeHeader({static_cast<const std::byte*>(frames.at(1).data()), frames[1].size()}, why);
    ASSERT_TRUE(request.has_value()) << why;
    Header answer;
    answer.kind = static_cast<std::uint16_t>(Kind::Params);
    answer.worker = request->worker;
    answer.sequence = request->sequence;
    answer.step = request->step;
    const std::vector<std::byte> bytes = encodeHeader(answer);
    socket_.send(frames[0], zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
  }

 private:
  zmq::socket_t socket_;
};

std::vector<zmq::message_t> noData() {
  return {};
}

// `servers` scripted servers published in a store, and a worker's client of them with `timeout_s`.
class PsClientTest : public ::testing::Test {
 protected:
  PsClient& connect(int servers, const std::string& timeoutSeconds, int worker = 0) {
    for (int s = 0; s < servers; ++s) {
      servers_.push_back(std::make_unique<ScriptedServer>(context_, store_, s));
    }
    options_ = parsePsOptions({{"servers", std::to_string(servers)}, {"auth", "off"}, {"timeout_s", timeoutSeconds}});
    client_ = std::make_unique<PsClient>(options_, worker, store_, "ps-server");
    return *client_;
  }
  ScriptedServer& server(int s) { return *servers_.at(static_cast<std::size_t>(s)); }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

 private:
  InMemoryStore store_;
  zmq::context_t context_;
  std::vector<std::unique_ptr<ScriptedServer>> servers_;
  PsOptions options_;
  std::unique_ptr<PsClient> client_;
};

// Note [PS recovery]: while a worker replays to a restarted server it waits on that server alone; another server's
// answer arriving meanwhile must stay for the later wait on that server (CI once lost it, and the worker then
// waited 300 s for an answer it had already been sent).
TEST_F(PsClientTest, WaitingOnOneServerKeepsAnotherServersAnswer) {
  PsClient& client = connect(2, "3");
  client.send(0, Kind::Push, 13, 0, 0.1, noData());
  const std::uint64_t toSecond = client.send(1, Kind::Push, 13, 0, 0.1, noData());
  server(1).answerNext();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the answer is in the client's socket
  server(0).answerNext();
  const Reply fromFirst = client.receiveFrom(0, timeout());
  EXPECT_EQ(fromFirst.header.step, 13);
  const Reply fromSecond = client.receiveFrom(1, timeout());
  EXPECT_EQ(fromSecond.header.sequence, toSecond);
  EXPECT_EQ(fromSecond.header.step, 13);
}

// An answer to a request the worker no longer waits for (it resent the request after a reconnect) is dropped, and
// the answer to the current one is returned.
TEST_F(PsClientTest, DropsAnswersToEarlierRequests) {
  PsClient& client = connect(1, "3");
  client.send(0, Kind::Pull, 1, 0, 0, noData());
  server(0).answerNext();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::uint64_t current = client.send(0, Kind::Pull, 2, 0, 0, noData());
  server(0).answerNext();
  const Reply reply = client.receiveFrom(0, timeout());
  EXPECT_EQ(reply.header.sequence, current);
  EXPECT_EQ(reply.header.step, 2);
}

// A server that never answers ends the wait after the timeout with an error naming it and what it was asked.
TEST_F(PsClientTest, ASilentServerIsNamedAfterTheTimeout) {
  PsClient& client = connect(1, "0.5", /*worker=*/3);
  client.send(0, Kind::Push, 7, 0, 0.1, noData());
  try {
    client.receiveAll(timeout());
    FAIL() << "a silent server did not time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 3 got no answer within 0.5 s from ps-server 0"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("push of step 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::ps
