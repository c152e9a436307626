#include "checkpoint.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "run_outputs.h"
#include "strata/error.h"
#include "strata/loaders/tensor_proto_io.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

void restore(const fs::path& file, const Tensor& destination, const std::string& what) {
  const NamedTensor loaded = readTensorProto(file);
  if (loaded.tensor.meta() != destination.meta()) {
    fail("{}: {} is {} in the checkpoint but {} in this model", file.string(), what, loaded.tensor.meta().toString(),
         destination.meta().toString());
  }
  Tensor(destination).copyFrom(loaded.tensor);
}

}  // namespace

void saveCheckpoint(const fs::path& dir, TrainingPlan& plan, const Optimizer& optimizer, const CheckpointState& state) {
  const fs::path temporary = dir.string() + ".tmp";
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  ParameterStore& store = plan.parameters();
  for (std::size_t i = 0; i < store.size(); ++i) {
    writeTensorProto(temporary / fmt::format("param_{}.pb", i), store.parameter(i), plan.parameterNames()[i]);
  }
  for (std::size_t b = 0; b < plan.buffers().size(); ++b) {
    writeTensorProto(temporary / fmt::format("buffer_{}.pb", b), plan.buffers()[b].second, plan.buffers()[b].first);
  }
  for (std::size_t k = 0; k < optimizer.stateBuffers().size(); ++k) {
    writeTensorProto(temporary / fmt::format("optimizer_{}.pb", k), optimizer.stateBuffers()[k],
                     fmt::format("optimizer_state_{}", k));
  }
  nlohmann::json json = {{"epochs_done", state.epochsDone},      {"steps", state.steps},
                         {"optimizer_steps", optimizer.steps()}, {"executor_runs", plan.executor().runCount()},
                         {"parameters", store.size()},           {"buffers", plan.buffers().size()}};
  if (const LossScaler* scaler = optimizer.lossScaler()) {
    const LossScalerState scaling = scaler->state();
    json["loss_scale"] = {{"scale", scaling.scale}, {"good_steps", scaling.goodSteps}, {"skipped", scaling.skipped}};
  }
  writeJsonAtomically(temporary / "state.json", json);
  fs::remove_all(dir);
  fs::rename(temporary, dir);
}

CheckpointState loadCheckpoint(const fs::path& dir, TrainingPlan& plan, Optimizer& optimizer) {
  const fs::path stateFile = dir / "state.json";
  std::ifstream in(stateFile);
  if (!in) {
    fail("{}: no checkpoint to resume from (run with --save to write one)", stateFile.string());
  }
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: corrupt checkpoint state: {}", stateFile.string(), e.what());
  }
  ParameterStore& store = plan.parameters();
  if (state.value("parameters", std::size_t{0}) != store.size() ||
      state.value("buffers", std::size_t{0}) != plan.buffers().size()) {
    fail("{}: the checkpoint has {} parameters and {} buffers but the model has {} and {}", stateFile.string(),
         state.value("parameters", 0), state.value("buffers", 0), store.size(), plan.buffers().size());
  }
  for (std::size_t i = 0; i < store.size(); ++i) {
    restore(dir / fmt::format("param_{}.pb", i), store.parameter(i), "parameter " + plan.parameterNames()[i]);
  }
  for (std::size_t b = 0; b < plan.buffers().size(); ++b) {
    restore(dir / fmt::format("buffer_{}.pb", b), plan.buffers()[b].second, "buffer " + plan.buffers()[b].first);
  }
  for (std::size_t k = 0; k < optimizer.stateBuffers().size(); ++k) {
    restore(dir / fmt::format("optimizer_{}.pb", k), optimizer.stateBuffers()[k], "optimizer state");
  }
  store.bumpVersion();
  optimizer.setSteps(state.at("optimizer_steps").get<std::int64_t>());
  // fp16 resumes with the scale it had; a checkpoint of another precision leaves the scaler at its start.
  if (LossScaler* scaler = optimizer.lossScaler(); scaler != nullptr && state.contains("loss_scale")) {
    try {
      const nlohmann::json& scaling = state.at("loss_scale");
      scaler->restore(LossScalerState{scaling.at("scale").get<double>(), scaling.at("good_steps").get<std::int64_t>(),
                                      scaling.at("skipped").get<std::int64_t>()});
    } catch (const nlohmann::json::exception& e) {
      fail("{}: corrupt loss_scale entry: {}", stateFile.string(), e.what());
    } catch (const Error& e) {
      fail("{}: {}", stateFile.string(), e.what());
    }
  }
  plan.executor().setRunCount(state.at("executor_runs").get<std::uint64_t>());
  return CheckpointState{state.at("epochs_done").get<std::int64_t>(), state.at("steps").get<std::int64_t>()};
}

}  // namespace strata::cli
