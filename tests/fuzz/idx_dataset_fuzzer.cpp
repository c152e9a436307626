// Fuzz target: the IDX (MNIST, Fashion-MNIST) reader (loaders/src/idx_dataset.cpp, dataset_files.cpp). The input
// is u32 n (little endian), then n bytes of the images file, then the labels file; either may be gzipped. Both are
// written as the test split's files and opened; bad files must end in strata::Error, good ones must give every
// sample (first, last) within its bounds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_files.h"
#include "strata/error.h"
#include "strata/loaders/idx_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) {
    return 0;
  }
  std::size_t split =
      std::size_t{data[0]} | std::size_t{data[1]} << 8 | std::size_t{data[2]} << 16 | std::size_t{data[3]} << 24;
  data += 4;
  size -= 4;
  split = std::min(split, size);
  const auto dir = strata::fuzz::scratchDirectory() / "idx";
  std::filesystem::create_directories(dir);
  strata::fuzz::writeScratchFile("idx/t10k-images-idx3-ubyte", data, split);
  strata::fuzz::writeScratchFile("idx/t10k-labels-idx1-ubyte", data + split, size - split);
  try {
    strata::IdxDatasetOptions options;
    options.directory = dir;
    options.split = strata::DatasetSplit::Test;
    const strata::IdxDataset dataset(options);
    const strata::Shape shape = dataset.sampleShape();
    std::vector<float> image(static_cast<std::size_t>(shape[0] * shape[1] * shape[2]));
    std::int64_t label = -1;
    for (const std::int64_t index : {std::int64_t{0}, dataset.size() - 1}) {
      if (index >= 0) {
        dataset.get(index, image.data(), &label);
        if (label < 0 || label >= dataset.numClasses()) {
          __builtin_trap();  // a label the reader should have refused
        }
      }
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
