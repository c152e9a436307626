#include "compare/compare_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compare/svg_chart.h"
#include "strata/error.h"
#include "strata/memory_category.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

struct Table {
  Table(std::string t, std::string n) : title(std::move(t)), note(std::move(n)) {}
  std::string title;
  std::string note;
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

struct Figure {
  std::string title;
  std::string file;  // under figures/
  std::string svg;
};

std::string mib(double bytes) {
  return fmt::format("{:.1f}", bytes / (1024.0 * 1024.0));
}

std::string orDash(const nlohmann::json& value, const std::string& format = "{:.2f}", double scale = 1.0) {
  if (!value.is_number()) {
    return "-";
  }
  return fmt::format(fmt::runtime(format), value.get<double>() * scale);
}

std::string percentError(const nlohmann::json& prediction, const char* key) {
  if (!prediction.is_object() || !prediction.contains(key) || !prediction[key].is_number()) {
    return "-";
  }
  return fmt::format("{:+.1f}%", 100.0 * prediction[key].get<double>());
}

// A rank's communication threads' CPU seconds as a share of one core over the training time; null without figures.
nlohmann::json communicationCpuShare(const nlohmann::json& r) {
  const nlohmann::json cpu = r.value("communication_cpu_s", nlohmann::json());
  const nlohmann::json time = r.value("train_time_s", nlohmann::json());
  if (!cpu.is_number() || !time.is_number() || time.get<double>() <= 0) {
    return nullptr;
  }
  return cpu.get<double>() / time.get<double>();
}

bool done(const nlohmann::json& r) {
  return r["status"] == "done";
}

// "0.59 (1.4%)": the gradient MiB a rank sent per step and their share of an uncompressed all-reduce's; "-" for
// strategies that do not report them.
std::string gradientBytesCell(const nlohmann::json& r) {
  const nlohmann::json bytes = r.value("gradient_bytes_per_step", nlohmann::json());
  const nlohmann::json ratio = r.value("compression_ratio", nlohmann::json());
  if (!bytes.is_number() || !ratio.is_number()) {
    return "-";
  }
  return fmt::format("{:.2f} ({:.1f}%)", bytes.get<double>() / (1 << 20), 100.0 * ratio.get<double>());
}

std::string configTitle(const nlohmann::json& r) {
  return fmt::format("{}, {} rank{}", r["label"].get<std::string>(), r["world_size"].get<int>(),
                     r["world_size"].get<int>() == 1 ? "" : "s");
}

std::vector<std::string> modelsOf(const nlohmann::json& results) {
  std::vector<std::string> models;
  for (const nlohmann::json& r : results) {
    const std::string m = r["model"];
    if (std::find(models.begin(), models.end(), m) == models.end()) {
      models.push_back(m);
    }
  }
  return models;
}

// The configurations as the study's tables have them: strategy and world size, whatever the model.
std::vector<std::pair<std::string, int>> setupsOf(const nlohmann::json& results) {
  std::vector<std::pair<std::string, int>> setups;
  for (const nlohmann::json& r : results) {
    const std::pair<std::string, int> s{r["label"], r["world_size"]};
    if (std::find(setups.begin(), setups.end(), s) == setups.end()) {
      setups.push_back(s);
    }
  }
  return setups;
}

const nlohmann::json* find(const nlohmann::json& results, const std::string& model,
                           const std::pair<std::string, int>& s) {
  for (const nlohmann::json& r : results) {
    if (r["model"] == model && r["label"] == s.first && r["world_size"] == s.second) {
      return &r;
    }
  }
  return nullptr;
}

std::string timeCell(const nlohmann::json* r) {
  if (r == nullptr)
    return "";
  return done(*r) ? orDash((*r)["train_time_s"]) : "failed";
}

// Note [Metrics]: each run's headline test figure is its task's (accuracy, perplexity, mean IoU); shares are shown
// in percent, other figures as they are.
std::string metricOf(const nlohmann::json& r) {
  return r.contains("test_metric") && r["test_metric"].is_string() ? r["test_metric"].get<std::string>() : "accuracy";
}

bool isShare(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric == "mean_iou";
}

// "acc. (%)", "perplexity", "mean IoU (%)": a column header for a metric.
std::string metricHeader(const std::string& metric) {
  if (metric == "accuracy")
    return "acc. (%)";
  if (metric == "mean_iou")
    return "mean IoU (%)";
  std::string words = metric;
  std::replace(words.begin(), words.end(), '_', ' ');
  return isShare(metric) ? words + " (%)" : words;
}

std::string metricValue(const nlohmann::json& r) {
  const std::string metric = metricOf(r);
  const nlohmann::json value =
      r.contains("test_metric_value") ? r["test_metric_value"] : r.value("test_accuracy", nlohmann::json());
  return isShare(metric) ? orDash(value, "{:.2f}", 100.0) : orDash(value, "{:.3f}");
}

std::string metricCell(const nlohmann::json* r) {
  if (r == nullptr)
    return "";
  return done(*r) ? metricValue(*r) : "failed";
}

// The metric of a model's runs (the first run's: one model, one task).
std::string metricOfModel(const nlohmann::json& results, const std::string& model) {
  for (const nlohmann::json& r : results) {
    if (r["model"] == model)
      return metricOf(r);
  }
  return "accuracy";
}

std::vector<Table> tables(const nlohmann::json& results) {
  std::vector<Table> out;
  const std::vector<std::string> models = modelsOf(results);
  const auto setups = setupsOf(results);
  {
    Table t("Training time in seconds (the study's Table II form)",
            "train_time_s of each run's summary.json: the training loop, evaluation excluded.");
    t.headers = {"configuration"};
    t.headers.insert(t.headers.end(), models.begin(), models.end());
    for (const auto& s : setups) {
      std::vector<std::string> row = {fmt::format("{}, {} rank(s)", s.first, s.second)};
      for (const std::string& m : models) {
        row.push_back(timeCell(find(results, m, s)));
      }
      t.rows.push_back(row);
    }
    out.push_back(t);
  }
  {
    Table t("Time and accuracy (the study's Tables III/IV form)",
            "Training time (s) and the test figure after the last epoch, on the whole test split: accuracy for "
            "classifiers, perplexity for language models (lower is better), mean IoU for segmentation.");
    t.headers = {"configuration"};
    for (const std::string& m : models) {
      t.headers.push_back(m + " time (s)");
      t.headers.push_back(m + " " + metricHeader(metricOfModel(results, m)));
    }
    for (const auto& s : setups) {
      std::vector<std::string> row = {fmt::format("{}, {} rank(s)", s.first, s.second)};
      for (const std::string& m : models) {
        row.push_back(timeCell(find(results, m, s)));
        row.push_back(metricCell(find(results, m, s)));
      }
      t.rows.push_back(row);
    }
    out.push_back(t);
  }
  {
    Table t(
        "Every configuration",
        "Peak: the most any rank held during training steps (Strata's allocator, by category below). "
        "Comm.: the mean time a rank waited for communication; hidden: the share of the collectives' "
        "running time that overlapped compute; comm. CPU: the CPU a rank's communication threads used, as a share of "
        "one core over the training time (on the CPU they share the cores with the compute). Predicted: `strata plan` "
        "before the run, with its error against the measurement (step time: the median logged step after the first "
        "log point). Grad. MiB/step: the gradients' bytes a rank handed to collectives per step, and their share of "
        "an uncompressed all-reduce's (docs/compression.md).");
    t.headers = {
        "model",       "configuration",       "status",    "time (s)", "samples/s", "step (ms)",      "final loss",
        "test metric", "peak/rank MiB",       "comm. (s)", "hidden",   "comm. CPU", "grad. MiB/step", "predicted MiB",
        "mem. error",  "predicted step (ms)", "step error"};
    for (const nlohmann::json& r : results) {
      const nlohmann::json& p = r["prediction"];
      t.rows.push_back(
          {r["model"], configTitle(r), r["status"], orDash(r.value("train_time_s", nlohmann::json()), "{:.1f}"),
           orDash(r.value("samples_per_s", nlohmann::json()), "{:.0f}"),
           orDash(r.value("step_time_s", nlohmann::json()), "{:.1f}", 1000.0),
           orDash(r.value("final_train_loss", nlohmann::json()), "{:.4f}"),
           done(r) ? fmt::format("{} {}", metricHeader(metricOf(r)), metricValue(r)) : "-",
           orDash(r.value("training_peak_memory_bytes", nlohmann::json()), "{:.1f}", 1.0 / (1 << 20)),
           orDash(r.value("communication_s", nlohmann::json()), "{:.2f}"),
           orDash(r.value("hidden_communication", nlohmann::json()), "{:.0f}%", 100.0),
           orDash(communicationCpuShare(r), "{:.0f}%", 100.0), gradientBytesCell(r),
           p.is_object() ? orDash(p["peak_memory_bytes"], "{:.1f}", 1.0 / (1 << 20)) : "-",
           percentError(p, "memory_error"), p.is_object() ? orDash(p["step_time_s"], "{:.1f}", 1000.0) : "-",
           percentError(p, "step_time_error")});
    }
    out.push_back(t);
  }
  {
    Table t("Peak memory per process by category (MiB)",
            "Ranks: each category's training peak on the rank that held the most of it. Servers: the strategy's own "
            "processes (parameter servers: their key ranges, optimizer state and receive buffers), which no rank's "
            "figure includes; each category's peak on the server that held the most of it, and the largest resident "
            "set (peak RSS) among them.");
    t.headers = {"model", "configuration", "processes"};
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      t.headers.emplace_back(memoryCategoryName(static_cast<MemoryCategory>(c)));
    }
    t.headers.emplace_back("resident peak");
    for (const nlohmann::json& r : results) {
      if (!done(r))
        continue;
      const nlohmann::json servers = r.value("servers", nlohmann::json::array());
      for (const auto& [kind, members] : {std::pair<std::string, nlohmann::json>{"ranks", r["ranks"]},
                                          std::pair<std::string, nlohmann::json>{"servers", servers}}) {
        if (members.empty())
          continue;
        std::vector<std::string> row = {r["model"], configTitle(r), fmt::format("{} ({})", kind, members.size())};
        for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
          const std::string name(memoryCategoryName(static_cast<MemoryCategory>(c)));
          double most = 0;
          for (const nlohmann::json& member : members) {
            most = std::max(most, member["memory_breakdown"].value(name, 0.0));
          }
          row.push_back(mib(most));
        }
        // Resident sets are measured for the servers only (the ranks' memory over time is in the figures).
        row.push_back(kind == "servers"
                          ? orDash(r.value("server_resident_peak_bytes", nlohmann::json()), "{:.1f}", 1.0 / (1 << 20))
                          : "-");
        t.rows.push_back(row);
      }
    }
    out.push_back(t);
  }
  {
    Table t("What the training peak is made of (MiB, measured / predicted)",
            "Each category at the moment of the total training peak, on the rank with the largest peak, beside what "
            "`strata plan` predicted for that moment: where a prediction misses, the category that differs is the "
            "one it did not expect alive (a collective's buffer, a gathered unit).");
    t.headers = {"model", "configuration"};
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      t.headers.emplace_back(memoryCategoryName(static_cast<MemoryCategory>(c)));
    }
    for (const nlohmann::json& r : results) {
      const nlohmann::json ranks = r.value("ranks", nlohmann::json::array());
      if (!done(r) || ranks.empty())
        continue;
      const auto largest = std::max_element(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) {
        return a.value("training_peak_memory_bytes", 0.0) < b.value("training_peak_memory_bytes", 0.0);
      });
      const nlohmann::json measured = largest->value("memory_at_peak", nlohmann::json::object());
      const nlohmann::json& p = r["prediction"];
      const nlohmann::json predicted =
          p.is_object() && p.value("memory_at_peak", nlohmann::json()).is_object() ? p["memory_at_peak"] : nullptr;
      std::vector<std::string> row = {r["model"], configTitle(r)};
      for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
        const std::string name(memoryCategoryName(static_cast<MemoryCategory>(c)));
        const std::string m = measured.contains(name) ? mib(measured[name].get<double>()) : "-";
        row.push_back(predicted.is_object() && predicted.contains(name)
                          ? fmt::format("{} / {}", m, mib(predicted[name].get<double>()))
                          : m);
      }
      t.rows.push_back(row);
    }
    out.push_back(t);
  }
  Table failed("Failed configurations", "Rerun them with `strata compare --resume OUT`.");
  failed.headers = {"configuration", "model", "after (s)", "reason", "log"};
  for (const nlohmann::json& r : results) {
    if (!done(r)) {
      failed.rows.push_back({configTitle(r), r["model"], fmt::format("{:.1f}", r["duration_s"].get<double>()),
                             r["status"] == "failed" ? r["reason"].get<std::string>() : "not run",
                             (fs::path(r["run_dir"].get<std::string>()) / "train.log").string()});
    }
  }
  if (!failed.rows.empty()) {
    out.push_back(failed);
  }
  return out;
}

