#include "compare/compare_results.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "compare/svg_chart.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

std::optional<nlohmann::json> readJson(const fs::path& file) {
  std::ifstream in(file);
  if (!in) {
    return std::nullopt;
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// Each line of a JSON-lines file that parses (a run killed mid-line leaves a partial last line).
std::vector<nlohmann::json> readJsonLines(const fs::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    try {
      lines.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
    }
  }
  return lines;
}

double number(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0.0;
}

nlohmann::json ratioError(const nlohmann::json& predicted, double measured) {
  return predicted.is_number() && measured > 0 ? nlohmann::json(predicted.get<double>() / measured - 1.0)
                                               : nlohmann::json(nullptr);
}

// The marginal step time: the median of the logged step times after the first log point (warm-up), else the
// mean over the run.
double measuredStepTime(const std::vector<nlohmann::json>& metrics, const nlohmann::json& summary) {
  std::vector<double> times;
  for (const nlohmann::json& m : metrics) {
    if (m.value("type", "") == "step" && m.contains("step_time_ms") && m["step_time_ms"].is_number()) {
      times.push_back(m["step_time_ms"].get<double>() / 1000.0);
    }
  }
  if (times.size() >= 3) {
    times.erase(times.begin());
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
  }
  const double steps = number(summary, "steps");
  return steps > 0 ? number(summary, "train_time_s") / steps : 0.0;
}

}  // namespace

