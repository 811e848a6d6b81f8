#include "engine/runtime/bias_folding.h"

#include <vector>

#include "engine/model/traind_schemas.h"
#include "engine/runtime/node_list.h"

namespace traind::engine {
namespace {

// MatMul(A, B), or FusedMatMul(A, B) without a bias, both operands of rank >= 2.
bool IsFoldableProduct(const onnx::NodeProto& node, const BiasFoldingGraph& graph) {
  const bool matmul = IsOnnxNode(node) && node.op_type() == "MatMul";
  const bool fused = node.domain() == kTraindTrainingDomain && node.op_type() == "FusedMatMul";
  if (!(matmul || fused) || node.input_size() != 2 || node.output_size() != 1) return false;
  for (const std::string& operand : node.input()) {
    auto dims = graph.dims.find(operand);
    if (dims == graph.dims.end() || dims->second.size() < 2) return false;
  }
  return true;
}

// N when `name` has the static shape [N], N >= 1; -1 otherwise.
int64_t StaticVectorLength(const BiasFoldingGraph& graph, const std::string& name) {
  auto dims = graph.dims.find(name);
  if (dims == graph.dims.end() || dims->second.size() != 1 || dims->second[0] < 1) return -1;
  return dims->second[0];
}

// The static last dimension of `name` (rank >= 2); -1 when unknown.
int64_t StaticLastDim(const BiasFoldingGraph& graph, const std::string& name) {
  auto dims = graph.dims.find(name);
  if (dims == graph.dims.end() || dims->second.size() < 2) return -1;
  return dims->second.back();
}

}  // namespace

int FoldBiasAddsIntoProducts(std::vector<onnx::NodeProto>& nodes, const BiasFoldingGraph& graph) {
  absl::flat_hash_map<std::string, int> producer;
  absl::flat_hash_map<std::string, int> reads;  // how many node inputs name each value
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (const auto& output : nodes[i].output()) producer[output] = i;
    for (const auto& input : nodes[i].input()) ++reads[input];
  }
  std::vector<bool> removed(nodes.size(), false);
  int folded = 0;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    const onnx::NodeProto& add = nodes[i];
    if (!IsOnnxNode(add) || add.op_type() != "Add" || add.input_size() != 2 || add.output_size() != 1) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string& product_value = add.input(side);
      const std::string& bias = add.input(1 - side);
      auto made_by = producer.find(product_value);
      if (made_by == producer.end() || removed[made_by->second] || graph.outputs.contains(product_value) ||
          reads[product_value] != 1 || product_value == bias) {
        continue;
      }
      onnx::NodeProto& product = nodes[made_by->second];
      if (!IsFoldableProduct(product, graph)) continue;
      const int64_t n = StaticVectorLength(graph, bias);
      if (n < 0 || StaticLastDim(graph, product_value) != n) continue;
      // The fused node takes the Add's place in the list (the compiler orders the nodes afterwards anyway).
      onnx::NodeProto fused = product;
      if (IsOnnxNode(fused)) {
        fused.set_op_type("FusedMatMul");
        fused.set_domain(kTraindTrainingDomain);
        fused.clear_attribute();
      }
      fused.add_input(bias);
      fused.set_output(0, add.output(0));
      removed[made_by->second] = true;
      nodes[i] = std::move(fused);
      ++folded;
      break;
    }
  }
  if (folded > 0) EraseRemovedNodes(nodes, removed);
  return folded;
}

}  // namespace traind::engine
