// Small helpers for the plan passes that rewrite the compiler's node list before it is planned
// (transpose_folding.h, bias_folding.h, channels_last.h).
#ifndef TRAIND_ENGINE_RUNTIME_NODE_LIST_H_
#define TRAIND_ENGINE_RUNTIME_NODE_LIST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/model/tensor_proto.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// A node of the default ONNX domain ("" or "ai.onnx").
inline bool IsOnnxNode(const onnx::NodeProto& node) { return node.domain().empty() || node.domain() == "ai.onnx"; }

// What the pattern passes (attention_fusion.h, gelu_fusion.h) know of the graph's values besides its nodes; the
// compiler gathers it once for all of them.
struct GraphValueFacts {
  // Static dims of every value with a stated shape (-1 for a symbolic or unknown dimension).
  absl::flat_hash_map<std::string, std::vector<int64_t>> dims;
  // Element types (onnx::TensorProto::DataType) where stated.
  absl::flat_hash_map<std::string, int32_t> elem_types;
  // Float32 one-element initializers and their values (Constant nodes are read from the node list).
  absl::flat_hash_map<std::string, float> scalar_constants;
  // Int64 initializers of at most 8 elements (Gather indices, Unsqueeze axes) and their values.
  absl::flat_hash_map<std::string, std::vector<int64_t>> int_constants;
  absl::flat_hash_set<std::string> outputs;  // graph outputs
  int onnx_opset = 0;                        // the model's default-domain opset
};

// Who makes each value of a node list and how many node inputs read it, the nodes marked in `removed` left out.
struct NodeListIndex {
  absl::flat_hash_map<std::string, int> producer;
  absl::flat_hash_map<std::string, int> reads;

  void Build(const std::vector<onnx::NodeProto>& nodes, const std::vector<bool>& removed) {
    producer.clear();
    reads.clear();
    for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
      if (removed[i]) continue;
      for (const auto& output : nodes[i].output()) {
        if (!output.empty()) producer[output] = i;
      }
      for (const auto& input : nodes[i].input()) {
        if (!input.empty()) ++reads[input];
      }
    }
  }
  // Read by exactly one node input and not a graph output: a value only the next node of a pattern sees.
  bool Private(const std::string& value, const GraphValueFacts& facts) const {
    auto it = reads.find(value);
    return it != reads.end() && it->second == 1 && !facts.outputs.contains(value);
  }
};

// A Constant node's `value` tensor (inline data, at most `max_elements`) of `data_type`, or nullopt.
inline std::optional<Tensor> ConstantNodeTensor(const onnx::NodeProto& node, int32_t data_type, int64_t max_elements) {
  if (!IsOnnxNode(node) || node.op_type() != "Constant") return std::nullopt;
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == "value" && attribute.has_t() && attribute.t().data_type() == data_type &&
        attribute.t().data_location() != onnx::TensorProto::EXTERNAL) {
      absl::StatusOr<Tensor> tensor = TensorFromProto(attribute.t(), max_elements);
      if (tensor.ok()) return *std::move(tensor);
    }
  }
  return std::nullopt;
}

// The value of a float32 scalar `value`: a one-element initializer (`facts`) or Constant node (value_float, or a
// one-element value tensor) of the list.
inline std::optional<float> FloatScalarConstant(const std::string& value, const std::vector<onnx::NodeProto>& nodes,
                                                const std::vector<bool>& removed, const NodeListIndex& index,
                                                const GraphValueFacts& facts) {
  if (auto it = facts.scalar_constants.find(value); it != facts.scalar_constants.end()) return it->second;
  auto it = index.producer.find(value);
  if (it == index.producer.end() || removed[it->second]) return std::nullopt;
  const onnx::NodeProto& node = nodes[it->second];
  if (!IsOnnxNode(node) || node.op_type() != "Constant") return std::nullopt;
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == "value_float") return attribute.f();
  }
  const std::optional<Tensor> tensor = ConstantNodeTensor(node, onnx::TensorProto::FLOAT, 1);
  if (!tensor.has_value() || tensor->num_elements() != 1) return std::nullopt;
  return tensor->data<float>()[0];
}

// A node's integer attribute `name`, or `fallback` when it has none.
inline int64_t IntAttributeOr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return attribute.i();
  }
  return fallback;
}

// A node's integer-list attribute `name` (empty when it has none).
inline std::vector<int64_t> IntsAttribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return std::vector<int64_t>(attribute.ints().begin(), attribute.ints().end());
  }
  return {};
}

// Sets (or adds) the integer attribute `name`.
inline void SetIntAttribute(onnx::NodeProto& node, const std::string& name, int64_t value) {
  for (auto& attribute : *node.mutable_attribute()) {
    if (attribute.name() == name) {
      attribute.set_type(onnx::AttributeProto::INT);
      attribute.set_i(value);
      return;
    }
  }
  auto* attribute = node.add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

// A Transpose of a rank-`rank` value that swaps its last two axes (perm [0, .., rank - 1, rank - 2]): a batched
// matrix transpose, which the products read in place.
inline bool SwapsLastTwoAxes(const onnx::NodeProto& transpose, int64_t rank) {
  if (rank < 2) return false;
  std::vector<int64_t> swap(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) swap[i] = i;
  std::swap(swap[rank - 1], swap[rank - 2]);
  return IntsAttribute(transpose, "perm") == swap;
}

// Drops the nodes marked in `removed` (parallel to `nodes`), keeping the others in order.
inline void EraseRemovedNodes(std::vector<onnx::NodeProto>& nodes, const std::vector<bool>& removed) {
  std::vector<onnx::NodeProto> kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!removed[i]) kept.push_back(std::move(nodes[i]));
  }
  nodes = std::move(kept);
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_NODE_LIST_H_
