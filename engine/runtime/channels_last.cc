#include "engine/runtime/channels_last.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/node_list.h"

namespace traind::engine {
namespace {

constexpr char kChannelsLastSuffix[] = "/channels_last";

enum class Role { kOther, kConv, kConvGrad, kBatchNorm, kBatchNormGrad, kMaxPool, kMaxPoolGrad, kElementwise };

bool IsTraind(const onnx::NodeProto& node) { return node.domain() == kTraindTrainingDomain; }

// Elementwise ops whose result, for operands all permuted alike, is the permuted result (broadcasting included).
bool IsElementwise(const onnx::NodeProto& node) {
  static const auto* const kOnnx = new absl::flat_hash_set<std::string>{
      "Abs", "Add", "Clip", "Div", "Identity", "LeakyRelu", "Max", "Min", "Mul", "Neg", "Relu", "Sigmoid", "Sub", "Sum",
      "Tanh"};
  if (IsOnnxNode(node)) return kOnnx->contains(node.op_type());
  return IsTraind(node) && node.op_type() == "ReluGrad";
}

const onnx::AttributeProto* FindAttribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return &attribute;
  }
  return nullptr;
}

bool ChannelsLastAlready(const onnx::NodeProto& node) {
  const onnx::AttributeProto* attribute = FindAttribute(node, "channels_last");
  return attribute != nullptr && attribute->i() != 0;
}

onnx::AttributeProto IntAttribute(const std::string& name, int64_t value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::INT);
  attribute.set_i(value);
  return attribute;
}

onnx::NodeProto MakeTranspose(const std::string& from, const std::string& to, bool to_channels_last) {
  onnx::NodeProto node;
  node.set_name(absl::StrCat("ChannelsLast/Transpose/", to));
  node.set_op_type("Transpose");
  node.add_input(from);
  node.add_output(to);
  onnx::AttributeProto* perm = node.add_attribute();
  perm->set_name("perm");
  perm->set_type(onnx::AttributeProto::INTS);
  for (int64_t axis : to_channels_last ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 3, 1, 2}) {
    perm->add_ints(axis);
  }
  return node;
}

class ChannelsLastPass {
 public:
  ChannelsLastPass(std::vector<onnx::NodeProto>& nodes, const ChannelsLastGraph& graph)
      : nodes_(nodes), graph_(graph), ranks_(graph.ranks) {}

  ChannelsLastResult Run() {
    const int num_nodes = static_cast<int>(nodes_.size());
    roles_.assign(num_nodes, Role::kOther);
    joined_.assign(num_nodes, false);
    InferRanks();
    for (int i = 0; i < num_nodes; ++i) roles_[i] = RoleOf(nodes_[i]);
    // Every convolution joins; then, in node order until nothing changes, the nodes that read one of theirs.
    bool any = false;
    for (int i = 0; i < num_nodes; ++i) {
      if (roles_[i] == Role::kConv || roles_[i] == Role::kConvGrad) joined_[i] = any = true;
    }
    if (!any || NamesTaken()) return {};
    for (int i = 0; i < num_nodes; ++i) {
      for (const auto& output : nodes_[i].output()) producer_[output] = i;
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (int i = 0; i < num_nodes; ++i) {
        if (joined_[i] || roles_[i] == Role::kOther) continue;
        for (int slot : ActivationInputs(i)) {
          auto it = producer_.find(nodes_[i].input(slot));
          if (it != producer_.end() && joined_[it->second] && IsActivationOutput(it->second, nodes_[i].input(slot))) {
            joined_[i] = changed = true;
            break;
          }
        }
      }
    }
    return Rewrite();
  }

 private:
  // The names this pass makes must be new: a model that already uses one is left as it is.
  bool NamesTaken() const {
    for (const onnx::NodeProto& node : nodes_) {
      for (const auto* names : {&node.input(), &node.output()}) {
        for (const std::string& name : *names) {
          if (name.find(kChannelsLastSuffix) != std::string::npos || name == kNchwAxes) return true;
        }
      }
    }
    for (const auto& [name, rank] : graph_.ranks) {
      if (name.find(kChannelsLastSuffix) != std::string::npos || name == kNchwAxes) return true;
    }
    return false;
  }

