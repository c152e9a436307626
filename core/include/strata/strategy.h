#pragma once

// Strata's strategy SDK: what a distributed-training strategy plugin implements and what it may use.
// A plugin is a shared library exporting the entry points declared by STRATA_EXPORT_STRATEGY (extern "C",
// noexcept). The host checks the ABI version first; errors cross the library boundary as messages, never as
// exceptions; every Strategy object is destroyed by its own library before the library is unloaded.

#include <cstddef>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "strata/comm/process_group.h"
#include "strata/executor.h"
#include "strata/optim/optimizer.h"
#include "strata/optim/parameter_store.h"

namespace strata {

// Bumped whenever a type in this header (or one it includes) changes layout or meaning.
inline constexpr int kStrategyAbiVersion = 1;

struct StrategyInfo {
  const char* name;
  const char* version;
  const char* description;
  int abiVersion;
};

// What the trainer hands a strategy. The strategy never builds its own process group.
class StrategyContext {
 public:
  virtual ~StrategyContext() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  // Trainable parameters and gradients in flat buffers (every parameter a view).
  virtual ParameterStore& parameters() = 0;
  // Buffers that are not trained but must agree across ranks (batch-norm running statistics).
  virtual std::vector<Tensor> buffers() = 0;
  // Node hooks (before/after each forward and backward node) and gradient-ready hooks of the training plan.
  virtual Executor& executor() = 0;
  virtual Optimizer& optimizer() = 0;
  // The job's process group; nullptr in a single-process run.
  virtual ProcessGroup* processGroup() = 0;
  // --strategy-opt key=value pairs; a strategy rejects keys it does not know.
  virtual const std::map<std::string, std::string>& options() const = 0;
  // Micro-batches per optimizer step (--grad-accum).
  virtual int gradAccumulation() const = 0;
  // Adds to a per-rank figure reported in summary.json (e.g. "communication_s").
  virtual void addFigure(const std::string& key, double value) = 0;
};

// A distribution strategy: hooks around forward, backward and step. Implementations throw strata::Error (or any
// std::exception) on failure; StrategyAdapter turns that into a message at the library boundary.
class Strategy {
 public:
  virtual ~Strategy() = default;
  // Once, before training: broadcast parameters, build buckets, install hooks on context.executor().
  virtual void setup(StrategyContext& context) = 0;
  // Before the forward pass of micro-batch `micro` (0-based); `last` when the optimizer steps after it.
  virtual void beforeForward(int /*micro*/, bool /*last*/) {}
  // After the backward pass of a micro-batch: wait for communication that must finish before the step.
  virtual void afterBackward(int /*micro*/, bool /*last*/) {}
  // Applies the update (the local optimizer for DDP) with learning rate lr.
  virtual void step(double lr) = 0;
  // Removes hooks; called before destruction (destructors must also remove them).
  virtual void teardown() {}
};

// The boundary the host calls: every method catches and returns an error message ("" on success).
class StrategyHandle {
 public:
  virtual ~StrategyHandle() = default;
  virtual std::string setup(StrategyContext& context) noexcept = 0;
  virtual std::string beforeForward(int micro, bool last) noexcept = 0;
  virtual std::string afterBackward(int micro, bool last) noexcept = 0;
  virtual std::string step(double lr) noexcept = 0;
  virtual std::string teardown() noexcept = 0;
};

// Compiled into the plugin (through STRATA_EXPORT_STRATEGY), so the try/catch runs in the plugin's own code.
template <typename Impl>
class StrategyAdapter final : public StrategyHandle {
 public:
  std::string setup(StrategyContext& context) noexcept override {
    return guard([&] { impl_.setup(context); });
  }
  std::string beforeForward(int micro, bool last) noexcept override {
    return guard([&] { impl_.beforeForward(micro, last); });
  }
  std::string afterBackward(int micro, bool last) noexcept override {
    return guard([&] { impl_.afterBackward(micro, last); });
  }
  std::string step(double lr) noexcept override {
    return guard([&] { impl_.step(lr); });
  }
  std::string teardown() noexcept override {
    return guard([&] { impl_.teardown(); });
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
