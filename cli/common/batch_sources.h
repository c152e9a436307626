#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "strata/loaders/data_loader.h"
#include "strata/train/batch_source.h"

namespace strata::cli {

// How a DataLoader's batches become what the program takes.
struct BatchShaping {
  // Float32 rows of [N, classes] to compare with one-hot labels (--loss mse); undefined: class indices as they are.
  std::optional<TensorMeta> oneHotTargets;
  // > 0: the model's batch dimension is fixed; a smaller last batch is padded with zero rows that do not count.
  std::int64_t staticBatch = 0;
  // The model's input dtype when it is another floating type than the loader's float32 (a float64 model, say):
  // each batch is converted to it.
  std::optional<DType> inputType;
};

// One rank's batches of a DataLoader (training: full batches; evaluation: every sample once over all ranks, the
// rows a shard repeats to even out the ranks not counted).
class LoaderBatchSource final : public BatchSource {
 public:
  LoaderBatchSource(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options, BatchShaping shaping);

  void startEpoch(std::int64_t epoch) override { loader_.startEpoch(epoch); }
  std::optional<TrainBatch> next() override;
  std::int64_t batchesPerEpoch() const override { return loader_.batchesPerEpoch(); }
  std::int64_t batchSize() const override { return loader_.options().batchSize; }

 private:
  DataLoader loader_;
  BatchShaping shaping_;
  std::int64_t datasetSize_;
};

// Class labels as one-hot rows of the model's output dtype: the targets of --loss mse on a classification set.
Tensor oneHot(const Tensor& labels, const TensorMeta& target);

}  // namespace strata::cli
