// FoldBiasAddsIntoProducts on a Linear layer with its bias as PyTorch exports it (MatMul of a sequence, then Add),
// trained and run: the same results as the unfolded plan, one node fewer; and the Adds it must leave alone.
#include "engine/runtime/bias_folding.h"

#include <cmath>

#include "engine/core/tensor.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/plan_test_util.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::AddFloatValue;
using testing::MakeNode;
using testing::SineValues;

// y = Relu(x W^T + b) on a [6, 4, 5] sequence (W [3, 5] transposed, as PyTorch exports a Linear; the bias Add
// with b first, as PyTorch writes it), and a second Linear whose weight is already [K, N] and bias second.
onnx::ModelProto LinearModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  AddFloatValue(graph->add_input(), "x", {6, 4, 5});
  AddFloatValue(graph->add_input(), "W", {3, 5});
  AddFloatValue(graph->add_input(), "b", {3});
  AddFloatValue(graph->add_input(), "V", {3, 2});
  AddFloatValue(graph->add_input(), "c", {2});
  *graph->add_node() = MakeNode("Transpose", {"W"}, "Wt");
  *graph->add_node() = MakeNode("MatMul", {"x", "Wt"}, "xW");
  *graph->add_node() = MakeNode("Add", {"b", "xW"}, "h");
  *graph->add_node() = MakeNode("Relu", {"h"}, "r");
  *graph->add_node() = MakeNode("MatMul", {"r", "V"}, "rV");
  *graph->add_node() = MakeNode("Add", {"rV", "c"}, "y");
  AddFloatValue(graph->mutable_value_info()->Add(), "Wt", {5, 3});
  AddFloatValue(graph->mutable_value_info()->Add(), "xW", {6, 4, 3});
  AddFloatValue(graph->mutable_value_info()->Add(), "h", {6, 4, 3});
  AddFloatValue(graph->mutable_value_info()->Add(), "r", {6, 4, 3});
  AddFloatValue(graph->mutable_value_info()->Add(), "rV", {6, 4, 2});
  AddFloatValue(graph->add_output(), "y", {6, 4, 2});
  return model;
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

  const NamedTensors inputs = {{"x", SineValues({6, 4, 5}, 1.0f)},
                               {"W", SineValues({3, 5}, 0.5f)},
                               {"b", SineValues({3}, 0.8f)},
                               {"V", SineValues({3, 2}, 1.2f)},
                               {"c", SineValues({2}, -0.4f)}};
  const NamedTensors outputs = testing::ExpectSameOutputs(*folded, *unfolded, inputs, 1e-5);
  ASSERT_EQ(outputs.size(), 1u);
  const Tensor& a = outputs[0].second;
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
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"P", "b"}, "y")}, graph), 1);
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"b", "P"}, "y")}, graph), 1);
  onnx::NodeProto fused = MakeNode("FusedMatMul", {"x", "W"}, "P");
  fused.set_domain(kTraindTrainingDomain);
  EXPECT_EQ(folds({fused, MakeNode("Add", {"P", "b"}, "y")}, graph), 1);
  // The product read by something else too (a gradient would read it).
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"P", "b"}, "y"), MakeNode("Relu", {"P"}, "r")}, graph),
            0);
  // The product a graph output.
  BiasFoldingGraph with_output = graph;
  with_output.outputs.insert("P");
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"P", "b"}, "y")}, with_output), 0);
  // A bias of another length, one that broadcasting would widen the product to, one of a single element (left to
  // the Add), or of unknown shape.
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"P", "b4"}, "y")}, graph), 0);
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P1"), MakeNode("Add", {"P1", "b"}, "y")}, graph), 0);
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"P", "one"}, "y")}, graph), 0);
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "W"}, "P"), MakeNode("Add", {"P", "unknown"}, "y")}, graph), 0);
  // A product with a 1-D operand (MatMul's vector semantics) or an operand of unknown rank.
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "v"}, "P"), MakeNode("Add", {"P", "b"}, "y")}, graph), 0);
  EXPECT_EQ(folds({MakeNode("MatMul", {"x", "unknown"}, "P"), MakeNode("Add", {"P", "b"}, "y")}, graph), 0);
  // A product that already has a bias.
  onnx::NodeProto biased = fused;
  biased.add_input("b");
  EXPECT_EQ(folds({biased, MakeNode("Add", {"P", "b"}, "y")}, graph), 0);
}

}  // namespace
}  // namespace traind::engine
