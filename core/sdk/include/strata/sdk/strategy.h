#pragma once

// Strata's strategy SDK, version 6 (kStrategyAbiVersion): what a distributed-training strategy plugin implements. The
// headers under strata/sdk/ (plus the value types they include: tensors, dtypes, the process group, work and store
// interfaces) are the only include path a plugin target gets; see docs/plugins.md.
//
// A plugin is a shared library exporting the entry points declared by STRATA_EXPORT_STRATEGY (extern "C",
// noexcept). The host checks the ABI version first; errors cross the library boundary as messages, never as
// exceptions; every Strategy object is destroyed by its own library before the library is unloaded.

#include <cstddef>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "strata/sdk/context.h"
#include "strata/sdk/roles.h"
#include "strata/sdk/state.h"

namespace strata {

// Bumped whenever a type of the SDK changes layout or meaning. StrategyInfo's layout never changes.
inline constexpr int kStrategyAbiVersion = 6;

struct StrategyInfo {
  const char* name;
  const char* version;
  const char* description;
  int abiVersion;
};

// How the plan's parameters are cut into units (groups of their own), in execution order.
struct UnitPartition {
  enum class Kind {
    None,             // one group per dtype
    ByModule,         // one unit per module path (the parameter name up to its last '.' or '/')
    ByParameterCount  // consecutive parameters until a unit holds at least `parameters` elements
  };
  Kind kind = Kind::None;
  std::int64_t parameters = 0;
  // ByModule: a module with fewer elements than this joins the unit before it (0: every module is a unit).
  std::int64_t smallModule = 0;
};

// Gradient accumulation over micro-batches (--grad-accum K).
enum class Accumulation {
  // The default: the plan adds each micro-batch's gradients into the gradient buffers (no copy of them), each
  // scaled by 1/K, so after the last micro-batch they hold the mean.
  InPlace,
  // Every backward overwrites the gradient buffers (still scaled by 1/K); the strategy accumulates where it keeps
  // gradients (a sharded strategy in its shards).
  ByStrategy,
};

// What a strategy asks of the run before the plan is built and before any process starts.
struct StrategyRequirements {
  UnitPartition units;
  Accumulation accumulation = Accumulation::InPlace;
  std::vector<RoleRequest> roles;
  // Workers that never wait for each other (an asynchronous parameter server): each epoch's steps become a budget
  // the ranks claim one at a time, so a fast rank takes more of them than a slow one, and log points do not make
  // the ranks meet (logged losses are the lead's own). Epoch ends (evaluation, checkpoints) still do.
  bool sharedSteps = false;
  // Ranks other than 0 may die without ending the job (an asynchronous parameter server goes on with W-1 workers):
  // the launcher reports the death (Note [Departed ranks] in core) instead of stopping the others.
  bool toleratesWorkerLoss = false;
  // A rank other than 0 that dies may be started again (`strata train --max-restarts N`) and rejoin the job where it
  // is: the new process calls Strategy::rejoin instead of setup (a synchronous parameter server, whose servers
  // hold the parameters and wait for the restarted worker in the round; Note [Rejoining workers]).
  bool rejoinsWorkers = false;
};

struct StrategyQuery {
  std::map<std::string, std::string> options;
  int worldSize = 1;
  int nodes = 1;
};

// A distribution strategy: hooks around forward, backward and step. Implementations throw strata::Error (or any
// std::exception) on failure; StrategyAdapter turns that into a message at the library boundary.
class Strategy {
 public:
  virtual ~Strategy() = default;
  // Called first (in the launcher as well as in every rank and role process): units, accumulation and roles.
  virtual StrategyRequirements requirements(const StrategyQuery& /*query*/) { return {}; }
  // Once, before training: broadcast parameters, build buckets, install hooks on context.hooks().
  virtual void setup(StrategyContext& context) = 0;
  // Instead of setup(), in a rank the launcher started again after it died (requirements().rejoinsWorkers): brings
  // this process to the job's state (parameters, buffers, whatever the strategy keeps) and returns the step it must
  // compute next, which the other ranks wait for. It may be a step the dead process already took part of: the
  // strategy makes its repetition harmless (Note [Rejoining workers]).
  virtual std::int64_t rejoin(StrategyContext& /*context*/);
  // Before the forward pass of a micro-batch.
  virtual void beforeForward(const StepInfo& /*at*/) {}
  // After the backward pass of a micro-batch: wait for communication that must finish before the step.
  virtual void afterBackward(const StepInfo& /*at*/) {}
  // Applies the update with learning rate lr (after the last micro-batch of a step).
  virtual void step(const StepInfo& at, double lr) = 0;
  // When this rank has taken its last step of an epoch (`at` is that step), before evaluation. With shared steps
  // (StrategyRequirements::sharedSteps) ranks get here at different times: an asynchronous strategy tells its peers
  // not to wait for this rank until it steps again.
  virtual void afterEpoch(const StepInfo& /*at*/) {}
  // Around evaluation and export: every rank calls both; in between, every rank holds the full current weights.
  virtual void beforeEvaluate() {}
  virtual void afterEvaluate() {}
  // Checkpoints, on every rank. The default (replicated strategies): rank 0 writes every parameter by name and the
  // full optimizer's state; every rank reads them.
  virtual void saveState(StrategyContext& context, StateWriter& writer);
  virtual void loadState(StrategyContext& context, StateReader& reader);
  // Removes hooks; called before destruction (destructors must also remove them: HookHandle does).
  virtual void teardown() {}
  // The entry point of a role process this strategy asked for (requirements().roles).
  virtual void runRole(RoleContext& context);
};

inline void Strategy::saveState(StrategyContext& context, StateWriter& writer) {
  if (context.rank() != 0) {
    return;
  }
  ParameterGroups& parameters = context.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    writer.putTensor("param/" + parameters.info(i).name, parameters.parameter(i));
  }
  const std::vector<Tensor> state = context.optimizers().full().state();
  for (std::size_t k = 0; k < state.size(); ++k) {
    writer.putTensor("optimizer/" + std::to_string(k), state[k]);
  }
  writer.putText("optimizer/steps", std::to_string(context.optimizers().full().steps()));
}

