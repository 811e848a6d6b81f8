#include "engine/runtime/transpose_folding.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "engine/model/traind_schemas.h"
#include "engine/runtime/kernel.h"
#include "engine/runtime/node_list.h"

namespace traind::engine {
namespace {

// transA / transB as the kernels read them (typed), when 0 or 1; nullopt otherwise (mistyped or another value: the
// node is left as it is, for its kernel to judge).
std::optional<int64_t> TransposeFlag(const onnx::NodeProto& node, const char* name) {
  absl::StatusOr<int64_t> value = KernelInit(node, /*opset=*/-1).GetInt(name, 0);
  if (!value.ok() || (*value != 0 && *value != 1)) return std::nullopt;
  return *value;
}

// A Transpose of a matrix: perm absent or [1, 0], of a value of rank 2 (known, or a Gemm's result).
bool IsMatrixTranspose(const onnx::NodeProto& node, const TransposeFoldingGraph& graph, bool of_gemm) {
  if (!IsOnnxNode(node) || node.op_type() != "Transpose" || node.input_size() != 1 || node.output_size() != 1) {
    return false;
  }
  auto rank = graph.ranks.find(node.input(0));
  if (!of_gemm && (rank == graph.ranks.end() || rank->second != 2)) return false;
  absl::StatusOr<std::vector<int64_t>> perm = KernelInit(node, /*opset=*/-1).GetInts("perm");
  return perm.ok() && (perm->empty() || *perm == std::vector<int64_t>{1, 0});
}

int RankOf(const TransposeFoldingGraph& graph, const std::string& name) {
  auto it = graph.ranks.find(name);
  return it == graph.ranks.end() ? -1 : it->second;
}

// How the product `reader` would read `value` transposed in place; false when it cannot.
bool CanReadTransposed(const onnx::NodeProto& reader, const std::string& value, const TransposeFoldingGraph& graph) {
  const int uses = static_cast<int>(std::count(reader.input().begin(), reader.input().end(), value));
  if (uses != 1) return false;
  const int position = reader.input(0) == value ? 0 : reader.input_size() > 1 && reader.input(1) == value ? 1 : -1;
  if (position < 0) return false;
  if (IsOnnxNode(reader) && reader.op_type() == "MatMul") {
    return reader.input_size() == 2 && RankOf(graph, reader.input(1 - position)) >= 2;
  }
  const bool flagged_product = (IsOnnxNode(reader) && reader.op_type() == "Gemm") ||
                               (reader.domain() == kTraindTrainingDomain && reader.op_type() == "FusedMatMul");
  return flagged_product && TransposeFlag(reader, position == 0 ? "transA" : "transB").has_value();
}

void ReadTransposed(onnx::NodeProto& reader, const std::string& value, const std::string& source) {
  const int position = reader.input(0) == value ? 0 : 1;
  reader.set_input(position, source);
  const char* attribute = position == 0 ? "transA" : "transB";
  if (IsOnnxNode(reader) && reader.op_type() == "MatMul") {
    reader.set_op_type("FusedMatMul");
    reader.set_domain(kTraindTrainingDomain);
    reader.clear_attribute();
    SetIntAttribute(reader, attribute, 1);
    return;
  }
  SetIntAttribute(reader, attribute, 1 - *TransposeFlag(reader, attribute));
}

}  // namespace

int FoldTransposesIntoProducts(std::vector<onnx::NodeProto>& nodes, const TransposeFoldingGraph& graph) {
  absl::flat_hash_map<std::string, int> producer;
  absl::flat_hash_map<std::string, std::vector<int>> readers;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (const auto& output : nodes[i].output()) producer[output] = i;
    for (const auto& input : nodes[i].input()) {
      std::vector<int>& list = readers[input];
      if (list.empty() || list.back() != i) list.push_back(i);
    }
  }
  std::vector<bool> removed(nodes.size(), false);
  int folded = 0;
  for (int t = 0; t < static_cast<int>(nodes.size()); ++t) {
    onnx::NodeProto& transpose = nodes[t];
    if (transpose.op_type() != "Transpose" || transpose.input_size() != 1 || transpose.output_size() != 1) continue;
    const std::string source = transpose.input(0);
    const std::string result = transpose.output(0);
    auto made_by = producer.find(source);
    const bool of_gemm = made_by != producer.end() && IsOnnxNode(nodes[made_by->second]) &&
                         nodes[made_by->second].op_type() == "Gemm" && !removed[made_by->second];
    if (!IsMatrixTranspose(transpose, graph, of_gemm)) continue;

    // Z = Transpose(Gemm(A, B)): the Gemm computes Z directly.
    if (of_gemm && !graph.outputs.contains(source)) {
      onnx::NodeProto& gemm = nodes[made_by->second];
      const auto& source_readers = readers[source];
      const bool no_c = gemm.input_size() < 3 || gemm.input(2).empty();
      const std::optional<int64_t> trans_a = TransposeFlag(gemm, "transA"), trans_b = TransposeFlag(gemm, "transB");
      if (no_c && gemm.input_size() >= 2 && source_readers.size() == 1 && trans_a && trans_b) {
        const std::string a = gemm.input(0), b = gemm.input(1);
        gemm.clear_input();
        gemm.add_input(b);
        gemm.add_input(a);
        SetIntAttribute(gemm, "transA", 1 - *trans_b);
        SetIntAttribute(gemm, "transB", 1 - *trans_a);
        gemm.set_output(0, result);
        removed[t] = true;
        ++folded;
        continue;
      }
    }

    // Wt = Transpose(W) read only by products: they read W transposed.
    if (graph.constants.contains(source) || graph.outputs.contains(result)) continue;
    auto result_readers = readers.find(result);
    if (result_readers == readers.end() || result_readers->second.empty()) continue;
    const bool all_products = std::all_of(result_readers->second.begin(), result_readers->second.end(),
                                          [&](int r) { return CanReadTransposed(nodes[r], result, graph); });
    if (!all_products) continue;
    for (int r : result_readers->second) {
      ReadTransposed(nodes[r], result, source);
      readers[source].push_back(r);
    }
    removed[t] = true;
    ++folded;
  }
  if (folded > 0) EraseRemovedNodes(nodes, removed);
  return folded;
}

}  // namespace traind::engine
