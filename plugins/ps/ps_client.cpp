#include "ps_client.h"

#include <fmt/format.h>

#include "ps_transport.h"
#include "strata/error.h"
#include "strata/sdk/roles.h"

namespace strata::ps {

PsClient::PsClient(const PsOptions& options, int worker, Store& store, const std::string& role)
    : options_(options),
      worker_(worker),
      store_(store),
      role_(role),
      sockets_(static_cast<std::size_t>(options.servers)),
      endpoints_(static_cast<std::size_t>(options.servers)),
      sequence_(static_cast<std::size_t>(options.servers), 0),
      awaited_(static_cast<std::size_t>(options.servers), 0),
      pending_(static_cast<std::size_t>(options.servers)) {
  if (options.auth) {
    const CurveKeys keys = loadJobKeys(options);
    publicKey_ = keys.publicKey;
    secretKey_ = keys.secretKey;
  }
  for (std::size_t s = 0; s < sockets_.size(); ++s) {
    endpoints_[s] = lookupRoleEndpoint(store_, role_, static_cast<int>(s), options_.timeout);
    connect(s);
  }
}

void PsClient::connect(std::size_t s) {
  zmq::socket_t socket(zmq_, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  if (options_.auth) {
    makeCurveClient(socket, CurveKeys{publicKey_, secretKey_});
  }
  socket.connect("tcp://" + endpoints_[s]);
  sockets_[s] = std::move(socket);
}

bool PsClient::reconnectIfRestarted(std::size_t s) {
  const std::string key = roleEndpointKey(role_, static_cast<int>(s));
  if (!store_.check({key})) {
    return false;
  }
  const std::string endpoint = store_.getString(key, options_.timeout);
  if (endpoint == endpoints_[s]) {
    return false;
  }
  fmt::print("ps: worker {}: ps-server {} moved from {} to {} (restarted); reconnecting\n", worker_, s, endpoints_[s],
             endpoint);
  endpoints_[s] = endpoint;
  connect(s);
  ++restartsSeen_;
  return true;
}

std::uint64_t PsClient::send(int server, Kind kind, std::int64_t step, std::int64_t modelVersion, double lr,
                             std::vector<zmq::message_t> data, std::uint32_t flags, std::uint64_t sequence) {
  const auto s = static_cast<std::size_t>(server);
  Header header;
  header.kind = static_cast<std::uint16_t>(kind);
  header.worker = worker_;
  header.frames = static_cast<std::uint32_t>(data.size());
  header.step = step;
  header.modelVersion = modelVersion;
  header.sequence = sequence != 0 ? sequence : ++sequence_[s];
  header.lr = lr;
  header.flags = flags;
  const std::vector<std::byte> bytes = encodeHeader(header);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(bytes.data(), bytes.size());
  for (zmq::message_t& d : data) {
    frames.push_back(std::move(d));
  }
  sendMessage(sockets_[s], frames);
  awaited_[s] = header.sequence;
  pending_[s] = fmt::format("{} of step {}", kindName(kind), step);
  return header.sequence;
}

std::vector<Reply> PsClient::receiveAll(std::chrono::milliseconds timeout) {
  std::vector<std::size_t> all(sockets_.size());
  for (std::size_t s = 0; s < all.size(); ++s) {
    all[s] = s;
  }
  return receive(all, timeout);
}

Reply PsClient::receiveFrom(int server, std::chrono::milliseconds timeout) {
  std::vector<Reply> replies = receive({static_cast<std::size_t>(server)}, timeout);
  return std::move(replies[static_cast<std::size_t>(server)]);
}

std::vector<Reply> PsClient::receiveUntilRestart(const std::vector<std::size_t>& servers,
                                                 std::chrono::milliseconds timeout) {
  return receive(servers, timeout, /*stopOnRestart=*/true);
}

std::vector<Reply> PsClient::receive(const std::vector<std::size_t>& servers, std::chrono::milliseconds timeout,
                                     bool stopOnRestart) {
  std::vector<Reply> replies(sockets_.size());
  std::vector<bool> done(sockets_.size(), true);
  for (std::size_t s : servers) {
    done[s] = false;
  }
  std::size_t remaining = servers.size();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Note [PS recovery]: a server silent this long is looked up again in the store.
  constexpr auto kSilence = std::chrono::milliseconds(1000);
  auto lastLook = std::chrono::steady_clock::now();
  while (remaining > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
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
    if (now - lastLook >= kSilence) {
      lastLook = now;
      bool restarted = false;
      for (std::size_t s = 0; s < sockets_.size(); ++s) {
        if (!done[s] && reconnectIfRestarted(s)) {
          replies[s].restarted = true;
          done[s] = true;
          --remaining;
          restarted = true;
        }
      }
      if (restarted && stopOnRestart) {
        for (std::size_t s = 0; s < sockets_.size(); ++s) {
          replies[s].pending = !done[s];
        }
        return replies;
      }
      continue;
    }
    // Only the sockets still awaited: an answer from another server stays queued in its socket for the call that
    // awaits it (Note [PS recovery]: a replay to a restarted server must not swallow another server's answer).
    std::vector<std::size_t> polled;
    std::vector<zmq::pollitem_t> items;
    for (std::size_t s = 0; s < sockets_.size(); ++s) {
      if (!done[s]) {
        polled.push_back(s);
        items.push_back({sockets_[s].handle(), 0, ZMQ_POLLIN, 0});
      }
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline - now, kSilence - (now - lastLook)));
    try {
      zmq::poll(items, std::max(left, std::chrono::milliseconds(1)));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) {
        throw;
      }
      continue;
    }
    for (std::size_t p = 0; p < polled.size(); ++p) {
      const std::size_t s = polled[p];
      if ((items[p].revents & ZMQ_POLLIN) == 0) {
        continue;
      }
      std::vector<zmq::message_t> frames = receiveMessage(sockets_[s]);
      std::string why;
      const std::optional<Header> header =
          decodeHeader({static_cast<const std::byte*>(frames[0].data()), frames[0].size()}, why);
      if (!header) {
        fail("ps: worker {}: a malformed answer from ps-server {} at {}: {}", worker_, s, endpoints_[s], why);
      }
      if (header->sequence != awaited_[s]) {
        continue;  // an answer to an older request (resent after a reconnect): already handled
      }
      if (header->kind == static_cast<std::uint16_t>(Kind::Error)) {
        fail("ps: worker {}: ps-server {} at {} refused its {}: {}", worker_, s, endpoints_[s], pending_[s],
             frames.size() > 1 ? frames[1].to_string() : "(no reason given)");
      }
      if (header->frames != frames.size() - 1) {
        fail("ps: worker {}: ps-server {} announced {} frames and sent {}", worker_, s, header->frames,
             frames.size() - 1);
      }
      lastLook = std::chrono::steady_clock::now();
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
