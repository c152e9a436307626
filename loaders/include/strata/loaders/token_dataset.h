#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "strata/loaders/dataset.h"
#include "strata/loaders/token_file.h"

namespace strata {

struct TokenDatasetOptions {
  std::filesystem::path file;
  std::int64_t seqLen = 0;  // T: the model's sequence length
  int rawTokenBytes = 2;    // ids of a file without Strata's header (Note [Token files])
  // The part of the file's windows this split takes, as fractions [begin, end) of them: one file split into
  // training and validation data. {0, 1}: every window.
  double begin = 0.0;
  double end = 1.0;
  // Ids must be below it (the model's vocabulary; 0: the file header's, or unchecked).
  std::int64_t vocabulary = 0;
  std::string splitName = "train";
};

// A language model's samples from a token file (Note [Token files]): window w holds ids [w T, w T + T] of the file;
// its input is the first T of them and its target the last T (the next token at every position). Windows do not
// overlap (consecutive ones share one id: the last target of one is the first input of the next), so sharding them
// across ranks (Note [Sharding]) gives each rank distinct text, and a resumed run continues at the exact window.
class TokenDataset : public Dataset {
 public:
  explicit TokenDataset(const TokenDatasetOptions& options);

  std::int64_t size() const override { return windows_; }
  Shape sampleShape() const override { return {seqLen_}; }
  DType sampleType() const override { return DType::Int64; }
  Shape targetShape() const override { return {seqLen_}; }
  Task task() const override { return Task::LanguageModel; }
  std::int64_t numClasses() const override { return vocabulary_; }
  void get(std::int64_t index, void* input, std::int64_t* target) const override;
  std::string description() const override;

  std::int64_t tokens() const { return windows_ * seqLen_; }

 private:
  std::shared_ptr<TokenFile> file_;
  std::int64_t seqLen_;
  std::int64_t firstWindow_ = 0;
  std::int64_t windows_ = 0;
  std::int64_t vocabulary_ = 0;
  std::string splitName_;
};

}  // namespace strata
