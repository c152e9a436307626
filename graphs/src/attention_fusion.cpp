#include "strata/graphs/attention_fusion.h"

#include <cmath>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "strata/graphs/producers.h"

namespace strata {
namespace {

constexpr double kMaskedBelow = -1e4;  // a fill value at or below it removes a score from the softmax

// A constant's values as doubles (any numeric dtype, bool as 0/1), or nullopt when the value is not a folded
// constant on the host (a trainable initializer never is).
std::optional<std::vector<double>> constantValues(const Graph& graph, int id) {
  if (id == kNoValue)
    return std::nullopt;
  const Value& value = graph.values[static_cast<std::size_t>(id)];
  const Tensor& t = value.constant;
  if (value.isInitializer || !t.defined() || t.device().type != DeviceType::CPU)
    return std::nullopt;
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  bool numeric = true;
  visitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_arithmetic_v<T>) {
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<double>(t.data<T>()[i]);
    } else {
      numeric = false;
    }
  });
  return numeric ? std::optional(values) : std::nullopt;
}

std::optional<double> scalarValue(const Graph& graph, int id) {
  const auto values = constantValues(graph, id);
  return values && values->size() == 1 ? std::optional((*values)[0]) : std::nullopt;
}

// Whether a constant of shape [..., T, T] (leading dims 1) marks exactly the causal pattern: `masked(i, j)` must be
// true where j > i and false elsewhere.
template <typename Masked>
bool isCausal(const Graph& graph, int id, std::int64_t t, Masked masked) {
  const auto values = constantValues(graph, id);
  const Shape& shape = graph.values[static_cast<std::size_t>(id)].meta.shape;
  if (!values || shape.size() < 2 || shape[shape.size() - 1] != t || shape[shape.size() - 2] != t ||
      static_cast<std::int64_t>(values->size()) != t * t)
    return false;
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t j = 0; j < t; ++j) {
      if (masked((*values)[static_cast<std::size_t>(i * t + j)]) != (j > i))
        return false;
    }
  }
  return true;
}

struct Chain {
  int q = kNoValue;
  int k = kNoValue;
  int v = kNoValue;
  int scaleValue = kNoValue;  // the Mul's own scalar constant, exact in the model's dtype
  double scale = 1.0;         // otherwise (Div, or no scale): a constant made from this
  bool causal = false;
  std::vector<int> dropped;    // every node of the chain but the last MatMul (and K's transpose, when it stays)
  int retranspose = kNoValue;  // K's Transpose node when it stays, with this perm (producing K, not K^T)
  std::vector<std::int64_t> retransposePerm;
  int last = kNoValue;  // the MatMul with V, which becomes the fused node
};

