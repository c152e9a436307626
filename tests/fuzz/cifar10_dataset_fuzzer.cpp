// Fuzz target: the CIFAR-10 binary reader (loaders/src/cifar10_dataset.cpp, dataset_files.cpp). The input is the
// test split's test_batch.bin (raw or gzipped); bad files must end in strata::Error, good ones must give every
// sample (first, last) within its bounds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_files.h"
#include "strata/error.h"
#include "strata/loaders/cifar10_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto dir = strata::fuzz::scratchDirectory() / "cifar";
  std::filesystem::create_directories(dir);
  strata::fuzz::writeScratchFile("cifar/test_batch.bin", data, size);
  try {
    strata::Cifar10DatasetOptions options;
    options.directory = dir;
    options.split = strata::DatasetSplit::Test;
    const strata::Cifar10Dataset dataset(options);
    std::vector<float> image(strata::Cifar10Dataset::kPixels);
    std::int64_t label = -1;
    for (const std::int64_t index : {std::int64_t{0}, dataset.size() - 1}) {
      dataset.get(index, image.data(), &label);
      if (label < 0 || label >= dataset.numClasses()) {
        __builtin_trap();  // a label the reader should have refused
      }
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
