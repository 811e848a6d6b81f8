#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engine/model/traind_schemas.h"
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

// A float value with static dims.
void AddStaticFloatValue(onnx::ValueInfoProto* info, const std::string& name, const std::vector<int64_t>& dims) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : dims) type->mutable_shape()->add_dim()->set_dim_value(dim);
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

// An opset-13 model with a graph input x and a graph output y (of dynamic length), and no nodes yet.
onnx::ModelProto ModelFromXToY() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  AddFloatValue(model.mutable_graph()->add_input(), "x");
  AddFloatValue(model.mutable_graph()->add_output(), "y");
  return model;
}

// A chain x -> Exp -> Neg -> Sqrt(abs) ... -> y, nodes listed in reverse order.
onnx::ModelProto ChainModel() {
  onnx::ModelProto model = ModelFromXToY();
  auto* graph = model.mutable_graph();
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

// A model already in topological order runs in its order — a training graph's backward node reading a forward
// value (t) stays in the backward pass, where a FIFO schedule would run it, and keep its output, during the forward
// pass — except for Shape and Size, which run as soon as their input exists so as not to keep it alive.
TEST(RuntimeTest, KeepsTheModelsOrderButRunsShapeQueriesEarly) {
  onnx::ModelProto model = ModelFromXToY();
  auto* graph = model.mutable_graph();
  AddNode(graph, "Exp", {"x"}, "a");
  AddNode(graph, "Neg", {"a"}, "b");
  AddNode(graph, "Abs", {"b"}, "c");
  AddNode(graph, "Neg", {"a"}, "t");
  AddNode(graph, "Add", {"c", "t"}, "sum");
  AddNode(graph, "Shape", {"b"}, "shape");
  AddNode(graph, "Reshape", {"sum", "shape"}, "y");
  auto plan = Compile(model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> order;
  for (const PlannedNode& node : (*plan)->nodes) order.push_back((*plan)->slot_names[node.outputs[0]]);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "shape", "c", "t", "sum", "y"}));
  // b dies with its last reader, Abs, not at the end.
  ASSERT_EQ((*plan)->nodes[3].release_after.size(), 1u);
  EXPECT_EQ((*plan)->slot_names[(*plan)->nodes[3].release_after[0]], "b");
}

// A session's pool keeps what its runs need (twice the plan's peak, at least 1 GiB), so that a run needing more than
// 1 GiB does not give its buffers back to the system after every run and fault them in again.
TEST(RuntimeTest, APoolCachesTwiceThePlansPeak) {
  PlanMemory small;
  small.peak_bytes = 10 << 20;
  EXPECT_EQ(PoolCacheBytes(small), size_t{1} << 30);
  PlanMemory large;
  large.peak_bytes = int64_t{3} << 30;
  EXPECT_EQ(PoolCacheBytes(large), size_t{6} << 30);
  large.peak_bytes = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(PoolCacheBytes(large), std::numeric_limits<size_t>::max());
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

// The exported GELU, y = (x * (1 + erf(x / sqrt(2)))) * 0.5, over a static [4, 1000] input, with one more
// consumer of x (so x itself is not absorbed) and a bias Add of a [1000] row (not a scalar: it stays its own node).
onnx::ModelProto GeluModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* graph = model.mutable_graph();
  AddStaticFloatValue(graph->add_input(), "x", {4, 1000});
  AddStaticFloatValue(graph->add_input(), "bias", {1000});
  AddStaticFloatValue(graph->add_output(), "y", {4, 1000});
  AddStaticFloatValue(graph->add_output(), "x_plus_bias", {4, 1000});
  for (const char* name : {"scaled", "erf", "one_plus", "times_x"}) AddStaticFloatValue(graph->add_value_info(), name, {4, 1000});
  auto add_scalar = [&](const char* name, float value) {
    auto* constant = graph->add_initializer();
    constant->set_name(name);
    constant->set_data_type(onnx::TensorProto::FLOAT);
    constant->add_float_data(value);
  };
  add_scalar("sqrt2", 1.4142135f);
  add_scalar("one", 1.0f);
  add_scalar("half", 0.5f);
  AddNode(graph, "Add", {"x", "bias"}, "x_plus_bias");  // first: its output lives while the chain runs
  AddNode(graph, "Div", {"x", "sqrt2"}, "scaled");
  AddNode(graph, "Erf", {"scaled"}, "erf");
  AddNode(graph, "Add", {"erf", "one"}, "one_plus");
  AddNode(graph, "Mul", {"x", "one_plus"}, "times_x");
  AddNode(graph, "Mul", {"times_x", "half"}, "y");
  return model;
}

