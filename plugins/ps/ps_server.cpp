#include "ps_server.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ps_checkpoint.h"
#include "ps_counted_bytes.h"
#include "ps_transport.h"
#include "strata/error.h"

namespace strata::ps {
namespace {

// dst[i] += src[i] (or dst = src when `assign`), reading src through memcpy when it is not aligned for T
// (ZeroMQ keeps frames of up to 33 bytes inside the message object).
template <typename T>
void addInto(T* dst, const void* src, std::int64_t n, bool assign) {
  if (assign) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    return;
  }
  std::vector<T> aligned;
  const T* from = static_cast<const T*>(src);
  if (reinterpret_cast<std::uintptr_t>(src) % alignof(T) != 0) {
    aligned.resize(static_cast<std::size_t>(n));
    std::memcpy(aligned.data(), src, static_cast<std::size_t>(n) * sizeof(T));
    from = aligned.data();
  }
  for (std::int64_t i = 0; i < n; ++i) {
    dst[i] += from[i];
  }
}

void addFrame(Tensor& dst, const zmq::message_t& frame, bool assign) {
  if (dst.dtype() == DType::Float64) {
    addInto(dst.data<double>(), frame.data(), dst.numel(), assign);
  } else {
    addInto(dst.data<float>(), frame.data(), dst.numel(), assign);
  }
}

void addInto(Tensor& dst, const Tensor& src) {
  if (dst.dtype() == DType::Float64) {
    addInto(dst.data<double>(), src.rawData(), dst.numel(), false);
  } else {
    addInto(dst.data<float>(), src.rawData(), dst.numel(), false);
  }
}

void scale(Tensor& t, double factor) {
  if (t.dtype() == DType::Float64) {
    double* p = t.data<double>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      p[i] *= factor;
    }
  } else {
    float* p = t.data<float>();
    const auto f = static_cast<float>(factor);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      p[i] *= f;
    }
  }
}

// DC-ASGD (Zheng et al., 2017): g += lambda * g * g * (w_now - w_then), compensating the delay of a stale gradient.
template <typename T>
void compensate(T* g, const T* now, const char* then, std::int64_t n, double lambda) {
  const T l = static_cast<T>(lambda);
  for (std::int64_t i = 0; i < n; ++i) {
    T old;
    std::memcpy(&old, then + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    g[i] += l * g[i] * g[i] * (now[i] - old);
  }
}

zmq::message_t copyOf(const zmq::message_t& m) {
  zmq::message_t result;
  result.copy(const_cast<zmq::message_t&>(m));
  return result;
}

zmq::message_t bytesFrame(const std::vector<std::byte>& bytes) {
  return zmq::message_t(bytes.data(), bytes.size());
}

}  // namespace

