// Small helpers for the plan passes that rewrite the compiler's node list before it is planned
// (transpose_folding.h, bias_folding.h, channels_last.h).
#ifndef TRAIND_ENGINE_RUNTIME_NODE_LIST_H_
#define TRAIND_ENGINE_RUNTIME_NODE_LIST_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "onnx/onnx_pb.h"

namespace traind::engine {

// A node of the default ONNX domain ("" or "ai.onnx").
inline bool IsOnnxNode(const onnx::NodeProto& node) { return node.domain().empty() || node.domain() == "ai.onnx"; }

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
