#include "common/batch_sources.h"

#include <cstring>

#include "strata/error.h"

namespace strata::cli {
namespace {

// Zero rows appended up to `rows`, for a model whose batch dimension is fixed in the file.
Tensor padBatch(const Tensor& images, std::int64_t rows) {
  Shape shape = images.shape();
  shape[0] = rows;
  Tensor padded = Tensor::zeros(images.dtype(), shape);
  std::memcpy(padded.rawData(), images.rawData(), images.bytes());
  return padded;
}

}  // namespace

Tensor oneHot(const Tensor& labels, const TensorMeta& target) {
  if (target.shape.size() != 2 || target.shape[0] != labels.numel() || target.dtype != DType::Float32) {
    fail("--loss mse needs float32 outputs of shape [N, classes] to compare with one-hot labels, not {}",
         target.toString());
  }
  Tensor rows = Tensor::zeros(DType::Float32, target.shape);
  const std::int64_t classes = target.shape[1];
  for (std::int64_t r = 0; r < labels.numel(); ++r) {
    const std::int64_t label = labels.data<std::int64_t>()[r];
    if (label < 0 || label >= classes) {
      fail("label {} of row {} is outside the model's {} outputs", label, r, classes);
    }
    rows.data<float>()[r * classes + label] = 1.0f;
  }
  return rows;
}

LoaderBatchSource::LoaderBatchSource(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options,
                                     BatchShaping shaping)
    : loader_(dataset, options), shaping_(std::move(shaping)), datasetSize_(dataset->size()) {}

std::optional<TrainBatch> LoaderBatchSource::next() {
  std::optional<Batch> batch = loader_.next();
  if (!batch) {
    return std::nullopt;
  }
  const DataLoaderOptions& options = loader_.options();
  const std::int64_t rows = batch->inputs.dim(0);
  TrainBatch out;
  out.input = shaping_.staticBatch > 0 && rows < shaping_.staticBatch ? padBatch(batch->inputs, shaping_.staticBatch)
                                                                      : batch->inputs;
  if (shaping_.inputType && *shaping_.inputType != out.input.dtype()) {
    Tensor converted = Tensor::empty(*shaping_.inputType, out.input.shape());
    converted.convertFrom(out.input);
    out.input = converted;
  }
  out.targets = shaping_.oneHotTargets ? oneHot(batch->targets, *shaping_.oneHotTargets) : batch->targets;
  out.classes = batch->targets;
  // Note [Sharding] in data_loader.h: row j of this rank's batch b sits at position rank + (b * B + j) * world of
  // the epoch's permutation; positions past the data set's end wrap around to repeat samples another rank has.
  out.countedRows = 0;
  for (std::int64_t j = 0; j < rows; ++j) {
    const std::int64_t position = options.rank + (batch->index * options.batchSize + j) * options.worldSize;
    out.countedRows += position < datasetSize_ ? 1 : 0;
  }
  return out;
}

}  // namespace strata::cli
