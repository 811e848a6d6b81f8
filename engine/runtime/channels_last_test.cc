// The channels-last pass: a small conv net (residual Add, BatchNormalization, a Shape and a Size of an activation,
// intermediates that are graph outputs) gives the same outputs with and without it, with the Transposes only at its
// borders; and the graphs it must leave alone. Training graphs: module_test (ConvolutionNetsTrainAlike...) and the
// golden tests against PyTorch, which run with the pass.
#include "engine/runtime/channels_last.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

void AddValue(onnx::ValueInfoProto* info, const std::string& name, const std::vector<int64_t>& dims,
              int elem_type = onnx::TensorProto::FLOAT) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(elem_type);
  for (int64_t dim : dims) type->mutable_shape()->add_dim()->set_dim_value(dim);
}

onnx::NodeProto Node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                     std::vector<std::pair<std::string, std::vector<int64_t>>> attributes = {}) {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name(outputs.front());
  for (const auto& input : inputs) node.add_input(input);
  for (const auto& output : outputs) node.add_output(output);
  for (const auto& [name, values] : attributes) {
    auto* attribute = node.add_attribute();
    attribute->set_name(name);
    if (name == "training_mode") {
      attribute->set_type(onnx::AttributeProto::INT);
      attribute->set_i(values.front());
    } else {
      attribute->set_type(onnx::AttributeProto::INTS);
      for (int64_t value : values) attribute->add_ints(value);
    }
  }
  return node;
}

// x -> Conv 3x3 -> BatchNormalization (batch statistics) -> Relu = r -> Conv 1x1 + r = a; outputs a, r (read by
// the second Conv too), the running mean, and Shape / Size of the first convolution's output.
onnx::ModelProto ResidualModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(15);
  onnx::GraphProto* graph = model.mutable_graph();
  AddValue(graph->add_input(), "x", {2, 3, 6, 5});
  AddValue(graph->add_input(), "w1", {4, 3, 3, 3});
  AddValue(graph->add_input(), "w2", {4, 4, 1, 1});
  for (const char* name : {"scale", "bias", "mean", "var"}) AddValue(graph->add_input(), name, {4});
  *graph->add_node() = Node("Conv", {"x", "w1"}, {"y1"}, {{"pads", {1, 1, 1, 1}}});
  *graph->add_node() =
      Node("BatchNormalization", {"y1", "scale", "bias", "mean", "var"}, {"z", "running_mean", "running_var"},
           {{"training_mode", {1}}});
  *graph->add_node() = Node("Relu", {"z"}, {"r"});
  *graph->add_node() = Node("Conv", {"r", "w2"}, {"y2"});
  *graph->add_node() = Node("Add", {"y2", "r"}, {"a"});
  *graph->add_node() = Node("Shape", {"y1"}, {"dims"});
  *graph->add_node() = Node("Size", {"y1"}, {"count"});
  for (const char* name : {"y1", "z", "r", "y2", "a"}) AddValue(graph->add_value_info(), name, {2, 4, 6, 5});
  AddValue(graph->add_output(), "a", {2, 4, 6, 5});
  AddValue(graph->add_output(), "r", {2, 4, 6, 5});
  AddValue(graph->add_output(), "running_mean", {4});
  AddValue(graph->add_output(), "dims", {4}, onnx::TensorProto::INT64);
  AddValue(graph->add_output(), "count", {}, onnx::TensorProto::INT64);
  return model;
}

