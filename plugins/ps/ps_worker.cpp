#include "ps_worker.h"

#include <utility>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata::ps {
namespace {

// A view of bytes that outlive the message (Note [PS zero copy]).
zmq::message_t viewOf(std::span<const std::byte> bytes) {
  return zmq::message_t(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr);
}

}  // namespace

PsWorker::PsWorker(const PsOptions& options, int worker, Store& store, const std::string& role, AddFigure addFigure)
    : options_(options),
      worker_(worker),
      addFigure_(std::move(addFigure)),
      client_(std::make_unique<PsClient>(options, worker, store, role)),
      versions_(static_cast<std::size_t>(options.servers), 0),
      retained_(static_cast<std::size_t>(options.servers)) {}

Ticket PsWorker::issue(Awaited awaited) {
  STRATA_CHECK(!awaiting_, "ps: worker {}: a request was sent while ticket {} is still awaited", worker_, ticket_);
  awaiting_ = true;
  awaited_ = awaited;
  return ++ticket_;
}

Ticket PsWorker::push(std::int64_t step, double lr, const std::vector<std::vector<std::span<const std::byte>>>& data,
                      const AfterSend& afterSend) {
  STRATA_CHECK(data.size() == retained_.size(), "ps: a push with frames for {} servers, the job has {}", data.size(),
               retained_.size());
  const Ticket ticket = issue(Awaited::Push);
  for (std::size_t s = 0; s < data.size(); ++s) {
    const std::int64_t version = versions_[s];
    if (options_.checkpointEvery == 0) {
      std::vector<zmq::message_t> frames;
      for (const auto& bytes : data[s]) {
        frames.push_back(viewOf(bytes));
      }
      client_->send(static_cast<int>(s), Kind::Push, step, version, lr, std::move(frames));
    } else {
      // Note [PS recovery]: a copy kept until the server's checkpoint holds it; the frames are views of the copy.
      RetainedPush push{.step = step, .modelVersion = version, .lr = lr, .frames = {}};
      for (const auto& bytes : data[s]) {
        const auto* begin = reinterpret_cast<const char*>(bytes.data());
        push.frames.emplace_back(begin, begin + bytes.size());
      }
      push.sequence = client_->send(static_cast<int>(s), Kind::Push, step, version, lr, framesOf(push));
      retained_[s].push_back(std::move(push));
    }
    if (afterSend) {
      afterSend(static_cast<int>(s));
    }
  }
  return ticket;
}

Ticket PsWorker::pull() {
  const Ticket ticket = issue(Awaited::Pull);
  for (int s = 0; s < servers(); ++s) {
    client_->send(s, Kind::Pull, -1, 0, 0, {});
  }
  return ticket;
}

Ticket PsWorker::idle() {
  const Ticket ticket = issue(Awaited::Idle);
  for (int s = 0; s < servers(); ++s) {
    client_->send(s, Kind::Idle, -1, 0, 0, {});
  }
  return ticket;
}

Ticket PsWorker::init(const std::vector<std::vector<std::span<const std::byte>>>& data, bool overwrite) {
  // A first Init is answered like a pull (a restarted server has reloaded its values); an overwrite that a server
  // lost in a restart must not pass for done.
  return send(Kind::Init, data, overwrite ? kInitOverwrites : 0U, overwrite ? Awaited::Other : Awaited::Pull);
}

Ticket PsWorker::request(Kind kind, const std::vector<std::vector<std::span<const std::byte>>>& data) {
  return send(kind, data, 0, Awaited::Other);
}

Ticket PsWorker::send(Kind kind, const std::vector<std::vector<std::span<const std::byte>>>& data, std::uint32_t flags,
                      Awaited awaited) {
  STRATA_CHECK(data.empty() || data.size() == retained_.size(), "ps: a {} with frames for {} servers, the job has {}",
               kindName(kind), data.size(), retained_.size());
  const Ticket ticket = issue(awaited);
  for (int s = 0; s < servers(); ++s) {
    std::vector<zmq::message_t> frames;
    if (!data.empty()) {
      for (const auto& bytes : data[static_cast<std::size_t>(s)]) {
        frames.emplace_back(bytes.data(), bytes.size());  // a copy: sent before the caller's bytes may go
      }
    }
    client_->send(s, kind, kind == Kind::Init ? 0 : -1, 0, 0, std::move(frames), flags);
  }
  return ticket;
}

