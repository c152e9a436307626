#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "strata/dtype.h"
#include "strata/shape.h"
#include "strata/train/task.h"

namespace strata {

// A labelled data set, read-only after construction: images with a class each, token windows with the next token at
// every position, or images with a class per pixel (Note [Tasks] in strata/train/task.h).
// Note [Concurrent get]: get() is const and may be called from several threads at once (the data loader's worker,
// tests, evaluation); implementations keep no mutable per-call state. setEpoch() is never called concurrently with
// get() (the loader calls it between epochs, while no worker runs).
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::int64_t size() const = 0;
  // Shape of one sample's input without the batch dimension, e.g. {1, 28, 28}, {3, 32, 32} or {T} (token ids).
  virtual Shape sampleShape() const = 0;
  // The input's element type: float32 (normalised images) or int64 (token ids).
  virtual DType sampleType() const { return DType::Float32; }
  // Shape of one sample's target without the batch dimension: {} (one class), {T} (the next token at every
  // position) or {H, W} (a class per pixel).
  virtual Shape targetShape() const { return {}; }
  virtual Task task() const { return Task::Classification; }
  // Classes, or the vocabulary's size (token ids are in [0, numClasses())).
  virtual std::int64_t numClasses() const = 0;
  // Writes sample `index` (in [0, size())): numElements(sampleShape()) values of sampleType() into `input` and
  // numElements(targetShape()) class indices into `target`. Throws Error for an index out of range, naming the data
  // set, and for bad data (the file and where in it).
  virtual void get(std::int64_t index, void* input, std::int64_t* target) const = 0;
  // Chooses the random augmentation of every sample for an epoch (deterministic in the dataset's seed and the
  // epoch). Datasets without augmentation ignore it.
  virtual void setEpoch(std::int64_t epoch) {}
  // Human-readable name for messages, e.g. "Fashion-MNIST train (/usr/share/datasets/fashion-mnist)".
  virtual std::string description() const = 0;

  std::int64_t sampleNumel() const { return numElements(sampleShape()); }

 protected:
  // Throws Error naming the dataset when index is outside [0, size()).
  void checkIndex(std::int64_t index) const;
};

enum class DatasetSplit { Train, Test };

std::string_view datasetSplitName(DatasetSplit split);
// "train" or "test"; throws Error otherwise.
DatasetSplit parseDatasetSplit(std::string_view text);

inline constexpr std::string_view kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct DatasetSpec {
  // "fashion-mnist" (files in kDefaultFashionMnistDir), "fashion-mnist:DIR", "mnist:DIR", "cifar10:DIR",
  // "synthetic", "tokens:FILE" or "tokens:TRAIN,VAL" (Note [Token files]), "text" (the default corpus) or
  // "text:FILE|DIR" (Note [Text corpora]), "images:DIR" (Note [Image folders]) or "segmentation:DIR"
  // (Note [Segmentation folders]).
  std::string kind = "fashion-mnist";
  DatasetSplit split = DatasetSplit::Train;
  // CIFAR-10 training only: random crop 32 with padding 4 and horizontal flip, re-drawn every epoch from `seed`.
  bool augment = false;
  // Seed of the synthetic data and of augmentation.
  std::uint64_t seed = 0;
  // Synthetic data; images and segmentation fit photos to sampleShape (the model's input), and segmentation takes the
  // model's class count.
  Shape sampleShape = {1, 28, 28};
  std::int64_t numClasses = 10;
  std::int64_t numSamples = 1024;
  // When non-empty (rank 3, {C, H, W}), the data set is wrapped in a TransformedDataset that resizes bilinearly
  // (and repeats a single channel) to this sample shape, e.g. {3, 224, 224} for VGG16 on Fashion-MNIST.
  Shape resizeTo;
  // Token and text data: the model's sequence length and vocabulary (ids must be below it), the id width of a raw
  // token file, where a text corpus is tokenized to, and with what (--tokenizer). A single token file or corpus
  // gives its last kValidationShare of windows to the test split.
  std::int64_t seqLen = 0;
  std::int64_t vocabulary = 0;
  int rawTokenBytes = 2;
  std::string cacheDir = "runs/data";
  std::string tokenizer = "bytes";
};

inline constexpr double kValidationShare = 0.05;

// The task of the data a --data kind names, before opening it: tokens and text are language modelling, the image
// sets classification.
Task taskOfDataset(const std::string& kind);

// Opens the data set a spec names. Throws Error for an unknown kind, a missing directory or file (listing the
// files expected) or a corrupt file.
std::unique_ptr<Dataset> openDataset(const DatasetSpec& spec);

// Throws Error (naming both shapes) unless samples of `dataset` can feed a model whose input is `modelInput` and
// whose output has `modelClasses` classes. modelInput may carry a leading batch dimension; dimensions of -1 match
// anything. The dataset's labels must index into the model's outputs, so numClasses() <= modelClasses (a wider head,
// e.g. an ImageNet model trained on 10 classes, is allowed); modelClasses <= 0 skips the class check.
void checkDatasetFitsModel(const Dataset& dataset, const Shape& modelInput, std::int64_t modelClasses);

}  // namespace strata
