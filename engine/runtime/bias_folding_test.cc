// FoldBiasAddsIntoProducts on a Linear layer with its bias as PyTorch exports it (MatMul of a sequence, then Add),
// trained and run: the same results as the unfolded plan, one node fewer; and the Adds it must leave alone.
#include "engine/runtime/bias_folding.h"

#include <cmath>

#include "engine/core/tensor.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

void AddValue(onnx::ValueInfoProto* info, const std::string& name, const std::vector<int64_t>& dims) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : dims) type->mutable_shape()->add_dim()->set_dim_value(dim);
}

onnx::NodeProto Node(const std::string& op, std::vector<std::string> inputs, const std::string& output) {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name(output);
  for (const auto& input : inputs) node.add_input(input);
  node.add_output(output);
  return node;
}

// y = Relu(x W^T + b) on a [6, 4, 5] sequence (W [3, 5] transposed, as PyTorch exports a Linear; the bias Add
// with b first, as PyTorch writes it), and a second Linear whose weight is already [K, N] and bias second.
onnx::ModelProto LinearModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  AddValue(graph->add_input(), "x", {6, 4, 5});
  AddValue(graph->add_input(), "W", {3, 5});
  AddValue(graph->add_input(), "b", {3});
  AddValue(graph->add_input(), "V", {3, 2});
  AddValue(graph->add_input(), "c", {2});
  *graph->add_node() = Node("Transpose", {"W"}, "Wt");
  *graph->add_node() = Node("MatMul", {"x", "Wt"}, "xW");
  *graph->add_node() = Node("Add", {"b", "xW"}, "h");
  *graph->add_node() = Node("Relu", {"h"}, "r");
  *graph->add_node() = Node("MatMul", {"r", "V"}, "rV");
  *graph->add_node() = Node("Add", {"rV", "c"}, "y");
  AddValue(graph->mutable_value_info()->Add(), "Wt", {5, 3});
  AddValue(graph->mutable_value_info()->Add(), "xW", {6, 4, 3});
  AddValue(graph->mutable_value_info()->Add(), "h", {6, 4, 3});
  AddValue(graph->mutable_value_info()->Add(), "r", {6, 4, 3});
  AddValue(graph->mutable_value_info()->Add(), "rV", {6, 4, 2});
  AddValue(graph->add_output(), "y", {6, 4, 2});
  return model;
}

