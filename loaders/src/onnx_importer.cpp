#include "strata/loaders/onnx_importer.h"

#include <fstream>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/ranges.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include "onnx_tensor.h"
#include "opset_downgrade.h"
#include "strata/error.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

constexpr std::int64_t kMinOpset = 13;
constexpr std::int64_t kMaxOpset = 17;

onnx::ModelProto parseModel(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    fail("{}: no such file", file.string());
  }
  if (std::filesystem::is_directory(file, ec)) {
    fail("{}: is a directory, not an .onnx file", file.string());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("{}: cannot be opened for reading", file.string());
  }
  const std::uintmax_t bytes = std::filesystem::file_size(file, ec);
  if (!ec && bytes == 0) {
    fail("{}: is empty, not an ONNX model", file.string());
  }
  onnx::ModelProto model;
  // Parsed from the stream, so the weights are copied once, into the model (read into a string first, they were
  // copied three times: `strata inspect` on VGG16 in float64, a 1 GB file, took 6.2-9.7 s and 3.3 GB, now 2.8-3.0 s
  // and 2.3 GB).
  if (!model.ParseFromIstream(&in)) {
    fail("{}: not an ONNX model, or a truncated one (protobuf parse of {} bytes failed)", file.string(), bytes);
  }
  if (!model.has_graph() || model.ir_version() <= 0) {
    fail("{}: not an ONNX model (no graph or IR version in the protobuf)", file.string());
  }
  return model;
}

std::int64_t defaultOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      return opset.version();
    }
  }
  return 0;
}

// Loads external initializer data now, so the checker and the converter see one self-contained model.
void internalizeExternalData(onnx::ModelProto& model, const std::filesystem::path& file) {
  for (auto& init : *model.mutable_graph()->mutable_initializer()) {
    if (init.data_location() != onnx::TensorProto::EXTERNAL) {
      continue;
    }
    const std::string context = fmt::format("{}: initializer '{}'", file.string(), init.name());
    const Tensor tensor = detail::tensorFromProto(init, context, file.parent_path());
    init.set_raw_data(std::string(static_cast<const char*>(tensor.rawData()), tensor.bytes()));
    init.clear_external_data();
    init.set_data_location(onnx::TensorProto::DEFAULT);
  }
}

TensorMeta metaFromType(const onnx::TypeProto& type, const std::string& context) {
  if (!type.has_tensor_type()) {
    fail("{}: is not a tensor (sequences, maps and optionals are not supported)", context);
  }
  const auto& tensorType = type.tensor_type();
  const auto dtype = dtypeFromOnnx(tensorType.elem_type());
  if (!dtype) {
    fail("{}: dtype {} is not supported", context, onnxTypeName(tensorType.elem_type()));
  }
  TensorMeta meta{*dtype, {}};
  if (!tensorType.has_shape()) {
    fail("{}: has no declared shape (rank unknown)", context);
  }
  for (const auto& dim : tensorType.shape().dim()) {
    meta.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  }
  return meta;
}

AttributeValue convertAttribute(const onnx::AttributeProto& attr, const std::string& context) {
  switch (attr.type()) {
    case onnx::AttributeProto::INT:
      return attr.i();
    case onnx::AttributeProto::FLOAT:
      return attr.f();
    case onnx::AttributeProto::STRING:
      return attr.s();
    case onnx::AttributeProto::INTS:
      return std::vector<std::int64_t>(attr.ints().begin(), attr.ints().end());
    case onnx::AttributeProto::FLOATS:
      return std::vector<float>(attr.floats().begin(), attr.floats().end());
    case onnx::AttributeProto::STRINGS:
      return std::vector<std::string>(attr.strings().begin(), attr.strings().end());
    case onnx::AttributeProto::TENSOR:
      return detail::tensorFromProto(attr.t(), context);
    default:
      fail("{}: attribute '{}' has a type Strata does not support (graphs, sparse tensors, type protos)", context,
           attr.name());
  }
}

// Note [Before the version converter]: ONNX's version converter (libonnx) builds its own IR of the graph and
// crashes (a null dereference in graphProtoToGraph) on some graphs the checker accepts, such as a graph output
// that no node, initializer or input produces (found by tests/fuzz/onnx_importer_fuzzer). A crash cannot be caught,
// so the structure the converter relies on is checked here first, with an error that names what is wrong.
void checkGraphOutputsAreProduced(const onnx::GraphProto& graph, const std::filesystem::path& file) {
  std::unordered_set<std::string> produced;
  for (const auto& init : graph.initializer()) {
    produced.insert(init.name());
  }
  for (const auto& input : graph.input()) {
    produced.insert(input.name());
  }
  for (const auto& node : graph.node()) {
    produced.insert(node.output().begin(), node.output().end());
  }
  for (const auto& output : graph.output()) {
    if (!produced.contains(output.name())) {
      fail("{}: graph output '{}' is not produced by the graph", file.string(), output.name());
    }
  }
}