  int RankOf(const std::string& name) const {
    auto it = ranks_.find(name);
    return it == ranks_.end() ? -1 : it->second;
  }

  // Ranks the graph does not state, for the outputs of the ops this pass looks at (in node order).
  void InferRanks() {
    for (const onnx::NodeProto& node : nodes_) {
      if (node.output_size() == 0 || node.output(0).empty() || ranks_.contains(node.output(0))) continue;
      int rank = -1;
      if (IsTraind(node) && (node.op_type() == "ConvGrad" || node.op_type() == "BatchNormalizationGrad" ||
                             node.op_type() == "MaxPoolGrad")) {
        if (node.input_size() > 1) rank = RankOf(node.input(1));
      } else if (IsOnnxNode(node) &&
                 (node.op_type() == "Conv" || node.op_type() == "BatchNormalization" || node.op_type() == "MaxPool")) {
        if (node.input_size() > 0) rank = RankOf(node.input(0));
      } else if (IsElementwise(node)) {
        for (const auto& input : node.input()) {
          if (input.empty()) continue;
          const int input_rank = RankOf(input);
          if (input_rank < 0) {
            rank = -1;
            break;
          }
          rank = std::max(rank, input_rank);
        }
      }
      if (rank >= 0) ranks_[node.output(0)] = rank;
    }
  }

  Role RoleOf(const onnx::NodeProto& node) const {
    auto rank4 = [&](int slot) { return node.input_size() > slot && RankOf(node.input(slot)) == 4; };
    if (IsOnnxNode(node) && node.op_type() == "Conv") return rank4(0) ? Role::kConv : Role::kOther;
    if (IsOnnxNode(node) && node.op_type() == "BatchNormalization") {
      // Spatial statistics (opset >= 9); before opset 14 only the inference form exists.
      const bool training_outputs = node.output_size() > 1;
      if (graph_.onnx_opset < 9 || (graph_.onnx_opset < 14 && training_outputs)) return Role::kOther;
      return rank4(0) ? Role::kBatchNorm : Role::kOther;
    }
    if (IsTraind(node) && node.op_type() == "ConvGrad") {
      return rank4(0) && rank4(1) && !ChannelsLastAlready(node) ? Role::kConvGrad : Role::kOther;
    }
    if (IsTraind(node) && node.op_type() == "BatchNormalizationGrad") {
      return rank4(0) && rank4(1) && !ChannelsLastAlready(node) ? Role::kBatchNormGrad : Role::kOther;
    }
    // MaxPool without its Indices output (whose values are NCHW offsets).
    if (IsOnnxNode(node) && node.op_type() == "MaxPool") {
      const bool indices = node.output_size() > 1 && !node.output(1).empty();
      return rank4(0) && !indices ? Role::kMaxPool : Role::kOther;
    }
    if (IsTraind(node) && node.op_type() == "MaxPoolGrad") {
      return rank4(0) && rank4(1) && !ChannelsLastAlready(node) ? Role::kMaxPoolGrad : Role::kOther;
    }
    if (IsElementwise(node)) {
      // Rank-4 operands (permuted) and scalars (unaffected); anything else would broadcast differently.
      bool any_rank4 = false;
      for (const auto& input : node.input()) {
        if (input.empty()) continue;
        const int rank = RankOf(input);
        if (rank == 4) {
          any_rank4 = true;
        } else if (rank != 0) {
          return Role::kOther;
        }
      }
      return any_rank4 && node.output_size() == 1 ? Role::kElementwise : Role::kOther;
    }
    return Role::kOther;
  }

  // The input slots of node i that carry activations (channels-last once the node joins).
  std::vector<int> ActivationInputs(int i) const {
    const onnx::NodeProto& node = nodes_[i];
    switch (roles_[i]) {
      case Role::kConv:
      case Role::kBatchNorm:
      case Role::kMaxPool:
        return {0};
      case Role::kConvGrad:
      case Role::kBatchNormGrad:
      case Role::kMaxPoolGrad:
        return {0, 1};
      case Role::kElementwise: {
        std::vector<int> slots;
        for (int slot = 0; slot < node.input_size(); ++slot) {
          if (!node.input(slot).empty() && RankOf(node.input(slot)) == 4) slots.push_back(slot);
        }
        return slots;
      }
      case Role::kOther:
        break;
    }
    return {};
  }