Tensor Values(const Shape& shape, float scale) {
  std::vector<float> values(DimProduct(shape, 0, shape.size()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = scale * std::sin(0.7f * static_cast<float>(i) + scale);
  return *Tensor::FromVector<float>(shape, values);
}

TEST(BiasFoldingTest, ALinearLayersBiasIsAddedByItsProductWithTheSameResults) {
  CompileOptions unfolded_options;
  unfolded_options.fold_bias_adds = false;
  auto folded = Compile(LinearModel());
  auto unfolded = Compile(LinearModel(), unfolded_options);
  ASSERT_TRUE(folded.ok()) << folded.status();
  ASSERT_TRUE(unfolded.ok()) << unfolded.status();
  std::vector<std::string> op_types;
  for (const PlannedNode& node : (*folded)->nodes) op_types.push_back(node.op_type);
  EXPECT_EQ(op_types, (std::vector<std::string>{"FusedMatMul", "Relu", "FusedMatMul"}));
  EXPECT_EQ((*unfolded)->nodes.size(), 5u);  // FusedMatMul, Add, Relu, MatMul, Add

  const NamedTensors inputs = {{"x", Values({6, 4, 5}, 1.0f)},
                               {"W", Values({3, 5}, 0.5f)},
                               {"b", Values({3}, 0.8f)},
                               {"V", Values({3, 2}, 1.2f)},
                               {"c", Values({2}, -0.4f)}};
  Session folded_session(*folded, std::make_unique<CpuExecutor>());
  Session unfolded_session(*unfolded, std::make_unique<CpuExecutor>());
  auto folded_outputs = folded_session.Run(inputs);
  auto unfolded_outputs = unfolded_session.Run(inputs);
  ASSERT_TRUE(folded_outputs.ok()) << folded_outputs.status();
  ASSERT_TRUE(unfolded_outputs.ok()) << unfolded_outputs.status();
  const Tensor& a = (*folded_outputs)[0].second;
  const Tensor& u = (*unfolded_outputs)[0].second;
  ASSERT_EQ(a.shape(), u.shape());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    EXPECT_NEAR(a.data<float>()[i], u.data<float>()[i], 1e-5 * (1 + std::fabs(u.data<float>()[i]))) << i;
  }
  // One element by definition, in double: y[2, 3, 1] = c[1] + sum_j relu(b[j] + sum_k x[2, 3, k] W[j, k]) V[j, 1].
  const float* x = inputs[0].second.data<float>();
  const float* w = inputs[1].second.data<float>();
  const float* b = inputs[2].second.data<float>();
  const float* v = inputs[3].second.data<float>();
  double expected = inputs[4].second.data<float>()[1];
  for (int j = 0; j < 3; ++j) {
    double h = b[j];
    for (int k = 0; k < 5; ++k) h += static_cast<double>(x[(2 * 4 + 3) * 5 + k]) * w[j * 5 + k];
    expected += std::max(h, 0.0) * v[j * 2 + 1];
  }
  EXPECT_NEAR(a.data<float>()[(2 * 4 + 3) * 2 + 1], expected, 1e-5);
}

BiasFoldingGraph SequenceGraph() {
  BiasFoldingGraph graph;
  graph.dims["x"] = {6, 4, 5};
  graph.dims["W"] = {5, 3};
  graph.dims["P"] = {6, 4, 3};
  graph.dims["b"] = {3};
  graph.dims["b4"] = {4};
  graph.dims["one"] = {1};
  graph.dims["v"] = {5};
  graph.dims["P1"] = {6, 4, 1};
  return graph;
}

TEST(BiasFoldingTest, AddsThatAreNotABiasOfASoleProductStay) {
  const BiasFoldingGraph graph = SequenceGraph();
  auto folds = [](std::vector<onnx::NodeProto> nodes, const BiasFoldingGraph& g) {
    return FoldBiasAddsIntoProducts(nodes, g);
  };
  // Folded, either operand order, MatMul or FusedMatMul.
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"P", "b"}, "y")}, graph), 1);
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"b", "P"}, "y")}, graph), 1);
  onnx::NodeProto fused = Node("FusedMatMul", {"x", "W"}, "P");
  fused.set_domain(kTraindTrainingDomain);
  EXPECT_EQ(folds({fused, Node("Add", {"P", "b"}, "y")}, graph), 1);
  // The product read by something else too (a gradient would read it).
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"P", "b"}, "y"), Node("Relu", {"P"}, "r")}, graph),
            0);
  // The product a graph output.
  BiasFoldingGraph with_output = graph;
  with_output.outputs.insert("P");
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"P", "b"}, "y")}, with_output), 0);
  // A bias of another length, one that broadcasting would widen the product to, one of a single element (left to
  // the Add), or of unknown shape.
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"P", "b4"}, "y")}, graph), 0);
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P1"), Node("Add", {"P1", "b"}, "y")}, graph), 0);
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"P", "one"}, "y")}, graph), 0);
  EXPECT_EQ(folds({Node("MatMul", {"x", "W"}, "P"), Node("Add", {"P", "unknown"}, "y")}, graph), 0);
  // A product with a 1-D operand (MatMul's vector semantics) or an operand of unknown rank.
  EXPECT_EQ(folds({Node("MatMul", {"x", "v"}, "P"), Node("Add", {"P", "b"}, "y")}, graph), 0);
  EXPECT_EQ(folds({Node("MatMul", {"x", "unknown"}, "P"), Node("Add", {"P", "b"}, "y")}, graph), 0);
  // A product that already has a bias.
  onnx::NodeProto biased = fused;
  biased.add_input("b");
  EXPECT_EQ(folds({biased, Node("Add", {"P", "b"}, "y")}, graph), 0);
}

}  // namespace
}  // namespace traind::engine