Tensor Values(const Shape& shape, float scale, float offset = 0.0f) {
  std::vector<float> values(DimProduct(shape, 0, shape.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = offset + scale * std::sin(0.7f * static_cast<float>(i) + scale);
  }
  return *Tensor::FromVector<float>(shape, values);
}

TEST(ChannelsLastTest, AConvNetGivesTheSameOutputsWithTransposesOnlyAtItsBorders) {
  CompileOptions nchw_options;
  nchw_options.channels_last = false;
  auto channels_last = Compile(ResidualModel());
  auto nchw = Compile(ResidualModel(), nchw_options);
  ASSERT_TRUE(channels_last.ok()) << channels_last.status();
  ASSERT_TRUE(nchw.ok()) << nchw.status();
  std::map<std::string, int> op_types;
  for (const PlannedNode& node : (*channels_last)->nodes) ++op_types[node.op_type];
  EXPECT_EQ(op_types["ChannelsLastConv"], 2);
  // With the Relu after it as its epilogue (fused_elementwise.h).
  EXPECT_EQ(op_types["ChannelsLastBatchNormalization+Relu"], 1);
  // x into the net; a and r back out (graph outputs). Nothing between the convolutions.
  EXPECT_EQ(op_types["Transpose"], 3);
  EXPECT_EQ(op_types["Gather"], 1);  // Shape's dims back in NCHW order

  const NamedTensors inputs = {{"x", Values({2, 3, 6, 5}, 1.0f)},   {"w1", Values({4, 3, 3, 3}, 0.5f)},
                               {"w2", Values({4, 4, 1, 1}, 0.7f)},  {"scale", Values({4}, 1.5f, 1.0f)},
                               {"bias", Values({4}, 0.3f)},          {"mean", Values({4}, 0.2f)},
                               {"var", Values({4}, 0.1f, 1.0f)}};
  Session channels_last_session(*channels_last, std::make_unique<CpuExecutor>());
  Session nchw_session(*nchw, std::make_unique<CpuExecutor>());
  auto a = channels_last_session.Run(inputs);
  auto b = nchw_session.Run(inputs);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 5u);
  for (size_t output = 0; output < a->size(); ++output) {
    const Tensor& got = (*a)[output].second;
    const Tensor& expected = (*b)[output].second;
    ASSERT_EQ(got.shape(), expected.shape()) << (*b)[output].first;
    ASSERT_EQ(got.dtype(), expected.dtype()) << (*b)[output].first;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      if (got.dtype() == DataType::kInt64) {
        EXPECT_EQ(got.data<int64_t>()[i], expected.data<int64_t>()[i]) << (*b)[output].first << "[" << i << "]";
      } else {
        EXPECT_NEAR(got.data<float>()[i], expected.data<float>()[i], 1e-5 * (1 + std::fabs(expected.data<float>()[i])))
            << (*b)[output].first << "[" << i << "]";
      }
    }
  }
  EXPECT_EQ((*a)[3].second.data<int64_t>()[1], 4);  // dims: [2, 4, 6, 5]
  EXPECT_EQ((*a)[4].second.data<int64_t>()[0], 2 * 4 * 6 * 5);
}

// x -> Conv 3x3 (20 channels: a 16-wide vector and a tail) -> BatchNormalization (batch statistics) [-> Relu] = r ->
// MaxPool 2x2 stride 2 = p, on odd heights and widths (floor mode drops the last row and column); outputs p, the
// running mean, and r when `r_is_output`.
onnx::ModelProto PooledModel(bool with_relu, bool r_is_output) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(15);
  onnx::GraphProto* graph = model.mutable_graph();
  AddValue(graph->add_input(), "x", {2, 3, 7, 9});
  AddValue(graph->add_input(), "w", {20, 3, 3, 3});
  for (const char* name : {"scale", "bias", "mean", "var"}) AddValue(graph->add_input(), name, {20});
  *graph->add_node() = Node("Conv", {"x", "w"}, {"y"}, {{"pads", {1, 1, 1, 1}}});
  *graph->add_node() = Node("BatchNormalization", {"y", "scale", "bias", "mean", "var"},
                            {with_relu ? "z" : "r", "running_mean", "running_var"}, {{"training_mode", {1}}});
  if (with_relu) *graph->add_node() = Node("Relu", {"z"}, {"r"});
  *graph->add_node() = Node("MaxPool", {"r"}, {"p"}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}});
  for (const char* name : {"y", "z", "r"}) AddValue(graph->add_value_info(), name, {2, 20, 7, 9});
  AddValue(graph->add_output(), "p", {2, 20, 3, 4});
  AddValue(graph->add_output(), "running_mean", {20});
  if (r_is_output) AddValue(graph->add_output(), "r", {2, 20, 7, 9});
  return model;
}

// In a forward plan the 2x2 MaxPool after a BatchNormalization (and the Relu that is its epilogue) is done by the
// normalisation, which pools rows as it normalises them: one node, outputs bit for bit those of the separate nodes.
// Not when the pooled value is read elsewhere too (a graph output here; the gradients in a training plan).
TEST(ChannelsLastTest, A2x2MaxPoolAfterBatchNormalizationIsDoneByTheNormalisation) {
  const NamedTensors inputs = {{"x", Values({2, 3, 7, 9}, 1.0f)},    {"w", Values({20, 3, 3, 3}, 0.5f)},
                               {"scale", Values({20}, 1.5f, 0.2f)},  {"bias", Values({20}, 0.3f)},
                               {"mean", Values({20}, 0.2f)},          {"var", Values({20}, 0.1f, 1.0f)}};
  CompileOptions unfused_options;
  unfused_options.fuse_elementwise = false;
  for (const bool with_relu : {true, false}) {
    for (const bool r_is_output : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "with_relu " << with_relu << ", r_is_output " << r_is_output);
      auto fused = Compile(PooledModel(with_relu, r_is_output));
      auto unfused = Compile(PooledModel(with_relu, r_is_output), unfused_options);
      ASSERT_TRUE(fused.ok()) << fused.status();
      ASSERT_TRUE(unfused.ok()) << unfused.status();
      std::map<std::string, int> op_types;
      for (const PlannedNode& node : (*fused)->nodes) ++op_types[node.op_type];
      const std::string normalisation =
          with_relu ? "ChannelsLastBatchNormalization+Relu" : "ChannelsLastBatchNormalization";
      if (r_is_output) {
        EXPECT_EQ(op_types[normalisation], 1);
        EXPECT_EQ(op_types["ChannelsLastMaxPool"], 1);
      } else {
        EXPECT_EQ(op_types[normalisation + "+MaxPool"], 1);
        EXPECT_EQ(op_types["ChannelsLastMaxPool"], 0);
      }
      Session fused_session(*fused, std::make_unique<CpuExecutor>());
      Session unfused_session(*unfused, std::make_unique<CpuExecutor>());
      auto a = fused_session.Run(inputs);
      auto b = unfused_session.Run(inputs);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_EQ(a->size(), b->size());
      for (size_t output = 0; output < a->size(); ++output) {
        const Tensor& got = (*a)[output].second;
        const Tensor& expected = (*b)[output].second;
        ASSERT_EQ(got.shape(), expected.shape()) << (*b)[output].first;
        for (int64_t i = 0; i < got.num_elements(); ++i) {
          ASSERT_EQ(got.data<float>()[i], expected.data<float>()[i]) << (*b)[output].first << "[" << i << "]";
        }
      }
      EXPECT_EQ((*a)[0].second.shape(), (Shape{2, 20, 3, 4}));
    }
  }
}

