#include "strata/graphs/channels_last.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "strata/channels_last.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

const Shape kInput{4, 3, 8, 8};

// x -> Conv (2x2, stride 2) -> c -> Transpose to NHWC -> LayerNorm -> MatMul -> Transpose to NCHW -> Mul(gamma
// [4,1,1]) -> Add(c) -> GlobalAveragePool -> Flatten -> Gemm -> y[N, 10]: ConvNeXt's block in miniature, whose
// own Transposes meet the channels-last values and whose layer scale broadcasts from rank 3.
onnx::ModelProto convNextLikeModel() {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3, 8, 8});
  addInitializer(model, "w", {4, 3, 2, 2}, randomValues(48, 11, 0.4f));
  addInitializer(model, "ln_scale", {4}, {1.0f, 0.9f, 1.1f, 1.2f});
  addInitializer(model, "ln_bias", {4}, randomValues(4, 12, 0.1f));
  addInitializer(model, "wl", {4, 4}, randomValues(16, 13, 0.5f));
  addInitializer(model, "gamma", {4, 1, 1}, randomValues(4, 14, 1.0f));
  addInitializer(model, "wf", {10, 4}, randomValues(40, 15, 0.3f));
  auto* conv = addNode(model, "Conv", {"x", "w"}, {"c"}, "patchify");
  setInts(conv, "strides", {2, 2});
  setInts(addNode(model, "Transpose", {"c"}, {"t"}, "to_nhwc"), "perm", {0, 2, 3, 1});
  addNode(model, "LayerNormalization", {"t", "ln_scale", "ln_bias"}, {"ln"}, "norm");
  addNode(model, "MatMul", {"ln", "wl"}, {"m"}, "pointwise");
  setInts(addNode(model, "Transpose", {"m"}, {"back"}, "to_nchw"), "perm", {0, 3, 1, 2});
  addNode(model, "Mul", {"back", "gamma"}, {"scaled"}, "layer_scale");
  addNode(model, "Add", {"scaled", "c"}, {"sum"}, "residual");
  addNode(model, "GlobalAveragePool", {"sum"}, {"pooled"}, "pool");
  addNode(model, "Flatten", {"pooled"}, {"flat"}, "flatten");
  setInt(addNode(model, "Gemm", {"flat", "wf"}, {"y"}, "fc"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 10});
  return model;
}

