#include "strata/loaders/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "strata/error.h"

namespace strata {

TokenDataset::TokenDataset(const TokenDatasetOptions& options)
    : file_(std::make_shared<TokenFile>(options.file, options.rawTokenBytes)),
      seqLen_(options.seqLen),
      splitName_(options.splitName) {
  const std::string path = options.file.string();
  STRATA_CHECK(seqLen_ > 0, "token file {}: the sequence length must be positive (the model's, or --seq-len), not {}",
               path, seqLen_);
  STRATA_CHECK(options.begin >= 0 && options.begin < options.end && options.end <= 1,
               "token file {}: the split [{}, {}) is not a part of [0, 1)", path, options.begin, options.end);
  const std::int64_t all = file_->size() > 0 ? (file_->size() - 1) / seqLen_ : 0;
  STRATA_CHECK(all > 0, "token file {}: {} ids make no window of {} + 1 (the sequence length and its next token)", path,
               file_->size(), seqLen_);
  firstWindow_ = static_cast<std::int64_t>(std::floor(options.begin * static_cast<double>(all)));
  const auto last = static_cast<std::int64_t>(std::floor(options.end * static_cast<double>(all)));
  windows_ = last - firstWindow_;
  STRATA_CHECK(
      windows_ > 0,
      "token file {}: its {} windows of {} ids leave none for the {} split (fraction {} to {}); give more text "
      "or a file per split (tokens:TRAIN,VAL)",
      path, all, seqLen_, splitName_, options.begin, options.end);
  const std::int64_t stated = file_->vocabulary();
  STRATA_CHECK(options.vocabulary <= 0 || stated <= options.vocabulary,
               "token file {}: its header states a vocabulary of {} ids, but the model has {} (its output's last axis)",
               path, stated, options.vocabulary);
  vocabulary_ = options.vocabulary > 0 ? options.vocabulary : stated;
}

void TokenDataset::get(std::int64_t index, void* input, std::int64_t* target) const {
  checkIndex(index);
  // Per call, not a member: get() may run on several threads (Note [Concurrent get]).
  std::vector<std::int64_t> window(static_cast<std::size_t>(seqLen_ + 1));
  file_->read((firstWindow_ + index) * seqLen_, window, vocabulary_);
  auto* ids = static_cast<std::int64_t*>(input);
  std::copy(window.begin(), window.end() - 1, ids);
  std::copy(window.begin() + 1, window.end(), target);
}

std::string TokenDataset::description() const {
  return fmt::format("tokens {} ({}, {} windows of {} from id {})", splitName_, file_->path().string(), windows_,
                     seqLen_, firstWindow_ * seqLen_);
}

}  // namespace strata
