#include "strata/optim/optimizer_options_text.h"

#include <charconv>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata {
namespace {

const char* kindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Sgd:
      return "sgd";
    case OptimizerKind::Adam:
      return "adam";
    case OptimizerKind::AdamW:
      return "adamw";
    case OptimizerKind::Lars:
      return "lars";
    case OptimizerKind::Lamb:
      return "lamb";
  }
  return "sgd";
}

double number(const std::map<std::string, std::string>& fields, const std::string& key) {
  const auto it = fields.find(key);
  if (it == fields.end()) {
    fail("optimizer options text lacks '{}'", key);
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  if (ec != std::errc() || end != it->second.data() + it->second.size()) {
    fail("optimizer options text: {}={} is not a number", key, it->second);
  }
  return value;
}

}  // namespace

std::string optimizerOptionsToText(const OptimizerOptions& o) {
  return fmt::format(
      "kind={} momentum={:.17g} dampening={:.17g} nesterov={} weight_decay={:.17g} beta1={:.17g} beta2={:.17g} "
      "epsilon={:.17g} max_grad_norm={:.17g} trust_coefficient={:.17g}",
      kindName(o.kind), o.momentum, o.dampening, o.nesterov ? 1 : 0, o.weightDecay, o.beta1, o.beta2, o.epsilon,
      o.maxGradNorm, o.trustCoefficient);
}

OptimizerOptions optimizerOptionsFromText(std::string_view text) {
  std::map<std::string, std::string> fields;
  std::istringstream words{std::string(text)};
  std::string word;
  while (words >> word) {
    const std::size_t eq = word.find('=');
    if (eq == std::string::npos) {
      fail("optimizer options text: '{}' is not key=value", word);
    }
    fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  OptimizerOptions o;
  const auto kind = fields.find("kind");
  if (kind == fields.end()) {
    fail("optimizer options text lacks 'kind'");
  }
  o.kind = parseOptimizerKind(kind->second);
  o.momentum = number(fields, "momentum");
  o.dampening = number(fields, "dampening");
  o.nesterov = number(fields, "nesterov") != 0;
  o.weightDecay = number(fields, "weight_decay");
  o.beta1 = number(fields, "beta1");
  o.beta2 = number(fields, "beta2");
  o.epsilon = number(fields, "epsilon");
  o.maxGradNorm = number(fields, "max_grad_norm");
  if (fields.count("trust_coefficient") != 0) {  // absent from texts written before LARS
    o.trustCoefficient = number(fields, "trust_coefficient");
  }
  return o;
}

}  // namespace strata
