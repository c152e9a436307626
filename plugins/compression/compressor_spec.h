#pragma once

// A compressor named on the command line: "NAME[:KEY=VALUE[,KEY=VALUE...]]" (--strategy-opt compress=powersgd:rank=4).

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "strata/sdk/compression.h"

namespace strata::compression {

// The built-in compressors, as the errors list them.
inline constexpr const char* kCompressorNames = "fp16, bf16, topk, randomk, sign, powersgd";

class CompressorSpec {
 public:
  // Throws strata::Error naming the text when it does not parse.
  explicit CompressorSpec(const std::string& text);

  const std::string& name() const { return name_; }
  const std::string& text() const { return text_; }

  // Option values, each checked against the range given ("ratio must be in (0, 1]"). Reading marks a key known.
  double number(const std::string& key, double fallback, double low, double high, bool lowOpen = false);
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t low, std::int64_t high);
  bool flag(const std::string& key, bool fallback);
  // Fails naming the keys no read asked for and the ones that exist.
  void rejectUnread() const;

 private:
  const std::string* find(const std::string& key);

  std::string text_;
  std::string name_;
  std::map<std::string, std::string> options_;
  std::set<std::string> read_;
};

// Makes the built-in compressor `text` names; every option is checked here, so a strategy that calls it from
// Strategy::requirements refuses a bad one before any rank starts.
std::unique_ptr<GradientCompressor> makeCompressor(const std::string& text);

}  // namespace strata::compression
