// Small helpers for the plan passes that rewrite the compiler's node list before it is planned
// (transpose_folding.h, bias_folding.h, channels_last.h).
#ifndef TRAIND_ENGINE_RUNTIME_NODE_LIST_H_
#define TRAIND_ENGINE_RUNTIME_NODE_LIST_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "onnx/onnx_pb.h"

namespace traind::engine {

// A node of the default ONNX domain ("" or "ai.onnx").
inline bool IsOnnxNode(const onnx::NodeProto& node) { return node.domain().empty() || node.domain() == "ai.onnx"; }

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
