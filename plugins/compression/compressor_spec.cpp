#include "compressor_spec.h"

#include <cmath>
#include <limits>

#include "compressors.h"
#include "strata/error.h"

namespace strata::compression {

CompressorSpec::CompressorSpec(const std::string& text) : text_(text) {
  const std::size_t colon = text.find(':');
  name_ = text.substr(0, colon);
  if (name_.empty()) {
    fail("compressor '{}': no name (expected NAME[:KEY=VALUE,...], NAME one of {})", text, kCompressorNames);
  }
  if (colon == std::string::npos) {
    return;
  }
  std::string rest = text.substr(colon + 1);
  std::size_t start = 0;
  while (start <= rest.size()) {
    const std::size_t comma = std::min(rest.find(',', start), rest.size());
    const std::string pair = rest.substr(start, comma - start);
    const std::size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size()) {
      fail("compressor '{}': option '{}' is not KEY=VALUE", text, pair);
    }
    if (!options_.emplace(pair.substr(0, eq), pair.substr(eq + 1)).second) {
      fail("compressor '{}': option '{}' given twice", text, pair.substr(0, eq));
    }
    start = comma + 1;
  }
}

const std::string* CompressorSpec::find(const std::string& key) {
  read_.insert(key);
  const auto it = options_.find(key);
  return it == options_.end() ? nullptr : &it->second;
}

double CompressorSpec::number(const std::string& key, double fallback, double low, double high, bool lowOpen) {
  const std::string* value = find(key);
  if (value == nullptr) {
    return fallback;
  }
  double parsed = 0;
  std::size_t used = 0;
  try {
    parsed = std::stod(*value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value->size() || !std::isfinite(parsed)) {
    fail("compressor '{}': {}={} is not a number", text_, key, *value);
  }
  if (parsed > high || parsed < low || (lowOpen && parsed == low)) {
    fail("compressor '{}': {}={} is outside {}{}, {}]", text_, key, *value, lowOpen ? "(" : "[", low, high);
  }
  return parsed;
}

std::int64_t CompressorSpec::integer(const std::string& key, std::int64_t fallback, std::int64_t low,
                                     std::int64_t high) {
  const std::string* value = find(key);
  if (value == nullptr) {
    return fallback;
  }
  std::int64_t parsed = 0;
  std::size_t used = 0;
  try {
    parsed = std::stoll(*value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value->size()) {
    fail("compressor '{}': {}={} is not an integer", text_, key, *value);
  }
  if (parsed < low || parsed > high) {
    fail("compressor '{}': {}={} is outside [{}, {}]", text_, key, *value, low, high);
  }
  return parsed;
}

bool CompressorSpec::flag(const std::string& key, bool fallback) {
  const std::string* value = find(key);
  if (value == nullptr) {
    return fallback;
  }
  if (*value == "1" || *value == "true") {
    return true;
  }
  if (*value == "0" || *value == "false") {
    return false;
  }
  fail("compressor '{}': {}={} is not 0, 1, true or false", text_, key, *value);
}

void CompressorSpec::rejectUnread() const {
  std::string unknown;
  for (const auto& [key, value] : options_) {
    if (read_.count(key) == 0) {
      unknown += (unknown.empty() ? "" : ", ") + key;
    }
  }
  if (!unknown.empty()) {
    std::string known;
    for (const std::string& key : read_) {
      known += (known.empty() ? "" : ", ") + key;
    }
    fail("compressor '{}': unknown option {} (known: {})", text_, unknown, known.empty() ? "none" : known);
  }
}

std::unique_ptr<GradientCompressor> makeCompressor(const std::string& text) {
  CompressorSpec spec(text);
  std::unique_ptr<GradientCompressor> made;
  if (spec.name() == "fp16") {
    made = makeHalfPrecision(spec, DType::Float16);
  } else if (spec.name() == "bf16") {
    made = makeHalfPrecision(spec, DType::BFloat16);
  } else if (spec.name() == "topk") {
    made = makeTopK(spec);
  } else if (spec.name() == "randomk") {
    made = makeRandomK(spec);
  } else if (spec.name() == "sign") {
    made = makeSign(spec);
  } else if (spec.name() == "powersgd") {
    made = makePowerSgd(spec);
  } else {
    fail("unknown compressor '{}' in '{}' (built in: {})", spec.name(), text, kCompressorNames);
  }
  spec.rejectUnread();
  return made;
}

}  // namespace strata::compression