PsServer::PsServer(const PsOptions& options, RoleContext& context)
    : options_(options),
      context_(context),
      zmq_(std::clamp(context.workers(), 1, 4)),  // Note [Server I/O threads]
      router_(zmq_, zmq::socket_type::router),
      workers_(static_cast<std::size_t>(context.workers())) {
  view_.index = context.index();
  view_.servers = context.count();
  view_.workers = context.workers();
  view_.holdsBuffers = context.index() == 0;
  durable_.assign(workers_.size(), 0);
  const char* jobId = std::getenv("STRATA_JOB_ID");
  jobId_ = jobId != nullptr ? jobId : "";
  const char* restarts = std::getenv("STRATA_ROLE_RESTARTS");
  restarts_ = restarts != nullptr ? std::atoll(restarts) : 0;
  figures_ = std::make_unique<ServerFigures>(context.store(), context.role(), view_.index, restarts_);
  const char* rankRestarts = std::getenv("STRATA_RANK_MAX_RESTARTS");
  keepPrevious_ = options_.mode == Mode::Sync && rankRestarts != nullptr && std::atoll(rankRestarts) > 0;
  if (options_.checkpointEvery > 0) {
    std::filesystem::path dir = options_.checkpointDir;
    if (dir.empty()) {
      const char* secret = std::getenv("STRATA_JOB_SECRET_FILE");
      if (secret == nullptr || secret[0] == '\0') {
        fail(
            "ps-server {}: checkpoint_every needs a directory: give --strategy-opt checkpoint_dir=DIR (the "
            "launcher's per-job directory is not known here)",
            view_.index);
      }
      dir = std::filesystem::path(secret).parent_path() / "ps-checkpoints";
    }
    std::filesystem::create_directories(dir);
    checkpointPath_ = (dir / fmt::format("server-{}.ckpt", view_.index)).string();
  }
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
  if (!checkpointPath_.empty()) {
    loadCheckpoint();
  }
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
             version_, rejected_, refused_);
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
  bool any = false;
  try {
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      if (!workers_[w].departed && context_.store().check({departedRankKey(static_cast<int>(w))})) {
        workers_[w].departed = true;
        workers_[w].waiting = false;
        any = true;
        fmt::print("ps-server {}: worker {} departed ({}); serving the others\n", view_.index, w,
                   context_.store().getString(departedRankKey(static_cast<int>(w)), context_.timeout()));
      }
    }
  } catch (const Error& e) {
    storeGone_ = true;
    fmt::print(
        "ps-server {}: the store is gone ({}); no longer watching for departed workers, serving until "
        "stopped\n",
        view_.index, e.what());
  }
  if (any) {
    releaseHeld();
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
  std::vector<Frame> spans;
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
  WorkerState& worker = workers_.at(static_cast<std::size_t>(header.worker));
  switch (static_cast<Kind>(header.kind)) {
    case Kind::Init:
      if (!view_.initialized) {
        initialize(verdict, frames, 3);  // identity, header, layout, then data
      } else if ((header.flags & kInitOverwrites) != 0) {
        overwrite(frames, 3);
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
    case Kind::Rejoin:
      // Note [Rejoining workers]: a restarted worker's new process; its next push (the same sequence number when
      // this server holds it already) tells this server where to send the round's answer.
      fmt::print("ps-server {}: worker {} rejoins (restarted): its last push {} ({} pushes), {}at version {}\n",
                 view_.index, header.worker, worker.lastSequence, worker.clock,
                 worker.waiting ? "waiting in the round, " : "", version_);
      reply(identity, header, Kind::Rejoined, 0);
      return;
    case Kind::Idle:
      // A worker done with its epoch's steps (shared steps) no longer holds the others back in SSP.
      worker.idle = true;
      reply(identity, header, Kind::Idle, 0);
      releaseHeld();
      return;
    case Kind::Push:
      break;
    default:
      return;
  }
  // A push. Note [PS validation]: a resent push (same sequence number) is never applied twice.
  if (header.sequence <= worker.lastSequence) {
    if (header.sequence == worker.lastSequence && worker.waiting) {
      worker.identity = copyOf(identity);  // the answer goes to the connection that asked last
      return;
    }
    ++replayedPushes_;  // already applied (or held by the checkpoint this server restarted from): answer only
    reply(identity, header, Kind::Params, 0);
    return;
  }
  if (worker.waiting) {
    ++rejected_;
    replyError(identity, &header,
               fmt::format("worker {} pushed step {} while its previous push is still unanswered", header.worker,
                           header.step));
    return;
  }
  worker.lastSequence = header.sequence;
  worker.idle = false;
  worker.identity = copyOf(identity);
  worker.request = header;
  if (options_.mode == Mode::Sync) {
    applySync(worker, frames);
    return;
  }
  const int staleness = applyAsync(worker, frames);
  worker.request.staleness = staleness;
  worker.waiting = true;
  releaseHeld();
}

void PsServer::allocate() {
  std::vector<ParameterSlice> slices;
  for (const Segment& segment : view_.segments) {
    const DType dtype = view_.layout.groups[segment.group].dtype;
    Tensor values = Tensor::empty(dtype, {segment.count}, MemoryCategory::Parameters);
    Tensor gradients = Tensor::zeros(dtype, {segment.count}, MemoryCategory::Gradients);
    slices.push_back(ParameterSlice{values, gradients});
    values_.push_back(values);
    gradients_.push_back(gradients);
  }
  if (view_.holdsBuffers) {
    for (const FlatLayout::Buffer& b : view_.layout.buffers) {
      buffers_.push_back(Tensor::empty(b.dtype, {b.numel}, MemoryCategory::Other));
      bufferSums_.push_back(Tensor::zeros(b.dtype, {b.numel}, MemoryCategory::Other));
    }
  }
  if (keepPrevious_) {
    for (const Tensor& values : values_) {
      previous_.push_back(Tensor::empty(values.dtype(), {values.numel()}, MemoryCategory::Parameters));
    }
    for (const Tensor& buffer : buffers_) {
      previousBuffers_.push_back(Tensor::empty(buffer.dtype(), {buffer.numel()}, MemoryCategory::Other));
    }
  }
  optimizer_ = context_.createOptimizer(std::move(slices));
  std::int64_t keyBytes = 0;
  for (const Tensor& values : values_) {
    keyBytes += static_cast<std::int64_t>(values.bytes());
  }
  figures_->setKeyRanges(view_.segments.size(), keyBytes);
  view_.stateSizes.clear();
  for (const Tensor& state : optimizer_->state()) {
    view_.stateSizes.push_back(state.bytes());
  }
}

// Note [PS checkpoints]: worker 0 hands back what a State reply gave it when the run was saved (frames: identity,
// header, the JSON description, each state tensor; sizes checked by validateRequest).
void PsServer::restoreState(const std::vector<zmq::message_t>& frames) {
  const nlohmann::json description = nlohmann::json::parse(frames[2].to_string());  // throws on bad JSON
  const std::int64_t steps = description.at("optimizer_steps").get<std::int64_t>();
  STRATA_CHECK(steps >= 0, "optimizer_steps {} is negative", steps);
  std::vector<Tensor> state = optimizer_->state();
  for (std::size_t i = 0; i < state.size(); ++i) {
    std::memcpy(state[i].rawData(), frames[3 + i].data(), state[i].bytes());
  }
  optimizer_->setSteps(steps);
  fmt::print("ps-server {}: optimizer state restored ({} tensors, {} steps)\n", view_.index, state.size(), steps);
}

void PsServer::initialize(const Verdict& verdict, const std::vector<zmq::message_t>& frames, std::size_t firstData) {
  view_.layout = *verdict.layout;
  view_.segments = verdict.segments;
  allocate();
  std::size_t frame = firstData;
  for (Tensor& values : values_) {
    addFrame(values, frames[frame++], true);
  }
  for (Tensor& buffer : buffers_) {
    addFrame(buffer, frames[frame++], true);
  }
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
  std::optional<ServerCheckpoint> checkpoint = readServerCheckpointHeader(checkpointPath_);
  if (!checkpoint) {
    return;
  }
  if (checkpoint->jobId != jobId_ || checkpoint->lastSequence.size() != workers_.size()) {
    fmt::print("ps-server {}: ignoring {}: it belongs to another job\n", view_.index, checkpointPath_);
    return;
  }
  view_.layout = checkpoint->layout;
  view_.segments = partitionKeys(view_.layout, view_.servers).at(static_cast<std::size_t>(view_.index));
  allocate();
  checkpoint->values = values_;
  checkpoint->buffers = buffers_;
  checkpoint->optimizerState = optimizer_->state();
  readServerCheckpointTensors(checkpointPath_, *checkpoint);
  optimizer_->setSteps(checkpoint->optimizerSteps);
  version_ = checkpoint->version;
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    workers_[w].lastSequence = checkpoint->lastSequence[w];
    workers_[w].clock = checkpoint->clock[w];
    durable_[w] = checkpoint->lastSequence[w];
  }
  view_.initialized = true;
  fmt::print("ps-server {}: restart {}: reloaded {} at version {}; the workers resend what came after it\n",
             view_.index, restarts_, checkpointPath_, version_);
}

