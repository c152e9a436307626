#include "ps_client.h"

#include <fmt/format.h>

#include "ps_transport.h"
#include "strata/error.h"

namespace strata::ps {

PsClient::PsClient(const PsOptions& options, int worker, const std::vector<std::string>& endpoints)
    : options_(options),
      worker_(worker),
      endpoints_(endpoints),
      sequence_(endpoints.size(), 0),
      pending_(endpoints.size()) {
  CurveKeys keys;
  if (options.auth) {
    keys = loadJobKeys(options);
  }
  for (const std::string& endpoint : endpoints) {
    zmq::socket_t socket(zmq_, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    if (options.auth) {
      makeCurveClient(socket, keys);
    }
    socket.connect("tcp://" + endpoint);
    sockets_.push_back(std::move(socket));
  }
}

void PsClient::send(int server, Kind kind, std::int64_t step, std::int64_t modelVersion, double lr,
                    std::vector<zmq::message_t> data, std::uint32_t flags) {
  const auto s = static_cast<std::size_t>(server);
  Header header;
  header.kind = static_cast<std::uint16_t>(kind);
  header.worker = worker_;
  header.frames = static_cast<std::uint32_t>(data.size());
  header.step = step;
  header.modelVersion = modelVersion;
  header.sequence = ++sequence_[s];
  header.lr = lr;
  header.flags = flags;
  const std::vector<std::byte> bytes = encodeHeader(header);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(bytes.data(), bytes.size());
  for (zmq::message_t& d : data) {
    frames.push_back(std::move(d));
  }
  sendMessage(sockets_[s], frames);
  pending_[s] = fmt::format("{} of step {}", kindName(kind), step);
}

std::vector<Reply> PsClient::receiveAll(std::chrono::milliseconds timeout) {
  std::vector<Reply> replies(sockets_.size());
  std::vector<bool> done(sockets_.size(), false);
  std::size_t remaining = sockets_.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (remaining > 0) {
    std::vector<zmq::pollitem_t> items;
    for (zmq::socket_t& socket : sockets_) {
      items.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::string silent;
      for (std::size_t s = 0; s < sockets_.size(); ++s) {
        if (!done[s]) {
          silent += fmt::format("{}ps-server {} at {} (asked: {})", silent.empty() ? "" : ", ", s, endpoints_[s],
                                pending_[s]);
        }
      }
      fail(
          "ps: worker {} got no answer within {} s from {}; the server's own log lines start with "
          "[ps-server N]",
          worker_, timeout.count() / 1000.0, silent);
    }
    try {
      zmq::poll(items, std::min(left, std::chrono::milliseconds(1000)));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) {
        throw;
      }
      continue;
    }
    for (std::size_t s = 0; s < sockets_.size(); ++s) {
      if ((items[s].revents & ZMQ_POLLIN) == 0) {
        continue;
      }
      std::vector<zmq::message_t> frames = receiveMessage(sockets_[s]);
      std::string why;
      const std::optional<Header> header =
          decodeHeader({static_cast<const std::byte*>(frames[0].data()), frames[0].size()}, why);
      if (!header) {
        fail("ps: worker {}: a malformed answer from ps-server {} at {}: {}", worker_, s, endpoints_[s], why);
      }
      if (header->kind == static_cast<std::uint16_t>(Kind::Error)) {
        fail("ps: worker {}: ps-server {} at {} refused its {}: {}", worker_, s, endpoints_[s], pending_[s],
             frames.size() > 1 ? frames[1].to_string() : "(no reason given)");
      }
      if (header->sequence != sequence_[s] || done[s]) {
        continue;  // an answer to an older request (resent after a reconnect): already handled
      }
      if (header->frames != frames.size() - 1) {
        fail("ps: worker {}: ps-server {} announced {} frames and sent {}", worker_, s, header->frames,
             frames.size() - 1);
      }
      replies[s].header = *header;
      for (std::size_t i = 1; i < frames.size(); ++i) {
        replies[s].data.push_back(std::move(frames[i]));
      }
      done[s] = true;
      --remaining;
    }
  }
  return replies;
}

}  // namespace strata::ps
