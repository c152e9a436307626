// The parameter server: workers push gradients to S servers (`strata ps-server`, this strategy's role) that own
// the parameters' key ranges and their optimizer state, and pull the new values (ps-lite's design, over ZeroMQ).
// Modes sync, async and ssp (Note [PS modes]); keys are byte-balanced slices of the flat buffers (Note [PS keys]).
//
// Note [PS zero copy]: a push's data frames are ZeroMQ messages over the gradient buffers themselves (no copy, no
// free function). That is safe because a worker waits for every server's answer before the next backward writes
// those buffers, and a server answers only after it has received the whole message.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ps_client.h"
#include "ps_keys.h"
#include "ps_options.h"
#include "ps_protocol.h"
#include "ps_server.h"
#include "strata/error.h"
#include "strata/sdk/strategy.h"

namespace strata::ps {
namespace {

constexpr const char* kRole = "ps-server";

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

class PsStrategy final : public Strategy {
 public:
  ~PsStrategy() override { teardown(); }

  StrategyRequirements requirements(const StrategyQuery& query) override {
    const PsOptions options = parsePsOptions(query.options);
    if (options.auth && query.nodes > 1 && options.keyFile.empty()) {
      fail(
          "ps: a job over {} nodes with auth on needs --strategy-opt key_file=PATH (the job's CURVE secret on a "
          "file system every node sees; `strata ps-keygen PATH` makes one), or auth=off on a trusted network",
          query.nodes);
    }
    StrategyRequirements requirements;
    // Note [PS recovery]: a server that can reload a checkpoint is restarted when it dies; one that cannot ends the
    // job at once, naming itself.
    for (int node : options.serverNodes) {
      if (node >= query.nodes) {
        fail("ps: --strategy-opt server_nodes names node {}, but the job has {} node(s) (--nnodes)", node, query.nodes);
      }
    }
    requirements.roles.push_back(RoleRequest{.name = kRole,
                                             .count = options.servers,
                                             .maxRestarts = options.checkpointEvery > 0 ? options.maxRestarts : 0,
                                             .nodes = options.serverNodes,
                                             .hosts = options.serverHosts});
    // async and ssp workers do not wait for each other: a fast one takes more of an epoch's steps.
    requirements.sharedSteps = options.mode != Mode::Sync;
    requirements.toleratesWorkerLoss = options.mode != Mode::Sync;
    // Note [Rejoining workers]: in sync mode the servers wait in the round for a restarted worker.
    requirements.rejoinsWorkers = options.mode == Mode::Sync;
    return requirements;
  }

  void setup(StrategyContext& context) override {
    connect(context);
    if (context.rank() == 0) {
      sendInit(/*overwrite=*/false);
    } else {
      for (int s = 0; s < options_.servers; ++s) {
        client_->send(s, Kind::Pull, 0, 0, 0, {});
      }
    }
    takeValues(receivePulls());
    if (context.rank() == 0) {
      fmt::print("ps: {} workers, {} server(s), mode {}: {} parameter bytes in {} key ranges\n", context.worldSize(),
                 options_.servers, modeName(options_.mode), layout_.parameterBytes(), countKeys());
    }
  }

  void step(const StepInfo& at, double lr) override {
    const auto start = std::chrono::steady_clock::now();
    ParameterGroups& parameters = context_->parameters();
    const bool recovery = options_.checkpointEvery > 0;
    staged_.clear();  // the servers have answered the last step's pushes
    for (int s = 0; s < options_.servers; ++s) {
      std::vector<Tensor> sources;
      for (const Segment& segment : keys_[static_cast<std::size_t>(s)]) {
        sources.push_back(onHost(parameters.flatGradients(segment.group).flatSlice(segment.offset, segment.count)));
      }
      if (s == 0) {
        for (const Tensor& buffer : buffers_) {
          sources.push_back(onHost(buffer));
        }
      }
      const std::int64_t version = versions_[static_cast<std::size_t>(s)];
      if (!recovery) {
        std::vector<zmq::message_t> data;
        for (const Tensor& source : sources) {
          data.emplace_back(source.rawData(), source.bytes(), nullptr);  // Note [PS zero copy]
        }
        client_->send(s, Kind::Push, at.step, version, lr, std::move(data));
        exitForTest(at.step, s);
        continue;
      }
      // Note [PS recovery]: a copy kept until the server's checkpoint holds it; the frames are views of the copy.
      RetainedPush push{.step = at.step, .modelVersion = version, .lr = lr, .frames = {}};
      for (const Tensor& source : sources) {
        const char* bytes = static_cast<const char*>(source.rawData());
        push.frames.emplace_back(bytes, bytes + source.bytes());
      }
      push.sequence = client_->send(s, Kind::Push, at.step, version, lr, framesOf(push));
      retained_[static_cast<std::size_t>(s)].push_back(std::move(push));
      exitForTest(at.step, s);
    }
    std::vector<Reply> replies = receiveReplaying([&](int s) { return replay(s, /*thenPull=*/false); });
    takeValues(replies);
    const int staleness = replies[0].header.staleness;
    context_->addFigure("ps_pushes", 1);
    context_->addFigure("ps_staleness_sum", staleness);
    if (staleness > stalenessMax_) {
      context_->addFigure("ps_staleness_max", staleness - stalenessMax_);
      stalenessMax_ = staleness;
    }
    context_->addFigure("communication_s", seconds(std::chrono::steady_clock::now() - start));
  }

