// strata generate: samples text from a trained language model export.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands/commands.h"
#include "common/device_selection.h"
#include "common/inference_plan.h"
#include "common/model_options.h"
#include "strata/error.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_exporter.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/loaders/tokenizer.h"

namespace strata::cli {
namespace {

struct GenerateOptions {
  ModelOptions model;
  DeviceOptions device;
  std::string prompt;
  std::int64_t maxTokens = 200;
  double temperature = 1.0;
  std::int64_t topK = 0;
  std::uint64_t seed = 0;
  std::int64_t seqLen = 0;
  std::string tokenizer;  // a run directory, or "bytes"; default: the model's own metadata
};

// The tokenizer the model was trained with (Note [Tokenizers]): --tokenizer, else the export's metadata, else
// bytes when the model's vocabulary is 256.
std::unique_ptr<Tokenizer> tokenizerFor(const GenerateOptions& options, const std::string& modelPath,
                                        std::int64_t vocabulary) {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string from;
  if (options.tokenizer == "bytes") {
    tokenizer = makeByteTokenizer();
    from = "--tokenizer bytes";
  } else if (!options.tokenizer.empty()) {
    tokenizer = readTokenizer(options.tokenizer);
    from = options.tokenizer;
  } else if ((tokenizer = tokenizerFromMetadata(readOnnxMetadata(modelPath)))) {
    from = "the model's metadata";
  } else if (vocabulary == 256) {
    tokenizer = makeByteTokenizer();
    from = "a vocabulary of 256 (no tokenizer in the model's metadata)";
  } else {
    fail(
        "{}: the model names no tokenizer (an export of `strata train --data text` carries one) and its vocabulary "
        "of {} is not bytes; give --tokenizer RUN_DIR (the training run's directory)",
        modelPath, vocabulary);
  }
  if (tokenizer->vocabulary() > vocabulary) {
    fail("the tokenizer from {} ({}) has {} ids, more than the model's vocabulary of {}", from,
         tokenizer->description(), tokenizer->vocabulary(), vocabulary);
  }
  fmt::print("tokenizer: {} (from {})\n", tokenizer->description(), from);
  return tokenizer;
}

// The next id from one position's scores: greedy at temperature 0, else a draw from the softmax of the scores over
// the temperature, restricted to the k highest when top-k > 0.
std::int64_t sampleNext(const float* scores, std::int64_t vocabulary, const GenerateOptions& options,
                        std::mt19937_64& random) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(vocabulary));
  std::iota(order.begin(), order.end(), 0);
  const auto higher = [&](std::int64_t a, std::int64_t b) { return scores[a] > scores[b]; };
  if (options.temperature <= 0) {
    return *std::max_element(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return higher(b, a); });
  }
  std::int64_t kept = vocabulary;
  if (options.topK > 0 && options.topK < vocabulary) {
    kept = options.topK;
    std::partial_sort(order.begin(), order.begin() + kept, order.end(), higher);
  }
  const float top = *std::max_element(scores, scores + vocabulary);
  std::vector<double> weights(static_cast<std::size_t>(kept));
  for (std::int64_t i = 0; i < kept; ++i) {
    weights[static_cast<std::size_t>(i)] =
        std::exp((scores[order[static_cast<std::size_t>(i)]] - top) / options.temperature);
  }
  std::discrete_distribution<std::int64_t> draw(weights.begin(), weights.end());
  return order[static_cast<std::size_t>(draw(random))];
}

