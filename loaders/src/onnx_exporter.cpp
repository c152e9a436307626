#include "strata/loaders/onnx_exporter.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <onnx/onnx_pb.h>

#include "onnx_tensor.h"
#include "strata/error.h"

namespace strata {

void exportOnnxWithWeights(const std::filesystem::path& source, const Graph& weights,
                           const std::filesystem::path& destination,
                           const std::map<std::string, std::string>& metadata) {
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
  for (const auto& [key, value] : metadata) {
    onnx::StringStringEntryProto* entry = nullptr;
    for (auto& existing : *model.mutable_metadata_props()) {
      entry = existing.key() == key ? &existing : entry;
    }
    if (entry == nullptr) {
      entry = model.add_metadata_props();
      entry->set_key(key);
    }
    entry->set_value(value);
  }
  std::ofstream out(destination, std::ios::binary | std::ios::trunc);
  if (!out || !model.SerializeToOstream(&out)) {
    fail("{}: cannot write the exported model", destination.string());
  }
}

std::map<std::string, std::string> readOnnxMetadata(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto model;
  if (!in || !model.ParseFromIstream(&in)) {
    fail("{}: cannot read the model's metadata (not an ONNX model?)", path.string());
  }
  std::map<std::string, std::string> metadata;
  for (const auto& entry : model.metadata_props()) {
    metadata[entry.key()] = entry.value();
  }
  return metadata;
}

}  // namespace strata
