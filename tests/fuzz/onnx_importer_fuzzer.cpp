// Fuzz target: the ONNX importer on arbitrary bytes (loaders/src/onnx_importer.cpp, onnx_tensor.cpp), through
// what `strata run` and `strata train` do with a model before the first step: the protobuf parse, external data,
// ONNX's checker, version converter and shape inference, conversion to the IR, specialisation to a batch of 2,
// the forward plan (lowering and the executor) and, for a one-input model, the training plan (backward graph,
// flat parameter buffers). Bad models must end in strata::Error; nothing is run.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_files.h"
#include "strata/error.h"
#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = strata::fuzz::writeScratchFile("model.onnx", data, size);
  try {
    const strata::Graph graph = strata::importOnnx(file);
    strata::SpecializeOptions specializeOptions;
    specializeOptions.defaultBatch = 2;
    const strata::Graph specialised = strata::specialize(graph, specializeOptions);
    const strata::Executor forward(strata::lowerToProgram(specialised, strata::LowerOptions{}), strata::Device::cpu());
    if (graph.inputs.size() == 1 && !graph.outputs.empty()) {
      strata::TrainingPlanOptions planOptions;
      planOptions.inputMetas = strata::defaultInputMetas(graph, 2);
      const strata::TrainingPlan plan(graph, planOptions);
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
