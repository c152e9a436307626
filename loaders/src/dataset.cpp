#include "strata/loaders/dataset.h"

#include <fmt/format.h>

#include "strata/error.h"
#include "strata/loaders/cifar10_dataset.h"
#include "strata/loaders/idx_dataset.h"
#include "strata/loaders/synthetic_dataset.h"
#include "strata/loaders/transformed_dataset.h"

namespace strata {

void Dataset::checkIndex(std::int64_t index) const {
  STRATA_CHECK(index >= 0 && index < size(), "{}: sample index {} is out of range [0, {})", description(), index,
               size());
}

std::string_view datasetSplitName(DatasetSplit split) {
  return split == DatasetSplit::Train ? "train" : "test";
}

DatasetSplit parseDatasetSplit(std::string_view text) {
  if (text == "train") {
    return DatasetSplit::Train;
  }
  if (text == "test") {
    return DatasetSplit::Test;
  }
  fail("unknown dataset split '{}': expected train or test", text);
}

namespace {

std::unique_ptr<Dataset> openUnwrapped(const DatasetSpec& spec) {
  const std::size_t colon = spec.kind.find(':');
  const std::string name = spec.kind.substr(0, colon);
  const std::string directory = colon == std::string::npos ? "" : spec.kind.substr(colon + 1);
  const bool cifar = name == "cifar10";
  STRATA_CHECK(!spec.augment || (cifar && spec.split == DatasetSplit::Train),
               "dataset '{}': augmentation is implemented for the cifar10 train split only", spec.kind);
  if (name == "fashion-mnist" || name == "mnist") {
    STRATA_CHECK(name == "fashion-mnist" || !directory.empty(), "dataset 'mnist' needs a directory: mnist:DIR");
    IdxDatasetOptions options;
    options.directory = directory.empty() ? std::string(kDefaultFashionMnistDir) : directory;
    options.split = spec.split;
    options.flavor = name == "mnist" ? IdxFlavor::Mnist : IdxFlavor::FashionMnist;
    return std::make_unique<IdxDataset>(options);
  }
  if (cifar) {
    STRATA_CHECK(!directory.empty(), "dataset 'cifar10' needs a directory: cifar10:DIR");
    Cifar10DatasetOptions options;
    options.directory = directory;
    options.split = spec.split;
    options.augment = spec.augment;
    options.seed = spec.seed;
    return std::make_unique<Cifar10Dataset>(options);
  }
  if (name == "synthetic" && directory.empty()) {
    SyntheticDatasetOptions options;
    options.sampleShape = spec.sampleShape;
    options.numClasses = spec.numClasses;
    options.numSamples = spec.numSamples;
    // Test data must differ from training data: derive its seed from the split.
    options.seed = spec.split == DatasetSplit::Train ? spec.seed : ~spec.seed;
    return std::make_unique<SyntheticDataset>(options);
  }
  fail("unknown dataset '{}': expected fashion-mnist, fashion-mnist:DIR, mnist:DIR, cifar10:DIR or synthetic",
       spec.kind);
}

}  // namespace

std::unique_ptr<Dataset> openDataset(const DatasetSpec& spec) {
  std::unique_ptr<Dataset> dataset = openUnwrapped(spec);
  if (spec.resizeTo.empty() || spec.resizeTo == dataset->sampleShape()) {
    return dataset;
  }
  TransformedDatasetOptions options;
  options.targetShape = spec.resizeTo;
  return std::make_unique<TransformedDataset>(std::shared_ptr<Dataset>(std::move(dataset)), options);
}

void checkDatasetFitsModel(const Dataset& dataset, const Shape& modelInput, std::int64_t modelClasses) {
  const Shape sample = dataset.sampleShape();
  // Compare against the model input without its batch dimension, when it has one.
  Shape modelSample = modelInput;
  const bool batched = modelSample.size() == sample.size() + 1;
  if (batched) {
    modelSample.erase(modelSample.begin());
  }
  bool fits = modelSample.size() == sample.size();
  for (std::size_t i = 0; fits && i < sample.size(); ++i) {
    fits = modelSample[i] == -1 || modelSample[i] == sample[i];
  }
  if (!fits) {
    std::string hint = batched ? fmt::format(" (one sample: {})", shapeToString(modelSample)) : std::string();
    if (sample.size() == 3 && modelSample.size() == 3) {
      hint += fmt::format("; resize the dataset to {} (DatasetSpec::resizeTo)", shapeToString(modelSample));
    }
    fail("dataset {} does not fit the model: its samples have shape {} but the model input is {}{}",
         dataset.description(), shapeToString(sample), shapeToString(modelInput), hint);
  }
  STRATA_CHECK(modelClasses <= 0 || dataset.numClasses() <= modelClasses,
               "dataset {} does not fit the model: it has {} classes but the model outputs only {} (sample shape {}, "
               "model input {})",
               dataset.description(), dataset.numClasses(), modelClasses, shapeToString(sample),
               shapeToString(modelInput));
}

}  // namespace strata
