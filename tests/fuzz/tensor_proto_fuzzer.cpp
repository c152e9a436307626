// Fuzz target: TensorProto files (loaders/src/tensor_proto_io.cpp, onnx_tensor.cpp), as `strata run --input` and
// `strata step` read them. Arbitrary bytes are written to a file and read; bad input must end in strata::Error.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_files.h"
#include "strata/error.h"
#include "strata/loaders/tensor_proto_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = strata::fuzz::writeScratchFile("tensor.pb", data, size);
  try {
    const strata::NamedTensor tensor = strata::readTensorProto(file);
    // Touch every byte the reader claims to hold.
    const auto* bytes = static_cast<const volatile std::uint8_t*>(tensor.tensor.rawData());
    std::uint8_t sum = 0;
    for (std::size_t i = 0; i < tensor.tensor.bytes(); ++i) {
      sum = static_cast<std::uint8_t>(sum + bytes[i]);
    }
    (void)sum;
  } catch (const strata::Error&) {
  }
  return 0;
}