  // Every role's activation output is its first.
  bool IsActivationOutput(int i, const std::string& value) const {
    return roles_[i] != Role::kOther && nodes_[i].output_size() > 0 && nodes_[i].output(0) == value;
  }

  ChannelsLastResult Rewrite() {
    ChannelsLastResult result;
    const int num_nodes = static_cast<int>(nodes_.size());
    // Which (node, slot) pairs read channels-last.
    std::vector<std::vector<int>> reads_channels_last(num_nodes);
    for (int i = 0; i < num_nodes; ++i) {
      if (joined_[i]) reads_channels_last[i] = ActivationInputs(i);
    }
    // Values produced channels-last: the activation outputs of joined nodes.
    absl::flat_hash_set<std::string> produced_channels_last;
    for (int i = 0; i < num_nodes; ++i) {
      if (joined_[i] && nodes_[i].output_size() > 0 && !nodes_[i].output(0).empty()) {
        produced_channels_last.insert(nodes_[i].output(0));
      }
    }
    std::vector<std::vector<onnx::NodeProto>> before(num_nodes), after(num_nodes);
    absl::flat_hash_set<std::string> transposed_in;  // NCHW values given a channels-last copy
    absl::flat_hash_map<std::string, int> back_to_nchw_at;  // channels-last values also needed in NCHW: where
    std::optional<int> first_gather;
    // Inputs.
    for (int i = 0; i < num_nodes; ++i) {
      onnx::NodeProto& node = nodes_[i];
      const std::vector<int>& channels_last_slots = reads_channels_last[i];
      for (int slot = 0; slot < node.input_size(); ++slot) {
        const std::string value = node.input(slot);
        if (value.empty()) continue;
        const bool wants_channels_last =
            std::find(channels_last_slots.begin(), channels_last_slots.end(), slot) != channels_last_slots.end();
        const std::string renamed = value + kChannelsLastSuffix;
        if (wants_channels_last) {
          if (!produced_channels_last.contains(value) && transposed_in.insert(value).second) {
            before[i].push_back(MakeTranspose(value, renamed, /*to_channels_last=*/true));
            result.same_size_as[renamed] = value;
            ++result.transposes;
          }
          node.set_input(slot, renamed);
          continue;
        }
        if (!produced_channels_last.contains(value)) continue;
        // A channels-last value read in NCHW order.
        if (IsOnnxNode(node) && node.op_type() == "Size") {
          node.set_input(slot, renamed);  // Same element count.
          continue;
        }
        if (IsOnnxNode(node) && node.op_type() == "Shape" && FindAttribute(node, "start") == nullptr &&
            FindAttribute(node, "end") == nullptr && node.output_size() == 1) {
          // Shape of the channels-last value, its dims gathered back into NCHW order.
          node.set_input(slot, renamed);
          const std::string dims = node.output(0);
          const std::string permuted = dims + "/channels_last_dims";
          node.set_output(0, permuted);
          result.same_size_as[permuted] = dims;
          onnx::NodeProto gather;
          gather.set_name(absl::StrCat("ChannelsLast/Gather/", dims));
          gather.set_op_type("Gather");
          gather.add_input(permuted);
          gather.add_input(kNchwAxes);
          gather.add_output(dims);
          after[i].push_back(std::move(gather));
          if (!first_gather) first_gather = i;
          continue;
        }
        back_to_nchw_at.try_emplace(value, i);  // nodes are visited in order: the first reader
      }
    }
    // Outputs: joined nodes write their activation channels-last, renamed; the NCHW name, where it is still read or
    // is a graph output, comes from a Transpose back.
    for (int i = 0; i < num_nodes; ++i) {
      if (!joined_[i]) continue;
      onnx::NodeProto& node = nodes_[i];
      ConvertOp(node, roles_[i]);
      ++result.converted_nodes;
      const std::string value = node.output(0);
      if (value.empty()) continue;  // ConvGrad without dX
      const std::string renamed = value + kChannelsLastSuffix;
      node.set_output(0, renamed);
      result.same_size_as[renamed] = value;
      auto reader = back_to_nchw_at.find(value);
      if (reader != back_to_nchw_at.end()) {
        before[reader->second].push_back(MakeTranspose(renamed, value, /*to_channels_last=*/false));
        ++result.transposes;
      } else if (graph_.outputs.contains(value)) {
        after[i].push_back(MakeTranspose(renamed, value, /*to_channels_last=*/false));
        ++result.transposes;
      }
    }
    std::vector<onnx::NodeProto> rewritten;
    rewritten.reserve(nodes_.size() + static_cast<size_t>(result.transposes) + 1);
    if (first_gather) rewritten.push_back(NchwAxesConstant());
    for (int i = 0; i < num_nodes; ++i) {
      for (auto& node : before[i]) rewritten.push_back(std::move(node));
      rewritten.push_back(std::move(nodes_[i]));
      for (auto& node : after[i]) rewritten.push_back(std::move(node));
    }
    nodes_ = std::move(rewritten);
    return result;
  }