std::vector<std::pair<double, double>> pointsOf(const nlohmann::json& pairs) {
  std::vector<std::pair<double, double>> points;
  for (const nlohmann::json& p : pairs) {
    if (p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number()) {
      points.emplace_back(p[0].get<double>(), p[1].get<double>());
    }
  }
  return points;
}

std::vector<Figure> figures(const nlohmann::json& results) {
  std::vector<Figure> out;
  std::vector<ChartSeries> loss;
  std::map<std::string, std::vector<ChartSeries>> byMetric;  // one chart per task's metric
  for (const nlohmann::json& r : results) {
    const std::string name = fmt::format("{} ({})", configTitle(r), r["model"].get<std::string>());
    loss.push_back({name, pointsOf(r["loss_curve"])});
    const std::string metric = metricOf(r);
    std::vector<std::pair<double, double>> curve =
        pointsOf(r.contains("metric_curve") ? r["metric_curve"] : r["accuracy_curve"]);
    for (auto& [epoch, value] : curve) {
      epoch += 1;  // after epoch 1, 2, ...
      value *= isShare(metric) ? 100 : 1;
    }
    byMetric[metric].push_back({name, curve});
  }
  out.push_back({"Training loss", "loss.svg",
                 svgLineChart({.title = "Training loss (logged steps)", .xLabel = "step", .yLabel = "loss"}, loss)});
  for (const auto& [metric, series] : byMetric) {
    std::string words = metric;
    std::replace(words.begin(), words.end(), '_', ' ');
    const std::string title = metric == "accuracy" ? "Test accuracy" : "Test " + words;
    out.push_back(
        {title, metric + ".svg",
         svgLineChart(
             {.title = title + " after each epoch", .xLabel = "epoch", .yLabel = isShare(metric) ? "%" : words},
             series)});
  }
  // One scatter per model: a front across models would compare unlike work.
  for (const std::string& model : modelsOf(results)) {
    std::vector<std::pair<std::string, std::pair<double, double>>> scatter;
    std::vector<std::size_t> front;
    for (const nlohmann::json& r : results) {
      if (r["model"] == model && done(r) && r["train_time_s"].is_number()) {
        if (r.value("pareto_front", false)) {
          front.push_back(scatter.size());
        }
        scatter.push_back(
            {configTitle(r),
             {r["train_time_s"].get<double>(), r["training_peak_memory_bytes"].get<double>() / (1 << 20)}});
      }
    }
    std::sort(front.begin(), front.end(),
              [&](std::size_t a, std::size_t b) { return scatter[a].second < scatter[b].second; });
    out.push_back(
        {"Time and memory: " + model, fmt::format("pareto-{}.svg", model),
         svgScatter({.title = model + ": training time vs peak memory per rank (* and dashed: the Pareto front)",
                     .xLabel = "training time (s)",
                     .yLabel = "peak MiB per rank"},
                    scatter, front)});
  }
  for (const nlohmann::json& r : results) {
    std::vector<ChartSeries> memory;
    std::vector<ChartSeries> cpu;
    std::vector<ChartSeries> gpu;
    for (const auto& [rank, series] : r["timeseries"].items()) {
      std::vector<std::pair<double, double>> m = pointsOf(series["memory_bytes"]);
      for (auto& p : m)
        p.second /= (1 << 20);
      memory.push_back({"rank " + rank, m});
      cpu.push_back({"rank " + rank, pointsOf(series["cpu_utilization"])});
      if (!series["gpu_utilization"].empty()) {
        gpu.push_back({"rank " + rank, pointsOf(series["gpu_utilization"])});
      }
    }
    const std::string title = fmt::format("{} ({})", configTitle(r), r["model"].get<std::string>());
    out.push_back(
        {"Memory over time: " + title, fmt::format("memory-{}.svg", r["name"].get<std::string>()),
         svgLineChart({.title = "Memory held by Strata's allocator: " + title, .xLabel = "seconds", .yLabel = "MiB"},
                      memory)});
    out.push_back(
        {"CPU utilisation over time: " + title, fmt::format("cpu-{}.svg", r["name"].get<std::string>()),
         svgLineChart({.title = "CPU utilisation (100 = one core): " + title, .xLabel = "seconds", .yLabel = "%"},
                      cpu)});
    if (!gpu.empty()) {
      out.push_back(
          {"GPU utilisation over time: " + title, fmt::format("gpu-{}.svg", r["name"].get<std::string>()),
           svgLineChart({.title = "GPU utilisation (NVML): " + title, .xLabel = "seconds", .yLabel = "%"}, gpu)});
    }
  }
  return out;
}