// Note [PS recovery]: every checkpoint_every updates, at a point where no sync round is half gathered.
void PsServer::afterUpdate() {
  if (checkpointPath_.empty() || version_ % options_.checkpointEvery != 0) {
    return;
  }
  ServerCheckpoint checkpoint;
  checkpoint.jobId = jobId_;
  checkpoint.layout = view_.layout;
  checkpoint.version = version_;
  checkpoint.restarts = restarts_;
  checkpoint.optimizerSteps = optimizer_->steps();
  for (const WorkerState& w : workers_) {
    checkpoint.lastSequence.push_back(w.lastSequence);
    checkpoint.clock.push_back(w.clock);
  }
  checkpoint.values = values_;
  checkpoint.buffers = buffers_;
  checkpoint.optimizerState = optimizer_->state();
  writeServerCheckpoint(checkpointPath_, checkpoint);
  durable_ = checkpoint.lastSequence;
}

void PsServer::overwrite(const std::vector<zmq::message_t>& frames, std::size_t firstData) {
  std::size_t frame = firstData;
  for (Tensor& values : values_) {
    addFrame(values, frames[frame++], true);
  }
  for (Tensor& buffer : buffers_) {
    addFrame(buffer, frames[frame++], true);
  }
  fmt::print("ps-server {}: values replaced by worker 0's (resumed from a checkpoint)\n", view_.index);
}

