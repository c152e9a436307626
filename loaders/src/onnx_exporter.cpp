#include "strata/loaders/onnx_exporter.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <onnx/onnx_pb.h>

#include "onnx_tensor.h"
#include "strata/error.h"

namespace strata {

void exportOnnxWithWeights(const std::filesystem::path& source, const Graph& weights,
                           const std::filesystem::path& destination) {
  std::ifstream in(source, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  onnx::ModelProto model;
  if (!in || !model.ParseFromString(buffer.str())) {
    fail("{}: cannot re-read the model to export it", source.string());
  }
  std::unordered_map<std::string, const Tensor*> byName;
  for (const Value& value : weights.values) {
    if (value.isInitializer && value.constant.defined()) {
      byName[value.name] = &value.constant;
    }
  }
  for (auto& init : *model.mutable_graph()->mutable_initializer()) {
    auto it = byName.find(init.name());
    if (it != byName.end()) {
      init = detail::tensorToProto(*it->second, init.name());  // inline data, even if the source was external
    }
  }
  std::ofstream out(destination, std::ios::binary | std::ios::trunc);
  if (!out || !model.SerializeToOstream(&out)) {
    fail("{}: cannot write the exported model", destination.string());
  }
}

}  // namespace strata
