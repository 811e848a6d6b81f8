#include "engine/runtime/attention_fusion.h"

#include <cmath>
#include <initializer_list>
#include <optional>
#include <utility>

#include "engine/model/tensor_proto.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/node_list.h"

namespace traind::engine {
namespace {

class Fuser {
 public:
  Fuser(std::vector<onnx::NodeProto>& nodes, const AttentionFusionGraph& graph) : nodes_(nodes), graph_(graph) {
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      for (const auto& output : nodes_[i].output()) {
        if (!output.empty()) producer_[output] = i;
      }
      for (const auto& input : nodes_[i].input()) {
        if (!input.empty()) ++reads_[input];
      }
    }
    removed_.assign(nodes_.size(), false);
  }

  int Run() {
    int fused = 0;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) fused += TryFuse(i) ? 1 : 0;
    if (fused > 0) EraseRemovedNodes(nodes_, removed_);
    return fused;
  }

 private:
  // The node making `value` when it is of `op_type` in `domain` (default: ONNX) and not yet removed; else nullptr.
  const onnx::NodeProto* Producer(const std::string& value, const char* op_type, bool traind = false) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || removed_[it->second]) return nullptr;
    const onnx::NodeProto& node = nodes_[it->second];
    const bool domain = traind ? node.domain() == kTraindTrainingDomain : IsOnnxNode(node);
    return domain && node.op_type() == op_type ? &node : nullptr;
  }
  int ProducerIndex(const std::string& value) const { return producer_.at(value); }

  // Read by exactly one node input and not a graph output.
  bool Private(const std::string& value) const {
    auto it = reads_.find(value);
    return it != reads_.end() && it->second == 1 && !graph_.outputs.contains(value);
  }

  bool IsFloat(const std::string& value) const {
    auto it = graph_.elem_types.find(value);
    return it != graph_.elem_types.end() && it->second == onnx::TensorProto::FLOAT;
  }

  std::optional<float> ScalarConstant(const std::string& value) const {
    if (auto it = graph_.scalar_constants.find(value); it != graph_.scalar_constants.end()) return it->second;
    const onnx::NodeProto* constant = Producer(value, "Constant");
    if (constant == nullptr) return std::nullopt;
    for (const auto& attribute : constant->attribute()) {
      if (attribute.name() == "value_float") return attribute.f();
      if (attribute.name() == "value" && attribute.has_t() &&
          attribute.t().data_type() == onnx::TensorProto::FLOAT &&
          attribute.t().data_location() != onnx::TensorProto::EXTERNAL) {
        absl::StatusOr<Tensor> scalar = TensorFromProto(attribute.t(), /*max_elements=*/1);
        if (scalar.ok() && scalar->num_elements() == 1) return scalar->data<float>()[0];
      }
    }
    return std::nullopt;
  }

  static int64_t IntAttribute(const onnx::NodeProto& node, const char* name, int64_t fallback) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == name) return attribute.i();
    }
    return fallback;
  }

  bool TryFuse(int root_index) {
    const onnx::NodeProto& root = nodes_[root_index];
    if (removed_[root_index] || !IsOnnxNode(root) || root.op_type() != "MatMul" || root.input_size() != 2 ||
        root.output_size() != 1) {
      return false;
    }
    const std::string& p = root.input(0);
    const std::string& v = root.input(1);
    const onnx::NodeProto* softmax = Producer(p, "Softmax");
    if (softmax == nullptr || softmax->input_size() != 1 || !IsFloat(p)) return false;
    auto p_dims = graph_.dims.find(p);
    if (p_dims == graph_.dims.end() || p_dims->second.size() < 2) return false;
    const int64_t rank = static_cast<int64_t>(p_dims->second.size());
    const int64_t axis = IntAttribute(*softmax, "axis", graph_.onnx_opset >= 13 ? -1 : 1);
    if (axis != -1 && axis != rank - 1) return false;

    // The scaling, if any, and the first product.
    std::string scores = softmax->input(0);
    if (!Private(scores)) return false;
    int scaling_index = -1;
    float scale = 1.0f;
    if (const onnx::NodeProto* mul = Producer(scores, "Mul"); mul != nullptr && mul->input_size() == 2) {
      const int factor = ScalarConstant(mul->input(1)).has_value() ? 1 : 0;
      const std::optional<float> c = ScalarConstant(mul->input(factor));
      if (!c.has_value()) return false;
      scale = *c;
      scaling_index = ProducerIndex(scores);
      scores = mul->input(1 - factor);
    } else if (const onnx::NodeProto* div = Producer(scores, "Div"); div != nullptr && div->input_size() == 2) {
      const std::optional<float> c = ScalarConstant(div->input(1));
      if (!c.has_value() || *c == 0.0f) return false;
      scale = 1.0f / *c;
      scaling_index = ProducerIndex(scores);
      scores = div->input(0);
    }
    if (!std::isfinite(scale) || (scaling_index >= 0 && !Private(scores))) return false;
    bool trans_b = false;
    const onnx::NodeProto* product = Producer(scores, "MatMul");
    if (product == nullptr) {
      product = Producer(scores, "FusedMatMul", /*traind=*/true);
      if (product == nullptr || IntAttribute(*product, "transA", 0) != 0) return false;
      trans_b = IntAttribute(*product, "transB", 0) != 0;
    }
    if (product->input_size() != 2) return false;  // FusedMatMul's bias
    const int product_index = ProducerIndex(scores);
    const std::string& q = product->input(0);
    std::string b = product->input(1);
    int transpose_index = -1;
    if (const onnx::NodeProto* transpose = Producer(b, "Transpose"); !trans_b && transpose != nullptr) {
      std::vector<int64_t> swap_last_two(static_cast<size_t>(rank));
      for (int64_t i = 0; i < rank; ++i) swap_last_two[i] = i;
      std::swap(swap_last_two[rank - 1], swap_last_two[rank - 2]);
      for (const auto& attribute : transpose->attribute()) {
        if (attribute.name() == "perm" &&
            std::vector<int64_t>(attribute.ints().begin(), attribute.ints().end()) == swap_last_two) {
          if (Private(b)) transpose_index = ProducerIndex(b);
          b = transpose->input(0);
          trans_b = true;
        }
      }
    }
    // Float32 operands of P's rank with statically equal batch dims.
    for (const std::string* operand : std::initializer_list<const std::string*>{&q, &b, &v}) {
      auto dims = graph_.dims.find(*operand);
      if (!IsFloat(*operand) || dims == graph_.dims.end() || static_cast<int64_t>(dims->second.size()) != rank) {
        return false;
      }
      for (int64_t i = 0; i + 2 < rank; ++i) {
        if (dims->second[i] < 0 || dims->second[i] != graph_.dims.at(q)[i]) return false;
      }
    }

    onnx::NodeProto fused;
    fused.set_name(root.name());
    fused.set_op_type("ScaledDotProductAttention");
    fused.set_domain(kTraindTrainingDomain);
    fused.add_input(q);
    fused.add_input(b);
    fused.add_input(v);
    fused.add_output(root.output(0));
    // P stays a value of the plan where its other readers (the gradient) or the graph's outputs want it.
    const bool keep_p = reads_.at(p) > 1 || graph_.outputs.contains(p);
    if (keep_p) fused.add_output(p);
    auto* scale_attribute = fused.add_attribute();
    scale_attribute->set_name("scale");
    scale_attribute->set_type(onnx::AttributeProto::FLOAT);
    scale_attribute->set_f(scale);
    auto* trans_b_attribute = fused.add_attribute();
    trans_b_attribute->set_name("transB");
    trans_b_attribute->set_type(onnx::AttributeProto::INT);
    trans_b_attribute->set_i(trans_b ? 1 : 0);

    removed_[ProducerIndex(p)] = true;
    if (scaling_index >= 0) removed_[scaling_index] = true;
    removed_[product_index] = true;
    if (transpose_index >= 0) removed_[transpose_index] = true;
    // The fused node takes the root's place in the list (the compiler orders the nodes afterwards anyway).
    nodes_[root_index] = std::move(fused);
    return true;
  }

  std::vector<onnx::NodeProto>& nodes_;
  const AttentionFusionGraph& graph_;
  absl::flat_hash_map<std::string, int> producer_;
  absl::flat_hash_map<std::string, int> reads_;  // how many node inputs name each value
  std::vector<bool> removed_;
};

}  // namespace

int FuseAttention(std::vector<onnx::NodeProto>& nodes, const AttentionFusionGraph& graph) {
  return Fuser(nodes, graph).Run();
}

}  // namespace traind::engine