  // Note [Rejoining workers]: this worker's process died and the launcher started it again; the other workers wait
  // for it in the servers' rounds. Each server says how many of this worker's pushes it has (its clock) and whether
  // the last one still waits in the round, and sends its values now and before its last update. The clocks differ
  // by at most one: a server cannot complete a round that lacks this worker. The worker recomputes the step of the
  // lowest clock when some server lacks that step's push, else the last step it pushed (so a log point or epoch end
  // the dead process may not have reached is reached again), from the values of that step's version and the same
  // batches (Trainer::rejoin), and so pushes the same bytes the dead process would have. A server that holds the push
  // already gets it with the same sequence number and applies nothing twice: it answers when its round completes,
  // or at once with its newer values. The run ends with the parameters of an uninterrupted one.
  std::int64_t rejoin(StrategyContext& context) override {
    connect(context);
    if (options_.mode != Mode::Sync) {
      fail("ps: worker {}: only mode=sync takes a restarted worker back (mode={} goes on without it)", context.rank(),
           modeName(options_.mode));
    }
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::Rejoin, -1, 0, 0, {});
    }
    std::vector<Reply> replies = client_->receiveAll(options_.timeout);
    struct Standing {
      std::uint64_t lastSequence = 0;
      std::int64_t clock = 0;
      std::int64_t version = 0;
      bool previous = false;
    };
    std::vector<Standing> standing;
    for (int s = 0; s < options_.servers; ++s) {
      Reply& reply = replies[static_cast<std::size_t>(s)];
      if (reply.header.kind != static_cast<std::uint16_t>(Kind::Rejoined) || reply.data.empty()) {
        fail("ps: worker {}: ps-server {} answered the rejoin with a {}", context.rank(), s,
             kindName(static_cast<Kind>(reply.header.kind)));
      }
      try {
        const nlohmann::json d = nlohmann::json::parse(reply.data[0].to_string());
        standing.push_back({d.at("last_sequence").get<std::uint64_t>(), d.at("clock").get<std::int64_t>(),
                            d.at("version").get<std::int64_t>(), d.at("previous").get<bool>()});
      } catch (const nlohmann::json::exception& e) {
        fail("ps: worker {}: ps-server {}'s rejoin answer is malformed: {}", context.rank(), s, e.what());
      }
    }
    const auto [low, high] = std::minmax_element(
        standing.begin(), standing.end(), [](const Standing& a, const Standing& b) { return a.clock < b.clock; });
    if (high->clock > low->clock + 1) {
      fail("ps: worker {}: the servers hold from {} to {} of its pushes; in sync mode they differ by one at most",
           context.rank(), low->clock, high->clock);
    }
    const std::int64_t step = high->clock > low->clock ? low->clock : std::max<std::int64_t>(low->clock - 1, 0);
    ParameterGroups& parameters = context.parameters();
    for (int s = 0; s < options_.servers; ++s) {
      const Standing& at = standing[static_cast<std::size_t>(s)];
      const std::vector<Segment>& keys = keys_[static_cast<std::size_t>(s)];
      const std::size_t perVersion = keys.size() + (s == 0 ? buffers_.size() : 0);
      // The frames after the description: the values at `version`, then (when kept) at version - 1.
      std::size_t first = 1;
      if (at.version == step + 1) {
        if (!at.previous) {
          fail(
              "ps: worker {}: ps-server {} has applied step {} but keeps no values from before it (a server "
              "restarted since, or started without --max-restarts), so this worker cannot recompute it",
              context.rank(), s, step);
        }
        first += perVersion;
      } else if (at.version != step) {
        fail("ps: worker {}: ps-server {} is at version {}, which step {} cannot be recomputed from", context.rank(), s,
             at.version, step);
      }
      std::vector<zmq::message_t>& data = replies[static_cast<std::size_t>(s)].data;
      if (data.size() < first + perVersion) {
        fail("ps: worker {}: ps-server {} sent {} frames in its rejoin answer, expected at least {}", context.rank(), s,
             data.size(), first + perVersion);
      }
      for (std::size_t k = 0; k < keys.size(); ++k) {
        copyFrame(data[first + k], parameters.flatParameters(keys[k].group).flatSlice(keys[k].offset, keys[k].count),
                  static_cast<std::size_t>(s));
      }
      if (s == 0) {
        for (std::size_t b = 0; b < buffers_.size(); ++b) {
          copyFrame(data[first + keys.size() + b], buffers_[b], 0);
        }
      }
      // The push of `step` carries the sequence number the server has for it, if it has it; else the next one.
      client_->setLastSequence(s, at.clock > step ? at.lastSequence - 1 : at.lastSequence);
      versions_[static_cast<std::size_t>(s)] = step;
    }
    parameters.bumpVersion();
    fmt::print("ps: worker {}: restarted; rejoins at step {} (the servers hold {} of its pushes)\n", context.rank(),
               step, high->clock);
    return step;
  }

