#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/attributes.h"
#include "strata/device.h"
#include "strata/stream.h"
#include "strata/tensor.h"

namespace strata {

// What shape inference knows about one input of a node. Absent optional inputs have present == false.
struct InputInfo {
  bool present = false;
  TensorMeta meta;
  const Tensor* constant = nullptr;  // the value when it is known before running (folded shape arithmetic)
};

struct ShapeContext {
  const std::vector<InputInfo>& inputs;
  const Attributes& attrs;
  std::size_t outputCount;  // how many outputs the node declares (optional trailing ones may be unused)
  const std::string& nodeName;
  const std::string& opType;

  const InputInfo& input(std::size_t i) const;
  bool hasInput(std::size_t i) const { return i < inputs.size() && inputs[i].present; }
  // The constant value of input i; throws an Error naming the node when it is not known at plan time.
  const Tensor& constantInput(std::size_t i) const;
  [[noreturn]] void error(const std::string& why) const;
};

// Infers output dtypes and static shapes from the inputs' (static) shapes and attributes.
using ShapeFn = std::function<std::vector<TensorMeta>(const ShapeContext&)>;

// What a kernel sees when it is created, once per node, at plan build time (choose algorithms, build primitives).
struct KernelInit {
  std::vector<InputInfo> inputs;
  std::vector<TensorMeta> outputs;
  const Attributes& attrs;
  const std::string& nodeName;
  bool training = false;
};

// What a kernel sees at each run. Outputs are allocated by the executor with the inferred shapes.
struct KernelContext {
  std::vector<const Tensor*> inputs;  // nullptr for absent optional inputs
  std::vector<Tensor*> outputs;       // nullptr for outputs nobody reads
  bool training = false;
  std::uint64_t step = 0;    // counts runs; seeds per-step randomness such as dropout masks
  Stream* stream = nullptr;  // where device work is enqueued (the CPU stream runs it at once)
  // `step` in the plan's device memory when the run is being recorded (nullptr otherwise): kernels that read it
  // there, instead of taking `step` as a launch argument, can be replayed (Note [Recorded runs]).
  const std::uint64_t* deviceStep = nullptr;

  const Tensor& input(std::size_t i) const;
  bool hasInput(std::size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  Tensor& output(std::size_t i) const;
  bool hasOutput(std::size_t i) const { return i < outputs.size() && outputs[i] != nullptr; }
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(KernelContext& ctx) = 0;
  // Whether the kernel takes per-run randomness from KernelContext::deviceStep (so a replayed recording draws new
  // values each run); random ops whose kernel does not are never recorded.
  virtual bool readsDeviceStep() const { return false; }
  // The implementation the kernel runs, for `strata run --profile` (e.g. oneDNN's "jit:avx2" or "direct loop");
  // empty when there is only one.
  virtual std::string implementation() const { return {}; }
};

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const KernelInit&)>;

// Wraps a stateless function as a kernel.
std::unique_ptr<OpKernel> makeFunctionKernel(std::function<void(KernelContext&)> fn);

struct OpSchema {
  std::string type;
  ShapeFn inferShapes;
  // Whether the op may be evaluated at load time when all its inputs are constants (false for random ops).
  bool foldable = true;
  // Whether every backend runs it on float16/bfloat16 inputs (all floating inputs of one node in the same 16-bit
  // dtype, floating outputs in it too). Mixed precision keeps the other ops in float32 (graphs/autocast.h).
  bool lowPrecision = false;
  // With lowPrecision, when only some operands take the 16-bit dtype (batch norm keeps scale, bias and statistics
  // in float32, as cuDNN and PyTorch autocast do): those inputs and outputs. Empty: every floating one.
  std::vector<std::size_t> lowPrecisionInputs = {};
  std::vector<std::size_t> lowPrecisionOutputs = {};
};

// Whether operand i is among `slots` (OpSchema::lowPrecisionInputs or lowPrecisionOutputs); empty slots: all are.
bool isLowPrecisionSlot(const std::vector<std::size_t>& slots, std::size_t i);

// Op types (ONNX default domain) with their shape functions and per-device kernel factories.
class OpRegistry {
 public:
  // The registry with all built-in ops registered.
  static OpRegistry& instance();

  // The shape function of a layout-aware op is wrapped to infer channels_last = 1 nodes too.
  void addSchema(OpSchema schema);
  // Kernels of layout-aware ops (strata/channels_last.h) are wrapped so that they also run channels_last = 1
  // nodes, by transposing, except the nodes for which `nativeChannelsLast` says the factory reads the layout itself.
  void addKernel(const std::string& type, DeviceType device, KernelFactory factory,
                 std::function<bool(const KernelInit&)> nativeChannelsLast = nullptr);
  // Convenience: a schema plus a stateless CPU kernel.
  void addCpuOp(const std::string& type, ShapeFn infer, std::function<void(KernelContext&)> compute,
                bool foldable = true);

  const OpSchema* schema(std::string_view type) const;
  const KernelFactory* kernel(std::string_view type, DeviceType device) const;
  // The nativeChannelsLast a kernel was registered with (nullptr: none), for code that wraps a registered kernel
  // and registers the wrapper (low-precision emulation) without losing it.
  std::function<bool(const KernelInit&)> nativeChannelsLast(std::string_view type, DeviceType device) const;
  bool supports(std::string_view type, DeviceType device) const { return kernel(type, device) != nullptr; }
  std::vector<std::string> opTypes() const;

 private:
  std::map<std::string, OpSchema, std::less<>> schemas_;
  std::map<std::pair<std::string, DeviceType>, KernelFactory> kernels_;
  std::map<std::pair<std::string, DeviceType>, std::function<bool(const KernelInit&)>> nativeChannelsLast_;
};

// Runs one op eagerly: infers shapes, creates the kernel for `device`, allocates outputs and computes them; the
// outputs are returned in host memory. Used for constant folding (on the CPU) and in tests.
std::vector<Tensor> runOpEagerly(const std::string& type, const std::vector<const Tensor*>& inputs,
                                 const Attributes& attrs, std::size_t outputCount = 1, bool training = false,
                                 Device device = Device::cpu());

}  // namespace strata