void PsServer::applySync(WorkerState& worker, const std::vector<zmq::message_t>& frames) {
  const bool first = arrived_ == 0;
  std::size_t frame = 2;
  for (Tensor& gradients : gradients_) {
    addFrame(gradients, frames[frame++], first);
  }
  for (Tensor& sum : bufferSums_) {
    addFrame(sum, frames[frame++], first);
  }
  roundLr_ = worker.request.lr;
  worker.waiting = true;
  ++worker.clock;
  if (++arrived_ < view_.workers) {
    return;
  }
  // Every worker has pushed: one update from the average.
  for (Tensor& gradients : gradients_) {
    if (view_.workers > 1) {
      scale(gradients, 1.0 / view_.workers);
    }
  }
  if (keepPrevious_) {
    for (std::size_t k = 0; k < values_.size(); ++k) {
      previous_[k].copyFrom(values_[k]);
    }
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      previousBuffers_[b].copyFrom(buffers_[b]);
    }
    hasPrevious_ = true;
  }
  optimizer_->step(roundLr_);
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    buffers_[b].copyFrom(bufferSums_[b]);
    scale(buffers_[b], 1.0 / view_.workers);
  }
  ++version_;
  arrived_ = 0;
  afterUpdate();
  traceLine(fmt::format(R"({{"server":{},"event":"update","version":{},"lr":{}}})", view_.index, version_, roundLr_));
  for (WorkerState& w : workers_) {
    if (w.waiting) {
      w.waiting = false;
      reply(w.identity, w.request, Kind::Params, 0);
    }
  }
}