nlohmann::json configurationResult(const CompareConfiguration& c, const RunState& state, const fs::path& runDir) {
  nlohmann::json r = {{"name", c.name},
                      {"label", c.label},
                      {"model", modelNameOf(c)},
                      {"model_path", c.model},
                      {"strategy", c.strategy},
                      {"strategy_options", c.strategyOptions},
                      {"world_size", c.worldSize},
                      {"train_args", c.trainArgs},
                      {"status", state.status},
                      {"reason", state.reason},
                      {"duration_s", state.durationS},
                      {"run_dir", runDir.string()}};
  const std::optional<nlohmann::json> summary = readJson(runDir / "summary.json");
  const std::vector<nlohmann::json> metrics = readJsonLines(runDir / "metrics.jsonl");
  // Note [Metrics]: the headline test figure of the run's task (accuracy, perplexity, mean IoU), named by its
  // summary.json; runs from before the field were classifiers.
  const std::string metric =
      summary && (*summary)["test_metric"].is_string() ? (*summary)["test_metric"].get<std::string>() : "accuracy";
  nlohmann::json loss = nlohmann::json::array();
  nlohmann::json accuracy = nlohmann::json::array();
  nlohmann::json metricCurve = nlohmann::json::array();
  for (const nlohmann::json& m : metrics) {
    if (m.value("type", "") == "step" && m["loss"].is_number()) {
      loss.push_back({m["step"], m["loss"]});
    } else if (m.value("type", "") == "epoch") {
      if (m.contains("test_accuracy") && m["test_accuracy"].is_number()) {
        accuracy.push_back({m["epoch"], m["test_accuracy"]});
      }
      if (m.contains("test_" + metric) && m["test_" + metric].is_number()) {
        metricCurve.push_back({m["epoch"], m["test_" + metric]});
      }
    }
  }
  r["loss_curve"] = loss;
  r["accuracy_curve"] = accuracy;
  r["test_metric"] = metric;
  r["metric_curve"] = metricCurve;
  r["metric_higher_is_better"] = metric != "perplexity" && metric != "loss";
  if (summary) {
    for (const char* key : {"train_time_s", "samples_per_s", "tokens_per_s", "steps", "epochs", "global_batch_size",
                            "final_train_loss", "test_accuracy", "params", "device", "task"}) {
      r[key] = summary->value(key, nlohmann::json(nullptr));
    }
    r["test_metric_value"] = summary->value("test_" + metric, nlohmann::json(nullptr));
    nlohmann::json ranks = nlohmann::json::array();
    double peak = 0;
    double trainingPeak = 0;
    double communication = 0;
    double collective = 0;
    double compute = 0;
    double communicationCpu = 0;
    double gradientBytesSent = 0;
    double gradientBytesUncompressed = 0;
    for (const nlohmann::json& rank : summary->value("ranks", nlohmann::json::array())) {
      ranks.push_back({{"rank", rank.value("rank", 0)},
                       {"peak_memory_bytes", rank.value("peak_memory_bytes", 0)},
                       {"training_peak_memory_bytes", rank.value("training_peak_memory_bytes", 0)},
                       {"memory_breakdown", rank.value("training_memory_breakdown", nlohmann::json::object())},
                       {"memory_at_peak", rank.value("training_memory_at_peak", nlohmann::json::object())},
                       {"compute_s", number(rank, "compute_s")},
                       {"communication_s", number(rank, "communication_s")},
                       {"collective_s", number(rank, "collective_s")},
                       {"communication_cpu_s", number(rank, "communication_cpu_s")},
                       {"gpu_utilization_mean", rank.value("gpu_utilization_mean", nlohmann::json(nullptr))}});
      peak = std::max(peak, number(rank, "peak_memory_bytes"));
      trainingPeak = std::max(trainingPeak, number(rank, "training_peak_memory_bytes"));
      communication += number(rank, "communication_s");
      collective += number(rank, "collective_s");
      compute += number(rank, "compute_s");
      communicationCpu += number(rank, "communication_cpu_s");
      gradientBytesSent += number(rank, "gradient_bytes_sent");
      gradientBytesUncompressed += number(rank, "gradient_bytes_uncompressed");
    }
    const double n = std::max<double>(1.0, static_cast<double>(ranks.size()));
    r["ranks"] = ranks;
    r["peak_memory_bytes"] = peak;
    r["training_peak_memory_bytes"] = trainingPeak;
    r["compute_s"] = compute / n;
    r["communication_s"] = communication / n;
    r["collective_s"] = collective / n;
    r["communication_cpu_s"] = communicationCpu / n;  // what moving the bytes cost in CPU (Note [Thread names])
    // The gradients' bytes a rank handed to collectives per step, and the compression ratio they measure (strategies
    // that report them: ddp; docs/compression.md).
    const double steps = number(*summary, "steps");
    r["gradient_bytes_per_step"] =
        gradientBytesUncompressed > 0 && steps > 0 ? nlohmann::json(gradientBytesSent / n / steps) : nullptr;
    r["compression_ratio"] =
        gradientBytesUncompressed > 0 ? nlohmann::json(gradientBytesSent / gradientBytesUncompressed) : nullptr;
    // communication_s is the time a rank waited; collective_s the time the collectives ran (strategies that
    // overlap report both): what ran and was not waited for was hidden behind compute.
    r["hidden_communication"] =
        collective > 0 ? nlohmann::json(std::clamp(1.0 - communication / collective, 0.0, 1.0)) : nullptr;
    r["step_time_s"] = measuredStepTime(metrics, *summary);
    // The strategy's own processes (parameter servers): their memory is no rank's (Note [Role figures]).
    nlohmann::json servers = nlohmann::json::array();
    double serverPeak = 0;
    double serverResident = 0;
    for (const nlohmann::json& server : summary->value("servers", nlohmann::json::array())) {
      servers.push_back({{"role", server.value("role", std::string())},
                         {"index", server.value("index", 0)},
                         {"peak_memory_bytes", server.value("peak_memory_bytes", nlohmann::json(nullptr))},
                         {"memory_breakdown", server.value("memory_breakdown", nlohmann::json::object())},
                         {"resident_peak_bytes", server.value("resident_peak_bytes", nlohmann::json(nullptr))}});
      serverPeak = std::max(serverPeak, number(server, "peak_memory_bytes"));
      serverResident = std::max(serverResident, number(server, "resident_peak_bytes"));
    }
    r["servers"] = servers;
    r["server_peak_memory_bytes"] = servers.empty() ? nlohmann::json(nullptr) : nlohmann::json(serverPeak);
    r["server_resident_peak_bytes"] = servers.empty() ? nlohmann::json(nullptr) : nlohmann::json(serverResident);
  }
  nlohmann::json series = nlohmann::json::object();
  for (int rank = 0; rank < c.worldSize; ++rank) {
    nlohmann::json memory = nlohmann::json::array();
    nlohmann::json cpu = nlohmann::json::array();
    nlohmann::json gpu = nlohmann::json::array();
    for (const nlohmann::json& s : readJsonLines(runDir / "timeseries" / fmt::format("rank-{}.jsonl", rank))) {
      memory.push_back({s["t_s"], s["memory_bytes"]});
      cpu.push_back({s["t_s"], s["cpu_utilization"]});
      if (s["gpu_utilization"].is_number()) {
        gpu.push_back({s["t_s"], s["gpu_utilization"]});
      }
    }
    series[std::to_string(rank)] = {{"memory_bytes", memory}, {"cpu_utilization", cpu}, {"gpu_utilization", gpu}};
  }
  r["timeseries"] = series;
  nlohmann::json prediction = nullptr;
  if (const std::optional<nlohmann::json> plan = readJson(runDir / "plan.json")) {
    const nlohmann::json configurations = plan->value("configurations", nlohmann::json::array());
    if (!configurations.empty()) {
      const nlohmann::json& p = configurations.front();
      prediction = {{"peak_memory_bytes", p.value("peak_memory_bytes", nlohmann::json(nullptr))},
                    {"step_time_s", p.value("step_time_s", nlohmann::json(nullptr))},
                    {"fits", p.value("fits", nlohmann::json(nullptr))},
                    {"memory_at_peak", p.value("memory_at_peak", nlohmann::json(nullptr))}};
      if (summary) {
        prediction["memory_error"] = ratioError(prediction["peak_memory_bytes"], r["training_peak_memory_bytes"]);
        prediction["step_time_error"] = ratioError(prediction["step_time_s"], r["step_time_s"]);
      }
    }
  }
  r["prediction"] = prediction;
  return r;
}

void markParetoFronts(nlohmann::json& results) {
  std::map<std::string, std::vector<std::size_t>> byModel;
  for (std::size_t i = 0; i < results.size(); ++i) {
    nlohmann::json& r = results[i];
    r["pareto_front"] = false;
    if (r["status"] == "done" && r.value("train_time_s", nlohmann::json()).is_number()) {
      byModel[r["model"].get<std::string>()].push_back(i);
    }
  }
  for (const auto& [model, members] : byModel) {
    std::vector<std::pair<double, double>> points;
    for (const std::size_t i : members) {
      points.emplace_back(results[i]["train_time_s"].get<double>(),
                          results[i]["training_peak_memory_bytes"].get<double>());
    }
    for (const std::size_t k : paretoFront(points)) {
      results[members[k]]["pareto_front"] = true;
    }
  }
}

nlohmann::json comparisonResults(const ComparisonRunner& runner) {
  nlohmann::json results = nlohmann::json::array();
  for (std::size_t i = 0; i < runner.configurations().size(); ++i) {
    const CompareConfiguration& c = runner.configurations()[i];
    results.push_back(configurationResult(c, runner.states()[i], runner.runDir(c)));
  }
  markParetoFronts(results);
  return results;
}

}  // namespace strata::cli
