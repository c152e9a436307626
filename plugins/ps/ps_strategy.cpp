// The parameter server: workers push gradients to S servers (`strata ps-server`, this strategy's role) that own
// the parameters' key ranges and their optimizer state, and pull the new values (ps-lite's design, over ZeroMQ).
// Modes sync, async and ssp (Note [PS modes]); keys are byte-balanced slices of the flat buffers (Note [PS keys]).
//
// Note [PS zero copy]: a push's data frames are ZeroMQ messages over the gradient buffers themselves (no copy, no
// free function). That is safe because a worker waits for every server's answer before the next backward writes
// those buffers, and a server answers only after it has received the whole message.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

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
    requirements.roles.push_back(RoleRequest{kRole, options.servers});
    // async and ssp workers do not wait for each other: a fast one takes more of an epoch's steps.
    requirements.sharedSteps = options.mode != Mode::Sync;
    return requirements;
  }

  void setup(StrategyContext& context) override {
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
    std::vector<std::string> endpoints;
    for (int s = 0; s < options_.servers; ++s) {
      endpoints.push_back(lookupRoleEndpoint(*context.store(), kRole, s, options_.timeout));
    }
    client_ = std::make_unique<PsClient>(options_, context.rank(), endpoints);
    versions_.assign(static_cast<std::size_t>(options_.servers), 0);
    if (context.rank() == 0) {
      sendInit(/*overwrite=*/false);
    } else {
      for (int s = 0; s < options_.servers; ++s) {
        client_->send(s, Kind::Pull, 0, 0, 0, {});
      }
    }
    takeValues(client_->receiveAll(options_.timeout));
    if (context.rank() == 0) {
      fmt::print("ps: {} workers, {} server(s), mode {}: {} parameter bytes in {} key ranges\n", context.worldSize(),
                 options_.servers, modeName(options_.mode), layout_.parameterBytes(), countKeys());
    }
  }

  void step(const StepInfo& at, double lr) override {
    const auto start = std::chrono::steady_clock::now();
    ParameterGroups& parameters = context_->parameters();
    for (int s = 0; s < options_.servers; ++s) {
      std::vector<zmq::message_t> data;
      for (const Segment& segment : keys_[static_cast<std::size_t>(s)]) {
        const Tensor slice = parameters.flatGradients(segment.group).flatSlice(segment.offset, segment.count);
        data.emplace_back(slice.rawData(), slice.bytes(), nullptr);  // Note [PS zero copy]
      }
      if (s == 0) {
        for (const Tensor& buffer : buffers_) {
          data.emplace_back(buffer.rawData(), buffer.bytes());
        }
      }
      client_->send(s, Kind::Push, at.step, versions_[static_cast<std::size_t>(s)], lr, std::move(data));
    }
    const std::vector<Reply> replies = client_->receiveAll(options_.timeout);
    takeValues(replies);
    const int staleness = replies[0].header.staleness;
    ++pushes_;
    stalenessSum_ += staleness;
    context_->addFigure("ps_pushes", 1);
    context_->addFigure("ps_staleness_sum", staleness);
    if (staleness > stalenessMax_) {
      context_->addFigure("ps_staleness_max", staleness - stalenessMax_);
      stalenessMax_ = staleness;
    }
    context_->addFigure("communication_s", seconds(std::chrono::steady_clock::now() - start));
  }

  // async and ssp: evaluate and export the newest values (sync workers already hold them).
  void beforeEvaluate() override {
    if (options_.mode == Mode::Sync || client_ == nullptr) {
      return;
    }
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::Pull, -1, 0, 0, {});
    }
    takeValues(client_->receiveAll(options_.timeout));
  }

  // Note [PS checkpoints]: the trainer's checkpoint holds the parameters (rank 0's, which are the servers' in
  // sync mode) and no optimizer state; on resume rank 0 re-initialises the servers with them, so the servers'
  // momentum or Adam moments start again from zero. The servers' own checkpoints (checkpoint_every) are not
  // written yet.
  void saveState(StrategyContext& context, StateWriter& writer) override {
    if (context.rank() != 0) {
      return;
    }
    ParameterGroups& parameters = context.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      writer.putTensor("param/" + parameters.info(i).name, parameters.parameter(i));
    }
    writer.putText("ps/optimizer_state", "on the servers; not checkpointed (Note [PS checkpoints])");
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
      context.store()->setString("ps/restored", "1");
      return;
    }
    context.store()->getString("ps/restored", options_.timeout);
    for (int s = 0; s < options_.servers; ++s) {
      client_->send(s, Kind::Pull, 0, 0, 0, {});
    }
    takeValues(client_->receiveAll(options_.timeout));
  }

  void teardown() override { client_.reset(); }

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

  void sendInit(bool overwrite) {
    ParameterGroups& parameters = context_->parameters();
    const std::vector<std::byte> layoutBytes = encodeLayout(layout_);
    for (int s = 0; s < options_.servers; ++s) {
      std::vector<zmq::message_t> data;
      data.emplace_back(layoutBytes.data(), layoutBytes.size());
      for (const Segment& segment : keys_[static_cast<std::size_t>(s)]) {
        const Tensor slice = parameters.flatParameters(segment.group).flatSlice(segment.offset, segment.count);
        data.emplace_back(slice.rawData(), slice.bytes());
      }
      if (s == 0) {
        for (const Tensor& buffer : buffers_) {
          data.emplace_back(buffer.rawData(), buffer.bytes());
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
    }
    parameters.bumpVersion();
  }

  void copyFrame(const zmq::message_t& frame, const Tensor& into, std::size_t server) const {
    if (frame.size() != into.bytes()) {
      fail("ps: worker {}: ps-server {} sent {} bytes for a key of {}", context_->rank(), server, frame.size(),
           into.bytes());
    }
    std::memcpy(into.rawData(), frame.data(), frame.size());
  }

  StrategyContext* context_ = nullptr;
  PsOptions options_;
  FlatLayout layout_;
  std::vector<Tensor> buffers_;
  std::vector<std::vector<Segment>> keys_;
  std::unique_ptr<PsClient> client_;
  std::vector<std::int64_t> versions_;
  std::int64_t pushes_ = 0;
  double stalenessSum_ = 0;
  int stalenessMax_ = 0;
};

}  // namespace
}  // namespace strata::ps

STRATA_EXPORT_STRATEGY(strata::ps::PsStrategy, "ps", "0.1.0",
                       "parameter server over ZeroMQ: sync, async or bounded-staleness (ssp) updates on S servers")