// The answer in words, per model: fastest, least memory, most accurate, and what the fastest costs in memory.
std::vector<std::string> answer(const nlohmann::json& results) {
  std::vector<std::string> lines;
  for (const std::string& model : modelsOf(results)) {
    std::vector<const nlohmann::json*> ok;
    for (const nlohmann::json& r : results) {
      if (r["model"] == model && done(r) && r["train_time_s"].is_number())
        ok.push_back(&r);
    }
    if (ok.empty()) {
      lines.push_back(fmt::format("**{}**: no configuration finished.", model));
      continue;
    }
    const auto by = [&](const char* key) {
      return
          [key](const nlohmann::json* a, const nlohmann::json* b) { return a->value(key, 0.0) < b->value(key, 0.0); };
    };
    const nlohmann::json& fastest = **std::min_element(ok.begin(), ok.end(), by("train_time_s"));
    const nlohmann::json& leanest = **std::min_element(ok.begin(), ok.end(), by("training_peak_memory_bytes"));
    // The best by the task's metric: the highest accuracy or mean IoU, the lowest perplexity.
    const std::string metric = metricOf(*ok.front());
    const bool higher = ok.front()->value("metric_higher_is_better", true);
    const auto valueOf = [&](const nlohmann::json* r) {
      const nlohmann::json& v = r->contains("test_metric_value") ? (*r)["test_metric_value"] : (*r)["test_accuracy"];
      return v.is_number() ? v.get<double>() : (higher ? -1e300 : 1e300);
    };
    const auto worse = [&](const nlohmann::json* a, const nlohmann::json* b) {
      return higher ? valueOf(a) < valueOf(b) : valueOf(a) > valueOf(b);
    };
    const nlohmann::json& best = **std::max_element(ok.begin(), ok.end(), worse);
    const nlohmann::json& worst = **std::min_element(ok.begin(), ok.end(), worse);
    const double tolerance = isShare(metric) ? 0.0005 : 0.0005 * std::abs(valueOf(&best));
    const bool same = std::abs(valueOf(&best) - valueOf(&worst)) < tolerance;
    const std::string unit = isShare(metric) ? " %" : "";
    std::string words = metric;
    std::replace(words.begin(), words.end(), '_', ' ');
    const std::string accuracy =
        ok.size() > 1 && same
            ? fmt::format("{}: the same in every configuration ({}{})", words, metricValue(best), unit)
            : fmt::format(
                  "{}: {} ({}{})",
                  metric == "accuracy" ? std::string("most accurate") : (higher ? "highest " : "lowest ") + words,
                  configTitle(best), metricValue(best), unit);
    std::string text = fmt::format(
        "**{}**: fastest: {} ({:.1f} s, {} MiB per rank); least memory: {} ({} MiB per rank, {:.1f} s); {}.", model,
        configTitle(fastest), fastest["train_time_s"].get<double>(),
        mib(fastest["training_peak_memory_bytes"].get<double>()), configTitle(leanest),
        mib(leanest["training_peak_memory_bytes"].get<double>()), leanest["train_time_s"].get<double>(), accuracy);
    const double fastestBytes = fastest["training_peak_memory_bytes"].get<double>();
    const double leanestBytes = leanest["training_peak_memory_bytes"].get<double>();
    if (&fastest != &leanest && leanestBytes < 0.99 * fastestBytes) {
      const double memorySaved = 1.0 - leanestBytes / fastestBytes;
      text += fmt::format(" The trade-off: {} needs {:.0f}% less memory per rank than {} and takes {:.2f}x its time.",
                          configTitle(leanest), 100.0 * memorySaved, configTitle(fastest),
                          leanest["train_time_s"].get<double>() / fastest["train_time_s"].get<double>());
    } else {
      text +=
          fmt::format(" {} is the fastest and needs no more memory than any other (within 1%).", configTitle(fastest));
    }
    std::vector<std::string> front;
    for (const nlohmann::json* r : ok) {
      if (r->value("pareto_front", false)) {
        front.push_back(configTitle(*r));
      }
    }
    text += fmt::format(" On the time/memory Pareto front (nothing else both faster and leaner): {}.",
                        fmt::join(front, "; "));
    lines.push_back(text);
  }
  return lines;
}