ChannelsLastGraph Ranks(std::map<std::string, int> ranks) {
  ChannelsLastGraph graph;
  for (const auto& [name, rank] : ranks) graph.ranks[name] = rank;
  graph.onnx_opset = 17;
  return graph;
}

TEST(ChannelsLastTest, LeavesAloneWhatItCannotRewriteExactly) {
  // No convolution: nothing to keep channels-last.
  std::vector<onnx::NodeProto> relu_only = {Node("Relu", {"x"}, {"y"})};
  EXPECT_EQ(ConvertToChannelsLast(relu_only, Ranks({{"x", 4}})).converted_nodes, 0);
  // A 1-D convolution (rank 3).
  std::vector<onnx::NodeProto> conv1d = {Node("Conv", {"x", "w"}, {"y"})};
  EXPECT_EQ(ConvertToChannelsLast(conv1d, Ranks({{"x", 3}, {"w", 3}})).converted_nodes, 0);
  // A rank-1 operand would broadcast against W, not C: the Add stays NCHW (the Conv alone converts).
  std::vector<onnx::NodeProto> bias_add = {Node("Conv", {"x", "w"}, {"y"}), Node("Add", {"y", "b"}, {"z"})};
  const ChannelsLastResult bias = ConvertToChannelsLast(bias_add, Ranks({{"x", 4}, {"w", 4}, {"b", 1}, {"y", 4}}));
  EXPECT_EQ(bias.converted_nodes, 1);
  EXPECT_EQ(bias_add.back().input(0), "y");
  // MaxPool joins, but not with its Indices output (NCHW offsets): then it reads an NCHW copy.
  std::vector<onnx::NodeProto> pools = {Node("Conv", {"x", "w"}, {"y"}), Node("MaxPool", {"y"}, {"p"}),
                                        Node("MaxPool", {"y"}, {"q", "indices"})};
  const ChannelsLastResult pooled = ConvertToChannelsLast(pools, Ranks({{"x", 4}, {"w", 4}}));
  EXPECT_EQ(pooled.converted_nodes, 2);
  EXPECT_EQ(pools[2].op_type(), "ChannelsLastMaxPool");
  EXPECT_EQ(pools[3].op_type(), "Transpose");  // y back to NCHW, before the MaxPool with Indices
  EXPECT_EQ(pools[4].op_type(), "MaxPool");
  // A model already using the pass's names is left as it is.
  std::vector<onnx::NodeProto> taken = {Node("Conv", {"x", "w"}, {"y"}), Node("Relu", {"y/channels_last"}, {"z"})};
  EXPECT_EQ(ConvertToChannelsLast(taken, Ranks({{"x", 4}, {"w", 4}})).converted_nodes, 0);
  EXPECT_EQ(taken.size(), 2u);
  // ConvGrad without dX (the first layer's): still converted, both inputs channels-last.
  std::vector<onnx::NodeProto> grad = {Node("ConvGrad", {"dy", "x", "w"}, {"", "dw"})};
  grad[0].set_domain(kTraindTrainingDomain);
  const ChannelsLastResult converted = ConvertToChannelsLast(grad, Ranks({{"dy", 4}, {"x", 4}, {"w", 4}}));
  EXPECT_EQ(converted.converted_nodes, 1);
  EXPECT_EQ(converted.transposes, 2);
  EXPECT_EQ(grad.back().input(0), "dy/channels_last");
  EXPECT_EQ(grad.back().output(1), "dw");
}

}  // namespace
}  // namespace traind::engine
