#pragma once

#include <cstdint>
#include <optional>

#include "strata/tensor.h"

namespace strata {

struct TrainBatch {
  Tensor input;    // the model's input, on the host
  Tensor targets;  // what the program's loss takes (class indices, or one-hot rows for a regression loss)
  Tensor classes;  // int64 class index per row, for accuracy (undefined when there are none)
  // Rows that count for accuracy: the first `countedRows` (a padded last batch, or samples a rank's shard repeats,
  // count once).
  std::int64_t countedRows = 0;
};

// One rank's batches of a data split, epoch by epoch.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void startEpoch(std::int64_t epoch) = 0;
  virtual std::optional<TrainBatch> next() = 0;
  virtual std::int64_t batchesPerEpoch() const = 0;
  virtual std::int64_t batchSize() const = 0;  // rows per batch (the last may be fewer)
};

}  // namespace strata