std::string markdownCell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  }
  return out;
}

std::string markdown(const nlohmann::json& host, const std::vector<std::string>& words, const std::vector<Table>& ts,
                     const std::vector<Figure>& fs) {
  std::string md = "# Strata comparison\n\n";
  md += fmt::format("Host: {}\n\n## The answer\n\n", host.value("description", std::string("unknown")));
  for (const std::string& w : words)
    md += "- " + w + "\n";
  for (const Table& t : ts) {
    md += fmt::format("\n## {}\n\n{}\n\n| {} |\n|{}\n", t.title, t.note, fmt::join(t.headers, " | "), [&] {
      std::string s;
      for (std::size_t i = 0; i < t.headers.size(); ++i)
        s += " --- |";
      return s;
    }());
    for (const auto& row : t.rows) {
      std::vector<std::string> cells;
      for (const std::string& c : row)
        cells.push_back(markdownCell(c));
      md += fmt::format("| {} |\n", fmt::join(cells, " | "));
    }
  }
  md += "\n## Figures\n\n";
  for (const Figure& f : fs)
    md += fmt::format("![{}](figures/{})\n\n", f.title, f.file);
  md += "Every figure is in results.json and results.csv.\n";
  return md;
}

std::string html(const nlohmann::json& host, const std::vector<std::string>& words, const std::vector<Table>& ts,
                 const std::vector<Figure>& fs) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Strata comparison</title><style>"
      "body{font-family:sans-serif;margin:2em;max-width:1400px;color:#222}table{border-collapse:collapse;"
      "margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}"
      "td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}.note{color:#555;font-size:13px}"
      "figure{display:inline-block;margin:0.5em}</style></head><body>\n<h1>Strata comparison</h1>\n";
  h += fmt::format("<p class=\"note\">Host: {}</p>\n<h2>The answer</h2><ul>\n",
                   escapeXml(host.value("description", std::string("unknown"))));
  for (std::string w : words) {
    // **bold** from the markdown answer
    std::string out;
    bool open = false;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (w.compare(i, 2, "**") == 0) {
        out += open ? "</b>" : "<b>";
        open = !open;
        ++i;
      } else {
        out += escapeXml(std::string(1, w[i]));
      }
    }
    h += "<li>" + out + "</li>\n";
  }
  h += "</ul>\n";
  for (const Table& t : ts) {
    h += fmt::format("<h2>{}</h2><p class=\"note\">{}</p><table><tr>", escapeXml(t.title), escapeXml(t.note));
    for (const std::string& c : t.headers)
      h += "<th>" + escapeXml(c) + "</th>";
    h += "</tr>\n";
    for (const auto& row : t.rows) {
      h += "<tr>";
      for (const std::string& c : row)
        h += "<td>" + escapeXml(c) + "</td>";
      h += "</tr>\n";
    }
    h += "</table>\n";
  }
  h += "<h2>Figures</h2>\n";
  for (const Figure& f : fs)
    h += "<figure>" + f.svg + "</figure>\n";
  h += "<p class=\"note\">Every figure is in results.json and results.csv beside this file.</p></body></html>\n";
  return h;
}

