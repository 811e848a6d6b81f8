// FuseExactGelu on exact GELU as exporters write it: one Gelu node with the chain's results (to float32 rounding),
// and the chains it must leave alone.
#include "engine/runtime/gelu_fusion.h"

#include <cmath>
#include <map>

#include "engine/core/tensor.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/plan_test_util.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::AddFloatValue;
using testing::MakeNode;
using testing::SineValues;

// y = gelu(x) for x [6, 40], in one of PyTorch's and hand-written forms; `leak`: the erf also feeds a second output.
onnx::ModelProto GeluModel(int form, bool leak, int32_t elem_type = onnx::TensorProto::FLOAT) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  auto value = [elem_type](onnx::ValueInfoProto* info, const std::string& name, const std::vector<int64_t>& dims) {
    AddFloatValue(info, name, dims);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
  };
  auto scalar = [graph, elem_type](const std::string& name, double v) {
    Tensor tensor = elem_type == onnx::TensorProto::FLOAT ? *Tensor::FromVector<float>({}, {static_cast<float>(v)})
                                                           : *Tensor::FromVector<double>({}, {v});
    *graph->add_initializer() = TensorToProto(tensor, name);
  };
  value(graph->add_input(), "x", {6, 40});
  scalar("sqrt2", std::sqrt(2.0));
  scalar("inv_sqrt2", 1.0 / std::sqrt(2.0));
  scalar("one", 1.0);
  scalar("half", 0.5);
  if (form == 1) {
    *graph->add_node() = MakeNode("Mul", {"inv_sqrt2", "x"}, "scaled");
  } else {
    *graph->add_node() = MakeNode("Div", {"x", "sqrt2"}, "scaled");
  }
  *graph->add_node() = MakeNode("Erf", {"scaled"}, "erf");
  if (form == 2) {
    *graph->add_node() = MakeNode("Add", {"one", "erf"}, "one_plus_erf");
    *graph->add_node() = MakeNode("Mul", {"half", "x"}, "x_half");
    *graph->add_node() = MakeNode("Mul", {"one_plus_erf", "x_half"}, "y");
  } else {
    *graph->add_node() = MakeNode("Add", {"erf", "one"}, "one_plus_erf");
    *graph->add_node() = MakeNode("Mul", {"x", "one_plus_erf"}, "x_times");
    *graph->add_node() = MakeNode("Mul", {"x_times", "half"}, "y");
  }
  for (const char* inner : {"scaled", "erf", "one_plus_erf", "x_times", "x_half", "y"}) {
    value(graph->mutable_value_info()->Add(), inner, {6, 40});
  }
  value(graph->add_output(), "y", {6, 40});
  if (leak) {
    *graph->add_node() = MakeNode("Neg", {"erf"}, "neg_erf");
    value(graph->add_output(), "neg_erf", {6, 40});
  }
  return model;
}

std::map<std::string, int> PlannedOps(const Plan& plan) {
  std::map<std::string, int> ops;
  for (const PlannedNode& node : plan.nodes) ++ops[node.op_type];
  return ops;
}

TEST(GeluFusionTest, EveryExportedFormIsOneGeluWithTheChainsResults) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    auto fused = Compile(GeluModel(form, /*leak=*/false));
    ASSERT_TRUE(fused.ok()) << fused.status();
    std::map<std::string, int> ops = PlannedOps(**fused);
    EXPECT_EQ(ops["Gelu"], 1);
    EXPECT_EQ((*fused)->nodes.size(), 1u);
    CompileOptions unfused_options;
    unfused_options.fuse_gelu = false;
    auto unfused = Compile(GeluModel(form, /*leak=*/false), unfused_options);
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    EXPECT_EQ(PlannedOps(**unfused)["Gelu"], 0);
    // x * (1 / sqrt(2)) in place of x / sqrt(2): the results agree to float32 rounding.
    const NamedTensors outputs =
        testing::ExpectSameOutputs(*fused, *unfused, {{"x", SineValues({6, 40}, 4.0f)}}, 2e-6);
    EXPECT_EQ(outputs.size(), 1u);
  }
}

TEST(GeluFusionTest, ChainsItCannotFuseAreLeftAlone) {
  // An inner value read elsewhere, and a float64 chain (Gelu is float32).
  for (const onnx::ModelProto& model :
       {GeluModel(0, /*leak=*/true), GeluModel(0, /*leak=*/false, onnx::TensorProto::DOUBLE)}) {
    auto plan = Compile(model);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(PlannedOps(**plan)["Gelu"], 0);
  }
}

}  // namespace
}  // namespace traind::engine
