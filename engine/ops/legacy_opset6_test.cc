// Opset-6 forms of existing ops, as PyTorch's old exports use them (libonnx-testdata's
// pytorch-converted and pytorch-operator models are all opset 6).
#include "engine/runtime/op_registry.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(LegacyBroadcastTest, TrailingAxisAndScalarB) {
  // Default alignment: B's dims are A's trailing dims.
  OpTester("Add", 6).AddAttribute("broadcast", int64_t{1})
      .AddInput<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<float>("b", {3}, {10, 20, 30})
      .AddOutput<float>("c", {2, 3}, {11, 22, 33, 14, 25, 36}).Run();
  // B [2] aligned at axis 0 of A [2,3]: numpy would reject this alignment.
  OpTester("Mul", 6).AddAttribute("broadcast", int64_t{1}).AddAttribute("axis", int64_t{0})
      .AddInput<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<float>("b", {2}, {10, -1})
      .AddOutput<float>("c", {2, 3}, {10, 20, 30, -4, -5, -6}).Run();
  // B [3,1] at axis 1 of A [2,3,2], a 1-dim of B broadcasting too.
  OpTester("Sub", 6).AddAttribute("broadcast", int64_t{1}).AddAttribute("axis", int64_t{1})
      .AddInput<int32_t>("a", {2, 3, 2}, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1})
      .AddInput<int32_t>("b", {3, 1}, {1, 2, 3})
      .AddOutput<int32_t>("c", {2, 3, 2}, {-1, -1, -2, -2, -3, -3, 0, 0, -1, -1, -2, -2}).Run();
  // A one-element B of higher rank is a scalar.
  OpTester("Div", 6).AddAttribute("broadcast", int64_t{1})
      .AddInput<float>("a", {2}, {2, 4})
      .AddInput<float>("b", {1, 1, 1}, {2})
      .AddOutput<float>("c", {2}, {1, 2}).Run();
  OpTester("Pow", 6).AddAttribute("broadcast", int64_t{1})
      .AddInput<float>("a", {2, 2}, {1, 2, 3, 4})
      .AddInput<float>("b", {}, {2})
      .AddOutput<float>("c", {2, 2}, {1, 4, 9, 16}).Run();
}