inline void Strategy::loadState(StrategyContext& context, StateReader& reader) {
  ParameterGroups& parameters = context.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    reader.getTensor("param/" + parameters.info(i).name, parameters.parameter(i));
  }
  SliceOptimizer& optimizer = context.optimizers().full();
  const std::vector<Tensor> state = optimizer.state();
  for (std::size_t k = 0; k < state.size(); ++k) {
    reader.getTensor("optimizer/" + std::to_string(k), state[k]);
  }
  optimizer.setSteps(std::stoll(reader.getText("optimizer/steps")));
  parameters.bumpVersion();
}

inline std::int64_t Strategy::rejoin(StrategyContext& /*context*/) {
  throw Error("this strategy cannot take a restarted worker back (it sets no StrategyRequirements::rejoinsWorkers)");
}

inline void Strategy::runRole(RoleContext& context) {
  throw Error(fmt::format("this strategy declares no role '{}'", context.role()));
}

// The boundary the host calls: every method catches and returns an error message ("" on success).
class StrategyHandle {
 public:
  virtual ~StrategyHandle() = default;
  virtual std::string requirements(const StrategyQuery& query, StrategyRequirements& out) noexcept = 0;
  virtual std::string setup(StrategyContext& context) noexcept = 0;
  virtual std::string rejoin(StrategyContext& context, std::int64_t& step) noexcept = 0;
  virtual std::string beforeForward(const StepInfo& at) noexcept = 0;
  virtual std::string afterBackward(const StepInfo& at) noexcept = 0;
  virtual std::string step(const StepInfo& at, double lr) noexcept = 0;
  virtual std::string afterEpoch(const StepInfo& at) noexcept = 0;
  virtual std::string beforeEvaluate() noexcept = 0;
  virtual std::string afterEvaluate() noexcept = 0;
  virtual std::string saveState(StrategyContext& context, StateWriter& writer) noexcept = 0;
  virtual std::string loadState(StrategyContext& context, StateReader& reader) noexcept = 0;
  virtual std::string teardown() noexcept = 0;
  virtual std::string runRole(RoleContext& context) noexcept = 0;
};

