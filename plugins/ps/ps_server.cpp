#include "ps_server.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ps_counted_bytes.h"
#include "ps_transport.h"
#include "strata/error.h"

namespace strata::ps {
namespace {

zmq::message_t copyOf(const zmq::message_t& m) {
  zmq::message_t result;
  result.copy(const_cast<zmq::message_t&>(m));
  return result;
}

zmq::message_t bytesFrame(const std::vector<std::byte>& bytes) {
  return zmq::message_t(bytes.data(), bytes.size());
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::int64_t environmentNumber(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoll(value) : 0;
}

}  // namespace

PsServer::PsServer(const PsOptions& options, RoleContext& context)
    : options_(options),
      context_(context),
      zmq_(std::clamp(context.workers(), 1, 4)),  // Note [Server I/O threads]
      router_(zmq_, zmq::socket_type::router),
      links_(static_cast<std::size_t>(context.workers())),
      figures_(std::make_unique<ServerFigures>(context.store(), context.role(), context.index(),
                                               environmentNumber("STRATA_ROLE_RESTARTS"))),
      recovery_(options, context.index(), context.workers(), environment("STRATA_JOB_ID"),
                environmentNumber("STRATA_ROLE_RESTARTS"), environment("STRATA_JOB_SECRET_FILE")),
      // Note [Rejoining workers]: in sync mode, when the launcher may restart workers, the rule keeps the values
      // before the last update for a restarted worker that must recompute that round.
      rule_(
          options, context.index(), context.workers(), context.index() == 0,
          options.mode == Mode::Sync && environmentNumber("STRATA_RANK_MAX_RESTARTS") > 0,
          options.trace.empty() ? UpdateRule::Trace() : [this](const std::string& json) { traceLine(json); }) {
  view_.index = context.index();
  view_.servers = context.count();
  view_.workers = context.workers();
  view_.holdsBuffers = context.index() == 0;
}

PsServer::~PsServer() = default;

void PsServer::start() {
  if (started_) {
    return;
  }
  started_ = true;
  router_.set(zmq::sockopt::linger, 0);
  if (options_.auth) {
    const CurveKeys keys = loadJobKeys(options_);
    publicKey_ = keys.publicKey;
    // The ZAP handler must be bound before the first connection is accepted (Note [PS authentication]).
    zap_ = zmq::socket_t(zmq_, zmq::socket_type::rep);
    zap_.set(zmq::sockopt::linger, 0);
    zap_.bind("inproc://zeromq.zap.01");
    makeCurveServer(router_, keys);
  }
  router_.bind("tcp://*:*");
  const int port = endpointPort(router_.get(zmq::sockopt::last_endpoint));
  const std::string endpoint = fmt::format("{}:{}", context_.hostAddress(), port);
  if (!options_.trace.empty()) {
    trace_ = std::make_unique<std::ofstream>(fmt::format("{}.{}.jsonl", options_.trace, view_.index), std::ios::app);
    if (!*trace_) {
      fail("ps-server {}: cannot write the trace file {}.{}.jsonl", view_.index, options_.trace, view_.index);
    }
  }
  loadCheckpoint();
  figures_->publishIfChanged();
  publishRoleEndpoint(context_.store(), context_.role(), view_.index, endpoint);
  fmt::print("ps-server {} of {}: serving {} workers at {} (mode {}{}, auth {})\n", view_.index, view_.servers,
             view_.workers, endpoint, modeName(options_.mode),
             options_.mode == Mode::Ssp ? fmt::format(", staleness {}", options_.staleness) : "",
             options_.auth ? "CURVE" : "off");
}

void PsServer::run() {
  start();
  while (!context_.stopRequested()) {
    serveOnce(200);
  }
  fmt::print("ps-server {}: stopping at version {} ({} messages rejected, {} connections refused)\n", view_.index,
             rule_.version(), rejected_, refused_);
}

void PsServer::serveOnce(int timeoutMs) {
  std::vector<zmq::pollitem_t> items{{router_.handle(), 0, ZMQ_POLLIN, 0}};
  if (options_.auth) {
    items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
  }
  try {
    zmq::poll(items, std::chrono::milliseconds(timeoutMs));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) {
      return;  // the launcher's SIGTERM: run() sees the stop flag
    }
    throw;
  }
  if (items.size() > 1 && (items[1].revents & ZMQ_POLLIN) != 0) {
    handleZap();
  }
  if ((items[0].revents & ZMQ_POLLIN) != 0) {
    handleRequest();
  }
  if (options_.mode != Mode::Sync && !storeGone_ &&
      std::chrono::steady_clock::now() - lastDepartureCheck_ > std::chrono::seconds(1)) {
    lastDepartureCheck_ = std::chrono::steady_clock::now();
    checkDepartures();
  }
}

// Note [Departed ranks]: a worker that died no longer holds the others back (SSP's slowest clock skips it).
// Note [Store gone at the end]: rank 0 hosts the store and leaves once the run is over, before the launcher stops the
// servers, so a check can find the store closed after a finished run: a 3-epoch ResNet-18 run in ssp mode was
// reported failed after its summary was written. The server stops checking and serves until it is stopped; a rank 0
// that died is the launcher's to report.
void PsServer::checkDepartures() {
  try {
    for (int w = 0; w < rule_.workers(); ++w) {
      if (!rule_.worker(w).departed && context_.store().check({departedRankKey(w)})) {
        fmt::print("ps-server {}: worker {} departed ({}); serving the others\n", view_.index, w,
                   context_.store().getString(departedRankKey(w), context_.timeout()));
        answer(rule_.markDeparted(w));
      }
    }
  } catch (const Error& e) {
    storeGone_ = true;
    fmt::print(
        "ps-server {}: the store is gone ({}); no longer watching for departed workers, serving until "
        "stopped\n",
        view_.index, e.what());
  }
}

// ZAP (ZeroMQ RFC 27): admit a CURVE client only with the job's public key.
void PsServer::handleZap() {
  std::vector<zmq::message_t> request = receiveMessage(zap_);
  bool admit = false;
  std::string address = request.size() > 3 ? request[3].to_string() : "?";
  if (request.size() >= 7 && request[5].to_string() == "CURVE" && request[6].size() == 32) {
    char key[41] = {};
    zmq_z85_encode(key, static_cast<const std::uint8_t*>(request[6].data()), 32);
    admit = publicKey_ == key;
  }
  if (!admit) {
    ++refused_;
    fmt::print("ps-server {}: refused a connection from {}: it does not hold the job's CURVE key\n", view_.index,
               address);
  }
  std::vector<zmq::message_t> replyFrames;
  replyFrames.emplace_back(std::string("1.0"));
  replyFrames.push_back(request.size() > 1 ? copyOf(request[1]) : zmq::message_t());
  replyFrames.emplace_back(std::string(admit ? "200" : "400"));
  replyFrames.emplace_back(std::string(admit ? "OK" : "not the job's key"));
  replyFrames.emplace_back(std::string(""));
  replyFrames.emplace_back(std::string(""));
  sendMessage(zap_, replyFrames);
}

void PsServer::handleRequest() {
  std::vector<zmq::message_t> frames = receiveMessage(router_);
  // Note [PS server memory]: the request's bytes count as communication buffers until it has been handled.
  const CountedBytes received(MemoryCategory::Communication, messageBytes(frames));
  if (frames.size() < 2) {
    ++rejected_;
    return;  // only a routing id: nothing to answer
  }
  zmq::message_t& identity = frames[0];
  std::vector<Frame> spans;  // the header, then (Init) the layout, then the data
  for (std::size_t i = 1; i < frames.size(); ++i) {
    spans.emplace_back(static_cast<const std::byte*>(frames[i].data()), frames[i].size());
  }
  Verdict verdict;
  try {
    verdict = validateRequest(spans, view_);
  } catch (const std::exception& e) {
    verdict.ok = false;
    verdict.error = e.what();
  }
  if (!verdict.ok) {
    ++rejected_;
    fmt::print("ps-server {}: rejected a message{}: {}\n", view_.index,
               verdict.headerDecoded ? fmt::format(" from worker {}", verdict.header.worker) : "", verdict.error);
    replyError(identity, verdict.headerDecoded ? &verdict.header : nullptr, verdict.error);
    return;
  }
  const Header& header = verdict.header;
  const std::span<const Frame> afterHeader = std::span<const Frame>(spans).subspan(1);
  switch (static_cast<Kind>(header.kind)) {
    case Kind::Init:
      if (!view_.initialized) {
        initialize(verdict, afterHeader.subspan(1));  // after the layout
      } else if ((header.flags & kInitOverwrites) != 0) {
        rule_.assign(afterHeader.subspan(1));
        fmt::print("ps-server {}: values replaced by worker 0's (resumed from a checkpoint)\n", view_.index);
      }
      reply(identity, header, Kind::Params, 0);
      return;
    case Kind::Pull:
      if (!view_.initialized) {
        heldPulls_.emplace_back(copyOf(identity), header);
        return;
      }
      reply(identity, header, Kind::Params, 0);
      return;
    case Kind::StatsRequest:
      reply(identity, header, Kind::Stats, 0);
      return;
    case Kind::StateRequest:
      reply(identity, header, Kind::State, 0);
      return;
    case Kind::RestoreState:
      try {
        restoreState(frames);
      } catch (const std::exception& e) {
        ++rejected_;
        fmt::print("ps-server {}: rejected a restore-state from worker 0: {}\n", view_.index, e.what());
        replyError(identity, &header, e.what());
        return;
      }
      reply(identity, header, Kind::State, 0);
      return;
    case Kind::Rejoin: {
      // Note [Rejoining workers]: a restarted worker's new process; its next push (the same sequence number when
      // this server holds it already) tells this server where to send the round's answer.
      const WorkerClock& clock = rule_.worker(header.worker);
      fmt::print("ps-server {}: worker {} rejoins (restarted): its last push {} ({} pushes), {}at version {}\n",
                 view_.index, header.worker, links_.at(static_cast<std::size_t>(header.worker)).lastSequence,
                 clock.clock, clock.waiting ? "waiting in the round, " : "", rule_.version());
      reply(identity, header, Kind::Rejoined, 0);
      return;
    }
    case Kind::Idle: {
      // A worker done with its epoch's steps (shared steps) no longer holds the others back in SSP.
      const std::vector<Release> due = rule_.markIdle(header.worker);
      reply(identity, header, Kind::Idle, 0);
      answer(due);
      return;
    }
    case Kind::Push:
      handlePush(identity, header, afterHeader);
      return;
    default:
      return;
  }
}

void PsServer::handlePush(zmq::message_t& identity, const Header& header, std::span<const Frame> data) {
  WorkerLink& link = links_.at(static_cast<std::size_t>(header.worker));
  const bool waiting = rule_.worker(header.worker).waiting;
  // Note [PS validation]: a resent push (same sequence number) is never applied twice.
  if (header.sequence <= link.lastSequence) {
    if (header.sequence == link.lastSequence && waiting) {
      link.identity = copyOf(identity);  // the answer goes to the connection that asked last
      return;
    }
    ++replayedPushes_;  // already applied (or held by the checkpoint this server restarted from): answer only
    reply(identity, header, Kind::Params, 0);
    return;
  }
  if (waiting) {
    ++rejected_;
    replyError(identity, &header,
               fmt::format("worker {} pushed step {} while its previous push is still unanswered", header.worker,
                           header.step));
    return;
  }
  link.lastSequence = header.sequence;
  link.identity = copyOf(identity);
  link.request = header;
  const std::int64_t before = rule_.version();
  const std::vector<Release> due = rule_.push(header.worker, header, data);
  if (rule_.version() != before) {
    recovery_.afterUpdate(view_.layout, rule_, lastSequences());  // before the answers: they carry `durable`
  }
  answer(due);
}

void PsServer::answer(const std::vector<Release>& due) {
  for (const Release& release : due) {
    WorkerLink& link = links_.at(static_cast<std::size_t>(release.worker));
    reply(link.identity, link.request, Kind::Params, release.staleness);
  }
}

std::vector<std::uint64_t> PsServer::lastSequences() const {
  std::vector<std::uint64_t> sequences;
  for (const WorkerLink& link : links_) {
    sequences.push_back(link.lastSequence);
  }
  return sequences;
}

void PsServer::allocate() {
  rule_.allocate(view_.layout, view_.segments,
                 [this](std::vector<ParameterSlice> slices) { return context_.createOptimizer(std::move(slices)); });
  std::int64_t keyBytes = 0;
  for (const Tensor& values : rule_.values()) {
    keyBytes += static_cast<std::int64_t>(values.bytes());
  }
  figures_->setKeyRanges(view_.segments.size(), keyBytes);
  view_.stateSizes.clear();
  for (const Tensor& state : rule_.optimizer().state()) {
    view_.stateSizes.push_back(state.bytes());
  }
}

// Note [PS checkpoints]: worker 0 hands back what a State reply gave it when the run was saved (frames: identity,
// header, the JSON description, each state tensor; sizes checked by validateRequest).
void PsServer::restoreState(const std::vector<zmq::message_t>& frames) {
  const nlohmann::json description = nlohmann::json::parse(frames[2].to_string());  // throws on bad JSON
  const std::int64_t steps = description.at("optimizer_steps").get<std::int64_t>();
  STRATA_CHECK(steps >= 0, "optimizer_steps {} is negative", steps);
  std::vector<Tensor> state = rule_.optimizer().state();
  for (std::size_t i = 0; i < state.size(); ++i) {
    std::memcpy(state[i].rawData(), frames[3 + i].data(), state[i].bytes());
  }
  rule_.optimizer().setSteps(steps);
  fmt::print("ps-server {}: optimizer state restored ({} tensors, {} steps)\n", view_.index, state.size(), steps);
}

void PsServer::initialize(const Verdict& verdict, std::span<const Frame> data) {
  view_.layout = *verdict.layout;
  view_.segments = verdict.segments;
  allocate();
  rule_.assign(data);
  view_.initialized = true;
  std::int64_t elements = 0;
  for (const Segment& segment : view_.segments) {
    elements += segment.count;
  }
  fmt::print("ps-server {}: initialised with {} parameters in {} key ranges\n", view_.index, elements,
             view_.segments.size());
  for (auto& [identity, header] : heldPulls_) {
    reply(identity, header, Kind::Params, 0);
  }
  heldPulls_.clear();
}

void PsServer::loadCheckpoint() {
  std::optional<ServerCheckpoint> checkpoint = recovery_.latest();
  if (!checkpoint) {
    return;
  }
  view_.layout = checkpoint->layout;
  view_.segments = partitionKeys(view_.layout, view_.servers).at(static_cast<std::size_t>(view_.index));
  allocate();
  const std::vector<std::uint64_t> lastSequence = recovery_.restore(*checkpoint, rule_);
  for (std::size_t w = 0; w < links_.size(); ++w) {
    links_[w].lastSequence = lastSequence[w];
  }
  view_.initialized = true;
}

void PsServer::reply(zmq::message_t& identity, const Header& request, Kind kind, int staleness) {
  std::vector<zmq::message_t> frames;
  frames.push_back(copyOf(identity));
  Header header;
  header.kind = static_cast<std::uint16_t>(kind);
  header.worker = request.worker;
  header.step = request.step;
  header.modelVersion = rule_.version();
  header.sequence = request.sequence;
  header.staleness = staleness;
  header.flags = static_cast<std::uint32_t>(recovery_.restarts());
  if (request.worker >= 0 && request.worker < rule_.workers()) {
    header.durable = recovery_.durable(request.worker);
  }
  std::vector<zmq::message_t> data;
  if (kind == Kind::Params) {
    // Note [PS zero copy], the answer's side: in sync mode the values change only after every worker has pushed
    // again, which each does only after it has received this answer whole, so the frames can be views of them.
    // async and ssp change them at the next push: copies.
    for (const Tensor& values : rule_.values()) {
      if (options_.mode == Mode::Sync) {
        data.emplace_back(values.rawData(), values.bytes(), nullptr);
      } else {
        data.push_back(countedCopy(values.rawData(), values.bytes()));  // Note [PS server memory]
      }
    }
    for (const Tensor& buffer : rule_.buffers()) {
      data.push_back(countedCopy(buffer.rawData(), buffer.bytes()));
    }
    rule_.recordSent(request.worker);
  } else if (kind == Kind::Rejoined) {
    // Copies: another worker's push may complete the round (and change the values) before ZeroMQ has sent them.
    const WorkerClock& clock = rule_.worker(request.worker);
    const nlohmann::json description = {
        {"last_sequence", links_.at(static_cast<std::size_t>(request.worker)).lastSequence},
        {"clock", clock.clock},
        {"waiting", clock.waiting},
        {"version", rule_.version()},
        {"previous", rule_.hasPrevious()}};
    data.emplace_back(description.dump());
    for (const auto* tensors : {&rule_.values(), &rule_.buffers()}) {
      for (const Tensor& t : *tensors) {
        data.push_back(countedCopy(t.rawData(), t.bytes()));
      }
    }
    if (rule_.hasPrevious()) {
      for (const auto* tensors : {&rule_.previousValues(), &rule_.previousBuffers()}) {
        for (const Tensor& t : *tensors) {
          data.push_back(countedCopy(t.rawData(), t.bytes()));
        }
      }
    }
  } else if (kind == Kind::Stats) {
    data.emplace_back(statsJson());
  } else if (kind == Kind::State) {
    // Copies: async pushes may change the state before ZeroMQ has sent it.
    nlohmann::json description = {{"optimizer_steps", rule_.optimizer().steps()},
                                  {"version", rule_.version()},
                                  {"server", view_.index},
                                  {"state_bytes", view_.stateSizes}};
    data.emplace_back(description.dump());
    for (const Tensor& state : rule_.optimizer().state()) {
      data.push_back(countedCopy(state.rawData(), state.bytes()));
    }
  }
  header.frames = static_cast<std::uint32_t>(data.size());
  frames.push_back(bytesFrame(encodeHeader(header)));
  for (zmq::message_t& d : data) {
    frames.push_back(std::move(d));
  }
  figures_->publishIfChanged();  // Note [Role figures]: before the answer
  sendMessage(router_, frames);
}

void PsServer::replyError(zmq::message_t& identity, const Header* request, const std::string& message) {
  std::vector<zmq::message_t> frames;
  frames.push_back(copyOf(identity));
  Header header;
  header.kind = static_cast<std::uint16_t>(Kind::Error);
  header.worker = request != nullptr ? request->worker : -1;
  header.sequence = request != nullptr ? request->sequence : 0;
  header.step = request != nullptr ? request->step : 0;
  header.modelVersion = rule_.version();
  header.frames = 1;
  frames.push_back(bytesFrame(encodeHeader(header)));
  frames.emplace_back(fmt::format("ps-server {}: {}", view_.index, message));
  figures_->publishIfChanged();
  sendMessage(router_, frames);
}

void PsServer::traceLine(const std::string& json) {
  if (trace_) {
    *trace_ << json << '\n';
    trace_->flush();
  }
}

std::string PsServer::statsJson() const {
  std::string perWorker;
  for (int w = 0; w < rule_.workers(); ++w) {
    const WorkerClock& s = rule_.worker(w);
    perWorker +=
        fmt::format(R"({}{{"worker":{},"pushes":{},"staleness_mean":{},"staleness_max":{},"departed":{}}})",
                    w == 0 ? "" : ",", w, s.pushes, s.pushes > 0 ? s.stalenessSum / static_cast<double>(s.pushes) : 0.0,
                    s.stalenessMax, s.departed ? "true" : "false");
  }
  return fmt::format(
      R"({{"server":{},"version":{},"rejected":{},"refused":{},"restarts":{},"replayed_answers":{},"workers":[{}],)"
      R"("figures":{}}})",
      view_.index, rule_.version(), rejected_, refused_, recovery_.restarts(), replayedPushes_, perWorker,
      figures_->json().dump());
}

}  // namespace strata::ps