std::string csvField(const nlohmann::json& v) {
  std::string text = v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : v.dump();
  if (text.find_first_of(",\"\n") != std::string::npos) {
    std::string quoted = "\"";
    for (const char c : text)
      quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  }
  return text;
}

std::string csv(const nlohmann::json& results) {
  const std::vector<std::string> columns = {"name",
                                            "model",
                                            "label",
                                            "strategy",
                                            "world_size",
                                            "status",
                                            "reason",
                                            "duration_s",
                                            "train_time_s",
                                            "samples_per_s",
                                            "steps",
                                            "step_time_s",
                                            "final_train_loss",
                                            "test_accuracy",
                                            "test_metric",
                                            "test_metric_value",
                                            "tokens_per_s",
                                            "peak_memory_bytes",
                                            "training_peak_memory_bytes",
                                            "compute_s",
                                            "communication_s",
                                            "collective_s",
                                            "hidden_communication",
                                            "communication_cpu_s",
                                            "gradient_bytes_per_step",
                                            "compression_ratio"};
  std::string out = fmt::format("{},predicted_peak_memory_bytes,memory_error,predicted_step_time_s,step_time_error",
                                fmt::join(columns, ","));
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    out += fmt::format(",peak_{}_bytes", memoryCategoryName(static_cast<MemoryCategory>(c)));
  }
  // The parameter servers' own memory (empty without servers): the most any server held, by category.
  out += ",servers,server_peak_memory_bytes,server_resident_peak_bytes";
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    out += fmt::format(",server_peak_{}_bytes", memoryCategoryName(static_cast<MemoryCategory>(c)));
  }
  out += "\n";
  for (const nlohmann::json& r : results) {
    std::vector<std::string> cells;
    for (const std::string& c : columns)
      cells.push_back(csvField(r.value(c, nlohmann::json(nullptr))));
    const nlohmann::json& p = r["prediction"];
    for (const char* key : {"peak_memory_bytes", "memory_error", "step_time_s", "step_time_error"}) {
      cells.push_back(csvField(p.is_object() ? p.value(key, nlohmann::json(nullptr)) : nlohmann::json(nullptr)));
    }
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      const std::string name(memoryCategoryName(static_cast<MemoryCategory>(c)));
      double most = 0;
      for (const nlohmann::json& rank : r.value("ranks", nlohmann::json::array())) {
        most = std::max(most, rank["memory_breakdown"].value(name, 0.0));
      }
      cells.push_back(done(r) ? fmt::format("{:.0f}", most) : "");
    }
    const nlohmann::json servers = r.value("servers", nlohmann::json::array());
    const bool withServers = done(r) && !servers.empty();
    cells.push_back(withServers ? std::to_string(servers.size()) : "");
    cells.push_back(withServers ? csvField(r.value("server_peak_memory_bytes", nlohmann::json(nullptr))) : "");
    cells.push_back(withServers ? csvField(r.value("server_resident_peak_bytes", nlohmann::json(nullptr))) : "");
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      const std::string name(memoryCategoryName(static_cast<MemoryCategory>(c)));
      double most = 0;
      for (const nlohmann::json& server : servers) {
        most = std::max(most, server["memory_breakdown"].value(name, 0.0));
      }
      cells.push_back(withServers ? fmt::format("{:.0f}", most) : "");
    }
    out += fmt::format("{}\n", fmt::join(cells, ","));
  }
  return out;
}

void writeText(const fs::path& file, const std::string& text) {
  const fs::path temporary = file.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.close();
    STRATA_CHECK(!out.fail(), "{}: cannot write", temporary.string());
  }
  fs::rename(temporary, file);
}

}  // namespace

void writeComparisonReport(const fs::path& out, const nlohmann::json& results, const nlohmann::json& host) {
  fs::create_directories(out / "figures");
  const std::vector<Table> ts = tables(results);
  const std::vector<Figure> fs = figures(results);
  const std::vector<std::string> words = answer(results);
  for (const Figure& f : fs) {
    writeText(out / "figures" / f.file, f.svg);
  }
  writeText(out / "results.json", nlohmann::json({{"host", host}, {"configurations", results}}).dump(1) + "\n");
  writeText(out / "results.csv", csv(results));
  writeText(out / "report.md", markdown(host, words, ts, fs));
  writeText(out / "report.html", html(host, words, ts, fs));
}

}  // namespace strata::cli