  static void ConvertOp(onnx::NodeProto& node, Role role) {
    switch (role) {
      case Role::kConv:
        node.set_op_type("ChannelsLastConv");
        node.set_domain(kTraindTrainingDomain);
        break;
      case Role::kBatchNorm: {
        node.set_op_type("ChannelsLastBatchNormalization");
        node.set_domain(kTraindTrainingDomain);
        // epsilon, momentum and training_mode carry over; the schema has nothing else (spatial is opset < 9).
        auto* attributes = node.mutable_attribute();
        attributes->erase(std::remove_if(attributes->begin(), attributes->end(),
                                         [](const onnx::AttributeProto& attribute) {
                                           return attribute.name() != "epsilon" && attribute.name() != "momentum" &&
                                                  attribute.name() != "training_mode";
                                         }),
                          attributes->end());
        break;
      }
      case Role::kMaxPool:
        node.set_op_type("ChannelsLastMaxPool");
        node.set_domain(kTraindTrainingDomain);
        node.mutable_output()->DeleteSubrange(1, node.output_size() - 1);  // an unnamed Indices output
        break;
      case Role::kConvGrad:
      case Role::kBatchNormGrad:
      case Role::kMaxPoolGrad:
        *node.add_attribute() = IntAttribute("channels_last", 1);
        break;
      case Role::kElementwise:
      case Role::kOther:
        break;
    }
  }

  static onnx::NodeProto NchwAxesConstant() {
    onnx::NodeProto node;
    node.set_name("ChannelsLast/Constant/nchw_axes");
    node.set_op_type("Constant");
    node.add_output(kNchwAxes);
    onnx::AttributeProto* value = node.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto* tensor = value->mutable_t();
    tensor->set_data_type(onnx::TensorProto::INT64);
    tensor->add_dims(4);
    for (int64_t axis : {0, 3, 1, 2}) tensor->add_int64_data(axis);
    return node;
  }

  static constexpr const char* kNchwAxes = "ChannelsLast/nchw_axes";

  std::vector<onnx::NodeProto>& nodes_;
  const ChannelsLastGraph& graph_;
  absl::flat_hash_map<std::string, int> ranks_;
  absl::flat_hash_map<std::string, int> producer_;
  std::vector<Role> roles_;
  std::vector<bool> joined_;
};

}  // namespace

bool IsChannelsLastValue(const std::string& name) {
  const size_t suffix = sizeof(kChannelsLastSuffix) - 1;
  return name.size() > suffix && name.compare(name.size() - suffix, suffix, kChannelsLastSuffix) == 0;
}

ChannelsLastResult ConvertToChannelsLast(std::vector<onnx::NodeProto>& nodes, const ChannelsLastGraph& graph) {
  return ChannelsLastPass(nodes, graph).Run();
}

}  // namespace traind::engine
