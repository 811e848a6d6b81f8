#include <cmath>
#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(AddTest, SameShapeAndBroadcast) {
  OpTester("Add", 14)
      .AddInput<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<float>("b", {3}, {10, 20, 30})
      .AddOutput<float>("c", {2, 3}, {11, 22, 33, 14, 25, 36})
      .Run();
  OpTester("Add", 14)
      .AddInput<int64_t>("a", {2, 1}, {1, 2})
      .AddInput<int64_t>("b", {1, 3}, {10, 20, 30})
      .AddOutput<int64_t>("c", {2, 3}, {11, 21, 31, 12, 22, 32})
      .Run();
}

TEST(AddTest, LargeBroadcastUsesThreadsAndMatchesScalarLoop) {
  const int64_t rows = 300, cols = 517;
  std::vector<float> a(rows * cols), b(cols), expected(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) a[i] = static_cast<float>(i % 97);
  for (int64_t j = 0; j < cols; ++j) b[j] = static_cast<float>(j);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) expected[i * cols + j] = a[i * cols + j] + b[j];
  }
  OpTester("Add", 14)
      .AddInput<float>("a", {rows, cols}, a)
      .AddInput<float>("b", {cols}, b)
      .AddOutput<float>("c", {rows, cols}, expected)
      .Run();
}

TEST(SubMulDivTest, Basic) {
  OpTester("Sub", 14).AddInput<float>("a", {2}, {5, 1}).AddInput<float>("b", {}, {2})
      .AddOutput<float>("c", {2}, {3, -1}).Run();
  OpTester("Mul", 14).AddInput<int32_t>("a", {2}, {3, -4}).AddInput<int32_t>("b", {2}, {2, 5})
      .AddOutput<int32_t>("c", {2}, {6, -20}).Run();
  OpTester("Div", 14).AddInput<float>("a", {2}, {1, 3}).AddInput<float>("b", {2}, {4, 2})
      .AddOutput<float>("c", {2}, {0.25f, 1.5f}).Run();
}

TEST(DivTest, IntegerDivisionByZeroAndOverflowDoNotTrap) {
  const int32_t min = std::numeric_limits<int32_t>::min();
  OpTester("Div", 14)
      .AddInput<int32_t>("a", {3}, {7, 5, min})
      .AddInput<int32_t>("b", {3}, {2, 0, -1})
      .AddOutput<int32_t>("c", {3}, {3, 0, min})
      .Run();
}

TEST(PowTest, MixedExponentTypes) {
  OpTester("Pow", 15).AddInput<float>("x", {3}, {2, 3, 4}).AddInput<float>("y", {}, {2})
      .AddOutput<float>("z", {3}, {4, 9, 16}).Run();
  OpTester("Pow", 15).AddInput<int64_t>("x", {3}, {2, 3, -2}).AddInput<int64_t>("y", {3}, {10, 0, 3})
      .AddOutput<int64_t>("z", {3}, {1024, 1, -8}).Run();
  OpTester("Pow", 15).AddInput<float>("x", {2}, {2, 4}).AddInput<int32_t>("y", {2}, {3, -1})
      .AddOutput<float>("z", {2}, {8, 0.25f}).Run();
}

TEST(MinMaxTest, VariadicWithBroadcastAndNaN) {
  OpTester("Max", 13)
      .AddInput<float>("a", {3}, {1, 5, NAN})
      .AddInput<float>("b", {1}, {3})
      .AddInput<float>("c", {2, 1}, {0, 4})
      .AddOutput<float>("y", {2, 3}, {3, 5, NAN, 4, 5, NAN})
      .Run();
  OpTester("Min", 13).AddInput<int32_t>("a", {2}, {1, 5})
      .AddOutput<int32_t>("y", {2}, {1, 5}).Run();
}

TEST(CompareTest, OutputsBool) {
  OpTester("Less", 13).AddInput<float>("a", {3}, {1, 2, 3}).AddInput<float>("b", {}, {2})
      .AddOutput<uint8_t>("c", {3}, {1, 0, 0}, DataType::kBool).Run();
  OpTester("Greater", 13).AddInput<int64_t>("a", {2}, {1, 3}).AddInput<int64_t>("b", {2}, {2, 2})
      .AddOutput<uint8_t>("c", {2}, {0, 1}, DataType::kBool).Run();
  OpTester("Equal", 13)
      .AddInput<uint8_t>("a", {2}, {1, 0}, DataType::kBool)
      .AddInput<uint8_t>("b", {2}, {1, 1}, DataType::kBool)
      .AddOutput<uint8_t>("c", {2}, {1, 0}, DataType::kBool).Run();
}

TEST(LogicTest, AndOrXor) {
  for (auto [op, expected] : {std::pair<const char*, std::vector<uint8_t>>{"And", {0, 0, 0, 1}},
                              {"Or", {0, 1, 1, 1}},
                              {"Xor", {0, 1, 1, 0}}}) {
    OpTester(op, 7)
        .AddInput<uint8_t>("a", {4}, {0, 0, 1, 1}, DataType::kBool)
        .AddInput<uint8_t>("b", {4}, {0, 1, 0, 1}, DataType::kBool)
        .AddOutput<uint8_t>("c", {4}, expected, DataType::kBool)
        .Run();
  }
}

TEST(BinaryTest, UnsupportedDtypeAndBadShapesAreErrorsNotCrashes) {
  auto unsupported = OpTester("Add", 14)
                         .AddInput<uint8_t>("a", {1}, {1}, DataType::kBool)
                         .AddInput<uint8_t>("b", {1}, {1}, DataType::kBool)
                         .AddOutput<uint8_t>("c", {1}, {1}, DataType::kBool)
                         .RunRaw();
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kUnimplemented);
  auto mismatch = OpTester("Add", 14)
                      .AddInput<float>("a", {2}, {1, 2})
                      .AddInput<float>("b", {3}, {1, 2, 3})
                      .AddOutput<float>("c", {3}, {0, 0, 0})
                      .RunRaw();
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
