// AccumulateGradient: buffer + gradient, or the gradient alone when reset (lazy reset), and its schema passes the
// onnx checker and strict shape inference.
#include <cmath>

#include "engine/model/model_loader.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(AccumulateGradientTest, AddsTheGradientToTheBuffer) {
  OpTester("AccumulateGradient", 1, kTraindTrainingDomain)
      .AddInput<float>("buffer", {2, 2}, {1, 2, 3, 4})
      .AddInput<float>("gradient", {2, 2}, {0.5f, -2, 0.25f, 10})
      .AddInput<uint8_t>("reset", {}, {0}, DataType::kBool)
      .AddOutput<float>("accumulated", {2, 2}, {1.5f, 0, 3.25f, 14})
      .SetTolerance(0, 0)
      .Run();
}

TEST(AccumulateGradientTest, ResetIgnoresTheBuffer) {
  // The buffer holds NaN: with reset it must not be read at all.
  OpTester("AccumulateGradient", 1, kTraindTrainingDomain)
      .AddInput<double>("buffer", {3}, {std::nan(""), 7, 8})
      .AddInput<double>("gradient", {3}, {1, 2, 3})
      .AddInput<uint8_t>("reset", {}, {1}, DataType::kBool)
      .AddOutput<double>("accumulated", {3}, {1, 2, 3})
      .SetTolerance(0, 0)
      .Run();
}

TEST(AccumulateGradientTest, LargeTensorsTakeTheParallelPath) {
  const int64_t n = 300000;
  std::vector<float> buffer(n), gradient(n), sum(n);
  for (int64_t i = 0; i < n; ++i) {
    buffer[i] = static_cast<float>(i % 17);
    gradient[i] = -0.5f * static_cast<float>(i % 5);
    sum[i] = buffer[i] + gradient[i];
  }
  OpTester("AccumulateGradient", 1, kTraindTrainingDomain)
      .AddInput<float>("buffer", {n}, buffer)
      .AddInput<float>("gradient", {n}, gradient)
      .AddInput<uint8_t>("reset", {}, {0}, DataType::kBool)
      .AddOutput<float>("accumulated", {n}, sum)
      .SetTolerance(0, 0)
      .Run();
}

TEST(AccumulateGradientTest, MismatchedShapesAndNonScalarResetAreErrors) {
  auto mismatched = OpTester("AccumulateGradient", 1, kTraindTrainingDomain)
                        .AddInput<float>("buffer", {3}, {1, 2, 3})
                        .AddInput<float>("gradient", {2}, {1, 2})
                        .AddInput<uint8_t>("reset", {}, {0}, DataType::kBool)
                        .AddOutput<float>("accumulated", {2}, {0, 0})
                        .RunRaw();
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument) << mismatched.status();
  auto bad_reset = OpTester("AccumulateGradient", 1, kTraindTrainingDomain)
                       .AddInput<float>("buffer", {2}, {1, 2})
                       .AddInput<float>("gradient", {2}, {1, 2})
                       .AddInput<uint8_t>("reset", {2}, {0, 1}, DataType::kBool)
                       .AddOutput<float>("accumulated", {2}, {0, 0})
                       .RunRaw();
  EXPECT_EQ(bad_reset.status().code(), absl::StatusCode::kInvalidArgument) << bad_reset.status();
}

TEST(AccumulateGradientTest, SchemaPassesCheckerAndStrictShapeInference) {
  OpTester tester("AccumulateGradient", 1, kTraindTrainingDomain);
  tester.AddInput<float>("buffer", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<float>("gradient", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<uint8_t>("reset", {}, {0}, DataType::kBool)
      .AddOutput<float>("accumulated", {2, 3}, {2, 4, 6, 8, 10, 12});
  tester.Run();
  onnx::ModelProto model = tester.model();
  auto* ai_onnx = model.add_opset_import();
  ai_onnx->set_domain("");
  ai_onnx->set_version(17);
  auto loaded = LoadModelFromBytes(model.SerializeAsString());
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  // A wrong declared output shape is caught by the schema's shape inference.
  model.mutable_graph()
      ->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(4);
  EXPECT_FALSE(LoadModelFromBytes(model.SerializeAsString()).ok());
}

}  // namespace
}  // namespace traind::engine