TEST(LegacyBroadcastTest, WithoutBroadcastShapesMustMatch) {
  OpTester("Add", 6).AddInput<float>("a", {2}, {1, 2}).AddInput<float>("b", {2}, {3, 4})
      .AddOutput<float>("c", {2}, {4, 6}).Run();
  auto mismatch = OpTester("Add", 6).AddInput<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
                      .AddInput<float>("b", {3}, {1, 2, 3})
                      .AddOutput<float>("c", {2, 3}, {0, 0, 0, 0, 0, 0}).RunRaw();
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("broadcast"), std::string::npos);
  // B's dims must match A's at the axis; B may not be bigger than A.
  auto wrong_axis = OpTester("Add", 6).AddAttribute("broadcast", int64_t{1})
                        .AddAttribute("axis", int64_t{1})
                        .AddInput<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
                        .AddInput<float>("b", {2}, {1, 2})
                        .AddOutput<float>("c", {2, 3}, {0, 0, 0, 0, 0, 0}).RunRaw();
  EXPECT_EQ(wrong_axis.status().code(), absl::StatusCode::kInvalidArgument);
  auto b_bigger = OpTester("Add", 6).AddAttribute("broadcast", int64_t{1})
                      .AddInput<float>("a", {2}, {1, 2})
                      .AddInput<float>("b", {2, 2}, {1, 2, 3, 4})
                      .AddOutput<float>("c", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(b_bigger.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_flag = OpTester("Add", 6).AddAttribute("broadcast", int64_t{2})
                      .AddInput<float>("a", {1}, {1}).AddInput<float>("b", {1}, {1})
                      .AddOutput<float>("c", {1}, {2}).RunRaw();
  EXPECT_EQ(bad_flag.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_flag.status().message().find("'broadcast'"), std::string::npos);
}

TEST(LegacyGemmTest, BroadcastAttributeControlsC) {
  // [1,2] x [2,2] + C.
  OpTester("Gemm", 6).AddAttribute("broadcast", int64_t{1})
      .AddInput<float>("a", {1, 2}, {1, 2}).AddInput<float>("b", {2, 2}, {1, 0, 0, 1})
      .AddInput<float>("c", {2}, {10, 20})
      .AddOutput<float>("y", {1, 2}, {11, 22}).Run();
  OpTester("Gemm", 6).AddAttribute("transB", int64_t{1}).AddAttribute("beta", 2.0f)
      .AddInput<float>("a", {1, 2}, {1, 2}).AddInput<float>("b", {2, 2}, {1, 2, 3, 4})
      .AddInput<float>("c", {1, 2}, {1, 1})
      .AddOutput<float>("y", {1, 2}, {7, 13}).Run();
  auto needs_broadcast = OpTester("Gemm", 6)
                             .AddInput<float>("a", {1, 2}, {1, 2})
                             .AddInput<float>("b", {2, 2}, {1, 0, 0, 1})
                             .AddInput<float>("c", {2}, {10, 20})
                             .AddOutput<float>("y", {1, 2}, {0, 0}).RunRaw();
  EXPECT_EQ(needs_broadcast.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_c = OpTester("Gemm", 6).AddInput<float>("a", {1, 1}, {1})
                  .AddInput<float>("b", {1, 1}, {1}).AddOutput<float>("y", {1, 1}, {1}).RunRaw();
  EXPECT_EQ(no_c.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LegacyMaxMinTest, NoBroadcastBeforeOpset8) {
  OpTester("Max", 6).AddInput<float>("a", {2}, {1, 5}).AddInput<float>("b", {2}, {3, 4})
      .AddInput<float>("c", {2}, {2, 6}).AddOutput<float>("y", {2}, {3, 6}).Run();
  OpTester("Min", 6).AddInput<float>("a", {2}, {1, 5}).AddInput<float>("b", {2}, {3, 4})
      .AddOutput<float>("y", {2}, {1, 4}).Run();
  auto broadcast = OpTester("Max", 6).AddInput<float>("a", {2}, {1, 5})
                       .AddInput<float>("b", {1}, {3}).AddOutput<float>("y", {2}, {3, 5})
                       .RunRaw();
  EXPECT_EQ(broadcast.status().code(), absl::StatusCode::kInvalidArgument);
  // From opset 8 the same inputs broadcast.
  OpTester("Max", 8).AddInput<float>("a", {2}, {1, 5}).AddInput<float>("b", {1}, {3})
      .AddOutput<float>("y", {2}, {3, 5}).Run();
}

TEST(LegacyClipTest, MinMaxAttributes) {
  OpTester("Clip", 6).AddAttribute("min", -1.0f).AddAttribute("max", 2.0f)
      .AddInput<float>("x", {4}, {-3, 0, 1.5f, 7}).AddOutput<float>("y", {4}, {-1, 0, 1.5f, 2})
      .Run();
  OpTester("Clip", 6).AddAttribute("max", 0.0f)
      .AddInput<float>("x", {2}, {-3, 7}).AddOutput<float>("y", {2}, {-3, 0}).Run();
}

TEST(LegacyOpset6Test, UnchangedOpsRunAtOpset6) {
  OpTester("Relu", 6).AddInput<float>("x", {2}, {-1, 2}).AddOutput<float>("y", {2}, {0, 2}).Run();
  OpTester("Neg", 6).AddInput<float>("x", {1}, {3}).AddOutput<float>("y", {1}, {-3}).Run();
  OpTester("Reshape", 6).AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
      .AddConstantInput<int64_t>("shape", {1}, {-1})
      .AddOutput<float>("y", {4}, {1, 2, 3, 4}).Run();
  OpTester("Squeeze", 6).AddAttribute("axes", std::vector<int64_t>{0})
      .AddInput<float>("x", {1, 2}, {1, 2}).AddOutput<float>("y", {2}, {1, 2}).Run();
  OpTester("Unsqueeze", 6).AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {2}, {1, 2}).AddOutput<float>("y", {2, 1}, {1, 2}).Run();
  OpTester("Transpose", 6).AddInput<float>("x", {1, 2}, {1, 2})
      .AddOutput<float>("y", {2, 1}, {1, 2}).Run();
  // Every op PyTorch's opset-6 exports need from the existing kernels is registered at 6.
  for (const char* op : {"Abs", "Add", "Clip", "Concat", "Constant", "Div", "Elu", "Exp",
                         "Flatten", "Gemm", "LeakyRelu", "MatMul", "Max", "Min", "Mul", "Neg",
                         "Pow", "Relu", "Reshape", "Selu", "Sigmoid", "Softplus", "Sqrt",
                         "Squeeze", "Sub", "Tanh", "Transpose", "Unsqueeze"}) {
    EXPECT_NE(OpRegistry::Global().Find("", op, 6), nullptr) << op;
  }
  // Ops whose opset-6 semantics differ from today's kernels stay unregistered at 6.
  EXPECT_EQ(OpRegistry::Global().Find("", "Equal", 6), nullptr);
  EXPECT_EQ(OpRegistry::Global().Find("", "And", 6), nullptr);
}

}  // namespace
}  // namespace traind::engine
