#include "engine/runtime/gelu_fusion.h"

#include <cmath>
#include <optional>

#include "engine/model/traind_schemas.h"
#include "engine/runtime/node_list.h"

namespace traind::engine {
namespace {

class GeluFuser {
 public:
  GeluFuser(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph) : nodes_(nodes), graph_(graph) {
    removed_.assign(nodes_.size(), false);
    index_.Build(nodes_, removed_);
  }

  int Run() {
    int fused = 0;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      std::vector<int> chain;
      const std::string x = GeluInput(i, &chain);
      if (x.empty()) continue;
      onnx::NodeProto gelu;
      gelu.set_name(nodes_[i].name());
      gelu.set_op_type("Gelu");
      gelu.set_domain(kTraindTrainingDomain);
      gelu.add_input(x);
      gelu.add_output(nodes_[i].output(0));
      for (int node : chain) removed_[node] = true;
      // The Gelu takes the root's place in the list (the compiler orders the nodes afterwards anyway).
      nodes_[i] = std::move(gelu);
      ++fused;
    }
    if (fused > 0) EraseRemovedNodes(nodes_, removed_);
    return fused;
  }

 private:
  // The producer of `value` when it is an ONNX `op_type` node with two inputs (one for Erf), not yet removed.
  int Producer(const std::string& value, const char* op_type) const {
    auto it = index_.producer.find(value);
    if (it == index_.producer.end() || removed_[it->second]) return -1;
    const onnx::NodeProto& node = nodes_[it->second];
    const int arity = std::string(op_type) == "Erf" ? 1 : 2;
    if (!IsOnnxNode(node) || node.op_type() != op_type || node.input_size() != arity || node.output_size() != 1) {
      return -1;
    }
    return it->second;
  }

  bool Private(const std::string& value) const { return index_.Private(value, graph_); }

  std::optional<float> ScalarConstant(const std::string& value) const {
    return FloatScalarConstant(value, nodes_, removed_, index_, graph_);
  }

  bool IsConstant(const std::string& value, double expected) const {
    const std::optional<float> scalar = ScalarConstant(value);
    return scalar.has_value() && std::fabs(*scalar - expected) <= 1e-6 * std::fabs(expected);
  }

  // x when node `root` ends an exact GELU chain of x (the chain's nodes but the root into `chain`); "" otherwise.
  std::string GeluInput(int root_index, std::vector<int>* chain) const {
    const onnx::NodeProto& root = nodes_[root_index];
    if (removed_[root_index] || !IsOnnxNode(root) || root.op_type() != "Mul" || root.input_size() != 2 ||
        root.output_size() != 1) {
      return "";
    }
    auto type = graph_.elem_types.find(root.output(0));
    if (type == graph_.elem_types.end() || type->second != onnx::TensorProto::FLOAT) return "";
    for (int nested = 0; nested < 2; ++nested) {
      const std::string& inner_value = root.input(nested);
      const int inner = Producer(inner_value, "Mul");
      if (inner < 0 || !Private(inner_value)) continue;
      const std::string factors[3] = {nodes_[inner].input(0), nodes_[inner].input(1), root.input(1 - nested)};
      for (int half = 0; half < 3; ++half) {
        if (!IsConstant(factors[half], 0.5)) continue;
        for (int cdf_term = 0; cdf_term < 3; ++cdf_term) {
          if (cdf_term == half) continue;
          const std::string& x = factors[3 - half - cdf_term];
          std::vector<int> cdf_nodes;
          if (!OnePlusErfOfScaled(factors[cdf_term], x, &cdf_nodes)) continue;
          *chain = cdf_nodes;
          chain->push_back(inner);
          return x;
        }
      }
    }
    return "";
  }

  // `value` is 1 + erf(x / sqrt(2)) (or erf(x * (1 / sqrt(2))) + 1, ...), its inner values private: its nodes.
  bool OnePlusErfOfScaled(const std::string& value, const std::string& x, std::vector<int>* nodes) const {
    const int add = Producer(value, "Add");
    if (add < 0 || !Private(value)) return false;
    for (int erf_side = 0; erf_side < 2; ++erf_side) {
      if (!IsConstant(nodes_[add].input(1 - erf_side), 1.0)) continue;
      const std::string& erf_value = nodes_[add].input(erf_side);
      const int erf = Producer(erf_value, "Erf");
      if (erf < 0 || !Private(erf_value)) continue;
      const std::string& scaled = nodes_[erf].input(0);
      if (!Private(scaled)) continue;
      int scaling = Producer(scaled, "Div");
      if (scaling >= 0 && !(nodes_[scaling].input(0) == x && IsConstant(nodes_[scaling].input(1), M_SQRT2))) {
        scaling = -1;
      }
      if (scaling < 0) {
        const int mul = Producer(scaled, "Mul");
        for (int side = 0; mul >= 0 && side < 2; ++side) {
          if (nodes_[mul].input(side) == x && IsConstant(nodes_[mul].input(1 - side), M_SQRT1_2)) scaling = mul;
        }
      }
      if (scaling < 0) continue;
      *nodes = {add, erf, scaling};
      return true;
    }
    return false;
  }

  std::vector<onnx::NodeProto>& nodes_;
  const GraphValueFacts& graph_;
  std::vector<bool> removed_;
  NodeListIndex index_;
};

}  // namespace

int FuseExactGelu(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph) {
  return GeluFuser(nodes, graph).Run();
}

}  // namespace traind::engine