class Matcher {
 public:
  explicit Matcher(const Graph& graph) : graph_(graph), readers_(readerCounts(graph)), consumers_(graph.values.size()) {
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      for (int input : graph.nodes[n].inputs) {
        if (input != kNoValue)
          consumers_[static_cast<std::size_t>(input)].push_back(static_cast<int>(n));
      }
    }
  }

  std::optional<Chain> match(int softmaxIndex) const {
    const Node& softmax = graph_.nodes[static_cast<std::size_t>(softmaxIndex)];
    if (softmax.opType != "Softmax" || softmax.inputs.size() != 1 || softmax.outputs.size() != 1)
      return std::nullopt;
    const TensorMeta& scoresMeta = meta(softmax.inputs[0]);
    const auto rank = static_cast<std::int64_t>(scoresMeta.shape.size());
    const std::int64_t axis = softmax.attrs.getInt("axis", -1);
    if (rank < 3 || (axis != -1 && axis != rank - 1))
      return std::nullopt;
    if (scoresMeta.dtype != DType::Float32 && scoresMeta.dtype != DType::Float64)
      return std::nullopt;
    const std::int64_t t = scoresMeta.shape.back();
    Chain chain;
    chain.dropped.push_back(softmaxIndex);
    // Backwards from the softmax: mask, scale, scores, K's transpose.
    int value = softmax.inputs[0];
    const Node* node = soleProducer(value);
    if (node == nullptr)
      return std::nullopt;
    if (node->opType == "Where" && node->inputs.size() == 3 && scoresMeta.shape[rank - 2] == t) {
      const auto fill = scalarValue(graph_, node->inputs[1]);
      if (!fill || !(*fill <= kMaskedBelow) || !isCausal(graph_, node->inputs[0], t, [](double c) { return c != 0.0; }))
        return std::nullopt;
      chain.causal = true;
      chain.dropped.push_back(indexOf(*node));
      value = node->inputs[2];
    } else if (node->opType == "Add" && node->inputs.size() == 2 && scoresMeta.shape[rank - 2] == t) {
      const auto masked = [](double m) {
        if (m != 0.0 && !(m <= kMaskedBelow))
          throw 0;  // neither kept nor masked: not a mask
        return m != 0.0;
      };
      const auto causalAt = [&](int id) {
        try {
          return isCausal(graph_, id, t, masked);
        } catch (int) {
          return false;
        }
      };
      const int scoresSide = causalAt(node->inputs[1])   ? node->inputs[0]
                             : causalAt(node->inputs[0]) ? node->inputs[1]
                                                         : kNoValue;
      if (scoresSide == kNoValue)
        return std::nullopt;
      chain.causal = true;
      chain.dropped.push_back(indexOf(*node));
      value = scoresSide;
    }
    node = soleProducer(value);
    if (node == nullptr)
      return std::nullopt;
    if ((node->opType == "Mul" || node->opType == "Div") && node->inputs.size() == 2) {
      const auto right = scalarValue(graph_, node->inputs[1]);
      const auto left = node->opType == "Mul" ? scalarValue(graph_, node->inputs[0]) : std::nullopt;
      if (right && *right != 0.0) {
        chain.scale = node->opType == "Mul" ? *right : 1.0 / *right;
        chain.scaleValue = node->opType == "Mul" ? node->inputs[1] : kNoValue;
        value = node->inputs[0];
      } else if (left) {
        chain.scale = *left;
        chain.scaleValue = node->inputs[0];
        value = node->inputs[1];
      } else {
        return std::nullopt;
      }
      chain.dropped.push_back(indexOf(*node));
      node = soleProducer(value);
      if (node == nullptr)
        return std::nullopt;
    }
    if (node->opType != "MatMul" || node->inputs.size() != 2)
      return std::nullopt;
    chain.dropped.push_back(indexOf(*node));
    chain.q = node->inputs[0];
    const Node* transpose = soleProducer(node->inputs[1]);
    if (transpose == nullptr || transpose->opType != "Transpose" || transpose->inputs.size() != 1)
      return std::nullopt;
    std::vector<std::int64_t> perm = transpose->attrs.getInts("perm", {});
    if (static_cast<std::int64_t>(perm.size()) != rank)
      return std::nullopt;
    // K^T = Transpose(X, perm), so K = Transpose(X, perm with its last two entries swapped): nothing at all when that
    // is the identity (the usual K.transpose(-2, -1)); otherwise the node stays with that perm (exporters merge the
    // heads' transpose with K's, [N, T, H, D] -> [N, H, D, T]).
    std::swap(perm[static_cast<std::size_t>(rank - 1)], perm[static_cast<std::size_t>(rank - 2)]);
    bool identity = true;
    for (std::int64_t d = 0; d < rank; ++d)
      identity = identity && perm[static_cast<std::size_t>(d)] == d;
    if (identity) {
      chain.dropped.push_back(indexOf(*transpose));
      chain.k = transpose->inputs[0];
    } else {
      chain.retranspose = indexOf(*transpose);
      chain.retransposePerm = perm;
      chain.k = transpose->outputs[0];
    }
    // Forwards from the softmax: an optional Dropout of ratio 0, then the MatMul with V.
    value = softmax.outputs[0];
    int reader = soleNodeReader(readers_, consumers_, value);
    if (reader == kNoValue)
      return std::nullopt;
    const Node* next = &graph_.nodes[static_cast<std::size_t>(reader)];
    if (next->opType == "Dropout") {
      const bool noMask = next->outputs.size() < 2 || next->outputs[1] == kNoValue ||
                          readers_[static_cast<std::size_t>(next->outputs[1])] == 0;
      const auto ratio = next->inputs.size() > 1 ? scalarValue(graph_, next->inputs[1]) : std::optional(0.5);
      if (!noMask || !ratio || *ratio != 0.0)
        return std::nullopt;
      chain.dropped.push_back(reader);
      value = next->outputs[0];
      reader = soleNodeReader(readers_, consumers_, value);
      if (reader == kNoValue)
        return std::nullopt;
      next = &graph_.nodes[static_cast<std::size_t>(reader)];
    }
    if (next->opType != "MatMul" || next->inputs.size() != 2 || next->inputs[0] != value)
      return std::nullopt;
    chain.v = next->inputs[1];
    chain.last = reader;
    return operandsFit(chain) ? std::optional(chain) : std::nullopt;
  }

 private:
  // Q [..., T, D], K [..., S, D] and V [..., S, Dv] with the same leading dims and one floating dtype.
  bool operandsFit(const Chain& c) const {
    const TensorMeta& q = meta(c.q);
    TensorMeta k = meta(c.k);
    if (c.retranspose != kNoValue)  // K^T as the transpose gives it
      std::swap(k.shape[k.shape.size() - 1], k.shape[k.shape.size() - 2]);
    const TensorMeta& v = meta(c.v);
    const std::size_t rank = q.shape.size();
    if (rank < 3 || k.shape.size() != rank || v.shape.size() != rank || k.dtype != q.dtype || v.dtype != q.dtype)
      return false;
    for (std::size_t d = 0; d + 2 < rank; ++d) {
      if (k.shape[d] != q.shape[d] || v.shape[d] != q.shape[d] || q.shape[d] < 0)
        return false;
    }
    return k.shape[rank - 1] == q.shape[rank - 1] && v.shape[rank - 2] == k.shape[rank - 2] &&
           (!c.causal || k.shape[rank - 2] == q.shape[rank - 2]);
  }
  const TensorMeta& meta(int id) const { return graph_.values[static_cast<std::size_t>(id)].meta; }
  // The node producing `value` when it has that one output and the value has one reader (the chain's next node).
  const Node* soleProducer(int value) const {
    const Value& v = graph_.values[static_cast<std::size_t>(value)];
    if (v.producer == kNoValue || readers_[static_cast<std::size_t>(value)] != 1)
      return nullptr;
    const Node& node = graph_.nodes[static_cast<std::size_t>(v.producer)];
    return node.outputs.size() == 1 ? &node : nullptr;
  }
  int indexOf(const Node& node) const { return static_cast<int>(&node - graph_.nodes.data()); }

  const Graph& graph_;
  std::vector<int> readers_;
  std::vector<std::vector<int>> consumers_;
};

}  // namespace

