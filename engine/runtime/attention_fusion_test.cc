// FuseAttention on attention as exporters write it: one ScaledDotProductAttention node with the unfused plan's
// results, P kept only where something reads it; and the chains it must leave alone.
#include "engine/runtime/attention_fusion.h"

#include <map>

#include "engine/autodiff/gradient_builder.h"
#include "engine/core/tensor.h"
#include "engine/model/traind_schemas.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/plan_test_util.h"
#include "gtest/gtest.h"
#include "onnx/shape_inference/implementation.h"

namespace traind::engine {
namespace {

using testing::AddFloatValue;
using testing::MakeNode;
using testing::SineValues;

struct Variant {
  bool divide = false;           // Div by an initializer instead of Mul by a Constant node
  bool p_is_output = false;      // P also a graph output
  bool scores_read_twice = false;  // S also read by another node
  bool broadcast_keys = false;   // K's batch [1, 3] broadcast by MatMul against Q's [2, 3]
};

// O = Softmax(scale * Q K^T) V for Q [2, 3, 5, 4], K [2, 3, 6, 4] (transposed by a Transpose of the last two
// axes), V [2, 3, 6, 2].
onnx::ModelProto AttentionModel(const Variant& variant) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  const int64_t key_batch = variant.broadcast_keys ? 1 : 2;
  AddFloatValue(graph->add_input(), "Q", {2, 3, 5, 4});
  AddFloatValue(graph->add_input(), "K", {key_batch, 3, 6, 4});
  AddFloatValue(graph->add_input(), "V", {2, 3, 6, 2});
  *graph->add_node() = MakeNode("Transpose", {"K"}, "Kt", {});
  graph->mutable_node(0)->add_attribute()->set_name("perm");
  graph->mutable_node(0)->mutable_attribute(0)->set_type(onnx::AttributeProto::INTS);
  for (int64_t axis : {0, 1, 3, 2}) graph->mutable_node(0)->mutable_attribute(0)->add_ints(axis);
  *graph->add_node() = MakeNode("MatMul", {"Q", "Kt"}, "S");
  if (variant.divide) {
    *graph->add_initializer() = TensorToProto(*Tensor::FromVector<float>({}, {2.0f}), "two");
    *graph->add_node() = MakeNode("Div", {"S", "two"}, "S_scaled");
  } else {
    onnx::NodeProto constant = MakeNode("Constant", {}, "half");
    onnx::AttributeProto* value = constant.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = TensorToProto(*Tensor::FromVector<float>({}, {0.5f}), "half");
    *graph->add_node() = constant;
    *graph->add_node() = MakeNode("Mul", {"S", "half"}, "S_scaled");
  }
  *graph->add_node() = MakeNode("Softmax", {"S_scaled"}, "P");
  *graph->add_node() = MakeNode("MatMul", {"P", "V"}, "O");
  AddFloatValue(graph->mutable_value_info()->Add(), "Kt", {key_batch, 3, 4, 6});
  AddFloatValue(graph->mutable_value_info()->Add(), "S", {2, 3, 5, 6});
  AddFloatValue(graph->mutable_value_info()->Add(), "S_scaled", {2, 3, 5, 6});
  AddFloatValue(graph->mutable_value_info()->Add(), "P", {2, 3, 5, 6});
  AddFloatValue(graph->add_output(), "O", {2, 3, 5, 2});
  if (variant.p_is_output) AddFloatValue(graph->add_output(), "P", {2, 3, 5, 6});
  if (variant.scores_read_twice) {
    *graph->add_node() = MakeNode("Relu", {"S"}, "S_relu");
    AddFloatValue(graph->add_output(), "S_relu", {2, 3, 5, 6});
  }
  return model;
}

// The plan's op types, how often each.
std::map<std::string, int> PlannedOps(const Plan& plan) {
  std::map<std::string, int> ops;
  for (const PlannedNode& node : plan.nodes) ++ops[node.op_type];
  return ops;
}

NamedTensors Inputs(const Variant& variant) {
  return {{"Q", SineValues({2, 3, 5, 4}, 1.0f)},
          {"K", SineValues({variant.broadcast_keys ? 1 : 2, 3, 6, 4}, 0.7f)},
          {"V", SineValues({2, 3, 6, 2}, 1.3f)}};
}

// The fused plan's outputs against the unfused plan's.
NamedTensors ExpectSameAsUnfused(const Variant& variant, const std::shared_ptr<const Plan>& fused) {
  CompileOptions unfused_options;
  unfused_options.fuse_attention = false;
  auto unfused = Compile(AttentionModel(variant), unfused_options);
  EXPECT_TRUE(unfused.ok()) << unfused.status();
  if (!unfused.ok()) return {};
  return testing::ExpectSameOutputs(fused, *unfused, Inputs(variant), 1e-5);
}

TEST(AttentionFusionTest, TheChainIsOneNodeWithTheUnfusedResults) {
  for (const bool divide : {false, true}) {
    SCOPED_TRACE(divide ? "Div by an initializer" : "Mul by a Constant node");
    Variant variant;
    variant.divide = divide;
    auto fused = Compile(AttentionModel(variant));
    ASSERT_TRUE(fused.ok()) << fused.status();
    std::map<std::string, int> ops = PlannedOps(**fused);
    EXPECT_EQ(ops["ScaledDotProductAttention"], 1);
    for (const char* gone : {"Transpose", "MatMul", "Mul", "Div", "Softmax"}) EXPECT_EQ(ops[gone], 0) << gone;
    // Nothing reads P: the fused node does not write it.
    for (const PlannedNode& node : (*fused)->nodes) {
      if (node.op_type == "ScaledDotProductAttention") {
        EXPECT_EQ(node.outputs.size(), 1u);
      }
    }
    EXPECT_EQ(ExpectSameAsUnfused(variant, *fused).size(), 1u);
  }
}

TEST(AttentionFusionTest, AttentionWeightsReadElsewhereAreStillWritten) {
  Variant variant;
  variant.p_is_output = true;
  auto fused = Compile(AttentionModel(variant));
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(PlannedOps(**fused)["ScaledDotProductAttention"], 1);
  EXPECT_EQ(ExpectSameAsUnfused(variant, *fused).size(), 2u);
}

TEST(AttentionFusionTest, ChainsItCannotFuseAreLeftAlone) {
  Variant scores_read_twice;
  scores_read_twice.scores_read_twice = true;
  Variant broadcast_keys;
  broadcast_keys.broadcast_keys = true;
  for (const Variant& variant : {scores_read_twice, broadcast_keys}) {
    auto plan = Compile(AttentionModel(variant));
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::map<std::string, int> ops = PlannedOps(**plan);
    EXPECT_EQ(ops["ScaledDotProductAttention"], 0);
    EXPECT_EQ(ops["Softmax"], 1);
    EXPECT_FALSE(ExpectSameAsUnfused(variant, *plan).empty());
  }
}

// Multi-head self-attention as written by hand and exported: x [2, 5, 24] -> Reshape [2, 5, 3, 2, 4] -> Transpose
// [2, 0, 3, 1, 4] -> q, k, v = Gather 0, 1, 2 -> Softmax(q k^T * 0.5) v -> Transpose [0, 2, 1, 3] -> Reshape [2, 5, 8];
// with `loss`, then Sum(y * c) as the loss (the gradient builder differentiates it for x).
onnx::ModelProto PackedHeadsModel(bool loss) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  AddFloatValue(graph->add_input(), "x", {2, 5, 24});
  auto int_constant = [graph](const std::string& name, const std::vector<int64_t>& dims,
                              const std::vector<int64_t>& values) {
    onnx::NodeProto constant = MakeNode("Constant", {}, name);
    onnx::AttributeProto* value = constant.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = TensorToProto(*Tensor::FromVector<int64_t>(dims, values), name);
    *graph->add_node() = constant;
  };
  auto perm_node = [graph](const std::string& input, const std::string& output, const std::vector<int64_t>& perm) {
    onnx::NodeProto transpose = MakeNode("Transpose", {input}, output);
    onnx::AttributeProto* attribute = transpose.add_attribute();
    attribute->set_name("perm");
    attribute->set_type(onnx::AttributeProto::INTS);
    for (int64_t axis : perm) attribute->add_ints(axis);
    *graph->add_node() = transpose;
  };
  int_constant("split_shape", {5}, {2, 5, 3, 2, 4});
  *graph->add_node() = MakeNode("Reshape", {"x", "split_shape"}, "r");
  perm_node("r", "t", {2, 0, 3, 1, 4});
  for (int64_t slot = 0; slot < 3; ++slot) {
    const std::string index = "slot" + std::to_string(slot);
    int_constant(index, {}, {slot});
    *graph->add_node() = MakeNode("Gather", {"t", index}, std::string(1, "qkv"[slot]), {{"axis", 0}});
  }
  perm_node("k", "kt", {0, 1, 3, 2});
  *graph->add_node() = MakeNode("MatMul", {"q", "kt"}, "s");
  *graph->add_initializer() = TensorToProto(*Tensor::FromVector<float>({}, {0.5f}), "half");
  *graph->add_node() = MakeNode("Mul", {"s", "half"}, "s_scaled");
  *graph->add_node() = MakeNode("Softmax", {"s_scaled"}, "p");
  *graph->add_node() = MakeNode("MatMul", {"p", "v"}, "o");
  perm_node("o", "o_t", {0, 2, 1, 3});
  int_constant("merge_shape", {3}, {2, 5, 8});
  *graph->add_node() = MakeNode("Reshape", {"o_t", "merge_shape"}, "y");
  if (loss) {
    AddFloatValue(graph->add_input(), "c", {2, 5, 8});
    *graph->add_node() = MakeNode("Mul", {"y", "c"}, "weighted");
    *graph->add_node() = MakeNode("ReduceSum", {"weighted"}, "loss", {{"keepdims", 0}});
    AddFloatValue(graph->add_output(), "loss", {});
  } else {
    AddFloatValue(graph->add_output(), "y", {2, 5, 8});
  }
  return model;
}