  // async and ssp: this worker takes no more steps this epoch (shared steps), so the servers stop holding the
  // others for it (SSP) until it pushes again.
  void afterEpoch(const StepInfo& /*at*/) override {
    if (options_.mode == Mode::Sync || client_ == nullptr) {
      return;
    }
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::Idle, -1, 0, 0, {});
    }
    receiveReplaying([&](int s) {
      replay(s, /*thenPull=*/false);
      client_->send(s, Kind::Idle, -1, 0, 0, {});
      return client_->receiveFrom(s, options_.timeout);
    });
  }

  // async and ssp: evaluate and export the newest values (sync workers already hold them).
  void beforeEvaluate() override {
    if (options_.mode == Mode::Sync || client_ == nullptr) {
      return;
    }
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::Pull, -1, 0, 0, {});
    }
    takeValues(receivePulls());
  }

  // Note [PS checkpoints]: the run's checkpoint holds the parameters (rank 0's, which are the servers' in sync mode)
  // and each server's optimizer state (momentum, Adam's moments and step count), fetched by rank 0 with a
  // StateRequest when the trainer saves. On resume rank 0 re-initialises the servers with the parameters and hands
  // each its state back (RestoreState), so a resumed sync run continues exactly as an uninterrupted one. A
  // checkpoint taken with another number of servers or another optimizer cannot be split again: its optimizer
  // state is dropped with a warning. (The servers' own checkpoints, checkpoint_every, are for their restarts
  // within a job.)
  void saveState(StrategyContext& context, StateWriter& writer) override {
    if (context.rank() != 0) {
      return;
    }
    ParameterGroups& parameters = context.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      writer.putTensor("param/" + parameters.info(i).name, parameters.parameter(i));
    }
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::StateRequest, -1, 0, 0, {});
    }
    std::vector<Reply> replies = client_->receiveAll(options_.timeout);
    writer.putText("ps/servers", std::to_string(options_.servers));
    for (int s = 0; s < options_.servers; ++s) {
      std::vector<zmq::message_t>& data = replies[static_cast<std::size_t>(s)].data;
      STRATA_CHECK(!data.empty(), "ps: ps-server {} answered the state request without its state", s);
      writer.putText(fmt::format("ps/server/{}/state", s), data[0].to_string());
      for (std::size_t k = 1; k < data.size(); ++k) {
        Tensor bytes = Tensor::empty(DType::UInt8, {static_cast<std::int64_t>(data[k].size())}, MemoryCategory::Other);
        std::memcpy(bytes.rawData(), data[k].data(), data[k].size());
        writer.putTensor(fmt::format("ps/server/{}/state/{}", s, k - 1), bytes);
      }
    }
  }

  void loadState(StrategyContext& context, StateReader& reader) override {
    ParameterGroups& parameters = context.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      reader.getTensor("param/" + parameters.info(i).name, parameters.parameter(i));
    }
    // Rank 0 overwrites the servers' values with the checkpoint's; the others pull them after it has.
    if (context.rank() == 0) {
      sendInit(/*overwrite=*/true);
      takeValues(client_->receiveAll(options_.timeout));
      restoreServerState(reader);
      context.store()->setString("ps/restored", "1");
      return;
    }
    context.store()->getString("ps/restored", options_.timeout);
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::Pull, 0, 0, 0, {});
    }
    takeValues(receivePulls());
  }

  // Note [PS checkpoints]: hands each server the optimizer state the checkpoint holds for it.
  void restoreServerState(StateReader& reader) {
    if (!reader.has("ps/servers")) {
      fmt::print(stderr,
                 "warning: ps: the checkpoint holds no optimizer state of the servers (written before it did): "
                 "momentum and moments start again from zero\n");
      return;
    }
    const std::string saved = reader.getText("ps/servers");
    if (saved != std::to_string(options_.servers)) {
      fmt::print(stderr,
                 "warning: ps: the checkpoint's optimizer state belongs to {} servers, this run has {}: momentum and "
                 "moments start again from zero\n",
                 saved, options_.servers);
      return;
    }
    for (int s = 0; s < options_.servers; ++s) {
      const std::string description = reader.getText(fmt::format("ps/server/{}/state", s));
      std::vector<std::int64_t> sizes;
      try {
        sizes = nlohmann::json::parse(description).at("state_bytes").get<std::vector<std::int64_t>>();
      } catch (const nlohmann::json::exception& e) {
        fail("ps: the checkpoint's state of ps-server {} is damaged: {}", s, e.what());
      }
      std::vector<zmq::message_t> frames;
      frames.emplace_back(description);
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        Tensor bytes = Tensor::empty(DType::UInt8, {sizes[k]}, MemoryCategory::Other);
        reader.getTensor(fmt::format("ps/server/{}/state/{}", s, k), bytes);
        frames.emplace_back(bytes.rawData(), bytes.bytes());
      }
      client_->send(s, Kind::RestoreState, -1, 0, 0, std::move(frames));
    }
    client_->receiveAll(options_.timeout);  // an Error reply (another optimizer's sizes) throws, naming the server
  }

  void teardown() override { client_.reset(); }

  // A test hook (tests/multirank/check_ps_worker_restart.py): STRATA_TEST_PS_WORKER_EXIT=R:STEP:N makes the first
  // process of worker R exit with status 3 once it has sent its push of STEP to the first N servers, so a test can
  // end a worker between its pushes to two servers, or while its push waits in the round.
  void exitForTest(std::int64_t step, int server) const {
    if (testExit_ && testExit_->step == step && testExit_->servers == server + 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // ZeroMQ's I/O thread delivers the push
      fmt::print("test hook STRATA_TEST_PS_WORKER_EXIT: worker {} exits after sending step {} to {} server(s)\n",
                 context_->rank(), step, server + 1);
      std::fflush(stdout);
      std::_Exit(3);
    }
  }

  // What setup and rejoin share: the options, the layout of the flat buffers, the keys and the servers' sockets.
  void connect(StrategyContext& context) {
    context_ = &context;
    options_ = parsePsOptions(context.options());
    if (context.store() == nullptr) {
      fail("ps: no store: the parameter server needs `strata train` to start its servers (roles)");
    }
    if (!options_.auth && context.rank() == 0) {
      fmt::print(
          "ps: WARNING: auth=off: the servers accept any client that reaches them; use it on trusted "
          "networks only\n");
    }
    ParameterGroups& parameters = context.parameters();
    for (std::size_t g = 0; g < parameters.groupCount(); ++g) {
      const Tensor& flat = parameters.flatParameters(g);
      layout_.groups.push_back({flat.dtype(), flat.numel()});
    }
    for (const Tensor& buffer : context.buffers()) {
      if (buffer.dtype() == DType::Float32 || buffer.dtype() == DType::Float64) {
        layout_.buffers.push_back({buffer.dtype(), buffer.numel()});
        buffers_.push_back(buffer);
      }
    }
    keys_ = partitionKeys(layout_, options_.servers);
    const char* testExit = std::getenv("STRATA_TEST_PS_WORKER_EXIT");
    const char* restarted = std::getenv("STRATA_RANK_RESTARTS");
    if (testExit != nullptr && (restarted == nullptr || std::string(restarted) == "0")) {
      int rank = -1;
      TestExit exit;
      if (std::sscanf(testExit, "%d:%ld:%d", &rank, &exit.step, &exit.servers) != 3) {
        fail("STRATA_TEST_PS_WORKER_EXIT='{}' is not RANK:STEP:SERVERS", testExit);
      }
      if (rank == context.rank()) {
        testExit_ = exit;
      }
    }
    client_ = std::make_unique<PsClient>(options_, context.rank(), *context.store(), kRole);
    versions_.assign(static_cast<std::size_t>(options_.servers), 0);
    retained_.resize(static_cast<std::size_t>(options_.servers));
  }

  void runRole(RoleContext& context) override {
    if (context.role() != kRole) {
      Strategy::runRole(context);
      return;
    }
    PsServer server(parsePsOptions(context.options()), context);
    server.run();
  }

 private:
  struct RetainedPush {
    std::uint64_t sequence = 0;
    std::int64_t step = 0;
    std::int64_t modelVersion = 0;
    double lr = 0;
    std::vector<std::vector<char>> frames;
  };

  static std::vector<zmq::message_t> framesOf(RetainedPush& push) {
    std::vector<zmq::message_t> data;
    for (std::vector<char>& frame : push.frames) {
      data.emplace_back(frame.data(), frame.size(), nullptr);  // Note [PS zero copy]: kept until trimmed
    }
    return data;
  }

  // Answers to pulls (setup, evaluation, resume), replaying to a restarted server first.
  std::vector<Reply> receivePulls() {
    return receiveReplaying([&](int s) { return replay(s, /*thenPull=*/true); });
  }

  // Note [PS recovery]: every server's answer to the request just sent, recovering a restarted server with
  // `recover` (its answer then) as soon as the restart shows. Waiting for the other servers first can deadlock: in
  // sync mode another server's round may wait for a worker that is itself replaying to the restarted server and
  // waits there for this worker's replay (seen as a CI hang: worker 0 a step ahead, waiting on server 1).
  std::vector<Reply> receiveReplaying(const std::function<Reply(int)>& recover) {
    std::vector<Reply> replies(static_cast<std::size_t>(options_.servers));
    std::vector<std::size_t> waiting;
    for (int s = 0; s < options_.servers; ++s) {
      waiting.push_back(static_cast<std::size_t>(s));
    }
    while (!waiting.empty()) {
      std::vector<Reply> got = client_->receiveUntilRestart(waiting, options_.timeout);
      std::vector<std::size_t> still;
      for (const std::size_t s : waiting) {
        if (got[s].restarted) {
          replies[s] = recover(static_cast<int>(s));
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
  // sequence numbers (it answers those it holds without applying them), then the pull that was pending.
  Reply replay(int s, bool thenPull) {
    std::deque<RetainedPush>& pushes = retained_[static_cast<std::size_t>(s)];
    context_->addFigure("ps_server_restarts_seen", 1);
    if (options_.checkpointEvery == 0) {
      fail("ps: worker {}: ps-server {} was restarted, but without checkpoint_every it has lost its parameters",
           context_->rank(), s);
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
        context_->addFigure("ps_pushes_replayed", 1);
      }
      if (restartedAgain) {
        continue;
      }
      if (thenPull) {
        client_->send(s, Kind::Pull, -1, 0, 0, {});
        last = client_->receiveFrom(s, options_.timeout);
        if (last.restarted) {
          continue;
        }
      }
      fmt::print("ps: worker {}: resent {} push(es) to the restarted ps-server {}\n", context_->rank(), pushes.size(),
                 s);
      return last;
    }
  }

  std::size_t countKeys() const {
    std::size_t n = 0;
    for (const auto& keys : keys_) {
      n += keys.size();
    }
    return n;
  }

  void sendInit(bool overwrite) {
    ParameterGroups& parameters = context_->parameters();
    const std::vector<std::byte> layoutBytes = encodeLayout(layout_);
    for (int s = 0; s < options_.servers; ++s) {
      std::vector<zmq::message_t> data;
      data.emplace_back(layoutBytes.data(), layoutBytes.size());
      for (const Segment& segment : keys_[static_cast<std::size_t>(s)]) {
        const Tensor slice = onHost(parameters.flatParameters(segment.group).flatSlice(segment.offset, segment.count));
        data.emplace_back(slice.rawData(), slice.bytes());
      }
      if (s == 0) {
        for (const Tensor& buffer : buffers_) {
          const Tensor host = onHost(buffer);
          data.emplace_back(host.rawData(), host.bytes());
        }
      }
      client_->send(s, Kind::Init, 0, 0, 0, std::move(data), overwrite ? kInitOverwrites : 0U);
    }
  }

  // Copies the servers' values (and server 0's buffers) into the flat buffers.
  void takeValues(const std::vector<Reply>& replies) {
    ParameterGroups& parameters = context_->parameters();
    for (std::size_t s = 0; s < replies.size(); ++s) {
      const Reply& reply = replies[s];
      const std::vector<Segment>& keys = keys_[s];
      const std::size_t expected = keys.size() + (s == 0 ? buffers_.size() : 0);
      if (reply.header.kind != static_cast<std::uint16_t>(Kind::Params) || reply.data.size() != expected) {
        fail("ps: worker {}: ps-server {} answered with a {} of {} frames, expected params of {}", context_->rank(), s,
             kindName(static_cast<Kind>(reply.header.kind)), reply.data.size(), expected);
      }
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const Tensor slice = parameters.flatParameters(keys[k].group).flatSlice(keys[k].offset, keys[k].count);
        copyFrame(reply.data[k], slice, s);
      }
      if (s == 0) {
        for (std::size_t b = 0; b < buffers_.size(); ++b) {
          copyFrame(reply.data[keys.size() + b], buffers_[b], s);
        }
      }
      versions_[s] = reply.header.modelVersion;
      // Pushes the server's checkpoint holds are no longer needed for a replay.
      std::deque<RetainedPush>& pushes = retained_[s];
      while (!pushes.empty() && pushes.front().sequence <= reply.header.durable) {
        pushes.pop_front();
      }
    }
    parameters.bumpVersion();
  }

  void copyFrame(const zmq::message_t& frame, const Tensor& into, std::size_t server) const {
    if (frame.size() != into.bytes()) {
      fail("ps: worker {}: ps-server {} sent {} bytes for a key of {}", context_->rank(), server, frame.size(),
           into.bytes());
    }
    if (into.device().type == DeviceType::CPU) {
      std::memcpy(into.rawData(), frame.data(), frame.size());
      return;
    }
    Tensor host = Tensor::empty(into.meta(), MemoryCategory::Communication);  // Note [PS workers on a device]
    std::memcpy(host.rawData(), frame.data(), frame.size());
    Tensor(into).copyFrom(host);
  }

  // Note [PS workers on a device]: frames are host memory, so a worker that trains on a GPU sends host copies of its
  // gradient, parameter and buffer slices (kept until the servers have answered, as zero-copy frames need) and
  // copies the values it pulls into device memory (copyFrame). On the CPU the slices are sent as they are.
  Tensor onHost(const Tensor& t) {
    if (t.device().type == DeviceType::CPU) {
      return t;
    }
    staged_.push_back(t.to(Device::cpu(), MemoryCategory::Communication));
    return staged_.back();
  }

  StrategyContext* context_ = nullptr;
  PsOptions options_;
  FlatLayout layout_;
  std::vector<Tensor> buffers_;
  std::vector<Tensor> staged_;  // host copies of device slices in flight (Note [PS workers on a device])
  std::vector<std::vector<Segment>> keys_;
  std::unique_ptr<PsClient> client_;
  std::vector<std::int64_t> versions_;
  std::vector<std::deque<RetainedPush>> retained_;  // per server (Note [PS recovery])
  int stalenessMax_ = 0;
  struct TestExit {
    long step = 0;
    int servers = 0;
  };
  std::optional<TestExit> testExit_;  // STRATA_TEST_PS_WORKER_EXIT
};

}  // namespace
}  // namespace strata::ps

STRATA_EXPORT_STRATEGY(strata::ps::PsStrategy, "ps", "0.1.0",
                       "parameter server over ZeroMQ: sync, async or bounded-staleness (ssp) updates on S servers")
