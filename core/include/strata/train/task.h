#pragma once

#include <string_view>

namespace strata {

// What a data set teaches a model, which decides the loss's class axis and the metric a run reports.
// Note [Tasks]: the model's first output holds the scores; a classifier's are [N, classes] (class axis 1), a
// language model's [N, T, vocabulary] (class axis last, as language models export them), a segmentation net's
// [N, classes, H, W] (class axis 1, one class per pixel).
enum class Task {
  Classification,  // a class per sample: accuracy
  LanguageModel,   // the next token at every position: per-token loss, perplexity and next-token accuracy
  Segmentation,    // a class per pixel: pixel accuracy and mean intersection over union
};

std::string_view taskName(Task task);

}  // namespace strata