std::vector<Reply> PsWorker::wait(Ticket ticket) {
  STRATA_CHECK(awaiting_ && ticket == ticket_, "ps: worker {}: ticket {} is not the one awaited ({})", worker_, ticket,
               awaiting_ ? fmt::format("{}", ticket_) : std::string("none"));
  awaiting_ = false;
  std::vector<Reply> replies = awaited_ == Awaited::Other ? client_->receiveAll(options_.timeout) : receiveReplaying();
  account(replies);
  return replies;
}

void PsWorker::account(const std::vector<Reply>& replies) {
  for (std::size_t s = 0; s < replies.size(); ++s) {
    const Reply& reply = replies[s];
    if (reply.restarted || reply.header.kind != static_cast<std::uint16_t>(Kind::Params)) {
      continue;
    }
    versions_[s] = reply.header.modelVersion;
    // Pushes the server's checkpoint holds are no longer needed for a replay.
    std::deque<RetainedPush>& pushes = retained_[s];
    while (!pushes.empty() && pushes.front().sequence <= reply.header.durable) {
      pushes.pop_front();
    }
  }
}

std::vector<zmq::message_t> PsWorker::framesOf(RetainedPush& push) {
  std::vector<zmq::message_t> data;
  for (std::vector<char>& frame : push.frames) {
    data.emplace_back(frame.data(), frame.size(), nullptr);  // Note [PS zero copy]: kept until trimmed
  }
  return data;
}

// Note [PS recovery]: every server's answer to the request just sent, recovering a restarted server as soon as the
// restart shows. Waiting for the other servers first can deadlock: in sync mode another server's round may wait for
// a worker that is itself replaying to the restarted server and waits there for this worker's replay (seen as a CI
// hang: worker 0 a step ahead, waiting on server 1).
std::vector<Reply> PsWorker::receiveReplaying() {
  std::vector<Reply> replies(static_cast<std::size_t>(servers()));
  std::vector<std::size_t> waiting;
  for (int s = 0; s < servers(); ++s) {
    waiting.push_back(static_cast<std::size_t>(s));
  }
  while (!waiting.empty()) {
    std::vector<Reply> got = client_->receiveUntilRestart(waiting, options_.timeout);
    std::vector<std::size_t> still;
    for (const std::size_t s : waiting) {
      if (got[s].restarted) {
        replies[s] = replay(static_cast<int>(s));
      } else if (got[s].pending) {
        still.push_back(s);
      } else {
        replies[s] = std::move(got[s]);
      }
    }
    waiting = std::move(still);
  }
  return replies;
}

// Note [PS recovery]: resends to restarted server s every push its checkpoint may lack, in order and with their
// sequence numbers (it answers those it holds without applying them), then the pull or idle that was awaited.
Reply PsWorker::replay(int s) {
  std::deque<RetainedPush>& pushes = retained_[static_cast<std::size_t>(s)];
  addFigure_("ps_server_restarts_seen", 1);
  if (options_.checkpointEvery == 0) {
    fail("ps: worker {}: ps-server {} was restarted, but without checkpoint_every it has lost its parameters", worker_,
         s);
  }
  for (;;) {
    Reply last;
    bool restartedAgain = false;
    for (RetainedPush& push : pushes) {
      client_->send(s, Kind::Push, push.step, push.modelVersion, push.lr, framesOf(push), 0, push.sequence);
      last = client_->receiveFrom(s, options_.timeout);
      if (last.restarted) {
        restartedAgain = true;
        break;
      }
      addFigure_("ps_pushes_replayed", 1);
    }
    if (restartedAgain) {
      continue;
    }
    if (awaited_ == Awaited::Pull || awaited_ == Awaited::Idle) {
      client_->send(s, awaited_ == Awaited::Pull ? Kind::Pull : Kind::Idle, -1, 0, 0, {});
      last = client_->receiveFrom(s, options_.timeout);
      if (last.restarted) {
        continue;
      }
    }
    fmt::print("ps: worker {}: resent {} push(es) to the restarted ps-server {}\n", worker_, pushes.size(), s);
    return last;
  }
}

}  // namespace strata::ps
