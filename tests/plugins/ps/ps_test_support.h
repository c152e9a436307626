#pragma once

// In-process parameter servers for the ps unit tests and the message fuzzer: a RoleContext over an in-memory store,
// a server thread, and a raw DEALER client that sends any frames it is given.

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "ps_protocol.h"
#include "ps_server.h"
#include "ps_transport.h"
#include "strata/comm/in_memory_store.h"
#include "strata/optim/optimizer.h"

namespace strata::ps::testing {

class TestRoleContext final : public RoleContext {
 public:
  TestRoleContext(Store& store, int workers, std::map<std::string, std::string> options,
                  OptimizerOptions optimizer = {})
      : store_(store), workers_(workers), options_(std::move(options)), optimizer_(optimizer) {}
  const std::string& role() const override { return role_; }
  int index() const override { return 0; }
  int count() const override { return 1; }
  int workers() const override { return workers_; }
  Store& store() override { return store_; }
  const std::map<std::string, std::string>& options() const override { return options_; }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(5); }
  std::string hostAddress() const override { return "127.0.0.1"; }
  bool stopRequested() const override { return false; }
  std::unique_ptr<SliceOptimizer> createOptimizer(std::vector<ParameterSlice> slices) override {
    return std::make_unique<Optimizer>(std::move(slices), optimizer_);  // plain SGD unless told otherwise
  }

 private:
  std::string role_ = "ps-server";
  Store& store_;
  int workers_;
  std::map<std::string, std::string> options_;
  OptimizerOptions optimizer_;
};

// One server on its own thread, serving until destroyed.
class ServerThread {
 public:
  // `store`: the job's store, when workers of a Trainer find the server there; else one of its own.
  ServerThread(int workers, std::map<std::string, std::string> options, OptimizerOptions optimizer = {},
               std::shared_ptr<InMemoryStore> store = nullptr)
      : store_(store != nullptr ? std::move(store) : std::make_shared<InMemoryStore>()),
        context_(*store_, workers, options, optimizer),
        server_(parsePsOptions(options), context_) {
    server_.start();
    endpoint_ = store_->getString(roleEndpointKey("ps-server", 0), std::chrono::seconds(5));
    thread_ = std::thread([this] {
      while (!stop_) {
        server_.serveOnce(20);
      }
    });
  }
  ~ServerThread() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  Store& store() { return *store_; }

 private:
  std::shared_ptr<InMemoryStore> store_;
  TestRoleContext context_;
  PsServer server_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

using Frames = std::vector<std::vector<std::byte>>;

inline std::vector<std::byte> header(Kind kind, int worker, std::uint32_t frames, std::uint64_t sequence = 1,
                                     double lr = 0.5) {
  Header h;
  h.kind = static_cast<std::uint16_t>(kind);
  h.worker = worker;
  h.frames = frames;
  h.sequence = sequence;
  h.lr = lr;
  return encodeHeader(h);
}

template <typename T>
std::vector<std::byte> bytesOf(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

inline std::vector<float> floatsOf(const zmq::message_t& frame) {
  std::vector<float> values(frame.size() / sizeof(float));
  std::memcpy(values.data(), frame.data(), frame.size());
  return values;
}

// A DEALER that sends whatever frames it is given and waits a bounded time for an answer.
class RawClient {
 public:
  explicit RawClient(const std::string& endpoint, const std::function<void(zmq::socket_t&)>& configure = {})
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    if (configure) {
      configure(socket_);
    }
    socket_.connect("tcp://" + endpoint);
  }
  void send(const Frames& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i].data(), frames[i].size()),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // The answer's frames, or none after `timeout`.
  std::vector<zmq::message_t> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::vector<zmq::message_t> frames;
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) {
      return frames;
    }
    do {
      zmq::message_t frame;
      (void)socket_.recv(frame);
      frames.push_back(std::move(frame));
    } while (frames.back().more());
    return frames;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

inline Header headerOf(const std::vector<zmq::message_t>& frames) {
  std::string why;
  const std::optional<Header> h =
      decodeHeader({static_cast<const std::byte*>(frames.at(0).data()), frames[0].size()}, why);
  if (!h) {
    throw std::runtime_error("bad reply header: " + why);
  }
  return *h;
}

}  // namespace strata::ps::testing
