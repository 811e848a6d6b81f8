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
  Fuser(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph) : nodes_(nodes), graph_(graph) {
    removed_.assign(nodes_.size(), false);
    index_.Build(nodes_, removed_);
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
    auto it = index_.producer.find(value);
    if (it == index_.producer.end() || removed_[it->second]) return nullptr;
    const onnx::NodeProto& node = nodes_[it->second];
    const bool domain = traind ? node.domain() == kTraindTrainingDomain : IsOnnxNode(node);
    return domain && node.op_type() == op_type ? &node : nullptr;
  }
  int ProducerIndex(const std::string& value) const { return index_.producer.at(value); }
  bool Private(const std::string& value) const { return index_.Private(value, graph_); }

  bool IsFloat(const std::string& value) const {
    auto it = graph_.elem_types.find(value);
    return it != graph_.elem_types.end() && it->second == onnx::TensorProto::FLOAT;
  }

  std::optional<float> ScalarConstant(const std::string& value) const {
    return FloatScalarConstant(value, nodes_, removed_, index_, graph_);
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
    const int64_t axis = IntAttributeOr(*softmax, "axis", graph_.onnx_opset >= 13 ? -1 : 1);
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
      if (product == nullptr || IntAttributeOr(*product, "transA", 0) != 0) return false;
      trans_b = IntAttributeOr(*product, "transB", 0) != 0;
    }
    if (product->input_size() != 2) return false;  // FusedMatMul's bias
    const int product_index = ProducerIndex(scores);
    const std::string& q = product->input(0);
    std::string b = product->input(1);
    int transpose_index = -1;
    if (const onnx::NodeProto* transpose = Producer(b, "Transpose");
        !trans_b && transpose != nullptr && SwapsLastTwoAxes(*transpose, rank)) {
      if (Private(b)) transpose_index = ProducerIndex(b);
      b = transpose->input(0);
      trans_b = true;
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
    const bool keep_p = index_.reads.at(p) > 1 || graph_.outputs.contains(p);
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
  const GraphValueFacts& graph_;
  std::vector<bool> removed_;
  NodeListIndex index_;
};

class LayoutFolder {
 public:
  LayoutFolder(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph) : nodes_(nodes), graph_(graph) {
    removed_.assign(nodes_.size(), false);
    Index();
  }

