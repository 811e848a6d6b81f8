#include <cmath>
#include <string>

#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

void AddFloatValue(onnx::ValueInfoProto* info, const std::string& name) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  type->mutable_shape()->add_dim()->set_dim_param("n");  // Dynamic dim.
}

onnx::NodeProto* AddNode(onnx::GraphProto* graph, const char* op, std::vector<std::string> inputs,
                         std::string output) {
  auto* node = graph->add_node();
  node->set_op_type(op);
  node->set_name(output);
  for (auto& input : inputs) node->add_input(input);
  node->add_output(output);
  return node;
}

// A chain x -> Exp -> Neg -> Sqrt(abs) ... -> y, nodes listed in reverse order.
onnx::ModelProto ChainModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* graph = model.mutable_graph();
  AddFloatValue(graph->add_input(), "x");
  AddFloatValue(graph->add_output(), "y");
  AddNode(graph, "Add", {"c", "x"}, "y");
  AddNode(graph, "Abs", {"b"}, "c");
  AddNode(graph, "Neg", {"a"}, "b");
  AddNode(graph, "Exp", {"x"}, "a");
  return model;
}

// y = x + Neg(Exp(w)) with w an initializer.
onnx::ModelProto ModelWithConstantSubgraph() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* graph = model.mutable_graph();
  auto* w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_float_data(0.0f);
  w->add_float_data(1.0f);
  AddFloatValue(graph->add_input(), "x");
  AddFloatValue(graph->add_output(), "y");
  AddNode(graph, "Exp", {"w"}, "e");
  AddNode(graph, "Neg", {"e"}, "n");
  AddNode(graph, "Add", {"x", "n"}, "y");
  return model;
}

