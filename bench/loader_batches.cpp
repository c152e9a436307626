// Time to fill one batch of `--data synthetic` through the DataLoader (Note [Synthetic pixels]), the work a GPU step
// waits for when the loader falls behind. PyTorch has no twin here: its benchmarks reuse one tensor. Prints the
// median over --batches batches per shape, with prefetch off so the time is the filling alone.
//   build/bench/strata_bench_loader_batches [--batches 10]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "strata/loaders/data_loader.h"
#include "strata/loaders/synthetic_dataset.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace strata;

struct Case {
  const char* name;
  std::int64_t batch;
  Shape sample;
};

}  // namespace

int main(int argc, char** argv) {
  int batches = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batches") == 0) {
      batches = std::max(1, std::atoi(argv[i + 1]));
    }
  }
  const Case cases[] = {{"ResNet-50 224", 128, {3, 224, 224}}, {"ResNet-50 32", 256, {3, 32, 32}}};
  fmt::print("{:<16} {:>6} {:>12} {:>10}\n", "shape", "batch", "ms/batch", "ns/pixel");
  for (const Case& c : cases) {
    auto dataset = std::make_shared<SyntheticDataset>(SyntheticDatasetOptions{
        .sampleShape = c.sample, .numClasses = 1000, .numSamples = c.batch * batches, .seed = 0});
    DataLoader loader(dataset, DataLoaderOptions{.batchSize = c.batch, .prefetch = 0});
    loader.startEpoch(0);
    std::vector<double> ms;
    for (int b = 0; b < batches; ++b) {
      const auto start = Clock::now();
      const auto batch = loader.next();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double pixels = static_cast<double>(c.batch * numElements(c.sample));
    fmt::print("{:<16} {:>6} {:>12.2f} {:>10.2f}\n", c.name, c.batch, median, median * 1e6 / pixels);
  }
  return 0;
}
