// FoldTransposesIntoProducts on the Linear layer of a training graph as PyTorch exports it and as the gradient
// builder differentiates it, against the same plan unfolded; and the cases it must leave alone.
#include "engine/runtime/transpose_folding.h"

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

// y = x W^T (MatMul of the transposed weight), dx = dy W (a Gemm reading the transposed weight transposed again),
// dW = (x^T dy)^T (the weight gradient made transposed, then transposed back): what train steps of a Linear run.
onnx::ModelProto LinearTrainingModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  AddFloatValue(graph->add_input(), "x", {6, 4, 5});
  AddFloatValue(graph->add_input(), "W", {3, 5});
  AddFloatValue(graph->add_input(), "dy", {24, 3});
  AddFloatValue(graph->add_input(), "x_rows", {24, 5});
  *graph->add_node() = MakeNode("Transpose", {"W"}, "Wt", {});
  graph->mutable_node(0)->add_attribute()->CopyFrom([] {
    onnx::AttributeProto perm;
    perm.set_name("perm");
    perm.set_type(onnx::AttributeProto::INTS);
    perm.add_ints(1);
    perm.add_ints(0);
    return perm;
  }());
  *graph->add_node() = MakeNode("MatMul", {"x", "Wt"}, "y");
  *graph->add_node() = MakeNode("Gemm", {"dy", "Wt"}, "dx_rows", {{"transB", 1}});
  *graph->add_node() = MakeNode("Gemm", {"x_rows", "dy"}, "dWt", {{"transA", 1}});
  *graph->add_node() = MakeNode("Transpose", {"dWt"}, "dW");
  AddFloatValue(graph->add_output(), "y", {6, 4, 3});
  AddFloatValue(graph->add_output(), "dx_rows", {24, 5});
  AddFloatValue(graph->add_output(), "dW", {3, 5});
  return model;
}

TEST(TransposeFoldingTest, ALinearLayersTransposesAreReadInPlaceWithTheSameResults) {
  CompileOptions unfolded_options;
  unfolded_options.fold_transposes = false;
  auto folded = Compile(LinearTrainingModel());
  auto unfolded = Compile(LinearTrainingModel(), unfolded_options);
  ASSERT_TRUE(folded.ok()) << folded.status();
  ASSERT_TRUE(unfolded.ok()) << unfolded.status();
  std::vector<std::string> op_types;
  for (const PlannedNode& node : (*folded)->nodes) op_types.push_back(node.op_type);
  EXPECT_EQ(op_types, (std::vector<std::string>{"FusedMatMul", "Gemm", "Gemm"}));
  EXPECT_EQ((*unfolded)->nodes.size(), 5u);

  const NamedTensors inputs = {{"x", SineValues({6, 4, 5}, 1.0f)},
                               {"W", SineValues({3, 5}, 0.5f)},
                               {"dy", SineValues({24, 3}, 2.0f)},
                               {"x_rows", SineValues({24, 5}, 1.5f)}};
  const NamedTensors folded_outputs = testing::ExpectSameOutputs(*folded, *unfolded, inputs, 1e-5);
  ASSERT_EQ(folded_outputs.size(), 3u);
  // dW by definition, for one element: sum over rows r of dy[r, 1] * x_rows[r, 2].
  double expected = 0;
  for (int r = 0; r < 24; ++r) {
    expected += inputs[2].second.data<float>()[r * 3 + 1] * inputs[3].second.data<float>()[r * 5 + 2];
  }
  EXPECT_NEAR(folded_outputs[2].second.data<float>()[1 * 5 + 2], expected, 1e-4);
}

TransposeFoldingGraph MatrixGraph() {
  TransposeFoldingGraph graph;
  for (const char* name : {"W", "Wt", "x", "dy", "G", "c"}) graph.ranks[name] = 2;
  graph.ranks["x3"] = 3;
  graph.ranks["v"] = 1;
  graph.ranks["T3"] = 3;
  return graph;
}

TEST(TransposeFoldingTest, TransposesThatAreNotOnlyReadByProductsStay) {
  const TransposeFoldingGraph graph = MatrixGraph();
  auto folds = [&](std::vector<onnx::NodeProto> nodes, const TransposeFoldingGraph& g) {
    return FoldTransposesIntoProducts(nodes, g);
  };
  // Folded: read by MatMul and Gemm.
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), MakeNode("MatMul", {"x3", "Wt"}, "y"),
                   MakeNode("Gemm", {"dy", "Wt"}, "z", {{"transB", 1}})},
                  graph),
            1);
  // Read by something else too.
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), MakeNode("MatMul", {"x", "Wt"}, "y"), MakeNode("Relu", {"Wt"}, "r")},
                  graph),
            0);
  // A graph output.
  TransposeFoldingGraph with_output = graph;
  with_output.outputs.insert("Wt");
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), MakeNode("MatMul", {"x", "Wt"}, "y")}, with_output), 0);
  // A constant: constant folding transposes it once instead.
  TransposeFoldingGraph constant = graph;
  constant.constants.insert("W");
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), MakeNode("MatMul", {"x", "Wt"}, "y")}, constant), 0);
  // MatMul with a vector: no FusedMatMul for it.
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), MakeNode("MatMul", {"v", "Wt"}, "y")}, graph), 0);
  // Read twice by one product (W^T W^T).
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), MakeNode("MatMul", {"Wt", "Wt"}, "y")}, graph), 0);
  // Not a matrix transpose.
  EXPECT_EQ(folds({MakeNode("Transpose", {"T3"}, "Wt"), MakeNode("MatMul", {"x3", "Wt"}, "y")}, graph), 0);
  // A Gemm with C, then transposed: (AB + C)^T is not a Gemm of the swapped operands.
  EXPECT_EQ(folds({MakeNode("Gemm", {"x", "dy", "c"}, "G"), MakeNode("Transpose", {"G"}, "Z"), MakeNode("Relu", {"Z"}, "r")},
                  graph),
            0);
  // A flag the Gemm kernel would not read as 0 / 1 (a string here): left for the kernel to refuse, not rewritten.
  onnx::NodeProto mistyped = MakeNode("Gemm", {"dy", "Wt"}, "z");
  auto* flag = mistyped.add_attribute();
  flag->set_name("transB");
  flag->set_type(onnx::AttributeProto::STRING);
  flag->set_s("yes");
  EXPECT_EQ(folds({MakeNode("Transpose", {"W"}, "Wt"), mistyped}, graph), 0);
  // A Gemm whose result is read elsewhere as well.
  EXPECT_EQ(folds({MakeNode("Gemm", {"x", "dy"}, "G"), MakeNode("Transpose", {"G"}, "Z"), MakeNode("Relu", {"G"}, "r")},
                  graph),
            0);
}

}  // namespace
}  // namespace traind::engine