TEST(RuntimeTest, ElementwiseChainsFuseIntoOneNodeWithBitwiseEqualResults) {
  // GELU's decomposition as the elementwise chain it is: without the pass that makes it one Gelu node
  // (engine/runtime/gelu_fusion.h, tested in gelu_fusion_test).
  CompileOptions fused_options;
  fused_options.fuse_gelu = false;
  CompileOptions unfused_options = fused_options;
  unfused_options.fuse_elementwise = false;
  auto fused = Compile(GeluModel(), fused_options);
  auto unfused = Compile(GeluModel(), unfused_options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  std::vector<std::string> op_types;
  for (const PlannedNode& node : (*fused)->nodes) op_types.push_back(node.op_type);
  EXPECT_EQ(op_types, (std::vector<std::string>{"Add", "Fused(Div+Erf+Add+Mul+Mul)"}));
  EXPECT_EQ((*unfused)->nodes.size(), 6u);
  // The four intermediates never exist: the fused plan's peak holds the two outputs (16 KB buckets), the unfused
  // one x_plus_bias and two intermediates (a node's input and output) at a time.
  EXPECT_EQ((*fused)->memory.peak_bytes, 2 * 16384);
  EXPECT_EQ((*unfused)->memory.peak_bytes, 3 * 16384);

  std::vector<float> x(4000), bias(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 4.0f;
  x[5] = std::numeric_limits<float>::infinity();
  x[6] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.001f * static_cast<float>(i);
  const NamedTensors inputs = {{"x", *Tensor::FromVector<float>({4, 1000}, x)},
                               {"bias", *Tensor::FromVector<float>({1000}, bias)}};
  ThreadPool threads(3);  // several chunks per thread and a partial last chunk (4000 = 3 * 1024 + 928)
  Session fused_session(*fused, std::make_unique<CpuExecutor>(&threads));
  Session unfused_session(*unfused, std::make_unique<CpuExecutor>(&threads));
  auto fused_outputs = fused_session.Run(inputs);
  auto unfused_outputs = unfused_session.Run(inputs);
  ASSERT_TRUE(fused_outputs.ok()) << fused_outputs.status();
  ASSERT_TRUE(unfused_outputs.ok()) << unfused_outputs.status();
  for (int output = 0; output < 2; ++output) {
    const Tensor& a = (*fused_outputs)[output].second;
    const Tensor& b = (*unfused_outputs)[output].second;
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0) << "output " << output;
  }
  // And the values are GELU's.
  const float* y = (*fused_outputs)[0].second.data<float>();
  EXPECT_NEAR(y[1], x[1] * 0.5 * (1 + std::erf(x[1] / std::sqrt(2.0))), 1e-6);
  EXPECT_TRUE(std::isnan(y[6]));
}

// A residual block's backward: dx = ReluGrad(Sum(a, b, c), y) and z = Relu(Mean(a, s)) with s a scalar: Sum,
// Mean and ReluGrad fuse as the binary ops do, bitwise equal to the unfused plan (NaN, zeros, negative zero).
TEST(RuntimeTest, SumMeanAndReluGradFuseWithBitwiseEqualResults) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* traind_opset = model.add_opset_import();
  traind_opset->set_domain(kTraindTrainingDomain);
  traind_opset->set_version(kTraindTrainingVersion);
  auto* graph = model.mutable_graph();
  for (const char* name : {"a", "b", "c", "y"}) AddStaticFloatValue(graph->add_input(), name, {3, 1500});
  AddStaticFloatValue(graph->add_input(), "s", {1});
  AddStaticFloatValue(graph->add_output(), "dx", {3, 1500});
  AddStaticFloatValue(graph->add_output(), "z", {3, 1500});
  AddStaticFloatValue(graph->add_value_info(), "summed", {3, 1500});
  AddStaticFloatValue(graph->add_value_info(), "mean", {3, 1500});
  AddNode(graph, "Sum", {"a", "b", "c"}, "summed");
  AddNode(graph, "ReluGrad", {"summed", "y"}, "dx");
  graph->mutable_node(1)->set_domain(kTraindTrainingDomain);
  AddNode(graph, "Mean", {"a", "s"}, "mean");
  AddNode(graph, "Relu", {"mean"}, "z");
  CompileOptions unfused_options;
  unfused_options.fuse_elementwise = false;
  auto fused = Compile(model);
  auto unfused = Compile(model, unfused_options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  std::vector<std::string> op_types;
  for (const PlannedNode& node : (*fused)->nodes) op_types.push_back(node.op_type);
  EXPECT_EQ(op_types, (std::vector<std::string>{"Fused(Sum+ReluGrad)", "Fused(Mean+Relu)"}));

  std::vector<float> a(4500), b(4500), c(4500), y(4500);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    b[i] = std::cos(0.11f * static_cast<float>(i)) * 1e-3f;
    c[i] = static_cast<float>(i % 7) - 3.0f;
    y[i] = i % 5 == 0 ? 0.0f : std::sin(0.05f * static_cast<float>(i));
  }
  a[4] = std::numeric_limits<float>::quiet_NaN();
  y[8] = -0.0f;
  y[9] = std::numeric_limits<float>::quiet_NaN();
  const NamedTensors inputs = {{"a", *Tensor::FromVector<float>({3, 1500}, a)},
                               {"b", *Tensor::FromVector<float>({3, 1500}, b)},
                               {"c", *Tensor::FromVector<float>({3, 1500}, c)},
                               {"y", *Tensor::FromVector<float>({3, 1500}, y)},
                               {"s", *Tensor::FromVector<float>({1}, {0.25f})}};
  ThreadPool threads(3);
  Session fused_session(*fused, std::make_unique<CpuExecutor>(&threads));
  Session unfused_session(*unfused, std::make_unique<CpuExecutor>(&threads));
  auto fused_outputs = fused_session.Run(inputs);
  auto unfused_outputs = unfused_session.Run(inputs);
  ASSERT_TRUE(fused_outputs.ok()) << fused_outputs.status();
  ASSERT_TRUE(unfused_outputs.ok()) << unfused_outputs.status();
  for (int output = 0; output < 2; ++output) {
    const Tensor& fused_value = (*fused_outputs)[output].second;
    const Tensor& unfused_value = (*unfused_outputs)[output].second;
    ASSERT_EQ(fused_value.shape(), unfused_value.shape());
    EXPECT_EQ(std::memcmp(fused_value.raw_data(), unfused_value.raw_data(), fused_value.byte_size()), 0)
        << "output " << output;
  }
  const float* dx = (*fused_outputs)[0].second.data<float>();
  EXPECT_EQ(dx[1], y[1] > 0 ? a[1] + b[1] + c[1] : 0.0f);
  EXPECT_EQ((*fused_outputs)[1].second.data<float>()[2], std::max(0.0f, (a[2] + 0.25f) / 2.0f));
}