// ONNX's shape inference for convolutions and pooling (libonnx's convPoolShapeInference) divides by strides and
// dilations: a zero one stops the process with SIGFPE (found by tests/fuzz/onnx_importer_fuzzer). These attributes
// must be positive for every op that has them, so a zero or negative one is refused before inference runs.
void checkConvPoolAttributes(const onnx::GraphProto& graph, const std::filesystem::path& file) {
  for (int n = 0; n < graph.node_size(); ++n) {
    const auto& node = graph.node(n);
    for (const auto& attr : node.attribute()) {
      if (attr.name() != "strides" && attr.name() != "dilations" && attr.name() != "kernel_shape") {
        continue;
      }
      for (const std::int64_t v : attr.ints()) {
        if (v <= 0) {
          const std::string name = node.name().empty() ? fmt::format("{}_{}", node.op_type(), n) : node.name();
          fail("{}: node '{}' ({}): attribute {} [{}] must hold positive values", file.string(), name, node.op_type(),
               attr.name(), fmt::join(attr.ints(), ", "));
        }
      }
    }
  }
}

// libonnx's convolution shape inference also reads one dilation per dimension of the weight beyond the first two,
// but has only one per spatial dimension of the input: a weight whose rank differs from the input's reads past the
// end (a SEGV, found by tests/fuzz/onnx_importer_fuzzer). Where both ranks are known before inference (graph inputs
// and initializers), they must agree. Note [Before the version converter] says why this is checked, not caught.
void checkConvWeightRanks(const onnx::GraphProto& graph, const std::filesystem::path& file) {
  std::unordered_map<std::string, int> rank;
  for (const auto& input : graph.input()) {
    if (input.type().has_tensor_type() && input.type().tensor_type().has_shape()) {
      rank[input.name()] = input.type().tensor_type().shape().dim_size();
    }
  }
  for (const auto& init : graph.initializer()) {
    rank[init.name()] = init.dims_size();
  }
  for (int n = 0; n < graph.node_size(); ++n) {
    const auto& node = graph.node(n);
    const std::string& op = node.op_type();
    const int weight = op == "QLinearConv" ? 3 : 1;
    if ((op != "Conv" && op != "ConvTranspose" && op != "ConvInteger" && op != "QLinearConv") ||
        node.input_size() <= weight) {
      continue;
    }
    const auto data = rank.find(node.input(0));
    const auto kernel = rank.find(node.input(weight));
    // An input whose rank is known only after inference (an intermediate value) cannot be compared; a weight of
    // rank 3 to 5 (1-D to 3-D convolutions) keeps ONNX's read within a few elements of a real one (finding 9).
    if (kernel != rank.end() && (kernel->second < 3 || kernel->second > 5)) {
      const std::string name = node.name().empty() ? fmt::format("{}_{}", op, n) : node.name();
      fail("{}: node '{}' ({}): weight '{}' has rank {}; convolutions take weights of rank 3 to 5", file.string(), name,
           op, node.input(weight), kernel->second);
    }
    if (data != rank.end() && kernel != rank.end() && data->second != kernel->second) {
      const std::string name = node.name().empty() ? fmt::format("{}_{}", op, n) : node.name();
      fail("{}: node '{}' ({}): weight '{}' has rank {} but input '{}' has rank {}; they must agree", file.string(),
           name, op, node.input(weight), kernel->second, node.input(0), data->second);
    }
  }
}

struct UnsupportedOp {
  int count = 0;
  std::string firstNode;
};