Graph fuseAttention(const Graph& graph, int* fused) {
  const Matcher matcher(graph);
  std::vector<std::optional<Chain>> fusedAt(graph.nodes.size());
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    std::optional<Chain> chain = matcher.match(static_cast<int>(n));
    if (!chain)
      continue;
    for (const int d : chain->dropped)
      dropped[static_cast<std::size_t>(d)] = true;
    const auto last = static_cast<std::size_t>(chain->last);
    fusedAt[last] = std::move(chain);
    ++count;
  }
  Graph out = graph;
  for (std::size_t n = 0; n < out.nodes.size(); ++n) {
    if (!fusedAt[n])
      continue;
    const Chain& chain = *fusedAt[n];
    Node& node = out.nodes[n];
    Value lse;
    lse.name = fmt::format("{}/log_sum_exp", node.name);
    const TensorMeta& q = out.values[static_cast<std::size_t>(chain.q)].meta;
    lse.meta = TensorMeta{q.dtype, Shape(q.shape.begin(), q.shape.end() - 1)};
    const DType dtype = q.dtype;
    const int lseId = out.addValue(std::move(lse));
    int scale = chain.scaleValue;
    const TensorMeta scalar{dtype, {}};
    if (scale == kNoValue || out.values[static_cast<std::size_t>(scale)].meta != scalar) {
      Value made;
      made.name = fmt::format("{}/scale", node.name);
      made.meta = scalar;
      made.constant = Tensor::empty(dtype, {});
      if (dtype == DType::Float64)
        *made.constant.data<double>() = chain.scale;
      else
        *made.constant.data<float>() = static_cast<float>(chain.scale);
      scale = out.addValue(std::move(made));
    }
    if (chain.retranspose != kNoValue) {
      Node& transpose = out.nodes[static_cast<std::size_t>(chain.retranspose)];
      transpose.attrs.set("perm", chain.retransposePerm);
      Shape& kShape = out.values[static_cast<std::size_t>(chain.k)].meta.shape;
      std::swap(kShape[kShape.size() - 1], kShape[kShape.size() - 2]);
    }
    node.opType = "ScaledDotProductAttention";
    node.domain.clear();
    node.inputs = {chain.q, chain.k, chain.v, scale};
    node.outputs = {node.outputs[0], lseId};
    node.attrs = Attributes();
    node.attrs.set("causal", std::int64_t{chain.causal ? 1 : 0});
  }
  dropNodes(out, dropped);
  if (fused != nullptr)
    *fused = count;
  return out;
}

}  // namespace strata
