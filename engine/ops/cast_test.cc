#include <cmath>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(CastTest, FloatToIntSaturatesAndTruncates) {
  OpTester("Cast", 13).AddAttribute("to", int64_t{6})  // INT32
      .AddInput<float>("x", {4}, {1.9f, -1.9f, 1e20f, NAN})
      .AddOutput<int32_t>("y", {4}, {1, -1, 2147483647, 0}).Run();
}

TEST(CastTest, ToAndFromBoolAndHalf) {
  OpTester("Cast", 13).AddAttribute("to", int64_t{9})  // BOOL
      .AddInput<double>("x", {3}, {0, 1e-30, -2})
      .AddOutput<uint8_t>("y", {3}, {0, 1, 1}, DataType::kBool).Run();
  OpTester("Cast", 13).AddAttribute("to", int64_t{10})  // FLOAT16
      .AddInput<float>("x", {2}, {1.5f, -2})
      .AddOutput<uint16_t>("y", {2}, {0x3E00, 0xC000}, DataType::kFloat16).Run();
  OpTester("Cast", 13).AddAttribute("to", int64_t{1})
      .AddInput<uint16_t>("x", {1}, {0x3E00}, DataType::kFloat16)
      .AddOutput<float>("y", {1}, {1.5f}).Run();
}

TEST(CastTest, StringIsUnsupported) {
  auto result = OpTester("Cast", 13).AddAttribute("to", int64_t{8})
                    .AddInput<float>("x", {1}, {1}).AddOutput<float>("y", {1}, {1}).RunRaw();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(CastLikeTest, TakesTheDtypeOfTheSecondInput) {
  OpTester("CastLike", 15)
      .AddInput<float>("x", {3}, {1.5f, -2.0f, 0.0f})
      .AddInput<int64_t>("like", {1}, {0})
      .AddOutput<int64_t>("y", {3}, {1, -2, 0})
      .Run();
  OpTester("CastLike", 15)
      .AddInput<int32_t>("x", {2}, {3, 0})
      .AddInput<double>("like", {0}, {})
      .AddOutput<double>("y", {2}, {3.0, 0.0})
      .Run();
}

}  // namespace
}  // namespace traind::engine