  int Run() {
    int folded = 0;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      const onnx::NodeProto& node = nodes_[i];
      if (node.domain() != kTraindTrainingDomain) continue;
      if (node.op_type() == "ScaledDotProductAttention") {
        folded += FoldOperands(i, /*first_operand=*/0) ? 3 : 0;
        folded += FoldForwardOutput(i) ? 1 : 0;
      } else if (node.op_type() == "ScaledDotProductAttentionGrad") {
        folded += FoldGradient(i) ? 4 : 0;
        folded += FoldOutputGradient(i) ? 1 : 0;
      }
    }
    if (folded == 0) return 0;
    RemoveUnreadLayoutNodes();
    EraseRemovedNodes(nodes_, removed_);
    return folded;
  }

 private:
  void Index() { index_.Build(nodes_, removed_); }

  const onnx::NodeProto* Producer(const std::string& value, const char* op_type) const {
    auto it = index_.producer.find(value);
    if (it == index_.producer.end() || removed_[it->second]) return nullptr;
    const onnx::NodeProto& node = nodes_[it->second];
    return IsOnnxNode(node) && node.op_type() == op_type ? &node : nullptr;
  }

  // The one node reading `value` (nullptr when none or several, or when it is a graph output).
  int SoleReader(const std::string& value) const {
    if (!index_.Private(value, graph_)) return -1;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      if (removed_[i]) continue;
      for (const auto& input : nodes_[i].input()) {
        if (input == value) return i;
      }
    }
    return -1;
  }

  // The values of an int64 constant (an initializer or a Constant node) of at most 8 elements, and its rank.
  struct IntValues {
    std::vector<int64_t> values;
    int rank = 0;
  };
  std::optional<IntValues> IntConstant(const std::string& value) const {
    if (auto it = graph_.int_constants.find(value); it != graph_.int_constants.end()) {
      auto dims = graph_.dims.find(value);
      return IntValues{it->second, dims == graph_.dims.end() ? -1 : static_cast<int>(dims->second.size())};
    }
    auto it = index_.producer.find(value);
    if (it == index_.producer.end() || removed_[it->second]) return std::nullopt;
    const std::optional<Tensor> tensor = ConstantNodeTensor(nodes_[it->second], onnx::TensorProto::INT64, 8);
    if (!tensor.has_value()) return std::nullopt;
    return IntValues{std::vector<int64_t>(tensor->data<int64_t>(), tensor->data<int64_t>() + tensor->num_elements()),
                     static_cast<int>(tensor->rank())};
  }

  bool HasPerm(const onnx::NodeProto& node, std::vector<int64_t> perm) const {
    return IntsAttribute(node, "perm") == perm;
  }

  // X = Gather(Transpose(R, [2, 0, 3, 1, 4]), s, axis 0) for a static [N, L, S, H, D] R: R and s.
  std::optional<std::pair<std::string, int64_t>> SlotOf(const std::string& x) const {
    const onnx::NodeProto* gather = Producer(x, "Gather");
    if (gather == nullptr || gather->input_size() != 2 || IntAttributeOr(*gather, "axis", 0) != 0) return std::nullopt;
    // A scalar index (rank 0): the Gather drops the axis.
    const std::optional<IntValues> slot = IntConstant(gather->input(1));
    if (!slot.has_value() || slot->values.size() != 1 || slot->rank != 0) return std::nullopt;
    const onnx::NodeProto* transpose = Producer(gather->input(0), "Transpose");
    if (transpose == nullptr || !HasPerm(*transpose, {2, 0, 3, 1, 4})) return std::nullopt;
    const std::string& r = transpose->input(0);
    auto dims = graph_.dims.find(r);
    if (dims == graph_.dims.end() || dims->second.size() != 5) return std::nullopt;
    for (int64_t dim : dims->second) {
      if (dim < 0) return std::nullopt;
    }
    const int64_t slots = dims->second[2];
    const int64_t s = slot->values[0] < 0 ? slot->values[0] + slots : slot->values[0];
    if (s < 0 || s >= slots) return std::nullopt;
    return std::make_pair(r, s);
  }

  // The three operands (from input `first_operand` on) as distinct slots of one tensor: that tensor and the slots.
  std::optional<std::pair<std::string, std::vector<int64_t>>> PackedOperands(const onnx::NodeProto& node,
                                                                              int first_operand) const {
    if (node.input_size() < first_operand + 3 || IntAttributeOr(node, "transB", 0) != 1 ||
        IntAttributeOr(node, "q_slot", -1) >= 0) {
      return std::nullopt;
    }
    std::string source;
    std::vector<int64_t> slots;
    for (int j = 0; j < 3; ++j) {
      const auto slot = SlotOf(node.input(first_operand + j));
      if (!slot.has_value() || (j > 0 && slot->first != source)) return std::nullopt;
      source = slot->first;
      for (int64_t taken : slots) {
        if (taken == slot->second) return std::nullopt;
      }
      slots.push_back(slot->second);
    }
    return std::make_pair(source, slots);
  }

  void SetSlots(onnx::NodeProto& node, int first_operand, const std::string& source, const std::vector<int64_t>& slots) {
    for (int j = 0; j < 3; ++j) node.set_input(first_operand + j, source);
    SetIntAttribute(node, "q_slot", slots[0]);
    SetIntAttribute(node, "b_slot", slots[1]);
    SetIntAttribute(node, "v_slot", slots[2]);
  }

  bool FoldOperands(int index, int first_operand) {
    const auto packed = PackedOperands(nodes_[index], first_operand);
    if (!packed.has_value()) return false;
    SetSlots(nodes_[index], first_operand, packed->first, packed->second);
    Index();
    return true;
  }

  // O read only by Transpose(O, [0, 2, 1, 3]): the node writes the transposed value.
  bool FoldForwardOutput(int index) {
    onnx::NodeProto& node = nodes_[index];
    if (IntAttributeOr(node, "o_interleaved", 0) != 0) return false;
    const int reader = SoleReader(node.output(0));
    if (reader < 0) return false;
    const onnx::NodeProto& transpose = nodes_[reader];
    if (!IsOnnxNode(transpose) || transpose.op_type() != "Transpose" || !HasPerm(transpose, {0, 2, 1, 3})) return false;
    node.set_output(0, transpose.output(0));
    SetIntAttribute(node, "o_interleaved", 1);
    removed_[reader] = true;
    Index();
    return true;
  }

  // dO = Transpose(G, [0, 2, 1, 3]) read by nothing else: the node reads G.
  bool FoldOutputGradient(int index) {
    onnx::NodeProto& node = nodes_[index];
    if (IntAttributeOr(node, "dO_interleaved", 0) != 0 || node.input_size() < 1) return false;
    const std::string& dout = node.input(0);
    const onnx::NodeProto* transpose = Producer(dout, "Transpose");
    if (transpose == nullptr || !HasPerm(*transpose, {0, 2, 1, 3}) || SoleReader(dout) != index) return false;
    const int transpose_index = index_.producer.at(dout);
    node.set_input(0, transpose->input(0));
    SetIntAttribute(node, "dO_interleaved", 1);
    removed_[transpose_index] = true;
    Index();
    return true;
  }

  // The gradient node's operands and outputs together (see the header).
  bool FoldGradient(int index) {
    const onnx::NodeProto& node = nodes_[index];
    const auto packed = PackedOperands(node, /*first_operand=*/1);
    if (!packed.has_value() || node.output_size() != 3) return false;
    int concat_index = -1;
    std::vector<int> unsqueezes;
    for (int j = 0; j < 3; ++j) {
      const std::string& gradient = node.output(j);
      const int unsqueeze = gradient.empty() ? -1 : SoleReader(gradient);
      if (unsqueeze < 0) return false;
      const onnx::NodeProto& u = nodes_[unsqueeze];
      if (!IsOnnxNode(u) || u.op_type() != "Unsqueeze" || u.input(0) != gradient) return false;
      std::vector<int64_t> axes = IntsAttribute(u, "axes");
      if (u.input_size() > 1) {
        const std::optional<IntValues> given = IntConstant(u.input(1));
        axes = given.has_value() ? given->values : std::vector<int64_t>{};
      }
      if (axes != std::vector<int64_t>{0}) return false;
      const int concat = SoleReader(u.output(0));
      if (concat < 0 || (concat_index >= 0 && concat != concat_index)) return false;
      concat_index = concat;
      const onnx::NodeProto& c = nodes_[concat];
      if (!IsOnnxNode(c) || c.op_type() != "Concat" || IntAttributeOr(c, "axis", 1) != 0 || c.input_size() != 3 ||
          c.input(static_cast<int>(packed->second[j])) != u.output(0)) {
        return false;
      }
      unsqueezes.push_back(unsqueeze);
    }
    const onnx::NodeProto& concat = nodes_[concat_index];
    const int transpose_index = SoleReader(concat.output(0));
    if (transpose_index < 0) return false;
    const onnx::NodeProto& transpose = nodes_[transpose_index];
    if (!IsOnnxNode(transpose) || transpose.op_type() != "Transpose" || !HasPerm(transpose, {1, 3, 0, 2, 4})) {
      return false;
    }
    auto source_dims = graph_.dims.find(packed->first);
    auto gradient_dims = graph_.dims.find(transpose.output(0));
    if (source_dims->second[2] != 3 ||
        (gradient_dims != graph_.dims.end() && gradient_dims->second != source_dims->second)) {
      return false;
    }
    onnx::NodeProto& rewritten = nodes_[index];
    SetSlots(rewritten, 1, packed->first, packed->second);
    const std::string packed_gradient = transpose.output(0);
    rewritten.clear_output();
    rewritten.add_output(packed_gradient);
    for (int unsqueeze : unsqueezes) removed_[unsqueeze] = true;
    removed_[concat_index] = true;
    removed_[transpose_index] = true;
    Index();
    return true;
  }

  // Gathers, then Transposes, that nothing reads any more (their results were folded into attention nodes).
  void RemoveUnreadLayoutNodes() {
    for (const char* op_type : {"Gather", "Transpose"}) {
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        const onnx::NodeProto& node = nodes_[i];
        if (removed_[i] || !IsOnnxNode(node) || node.op_type() != op_type || node.output_size() != 1) continue;
        const std::string& output = node.output(0);
        if (!index_.reads.contains(output) && !graph_.outputs.contains(output)) removed_[i] = true;
      }
      Index();
    }
  }

  std::vector<onnx::NodeProto>& nodes_;
  const GraphValueFacts& graph_;
  std::vector<bool> removed_;
  NodeListIndex index_;
};

}  // namespace

int FuseAttention(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph) {
  return Fuser(nodes, graph).Run();
}

int FoldAttentionLayouts(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph) {
  return LayoutFolder(nodes, graph).Run();
}

}  // namespace traind::engine