// Shape inference's value_info, as artifacts carry it.
onnx::ModelProto Inferred(onnx::ModelProto model) {
  RegisterTraindSchemas();
  onnx::shape_inference::InferShapes(model);
  return model;
}

TEST(AttentionLayoutFoldingTest, HeadsAreReadAndWrittenWhereTheProjectionsKeepThem) {
  const onnx::ModelProto model = Inferred(PackedHeadsModel(/*loss=*/false));
  auto folded = Compile(model);
  ASSERT_TRUE(folded.ok()) << folded.status();
  std::map<std::string, int> ops = PlannedOps(**folded);
  EXPECT_EQ(ops["ScaledDotProductAttention"], 1);
  for (const char* gone : {"Transpose", "Gather", "MatMul", "Softmax"}) EXPECT_EQ(ops[gone], 0) << gone;
  CompileOptions unfused_options;
  unfused_options.fuse_attention = false;
  auto unfused = Compile(model, unfused_options);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  EXPECT_EQ(testing::ExpectSameOutputs(*folded, *unfused, {{"x", SineValues({2, 5, 24}, 1.0f)}}, 1e-5).size(), 1u);
}

// The training graph: the gradient node reads the packed heads and dO where they lie and writes the packed gradient,
// so no Gather, Transpose, Unsqueeze or Concat of the layout is left; the gradient is the unfused plan's.
TEST(AttentionLayoutFoldingTest, TheGradientWritesThePackedHeadsGradient) {
  auto gradient_model = BuildGradientModel(PackedHeadsModel(/*loss=*/true), {"loss", {"x"}});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  const onnx::ModelProto model = Inferred(*gradient_model);
  auto folded = Compile(model);
  ASSERT_TRUE(folded.ok()) << folded.status();
  std::map<std::string, int> ops = PlannedOps(**folded);
  EXPECT_EQ(ops["ScaledDotProductAttention"], 1);
  EXPECT_EQ(ops["ScaledDotProductAttentionGrad"], 1);
  for (const char* gone : {"Transpose", "Gather", "Unsqueeze", "Concat", "SoftmaxGrad"}) {
    EXPECT_EQ(ops[gone], 0) << gone;
  }
  CompileOptions unfused_options;
  unfused_options.fuse_attention = false;
  auto unfused = Compile(model, unfused_options);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  const NamedTensors outputs = testing::ExpectSameOutputs(
      *folded, *unfused, {{"x", SineValues({2, 5, 24}, 1.0f)}, {"c", SineValues({2, 5, 8}, 0.3f)}}, 1e-5);
  EXPECT_EQ(outputs.size(), 2u);  // the loss and x's gradient
}

}  // namespace
}  // namespace traind::engine