TEST(RuntimeTest, AValueReadTwiceOrReturnedIsNotFusedAway) {
  // a = Exp(x) is read by Neg and by Abs: it must exist whole, so Exp fuses with neither. y = Neg(a) is a graph
  // output read by the final Add: kept too.
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* graph = model.mutable_graph();
  AddStaticFloatValue(graph->add_input(), "x", {3});
  AddStaticFloatValue(graph->add_output(), "y", {3});
  AddStaticFloatValue(graph->add_output(), "z", {3});
  for (const char* name : {"a", "b"}) AddStaticFloatValue(graph->add_value_info(), name, {3});
  AddNode(graph, "Exp", {"x"}, "a");
  AddNode(graph, "Neg", {"a"}, "y");
  AddNode(graph, "Abs", {"a"}, "b");
  AddNode(graph, "Add", {"b", "y"}, "z");
  auto plan = Compile(model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> op_types;
  for (const PlannedNode& node : (*plan)->nodes) op_types.push_back(node.op_type);
  EXPECT_EQ(op_types, (std::vector<std::string>{"Exp", "Neg", "Fused(Abs+Add)"}));
  Session session(*plan, std::make_unique<CpuExecutor>());
  auto outputs = session.Run({{"x", *Tensor::FromVector<float>({3}, std::vector<float>{0, 1, -1})}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_FLOAT_EQ((*outputs)[1].second.data<float>()[1], std::exp(1.0f) - std::exp(1.0f));
}

// A BatchNormalization's output read only by a Relu, or by a residual Add and Relu, becomes the normalisation's
// epilogue: one node, bitwise equal to the unfused plan; of two normalisations feeding one Add the later takes it.
// A normalisation whose output is also returned keeps its own pass. Channels 21 (a tail past the 16-lane
// vectors) and rows that leave a partial last chunk per thread.
TEST(RuntimeTest, BatchNormalizationTakesTheReluAndResidualAddAfterItAsItsEpilogue) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(15);
  auto* traind_opset = model.add_opset_import();
  traind_opset->set_domain(kTraindTrainingDomain);
  traind_opset->set_version(kTraindTrainingVersion);
  auto* graph = model.mutable_graph();
  constexpr int64_t kChannels = 21;
  const std::vector<int64_t> dims = {3, 5, 7, kChannels};
  for (const char* name : {"x1", "x2", "x3", "x4"}) AddStaticFloatValue(graph->add_input(), name, dims);
  for (const char* name : {"scale", "bias", "mean", "var"}) AddStaticFloatValue(graph->add_input(), name, {kChannels});
  for (const char* name : {"r1", "out", "n4", "r4"}) AddStaticFloatValue(graph->add_output(), name, dims);
  AddStaticFloatValue(graph->add_output(), "running_mean1", {kChannels});
  for (const char* name : {"n1", "n2", "n3", "sum"}) AddStaticFloatValue(graph->add_value_info(), name, dims);
  auto add_norm = [&](const std::string& x, const std::string& y, const std::string& running_mean) {
    onnx::NodeProto* node = AddNode(graph, "ChannelsLastBatchNormalization", {x, "scale", "bias", "mean", "var"}, y);
    node->set_domain(kTraindTrainingDomain);
    node->add_output(running_mean);
    node->add_output(running_mean.empty() ? "" : running_mean + "_var");
    auto* training_mode = node->add_attribute();
    training_mode->set_name("training_mode");
    training_mode->set_type(onnx::AttributeProto::INT);
    training_mode->set_i(1);
  };
  add_norm("x1", "n1", "running_mean1");  // n1 -> Relu: fuses
  AddNode(graph, "Relu", {"n1"}, "r1");
  add_norm("x2", "n2", "");  // n2 + n3 -> Relu: n3's normalisation, the later one, takes Add and Relu
  add_norm("x3", "n3", "");
  AddNode(graph, "Add", {"n2", "n3"}, "sum");
  AddNode(graph, "Relu", {"sum"}, "out");
  add_norm("x4", "n4", "");  // n4 is returned: no epilogue
  AddNode(graph, "Relu", {"n4"}, "r4");

  CompileOptions unfused_options;
  unfused_options.fuse_elementwise = false;
  auto fused = Compile(model);
  auto unfused = Compile(model, unfused_options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  std::vector<std::string> op_types;
  for (const PlannedNode& node : (*fused)->nodes) op_types.push_back(node.op_type);
  EXPECT_EQ(op_types, (std::vector<std::string>{"ChannelsLastBatchNormalization+Relu", "ChannelsLastBatchNormalization",
                                                "ChannelsLastBatchNormalization+Add+Relu",
                                                "ChannelsLastBatchNormalization", "Relu"}));

  NamedTensors inputs;
  const int64_t count = 3 * 5 * 7 * kChannels;
  for (int k = 1; k <= 4; ++k) {
    std::vector<float> values(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) values[i] = std::sin(0.37f * static_cast<float>(i * k)) * 2.0f + 0.1f * k;
    if (k == 2) values[40] = std::numeric_limits<float>::quiet_NaN();  // one channel's statistics NaN
    inputs.push_back({"x" + std::to_string(k), *Tensor::FromVector<float>(dims, values)});
  }
  std::vector<float> scale(kChannels), bias(kChannels), mean(kChannels, 0.0f), var(kChannels, 1.0f);
  for (int64_t c = 0; c < kChannels; ++c) {
    scale[c] = 0.5f + 0.1f * static_cast<float>(c);
    bias[c] = c % 3 == 0 ? -1.0f : 0.25f;
  }
  inputs.push_back({"scale", *Tensor::FromVector<float>({kChannels}, scale)});
  inputs.push_back({"bias", *Tensor::FromVector<float>({kChannels}, bias)});
  inputs.push_back({"mean", *Tensor::FromVector<float>({kChannels}, mean)});
  inputs.push_back({"var", *Tensor::FromVector<float>({kChannels}, var)});
  for (int num_threads : {1, 3}) {
    ThreadPool threads(num_threads);
    Session fused_session(*fused, std::make_unique<CpuExecutor>(&threads));
    Session unfused_session(*unfused, std::make_unique<CpuExecutor>(&threads));
    auto fused_outputs = fused_session.Run(inputs);
    auto unfused_outputs = unfused_session.Run(inputs);
    ASSERT_TRUE(fused_outputs.ok()) << fused_outputs.status();
    ASSERT_TRUE(unfused_outputs.ok()) << unfused_outputs.status();
    ASSERT_EQ(fused_outputs->size(), 5u);
    for (size_t output = 0; output < fused_outputs->size(); ++output) {
      const Tensor& fused_value = (*fused_outputs)[output].second;
      const Tensor& unfused_value = (*unfused_outputs)[output].second;
      ASSERT_EQ(fused_value.shape(), unfused_value.shape());
      EXPECT_EQ(std::memcmp(fused_value.raw_data(), unfused_value.raw_data(), fused_value.byte_size()), 0)
          << "output " << (*fused_outputs)[output].first << ", " << num_threads << " threads";
    }
    // And r1 is the Relu of the normalised x1: channel 0 of row 0 by hand.
    double sum = 0, squares = 0;
    const float* x1 = inputs[0].second.data<float>();
    for (int64_t r = 0; r < count / kChannels; ++r) sum += x1[r * kChannels];
    const double batch_mean = sum / static_cast<double>(count / kChannels);
    for (int64_t r = 0; r < count / kChannels; ++r) squares += std::pow(x1[r * kChannels] - batch_mean, 2);
    const double expected = std::max(
        0.0, (x1[0] - batch_mean) / std::sqrt(squares / static_cast<double>(count / kChannels) + 1e-5) * scale[0] +
                 bias[0]);
    EXPECT_NEAR((*fused_outputs)[0].second.data<float>()[0], expected, 1e-5);
  }
}

}  // namespace
}  // namespace traind::engine