void generate(const GenerateOptions& options) {
  applyThreads(options.model);
  STRATA_CHECK(!options.model.modelPath.empty(), "strata generate needs a trained model (an .onnx export)");
  const std::string& path = options.model.modelPath;
  const Graph graph = evaluationModeGraph(importOnnx(path));
  STRATA_CHECK(graph.inputs.size() == 1, "{}: a language model takes one input (token ids [N, T]), this one has {}",
               path, graph.inputs.size());
  TensorMeta input = graph.values[static_cast<std::size_t>(graph.inputs[0])].meta;
  if (input.shape.size() != 2 || (input.dtype != DType::Int64 && input.dtype != DType::Int32)) {
    fail("{}: a language model takes token ids [N, T] (int64), but the input is {}", path, input.toString());
  }
  input.shape[0] = 1;
  if (input.shape[1] < 0) {
    STRATA_CHECK(options.seqLen > 0, "{}: the model's sequence length is open; give --seq-len T", path);
    input.shape[1] = options.seqLen;
  }
  const std::int64_t window = input.shape[1];
  const Graph specialised = specialize(graph, SpecializeOptions{.inputMetas = {input}});
  const TensorMeta& scoresMeta = specialised.values[static_cast<std::size_t>(specialised.outputs.at(0))].meta;
  if (scoresMeta.shape.size() != 3 || scoresMeta.shape[1] != window) {
    fail("{}: a language model's first output is [N, T, vocabulary], but this one is {}", path, scoresMeta.toString());
  }
  const std::int64_t vocabulary = scoresMeta.shape[2];
  const std::unique_ptr<Tokenizer> tokenizer = tokenizerFor(options, path, vocabulary);
  requireFullPrecision(options.device, "generate");
  const Device device = selectDevice(options.device);
  const std::unique_ptr<Executor> plan =
      buildInferenceExecutor(specialised, {input}, device, options.device, /*verbose=*/false);

  std::vector<std::int64_t> ids = tokenizer->encode(options.prompt);
  if (ids.empty()) {
    ids = tokenizer->encode("\n");  // an empty prompt starts a new line
  }
  const std::size_t promptLength = ids.size();
  std::mt19937_64 random(options.seed);
  Tensor tokens = Tensor::zeros(input.dtype, input.shape);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t n = 0; n < options.maxTokens; ++n) {
    // Note [Generation without a cache]: the model runs on the last T ids every time (no key/value cache), so a
    // token costs one forward pass of the whole window. Positions after the context are padding that the causal
    // mask keeps from the positions before, whose scores are read.
    const std::int64_t context = std::min<std::int64_t>(window, static_cast<std::int64_t>(ids.size()));
    const std::int64_t from = static_cast<std::int64_t>(ids.size()) - context;
    for (std::int64_t t = 0; t < window; ++t) {
      const std::int64_t id = t < context ? ids[static_cast<std::size_t>(from + t)] : 0;
      if (input.dtype == DType::Int64) {
        tokens.data<std::int64_t>()[t] = id;
      } else {
        tokens.data<std::int32_t>()[t] = static_cast<std::int32_t>(id);
      }
    }
    const Tensor scores = plan->run({tokens.to(device)})[0].to(Device::cpu());
    Tensor row = Tensor::empty(DType::Float32, {vocabulary});
    row.convertFrom(scores.reshape({window, vocabulary}).flatSlice((context - 1) * vocabulary, vocabulary));
    ids.push_back(sampleNext(row.data<float>(), vocabulary, options, random));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<std::int64_t> continuation(ids.begin() + static_cast<std::ptrdiff_t>(promptLength), ids.end());
  fmt::print("{}{}\n", options.prompt, tokenizer->decode(continuation));
  std::fflush(stdout);
  fmt::print(stderr,
             "generated {} tokens in {:.2f} s ({:.1f} ms a token: every token reruns the model on its whole window of "
             "{}, no key/value cache)\n",
             options.maxTokens, seconds, options.maxTokens > 0 ? 1000.0 * seconds / options.maxTokens : 0.0, window);
}

}  // namespace

void addGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* c = app.add_subcommand("generate", "sample text from a trained language model (an .onnx export)");
  c->add_option("model", o->model.modelPath, "the exported model (strata train --data text ... --export FILE)")
      ->required();
  c->add_option("--prompt", o->prompt, "the text to continue (default: a new line)");
  c->add_option("--max-tokens", o->maxTokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  c->add_option("--temperature", o->temperature, "softmax temperature (0: always the most likely token)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--top-k", o->topK, "draw among the k most likely tokens only (0: all)")->check(CLI::NonNegativeNumber);
  c->add_option("--seed", o->seed, "seed of the draws");
  c->add_option("--seq-len", o->seqLen, "the window T, when the model leaves it open");
  c->add_option("--tokenizer", o->tokenizer,
                "bytes, or the training run's directory (its tokenizer.json); default: the model's own metadata");
  c->add_option("--threads", o->model.threads, "CPU threads (default: all cores)");
  addDeviceOptions(*c, o->device);
  c->callback([o] { generate(*o); });
}

}  // namespace strata::cli