int PsServer::applyAsync(WorkerState& worker, const std::vector<zmq::message_t>& frames) {
  const Header& header = worker.request;
  const std::int64_t staleness = std::max<std::int64_t>(0, version_ - header.modelVersion);
  std::size_t frame = 2;
  for (std::size_t k = 0; k < gradients_.size(); ++k) {
    Tensor& g = gradients_[k];
    addFrame(g, frames[frame++], true);
    if (options_.dcAsgd > 0 && worker.pulledValues.defined()) {
      std::int64_t offset = 0;
      for (std::size_t j = 0; j < k; ++j) {
        offset += static_cast<std::int64_t>(values_[j].bytes());
      }
      const char* then = static_cast<const char*>(worker.pulledValues.rawData()) + offset;
      if (g.dtype() == DType::Float64) {
        compensate(g.data<double>(), values_[k].data<double>(), then, g.numel(), options_.dcAsgd);
      } else {
        compensate(g.data<float>(), values_[k].data<float>(), then, g.numel(), options_.dcAsgd);
      }
    }
  }
  // Buffers: the mean of every worker's latest values (a worker's push replaces its previous contribution).
  if (!buffers_.empty()) {
    if (worker.latestBuffers.empty()) {
      for (const Tensor& buffer : buffers_) {
        worker.latestBuffers.push_back(Tensor::empty(buffer.dtype(), {buffer.numel()}));
      }
    }
    for (Tensor& latest : worker.latestBuffers) {
      addFrame(latest, frames[frame++], true);
    }
    averageLatestBuffers();
  }
  double lr = header.lr;
  if (options_.lrScale == LrScale::Workers) {
    lr /= static_cast<double>(workers_.size());  // Note [Async learning rate]: every worker the job started with
  }
  if (options_.lrStaleness) {
    lr /= static_cast<double>(std::max<std::int64_t>(1, staleness));
  }
  optimizer_->step(lr);
  ++version_;
  afterUpdate();
  ++worker.clock;
  ++worker.pushes;
  worker.stalenessSum += static_cast<double>(staleness);
  worker.stalenessMax = std::max(worker.stalenessMax, staleness);
  traceLine(fmt::format(R"({{"server":{},"event":"push","worker":{},"clock":{},"min_clock":{},"version":{},)"
                        R"("staleness":{},"lr":{}}})",
                        view_.index, header.worker, worker.clock, slowestClock(), version_, staleness, lr));
  return static_cast<int>(std::min<std::int64_t>(staleness, std::numeric_limits<int>::max()));
}

void PsServer::averageLatestBuffers() {
  int contributors = 0;
  for (const WorkerState& w : workers_) {
    if (w.latestBuffers.empty()) {
      continue;
    }
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      if (contributors == 0) {
        buffers_[b].copyFrom(w.latestBuffers[b]);
      } else {
        addInto(buffers_[b], w.latestBuffers[b]);
      }
    }
    ++contributors;
  }
  for (Tensor& buffer : buffers_) {
    scale(buffer, 1.0 / std::max(contributors, 1));
  }
}

std::int64_t PsServer::slowestClock() const {
  std::int64_t slowest = std::numeric_limits<std::int64_t>::max();
  for (const WorkerState& w : workers_) {
    if (!w.departed && !w.idle) {
      slowest = std::min(slowest, w.clock);
    }
  }
  return slowest;
}

// async: every held answer goes out at once; ssp: a worker's only when it is at most K pushes ahead.
void PsServer::releaseHeld() {
  const std::int64_t slowest = slowestClock();
  for (WorkerState& w : workers_) {
    if (!w.waiting) {
      continue;
    }
    if (options_.mode == Mode::Ssp && w.clock - slowest > options_.staleness) {
      continue;
    }
    w.waiting = false;
    traceLine(fmt::format(R"({{"server":{},"event":"release","worker":{},"clock":{},"min_clock":{}}})", view_.index,
                          w.request.worker, w.clock, slowest));
    reply(w.identity, w.request, Kind::Params, w.request.staleness);
  }
}

