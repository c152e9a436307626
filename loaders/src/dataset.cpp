#include "strata/loaders/dataset.h"

#include <fmt/format.h>

#include "strata/error.h"
#include "strata/loaders/cifar10_dataset.h"
#include "strata/loaders/idx_dataset.h"
#include "strata/loaders/image_folder_dataset.h"
#include "strata/loaders/segmentation_dataset.h"
#include "strata/loaders/synthetic_dataset.h"
#include "strata/loaders/text_corpus.h"
#include "strata/loaders/token_dataset.h"
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

// tokens:FILE, tokens:TRAIN,VAL, text, text:PATH. One file serves both splits: the test split is its last
// kValidationShare of windows.
std::unique_ptr<Dataset> openTokens(const DatasetSpec& spec, const std::string& name, const std::string& source) {
  STRATA_CHECK(!spec.augment, "dataset '{}': augmentation is for images", spec.kind);
  TokenDatasetOptions options;
  options.seqLen = spec.seqLen;
  options.vocabulary = spec.vocabulary;
  options.rawTokenBytes = spec.rawTokenBytes;
  options.splitName = spec.split == DatasetSplit::Train ? "train" : "validation";
  const bool train = spec.split == DatasetSplit::Train;
  if (name == "text") {
    const TextCorpus corpus = prepareTextCorpus(TextCorpusOptions{
        .source = source, .cacheDir = spec.cacheDir, .tokenizer = parseTokenizerSpec(spec.tokenizer)});
    options.file = corpus.tokens;
    STRATA_CHECK(
        spec.vocabulary <= 0 || corpus.tokenizer->vocabulary() <= spec.vocabulary,
        "dataset '{}': the tokenizer ({}) has {} ids, more than the model's vocabulary of {} (its output's last "
        "axis); give --tokenizer a vocabulary that fits, or a model that fits the tokenizer",
        spec.kind, corpus.tokenizer->description(), corpus.tokenizer->vocabulary(), spec.vocabulary);
  } else {
    STRATA_CHECK(!source.empty(), "dataset 'tokens' needs a file: tokens:FILE or tokens:TRAIN,VAL");
    const std::size_t comma = source.find(',');
    if (comma != std::string::npos) {
      options.file = train ? source.substr(0, comma) : source.substr(comma + 1);
      return std::make_unique<TokenDataset>(options);
    }
    options.file = source;
  }
  options.begin = train ? 0.0 : 1.0 - kValidationShare;
  options.end = train ? 1.0 - kValidationShare : 1.0;
  return std::make_unique<TokenDataset>(options);
}

std::unique_ptr<Dataset> openUnwrapped(const DatasetSpec& spec) {
  const std::size_t colon = spec.kind.find(':');
  const std::string name = spec.kind.substr(0, colon);
  const std::string directory = colon == std::string::npos ? "" : spec.kind.substr(colon + 1);
  const bool cifar = name == "cifar10";
  const bool photos = name == "images" || name == "segmentation";
  STRATA_CHECK(!spec.augment || ((cifar || photos) && spec.split == DatasetSplit::Train),
               "dataset '{}': augmentation is implemented for the train split of cifar10, images and segmentation",
               spec.kind);
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
  if (name == "tokens" || name == "text") {
    return openTokens(spec, name, directory);
  }
  if (name == "images") {
    STRATA_CHECK(!directory.empty(), "dataset 'images' needs a directory: images:DIR");
    return std::make_unique<ImageFolderDataset>(ImageFolderOptions{.directory = directory,
                                                                   .split = spec.split,
                                                                   .sampleShape = spec.sampleShape,
                                                                   .augment = spec.augment,
                                                                   .seed = spec.seed});
  }
  if (name == "segmentation") {
    STRATA_CHECK(!directory.empty(), "dataset 'segmentation' needs a directory: segmentation:DIR");
    return std::make_unique<SegmentationDataset>(SegmentationOptions{.directory = directory,
                                                                     .split = spec.split,
                                                                     .sampleShape = spec.sampleShape,
                                                                     .classes = spec.numClasses,
                                                                     .augment = spec.augment,
                                                                     .seed = spec.seed});
  }
  if (name == "synthetic" && (directory.empty() || directory == "segmentation")) {
    SyntheticDatasetOptions options;
    options.perPixelLabels = directory == "segmentation";
    options.sampleShape = spec.sampleShape;
    options.numClasses = spec.numClasses;
    options.numSamples = spec.numSamples;
    // Test data must differ from training data: derive its seed from the split.
    options.seed = spec.split == DatasetSplit::Train ? spec.seed : ~spec.seed;
    return std::make_unique<SyntheticDataset>(options);
  }
  fail(
      "unknown dataset '{}': expected fashion-mnist, fashion-mnist:DIR, mnist:DIR, cifar10:DIR, synthetic, "
      "synthetic:segmentation, images:DIR, segmentation:DIR, tokens:FILE, tokens:TRAIN,VAL, text or text:FILE|DIR",
      spec.kind);
}

}  // namespace

Task taskOfDataset(const std::string& kind) {
  const std::string name = kind.substr(0, kind.find(':'));
  if (name == "tokens" || name == "text") {
    return Task::LanguageModel;
  }
  return name == "segmentation" || kind == "synthetic:segmentation" ? Task::Segmentation : Task::Classification;
}

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