// x -> Conv -> c1 -> Relu -> r1 -> Conv -> c2 -> Concat(r1, c2 along the channels, axis given as -3) -> BatchNorm ->
// GlobalAveragePool -> Flatten -> Gemm -> y[N, 10]: DenseNet's join in miniature.
onnx::ModelProto denseJoinModel() {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3, 8, 8});
  addInitializer(model, "w1", {4, 3, 3, 3}, randomValues(108, 21, 0.4f));
  addInitializer(model, "w2", {2, 4, 1, 1}, randomValues(8, 22, 0.5f));
  addInitializer(model, "scale", {6}, {1.0f, 0.9f, 1.1f, 1.2f, 0.8f, 1.0f});
  addInitializer(model, "shift", {6}, randomValues(6, 23, 0.1f));
  addInitializer(model, "mean", {6}, {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  addInitializer(model, "var", {6}, {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  addInitializer(model, "wf", {10, 6}, randomValues(60, 24, 0.3f));
  setInts(addNode(model, "Conv", {"x", "w1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  addNode(model, "Relu", {"c1"}, {"r1"}, "relu1");
  addNode(model, "Conv", {"r1", "w2"}, {"c2"}, "conv2");
  setInt(addNode(model, "Concat", {"r1", "c2"}, {"joined"}, "join"), "axis", -3);
  setInt(addNode(model, "BatchNormalization", {"joined", "scale", "shift", "mean", "var"}, {"n"}, "bn"),
         "training_mode", 1);
  addNode(model, "GlobalAveragePool", {"n"}, {"pooled"}, "pool");
  addNode(model, "Flatten", {"pooled"}, {"flat"}, "flatten");
  setInt(addNode(model, "Gemm", {"flat", "wf"}, {"y"}, "fc"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 10});
  return model;
}

// x -> Conv -> c -> Resize (bilinear x2, scales) -> u -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm ->
// y[N, 10]: a decoder's upsampling between two convolutions.
onnx::ModelProto upsamplingModel() {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3, 8, 8});
  addInitializer(model, "w1", {4, 3, 3, 3}, randomValues(108, 31, 0.4f));
  addInitializer(model, "w2", {5, 4, 3, 3}, randomValues(180, 32, 0.3f));
  addInitializer(model, "scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  addInitializer(model, "wf", {10, 5}, randomValues(50, 33, 0.3f));
  setInts(addNode(model, "Conv", {"x", "w1"}, {"c"}, "conv1"), "pads", {1, 1, 1, 1});
  auto* resize = addNode(model, "Resize", {"c", "", "scales"}, {"u"}, "upsample");
  auto* mode = resize->add_attribute();
  mode->set_name("mode");
  mode->set_type(onnx::AttributeProto::STRING);
  mode->set_s("linear");
  setInts(addNode(model, "Conv", {"u", "w2"}, {"c2"}, "conv2"), "pads", {1, 1, 1, 1});
  addNode(model, "Relu", {"c2"}, {"r2"}, "relu2");
  addNode(model, "GlobalAveragePool", {"r2"}, {"pooled"}, "pool");
  addNode(model, "Flatten", {"pooled"}, {"flat"}, "flatten");
  setInt(addNode(model, "Gemm", {"flat", "wf"}, {"y"}, "fc"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 10});
  return model;
}

Graph import(const testing::TempDir& dir, const onnx::ModelProto& model, const std::string& name) {
  return importOnnx(testing::save(model, dir / (name + ".onnx")));
}

const Node* nodeNamed(const Graph& graph, const std::string& name) {
  for (const Node& node : graph.nodes) {
    if (node.name == name)
      return &node;
  }
  return nullptr;
}

Graph rewritten(const Graph& model, ChannelsLastReport& report) {
  SpecializeOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, kInput}};
  options.training = true;
  return specialize(channelsLast(specialize(model, options), &report), options);
}

TEST(ChannelsLastTest, MarksTheLayoutNodesAndTransposesAtTheEdges) {
  testing::TempDir dir;
  ChannelsLastReport report;
  const Graph graph = rewritten(import(dir, testing::smallCnnModel(), "cnn"), report);
  for (const char* name : {"conv1", "bn1", "pool1", "conv2", "conv3"}) {
    const Node* node = nodeNamed(graph, name);
    ASSERT_NE(node, nullptr) << name;
    EXPECT_EQ(node->attrs.getInt("channels_last", 0), 1) << name;
  }
  const Node* conv1 = nodeNamed(graph, "conv1");
  EXPECT_EQ(graph.values[static_cast<std::size_t>(conv1->outputs[0])].meta.shape, (Shape{4, 8, 8, 4}));
  EXPECT_EQ(graph.values[static_cast<std::size_t>(conv1->inputs[1])].meta.shape, (Shape{4, 3, 3, 3}));  // KRSC
  EXPECT_EQ(report.layoutNodes, 5);
  EXPECT_EQ(report.elementwiseNodes, 4);  // relu1, relu2, residual, bias
  // In: x, w1, w2 (once for both convs) and bias2 (broadcast from [4, 1, 1]); out: before Flatten.
  EXPECT_EQ(report.transposes, 5);
  EXPECT_EQ(nodeNamed(graph, "fc")->attrs.has("channels_last"), false);
}

TEST(ChannelsLastTest, AModelsOwnTransposesMeetTheChannelsLastValues) {
  testing::TempDir dir;
  ChannelsLastReport report;
  const Graph graph = rewritten(import(dir, convNextLikeModel(), "convnext"), report);
  EXPECT_EQ(nodeNamed(graph, "to_nhwc"), nullptr) << "the patchify conv already gives NHWC";
  EXPECT_EQ(nodeNamed(graph, "to_nchw"), nullptr) << "layer_scale reads the NHWC MatMul result directly";
  EXPECT_EQ(report.layoutNodes, 2);       // patchify and the pooling (a ReduceMean over H and W)
  EXPECT_EQ(report.elementwiseNodes, 2);  // layer_scale and residual
  EXPECT_EQ(report.transposes, 4);        // x, w, gamma in; the pooled [N, 1, 1, C] out
  const Node* pool = nodeNamed(graph, "pool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->opType, "ReduceMean");
}

TEST(ChannelsLastTest, AConcatOfChannelsLastValuesJoinsThemWithoutTransposes) {
  testing::TempDir dir;
  ChannelsLastReport report;
  const Graph graph = rewritten(import(dir, denseJoinModel(), "dense"), report);
  const Node* join = nodeNamed(graph, "join");
  ASSERT_NE(join, nullptr);
  EXPECT_EQ(join->attrs.getInt("axis", 0), 3);  // the channels of [N, H, W, C]
  EXPECT_EQ(graph.values[static_cast<std::size_t>(join->outputs[0])].meta.shape, (Shape{4, 8, 8, 6}));
  EXPECT_EQ(nodeNamed(graph, "bn")->attrs.getInt("channels_last", 0), 1) << "the batch norm reads the join";
  EXPECT_EQ(report.elementwiseNodes, 2);  // relu1 and the join
  EXPECT_EQ(report.transposes, 4);        // x, w1 and w2 in; the pooled [N, 1, 1, C] out
  for (int input : join->inputs)          // both read as conv1's and conv2's channels-last outputs
    EXPECT_EQ(graph.values[static_cast<std::size_t>(input)].meta.shape[1], 8) << graph.values[input].name;
}

TEST(ChannelsLastTest, LeavesWhatItCannotRunChannelsLast) {
  testing::TempDir dir;
  onnx::ModelProto model = testing::smallCnnModel();
  // Asymmetric pads on conv1, and pool1's Indices read by the graph.
  for (auto& node : *model.mutable_graph()->mutable_node()) {
    if (node.name() == "conv1") {
      node.mutable_attribute(0)->clear_ints();
      for (std::int64_t p : {0, 1, 2, 1})
        node.mutable_attribute(0)->add_ints(p);
    }
    if (node.name() == "pool1")
      node.add_output("indices");
  }
  testing::setTensorType(model.mutable_graph()->add_output(), "indices", onnx::TensorProto::INT64, {-1, 4, 4, 4});
  ChannelsLastReport report;
  const Graph graph = rewritten(import(dir, model, "partial"), report);
  EXPECT_FALSE(nodeNamed(graph, "conv1")->attrs.has("channels_last"));
  EXPECT_FALSE(nodeNamed(graph, "bn1")->attrs.has("channels_last")) << "its input is channels-first";
  EXPECT_FALSE(nodeNamed(graph, "pool1")->attrs.has("channels_last"));
  EXPECT_EQ(nodeNamed(graph, "conv2")->attrs.getInt("channels_last", 0), 1);
}

// A Resize between channels-last convolutions follows their layout: no Transpose on either side of it.
TEST(ChannelsLastTest, AResizeOfAChannelsLastValueStaysChannelsLast) {
  testing::TempDir dir;
  ChannelsLastReport report;
  const Graph graph = rewritten(import(dir, upsamplingModel(), "upsampling"), report);
  const Node* resize = nodeNamed(graph, "upsample");
  ASSERT_NE(resize, nullptr);
  EXPECT_EQ(resize->attrs.getInt("channels_last", 0), 1);
  EXPECT_EQ(graph.values[static_cast<std::size_t>(resize->outputs[0])].meta.shape, (Shape{4, 16, 16, 4}));
  EXPECT_EQ(nodeNamed(graph, "conv2")->attrs.getInt("channels_last", 0), 1);
  for (const Node& node : graph.nodes) {
    if (node.opType == "Transpose") {
      EXPECT_NE(node.outputs[0], resize->inputs[0]) << node.name;
      EXPECT_NE(node.inputs[0], resize->outputs[0]) << node.name;
    }
  }
  EXPECT_EQ(report.layoutNodes, 4);  // two Convs, the Resize and the pooling (a ReduceMean)
}

// ---- Training: the same step with and without the rewrite ----

struct Batch {
  Tensor x;
  Tensor labels;
};

Batch batch() {
  Batch b{testing::randomTensor(kInput, 7), Tensor::empty(DType::Int64, {kInput[0]})};
  for (std::int64_t i = 0; i < kInput[0]; ++i)
    b.labels.data<std::int64_t>()[i] = (3 * i + 1) % 10;
  return b;
}

TrainingPlanOptions options(bool channelsLast, std::optional<DType> low = std::nullopt) {
  TrainingPlanOptions o;
  o.inputMetas = {TensorMeta{DType::Float32, kInput}};
  o.channelsLast = channelsLast;
  o.mixedPrecision = low;
  return o;
}

double relativeError(const Tensor& actual, const Tensor& expected) {
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double e = expected.data<float>()[i];
    diff += (actual.data<float>()[i] - e) * (actual.data<float>()[i] - e);
    norm += e * e;
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Note [Channels-last weights]: every 4-D weight the rewritten plan reads is stored [K, R, S, C], and neither pass
// transposes a parameter or its gradient.
void expectWeightsStoredChannelsLast(TrainingPlan& reference, TrainingPlan& rewritten) {
  ASSERT_EQ(rewritten.parameterNames(), reference.parameterNames()) << "same parameters, same (first-use) order";
  std::size_t stored = 0;
  for (std::size_t i = 0; i < reference.parameters().size(); ++i) {
    const Shape& model = reference.parameters().info(i).meta.shape;
    const Shape& kept = rewritten.parameters().info(i).meta.shape;
    EXPECT_EQ(kept, model.size() == 4 ? toChannelsLast(model) : model) << reference.parameterNames()[i];
    EXPECT_EQ(rewritten.storedChannelsLast(i), model.size() == 4) << reference.parameterNames()[i];
    stored += model.size() == 4 ? 1 : 0;
  }
  EXPECT_GT(stored, 0u);
  EXPECT_EQ(rewritten.channelsLastParameters().size(), stored);
  EXPECT_TRUE(reference.channelsLastParameters().empty());
  const TrainingGraph& training = rewritten.trainingGraph();
  for (const Node& node : training.graph.nodes) {
    if (node.opType != "Transpose")
      continue;
    for (std::size_t p = 0; p < training.parameters.size(); ++p) {
      EXPECT_NE(node.inputs[0], training.parameters[p]) << node.name << " transposes a parameter";
      EXPECT_NE(node.outputs[0], training.parameterGrads[p]) << node.name << " transposes a parameter's gradient";
    }
  }
}

// Two steps (the second after an SGD-like update of every parameter), so running statistics and updated weights
// flow through the rewritten plan too; then evaluation and the exported weights.
void expectSameTraining(const Graph& model, std::optional<DType> low, double tolerance) {
  const Batch data = batch();
  TrainingPlan reference(model, options(false, low));
  TrainingPlan rewritten(model, options(true, low));
  EXPECT_GT(rewritten.channelsLastReport().layoutNodes, 0);
  expectWeightsStoredChannelsLast(reference, rewritten);
  for (int step = 0; step < 2; ++step) {
    const StepResult expected = reference.step({data.x}, data.labels);
    const StepResult actual = rewritten.step({data.x}, data.labels);
    const float want = *expected.loss.data<float>();
    EXPECT_NEAR(*actual.loss.data<float>(), want, tolerance * std::abs(want)) << "step " << step;
    ASSERT_EQ(rewritten.parameters().size(), reference.parameters().size());
    for (std::size_t i = 0; i < reference.parameters().size(); ++i) {
      EXPECT_LT(relativeError(rewritten.channelsFirstGradient(i), reference.parameters().gradient(i)), tolerance)
          << reference.parameterNames()[i] << " step " << step;
      for (TrainingPlan* plan : {&reference, &rewritten}) {
        Tensor p = plan->parameters().parameter(i);
        const Tensor g = plan->parameters().gradient(i);
        for (std::int64_t k = 0; k < p.numel(); ++k)
          p.data<float>()[k] -= 0.1f * g.data<float>()[k];
      }
    }
    reference.parameters().bumpVersion();  // the weights changed (Note [Weight cache])
    rewritten.parameters().bumpVersion();
    for (std::size_t i = 0; i < reference.buffers().size(); ++i) {
      EXPECT_LT(relativeError(rewritten.buffers()[i].second, reference.buffers()[i].second), tolerance)
          << reference.buffers()[i].first;
    }
  }
  // Evaluation reads the stored weights through the same layout; the exported model has the model's own.
  const std::vector<Tensor> expected = reference.evaluate({data.x});
  const std::vector<Tensor> actual = rewritten.evaluate({data.x});
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t o = 0; o < expected.size(); ++o)
    EXPECT_LT(relativeError(actual[o], expected[o]), tolerance) << "evaluation output " << o;
  const Graph exportedReference = reference.modelWithCurrentWeights();
  const Graph exported = rewritten.modelWithCurrentWeights();
  for (std::size_t i = 0; i < reference.parameters().size(); ++i) {
    const int id = exportedReference.findValue(reference.parameterNames()[i]);
    ASSERT_NE(id, kNoValue) << reference.parameterNames()[i];
    const Tensor& want = exportedReference.values[static_cast<std::size_t>(id)].constant;
    const Tensor& got =
        exported.values[static_cast<std::size_t>(exported.findValue(reference.parameterNames()[i]))].constant;
    ASSERT_EQ(got.meta(), want.meta()) << reference.parameterNames()[i];
    EXPECT_LT(relativeError(got, want), tolerance) << reference.parameterNames()[i];
  }
}

TEST(ChannelsLastTrainingTest, SmallCnnTrainsAsChannelsFirst) {
  testing::TempDir dir;
  expectSameTraining(import(dir, testing::smallCnnModel(), "cnn"), std::nullopt, 1e-5);
}

TEST(ChannelsLastTrainingTest, ConvNextBlockTrainsAsChannelsFirst) {
  testing::TempDir dir;
  expectSameTraining(import(dir, convNextLikeModel(), "convnext"), std::nullopt, 1e-5);
}

TEST(ChannelsLastTrainingTest, DenseJoinTrainsAsChannelsFirst) {
  testing::TempDir dir;
  // 1e-4: a batch norm's scale gradient is a cancelling sum, and the two layouts add it in different orders; it
  // differed by 1.1e-5 in the ASan build on an AVX2 host. A misplaced channel is off by order 1.
  expectSameTraining(import(dir, denseJoinModel(), "dense"), std::nullopt, 1e-4);
}

// ResizeGrad's channels-last passes (Note [Separable resize]) against the channels-first plan.
TEST(ChannelsLastTrainingTest, UpsamplingTrainsAsChannelsFirst) {
  testing::TempDir dir;
  expectSameTraining(import(dir, upsamplingModel(), "upsampling"), std::nullopt, 1e-5);
}

TEST(ChannelsLastTrainingTest, Bfloat16TrainsAsChannelsFirstBfloat16) {
  testing::TempDir dir;
  expectSameTraining(import(dir, testing::smallCnnModel("AveragePool"), "cnn_avg"), DType::BFloat16, 1e-2);
}

}  // namespace
}  // namespace strata