void PsServer::reply(zmq::message_t& identity, const Header& request, Kind kind, int staleness) {
  std::vector<zmq::message_t> frames;
  frames.push_back(copyOf(identity));
  Header header;
  header.kind = static_cast<std::uint16_t>(kind);
  header.worker = request.worker;
  header.step = request.step;
  header.modelVersion = version_;
  header.sequence = request.sequence;
  header.staleness = staleness;
  header.flags = static_cast<std::uint32_t>(restarts_);
  if (request.worker >= 0 && static_cast<std::size_t>(request.worker) < durable_.size()) {
    header.durable = checkpointPath_.empty() ? std::numeric_limits<std::uint64_t>::max()
                                             : durable_[static_cast<std::size_t>(request.worker)];
  }
  std::vector<zmq::message_t> data;
  if (kind == Kind::Params) {
    // Note [PS zero copy], the answer's side: in sync mode the values change only after every worker has pushed
    // again, which each does only after it has received this answer whole, so the frames can be views of them.
    // async and ssp change them at the next push: copies.
    for (const Tensor& values : values_) {
      if (options_.mode == Mode::Sync) {
        data.emplace_back(values.rawData(), values.bytes(), nullptr);
      } else {
        data.push_back(countedCopy(values.rawData(), values.bytes()));  // Note [PS server memory]
      }
    }
    for (const Tensor& buffer : buffers_) {
      data.push_back(countedCopy(buffer.rawData(), buffer.bytes()));
    }
    if (options_.dcAsgd > 0) {
      // DC-ASGD's backup of the values a worker pulled is part of the update rule's state.
      WorkerState& worker = workers_.at(static_cast<std::size_t>(request.worker));
      std::int64_t bytes = 0;
      for (const Tensor& values : values_) {
        bytes += static_cast<std::int64_t>(values.bytes());
      }
      if (!worker.pulledValues.defined()) {
        worker.pulledValues = Tensor::empty(DType::UInt8, {bytes}, MemoryCategory::OptimizerState);
      }
      char* into = static_cast<char*>(worker.pulledValues.rawData());
      for (const Tensor& values : values_) {
        std::memcpy(into, values.rawData(), values.bytes());
        into += values.bytes();
      }
    }
  } else if (kind == Kind::Rejoined) {
    // Copies: another worker's push may complete the round (and change the values) before ZeroMQ has sent them.
    const WorkerState& worker = workers_.at(static_cast<std::size_t>(request.worker));
    const nlohmann::json description = {{"last_sequence", worker.lastSequence},
                                        {"clock", worker.clock},
                                        {"waiting", worker.waiting},
                                        {"version", version_},
                                        {"previous", hasPrevious_}};
    data.emplace_back(description.dump());
    for (const auto* tensors : {&values_, &buffers_}) {
      for (const Tensor& t : *tensors) {
        data.push_back(countedCopy(t.rawData(), t.bytes()));
      }
    }
    if (hasPrevious_) {
      for (const auto* tensors : {&previous_, &previousBuffers_}) {
        for (const Tensor& t : *tensors) {
          data.push_back(countedCopy(t.rawData(), t.bytes()));
        }
      }
    }
  } else if (kind == Kind::Stats) {
    data.emplace_back(statsJson());
  } else if (kind == Kind::State) {
    // Copies: async pushes may change the state before ZeroMQ has sent it.
    nlohmann::json description = {{"optimizer_steps", optimizer_->steps()},
                                  {"version", version_},
                                  {"server", view_.index},
                                  {"state_bytes", view_.stateSizes}};
    data.emplace_back(description.dump());
    for (const Tensor& state : optimizer_->state()) {
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
  header.modelVersion = version_;
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
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    const WorkerState& s = workers_[w];
    perWorker +=
        fmt::format(R"({}{{"worker":{},"pushes":{},"staleness_mean":{},"staleness_max":{},"departed":{}}})",
                    w == 0 ? "" : ",", w, s.pushes, s.pushes > 0 ? s.stalenessSum / static_cast<double>(s.pushes) : 0.0,
                    s.stalenessMax, s.departed ? "true" : "false");
  }
  return fmt::format(
      R"({{"server":{},"version":{},"rejected":{},"refused":{},"restarts":{},"replayed_answers":{},"workers":[{}],)"
      R"("figures":{}}})",
      view_.index, version_, rejected_, refused_, restarts_, replayedPushes_, perWorker, figures_->json().dump());
}

}  // namespace strata::ps