Graph convertGraph(const onnx::ModelProto& model, const std::filesystem::path& file, const ImportOptions& options) {
  const onnx::GraphProto& proto = model.graph();
  Graph graph;
  graph.name = proto.name();
  graph.sourcePath = file.string();
  graph.opsetVersion = defaultOpset(model);
  std::unordered_map<std::string, int> ids;

  for (const auto& init : proto.initializer()) {
    Value value;
    value.name = init.name();
    value.constant = detail::tensorFromProto(init, fmt::format("{}: initializer '{}'", file.string(), init.name()),
                                             file.parent_path());
    value.meta = value.constant.meta();
    value.isInitializer = true;
    const std::string name = value.name;  // read before the move below
    ids[name] = graph.addValue(std::move(value));
  }
  for (const auto& input : proto.input()) {
    if (ids.count(input.name()) != 0) {
      continue;  // an initializer listed as an input (IR < 4 style): it stays a constant
    }
    Value value;
    value.name = input.name();
    value.meta = metaFromType(input.type(), fmt::format("{}: graph input '{}'", file.string(), input.name()));
    const int id = graph.addValue(std::move(value));
    ids[input.name()] = id;
    graph.inputs.push_back(id);
  }

  std::map<std::string, UnsupportedOp> unsupported;
  const OpRegistry& registry = OpRegistry::instance();
  for (int n = 0; n < proto.node_size(); ++n) {
    const auto& nodeProto = proto.node(n);
    Node node;
    node.opType = nodeProto.op_type();
    node.domain = nodeProto.domain();
    node.name = nodeProto.name().empty() ? fmt::format("{}_{}", node.opType, n) : nodeProto.name();
    const bool defaultDomain = node.domain.empty() || node.domain == "ai.onnx";
    const std::string qualified = defaultDomain ? node.opType : node.domain + ":" + node.opType;
    if (!defaultDomain || !registry.supports(node.opType, DeviceType::CPU)) {
      auto& entry = unsupported[qualified];
      if (entry.count++ == 0) {
        entry.firstNode = node.name;
      }
    }
    const std::string context = fmt::format("{}: node '{}' ({})", file.string(), node.name, qualified);
    for (const auto& attr : nodeProto.attribute()) {
      if (attr.type() == onnx::AttributeProto::GRAPH || attr.type() == onnx::AttributeProto::GRAPHS) {
        continue;  // control flow: reported as an unsupported op above
      }
      node.attrs.set(attr.name(), convertAttribute(attr, context));
    }
    for (const auto& name : nodeProto.input()) {
      if (name.empty()) {
        node.inputs.push_back(kNoValue);
        continue;
      }
      auto it = ids.find(name);
      if (it == ids.end()) {
        fail("{}: input '{}' is not produced by any earlier node, initializer or graph input", context, name);
      }
      node.inputs.push_back(it->second);
    }
    for (const auto& name : nodeProto.output()) {
      if (name.empty()) {
        node.outputs.push_back(kNoValue);
        continue;
      }
      Value value;
      value.name = name;
      value.producer = static_cast<int>(graph.nodes.size());
      const int id = graph.addValue(std::move(value));
      ids[name] = id;
      node.outputs.push_back(id);
    }
    graph.nodes.push_back(std::move(node));
  }

  if (!unsupported.empty() && options.requireSupportedOps) {
    std::string list;
    for (const auto& [type, entry] : unsupported) {
      list += fmt::format("{}{} x{} (first: node '{}')", list.empty() ? "" : ", ", type, entry.count, entry.firstNode);
    }
    fail("{}: unsupported operators: {}", file.string(), list);
  }

  for (const auto& output : proto.output()) {
    auto it = ids.find(output.name());
    if (it == ids.end()) {
      fail("{}: graph output '{}' is not produced by the graph", file.string(), output.name());
    }
    graph.outputs.push_back(it->second);
  }
  // Declared dtypes of values that inference or the exporter annotated; kernels' shape functions fill the rest.
  for (const auto& info : proto.value_info()) {
    auto it = ids.find(info.name());
    if (it != ids.end() && info.type().has_tensor_type()) {
      if (auto dtype = dtypeFromOnnx(info.type().tensor_type().elem_type())) {
        graph.values[static_cast<std::size_t>(it->second)].meta.dtype = *dtype;
      }
    }
  }
  return graph;
}

}  // namespace

Graph importOnnx(const std::filesystem::path& file, const ImportOptions& options) {
  onnx::ModelProto model = parseModel(file);
  internalizeExternalData(model, file);

  const std::int64_t fileOpset = defaultOpset(model);
  std::int64_t opset = fileOpset;
  if (opset > kMaxOpset && opset <= kNewestDowngradableOpset) {
    downgradeToOpset17(model, file, opset);  // Note [Opsets above 17]
    opset = defaultOpset(model);
  }
  // Note [Newer IR versions]: PyTorch >= 2.9 writes IR version 10 (its default exporter, onnx >= 1.16), newer than
  // the IR 8 that this build's ONNX library (Debian 12's 1.12) checks, which refuses any newer file. IR 9 and 10
  // added types (8-bit floats, 4-bit integers) and function features that Strata does not run: a newer model
  // is checked as IR 8, and a tensor of a newer type is still refused by name below. Opsets 18..23 are rewritten
  // as 17 first (Note [Opsets above 17]); newer ones reach the converter, whose error says how to export.
  if (model.ir_version() > onnx::Version::IR_VERSION) {
    model.set_ir_version(onnx::Version::IR_VERSION);
  }
  const std::string exportHint = opset > kMaxOpset
                                     ? fmt::format(
                                           " (export at opset {}: PyTorch's torch.onnx.export(..., opset_version={}, "
                                           "dynamo=False))",
                                           kMaxOpset, kMaxOpset)
                                     : "";
  if (options.runChecker) {
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception& e) {
      fail("{}: the ONNX checker rejected the model: {}{}", file.string(), e.what(), exportHint);
    }
  }
  // A model without the default domain (opset 0) has nothing to convert; its ops are reported as unsupported.
  if (opset != 0 && (opset < kMinOpset || opset > kMaxOpset)) {
    checkGraphOutputsAreProduced(model.graph(), file);
    try {
      model = onnx::version_conversion::ConvertVersion(model, static_cast<int>(kMaxOpset));
    } catch (const std::exception& e) {
      fail("{}: opset {} is outside the supported {}..{} and ONNX's version converter could not convert it: {}{}",
           file.string(), opset, kMinOpset, kMaxOpset, e.what(), exportHint);
    }
  }
  checkConvPoolAttributes(model.graph(), file);
  checkConvWeightRanks(model.graph(), file);
  try {
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    fail("{}: ONNX shape inference failed: {}", file.string(), e.what());
  }
  Graph graph = convertGraph(model, file, options);
  graph.fileOpsetVersion = fileOpset;
  return graph;
}

}  // namespace strata
