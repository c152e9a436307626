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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ps_keys.h"
#include "ps_options.h"
#include "ps_protocol.h"
#include "ps_server.h"
#include "ps_worker.h"
#include "strata/error.h"
#include "strata/sdk/strategy.h"

namespace strata::ps {
namespace {

constexpr const char* kRole = "ps-server";

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::span<const std::byte> bytesOf(const Tensor& t) {
  return {static_cast<const std::byte*>(t.rawData()), t.bytes()};
}

using ServerFrames = std::vector<std::vector<std::span<const std::byte>>>;  // per server

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
    takeValues(worker_->wait(context.rank() == 0 ? init(/*overwrite=*/false) : worker_->pull()));
    if (context.rank() == 0) {
      fmt::print("ps: {} workers, {} server(s), mode {}: {} parameter bytes in {} key ranges\n", context.worldSize(),
                 options_.servers, modeName(options_.mode), layout_.parameterBytes(), countKeys());
    }
  }

  void step(const StepInfo& at, double lr) override {
    const auto start = std::chrono::steady_clock::now();
    ParameterGroups& parameters = context_->parameters();
    staged_.clear();  // the servers have answered the last step's pushes
    ServerFrames data(static_cast<std::size_t>(options_.servers));
    for (int s = 0; s < options_.servers; ++s) {
      for (const Segment& segment : keys_[static_cast<std::size_t>(s)]) {
        data[static_cast<std::size_t>(s)].push_back(
            bytesOf(onHost(parameters.flatGradients(segment.group).flatSlice(segment.offset, segment.count))));
      }
      if (s == 0) {
        for (const Tensor& buffer : buffers_) {
          data[0].push_back(bytesOf(onHost(buffer)));
        }
      }
    }
    const Ticket ticket = worker_->push(at.step, lr, data, [&](int server) { exitForTest(at.step, server); });
    std::vector<Reply> replies = worker_->wait(ticket);
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
    std::vector<Reply> replies = worker_->wait(worker_->request(Kind::Rejoin));
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
      worker_->setLastSequence(s, at.clock > step ? at.lastSequence - 1 : at.lastSequence);
      worker_->setVersion(s, step);
    }
    parameters.bumpVersion();
    fmt::print("ps: worker {}: restarted; rejoins at step {} (the servers hold {} of its pushes)\n", context.rank(),
               step, high->clock);
    return step;
  }

  // async and ssp: this worker takes no more steps this epoch (shared steps), so the servers stop holding the
  // others for it (SSP) until it pushes again.
  void afterEpoch(const StepInfo& /*at*/) override {
    if (options_.mode == Mode::Sync || worker_ == nullptr) {
      return;
    }
    worker_->wait(worker_->idle());
  }

  // async and ssp: evaluate and export the newest values (sync workers already hold them).
  void beforeEvaluate() override {
    if (options_.mode == Mode::Sync || worker_ == nullptr) {
      return;
    }
    takeValues(worker_->wait(worker_->pull()));
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
    std::vector<Reply> replies = worker_->wait(worker_->request(Kind::StateRequest));
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
      takeValues(worker_->wait(init(/*overwrite=*/true)));
      restoreServerState(reader);
      context.store()->setString("ps/restored", "1");
      return;
    }
    context.store()->getString("ps/restored", options_.timeout);
    takeValues(worker_->wait(worker_->pull()));
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
    std::vector<std::string> descriptions;
    std::vector<std::vector<Tensor>> states;
    ServerFrames data;
    for (int s = 0; s < options_.servers; ++s) {
      const std::string& description = descriptions.emplace_back(reader.getText(fmt::format("ps/server/{}/state", s)));
      std::vector<std::int64_t> sizes;
      try {
        sizes = nlohmann::json::parse(description).at("state_bytes").get<std::vector<std::int64_t>>();
      } catch (const nlohmann::json::exception& e) {
        fail("ps: the checkpoint's state of ps-server {} is damaged: {}", s, e.what());
      }
      std::vector<std::span<const std::byte>>& frames = data.emplace_back();
      frames.emplace_back(reinterpret_cast<const std::byte*>(description.data()), description.size());
      std::vector<Tensor>& state = states.emplace_back();
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        Tensor bytes = state.emplace_back(Tensor::empty(DType::UInt8, {sizes[k]}, MemoryCategory::Other));
        reader.getTensor(fmt::format("ps/server/{}/state/{}", s, k), bytes);
        frames.push_back(bytesOf(bytes));
      }
    }
    // An Error reply (another optimizer's sizes) throws, naming the server.
    worker_->wait(worker_->request(Kind::RestoreState, data));
  }

  void teardown() override { worker_.reset(); }

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
    worker_ = std::make_unique<PsWorker>(
        options_, context.rank(), *context.store(), kRole,
        [&context](const std::string& name, double amount) { context.addFigure(name, amount); });
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
  std::size_t countKeys() const {
    std::size_t n = 0;
    for (const auto& keys : keys_) {
      n += keys.size();
    }
    return n;
  }

  // Rank 0's Init: the layout, then each server's values (and server 0's buffers).
  Ticket init(bool overwrite) {
    ParameterGroups& parameters = context_->parameters();
    const std::vector<std::byte> layoutBytes = encodeLayout(layout_);
    ServerFrames data(static_cast<std::size_t>(options_.servers));
    for (int s = 0; s < options_.servers; ++s) {
      std::vector<std::span<const std::byte>>& frames = data[static_cast<std::size_t>(s)];
      frames.emplace_back(layoutBytes);
      for (const Segment& segment : keys_[static_cast<std::size_t>(s)]) {
        frames.push_back(
            bytesOf(onHost(parameters.flatParameters(segment.group).flatSlice(segment.offset, segment.count))));
      }
      if (s == 0) {
        for (const Tensor& buffer : buffers_) {
          frames.push_back(bytesOf(onHost(buffer)));
        }
      }
    }
    return worker_->init(data, overwrite);  // copies the frames: the layout and host copies may go
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
  std::unique_ptr<PsWorker> worker_;
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