// Compiled into the plugin (through STRATA_EXPORT_STRATEGY), so the try/catch runs in the plugin's own code.
template <typename Impl>
class StrategyAdapter final : public StrategyHandle {
 public:
  std::string requirements(const StrategyQuery& query, StrategyRequirements& out) noexcept override {
    return guard([&] { out = impl_.requirements(query); });
  }
  std::string setup(StrategyContext& context) noexcept override {
    return guard([&] { impl_.setup(context); });
  }
  std::string rejoin(StrategyContext& context, std::int64_t& step) noexcept override {
    return guard([&] { step = impl_.rejoin(context); });
  }
  std::string beforeForward(const StepInfo& at) noexcept override {
    return guard([&] { impl_.beforeForward(at); });
  }
  std::string afterBackward(const StepInfo& at) noexcept override {
    return guard([&] { impl_.afterBackward(at); });
  }
  std::string step(const StepInfo& at, double lr) noexcept override {
    return guard([&] { impl_.step(at, lr); });
  }
  std::string afterEpoch(const StepInfo& at) noexcept override {
    return guard([&] { impl_.afterEpoch(at); });
  }
  std::string beforeEvaluate() noexcept override {
    return guard([&] { impl_.beforeEvaluate(); });
  }
  std::string afterEvaluate() noexcept override {
    return guard([&] { impl_.afterEvaluate(); });
  }
  std::string saveState(StrategyContext& context, StateWriter& writer) noexcept override {
    return guard([&] { impl_.saveState(context, writer); });
  }
  std::string loadState(StrategyContext& context, StateReader& reader) noexcept override {
    return guard([&] { impl_.loadState(context, reader); });
  }
  std::string teardown() noexcept override {
    return guard([&] { impl_.teardown(); });
  }
  std::string runRole(RoleContext& context) noexcept override {
    return guard([&] { impl_.runRole(context); });
  }

 private:
  template <typename Fn>
  static std::string guard(Fn&& fn) noexcept {
    try {
      fn();
      return {};
    } catch (const std::exception& e) {
      return e.what()[0] != '\0' ? e.what() : "unknown error";
    } catch (...) {
      return "unknown non-standard exception";
    }
  }
  Impl impl_;
};

}  // namespace strata

// Entry points of a plugin library. The factory writes a message into `error` (at most errorSize bytes,
// NUL-terminated) and returns nullptr when the strategy cannot be created.
#define STRATA_EXPORT_STRATEGY(ImplClass, pluginName, pluginVersion, pluginDescription)                             \
  extern "C" __attribute__((visibility("default"))) const ::strata::StrategyInfo* strata_strategy_info() noexcept { \
    static const ::strata::StrategyInfo info{pluginName, pluginVersion, pluginDescription,                          \
                                             ::strata::kStrategyAbiVersion};                                        \
    return &info;                                                                                                   \
  }                                                                                                                 \
  extern "C" __attribute__((visibility("default"))) ::strata::StrategyHandle* strata_create_strategy(               \
      char* error, std::size_t errorSize) noexcept {                                                                \
    try {                                                                                                           \
      return new ::strata::StrategyAdapter<ImplClass>();                                                            \
    } catch (const std::exception& e) {                                                                             \
      if (error != nullptr && errorSize > 0) {                                                                      \
        std::strncpy(error, e.what(), errorSize - 1);                                                               \
        error[errorSize - 1] = '\0';                                                                                \
      }                                                                                                             \
      return nullptr;                                                                                               \
    }                                                                                                               \
  }                                                                                                                 \
  extern "C" __attribute__((visibility("default"))) void strata_destroy_strategy(                                   \
      ::strata::StrategyHandle* handle) noexcept {                                                                  \
    delete handle;                                                                                                  \
  }