TEST(RuntimeTest, FoldsNodesOfConstantsAtCompileTime) {
  auto plan = Compile(ModelWithConstantSubgraph());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> remaining;
  for (const PlannedNode& node : (*plan)->nodes) remaining.push_back(node.op_type);
  EXPECT_EQ(remaining, (std::vector<std::string>{"Add"}));
  Session session(*plan, std::make_unique<CpuExecutor>());
  auto outputs = session.Run({{"x", *Tensor::FromVector<float>({2}, std::vector<float>{10, 20})}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_FLOAT_EQ((*outputs)[0].second.data<float>()[0], 9.0f);
  EXPECT_FLOAT_EQ((*outputs)[0].second.data<float>()[1], 20.0f - std::exp(1.0f));
}

TEST(RuntimeTest, SchedulesOutOfOrderNodesAndHandlesDynamicDims) {
  auto session = Session::Create(ChainModel());
  ASSERT_TRUE(session.ok()) << session.status();
  for (int64_t n : {1, 5}) {
    std::vector<float> x(n, 0.0f);
    auto outputs = (*session)->Run({{"x", *Tensor::FromVector<float>({n}, x)}});
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ASSERT_EQ((*outputs)[0].second.num_elements(), n);
    EXPECT_FLOAT_EQ((*outputs)[0].second.data<float>()[n - 1], 1.0f);  // |-e^0| + 0.
  }
}

TEST(RuntimeTest, IntermediatesReturnToThePoolAndGetReused) {
  auto plan = Compile(ChainModel());
  ASSERT_TRUE(plan.ok());
  // Every intermediate is released right after its last consumer.
  size_t released = 0;
  for (const PlannedNode& node : (*plan)->nodes) released += node.release_after.size();
  EXPECT_EQ(released, 4u);  // a, b, c and the graph input x (y is an output).
  CpuExecutor executor;
  auto x = *Tensor::FromVector<float>({4}, {1, 2, 3, 4});
  ASSERT_TRUE(executor.Run(**plan, {x}).ok());
  EXPECT_GT(executor.buffers().reuse_count(), 0u);
}

TEST(RuntimeTest, RejectsCyclesAndUnsupportedOps) {
  onnx::ModelProto cyclic = ChainModel();
  cyclic.mutable_graph()->mutable_node(3)->set_input(0, "c");  // Exp reads Abs's output.
  auto cycle = Compile(cyclic);
  EXPECT_EQ(cycle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cycle.status().message().find("cycle"), std::string::npos) << cycle.status();

  onnx::ModelProto unsupported = ChainModel();
  unsupported.mutable_graph()->mutable_node(0)->set_op_type("FancyOp");
  auto missing = Compile(unsupported);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(missing.status().message().find("FancyOp"), std::string::npos);
}

TEST(RuntimeTest, RunValidatesInputs) {
  auto session = Session::Create(ChainModel());
  ASSERT_TRUE(session.ok());
  auto wrong_dtype = (*session)->Run({{"x", *Tensor::FromVector<int32_t>({1}, {1})}});
  EXPECT_EQ(wrong_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_rank = (*session)->Run({{"x", *Tensor::FromVector<float>({1, 1}, {1})}});
  EXPECT_EQ(wrong_rank.status().code(), absl::StatusCode::kInvalidArgument);
  auto unknown = (*session)->Run({{"z", *Tensor::FromVector<float>({1}, {1})}});
  EXPECT_FALSE(unknown.ok());
}

TEST(RuntimeTest, KernelErrorsNameTheNode) {
  onnx::ModelProto model = ChainModel();
  auto* graph = model.mutable_graph();
  // y = Add(c, x) becomes Reshape(c, x): the float "shape" input is rejected at run time.
  graph->mutable_node(0)->set_op_type("Reshape");
  auto plan = Compile(model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CpuExecutor executor;
  auto result = executor.Run(**plan, {*Tensor::FromVector<float>({2}, {1, 2})});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("node 'y' (Reshape, opset 13)"), std::string::npos)
      << result.status();
}

// Donation targets: an input read by one node once can be updated in place by it; one read twice, or by two nodes,
// or that is also a graph output cannot.
TEST(RuntimeTest, DonationTargetsAreSoleReaders) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* graph = model.mutable_graph();
  for (const char* name : {"a", "b", "c", "d"}) AddFloatValue(graph->add_input(), name);
  AddFloatValue(graph->add_output(), "y");
  AddFloatValue(graph->add_output(), "z");
  AddFloatValue(graph->add_output(), "d");
  AddNode(graph, "Add", {"a", "a"}, "s");   // a read twice
  AddNode(graph, "Mul", {"s", "b"}, "y");   // b read once, at position 1
  AddNode(graph, "Sub", {"c", "y"}, "t");   // c read by two nodes
  AddNode(graph, "Add", {"t", "c"}, "z");
  auto plan = Compile(model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ((*plan)->donation_targets.size(), 4u);
  EXPECT_EQ((*plan)->donation_targets[0].node, -1);
  EXPECT_EQ((*plan)->donation_targets[1].node, 1);
  EXPECT_EQ((*plan)->donation_targets[1].position, 1);
  EXPECT_EQ((*plan)->donation_targets[2].node, -1);
  EXPECT_EQ((*plan)->donation_targets[3].node, -1);  // a graph output, read by nobody
  // Ordinary kernels ignore donations: donating everything changes no input.
  std::vector<Tensor> inputs;
  for (float value : {1.0f, 2.0f, 3.0f, 4.0f}) inputs.push_back(*Tensor::FromVector<float>({1}, {value}));
  const std::vector<int> all = {0, 1, 2, 3};
  RunOptions options;
  options.donated_inputs = all;
  auto outputs = CpuExecutor().RunWithOptions(**plan, inputs, options);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_FLOAT_EQ((*outputs)[0].data<float>()[0], 4.0f);  // (1 + 1) * 2
  EXPECT_FLOAT_EQ((*outputs)[1].data<float>()[0], 2.0f);  // (3 - 4) + 3
  for (int i = 0; i < 4; ++i) EXPECT_EQ(inputs[i].data<float>()[0], 1.0f + i);
}

}  // namespace
}  // namespace traind::engine
