#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// x = arange(12).reshape(3, 4) as float.
std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(SliceTest, StepsNegativeStepsAndClamping) {
  // x[0:2, 1:4:2]
  OpTester("Slice", 13).AddInput<float>("x", {3, 4}, Iota(12))
      .AddInput<int64_t>("starts", {2}, {0, 1}).AddInput<int64_t>("ends", {2}, {2, 4})
      .AddInput<int64_t>("axes", {2}, {0, 1}).AddInput<int64_t>("steps", {2}, {1, 2})
      .AddOutput<float>("y", {2, 2}, {1, 3, 5, 7}).Run();
  // x[::-1, -1:-5:-2] with INT64 "to the end" bounds: rows 2,1,0, cols 3,1.
  OpTester("Slice", 13).AddInput<float>("x", {3, 4}, Iota(12))
      .AddInput<int64_t>("starts", {2}, {kMax, -1}).AddInput<int64_t>("ends", {2}, {kMin, -5})
      .AddInput<int64_t>("axes", {2}, {0, -1}).AddInput<int64_t>("steps", {2}, {-1, -2})
      .AddOutput<float>("y", {3, 2}, {11, 9, 7, 5, 3, 1}).Run();
  // Out-of-bounds starts/ends clamp; int32 parameters; default axes and steps.
  OpTester("Slice", 13).AddInput<int64_t>("x", {5}, {0, 1, 2, 3, 4})
      .AddInput<int32_t>("starts", {1}, {-100}).AddInput<int32_t>("ends", {1}, {3})
      .AddOutput<int64_t>("y", {1 * 3}, {0, 1, 2}).Run();
  // Start beyond the end: empty result.
  OpTester("Slice", 13).AddInput<float>("x", {3}, {1, 2, 3})
      .AddInput<int64_t>("starts", {1}, {5}).AddInput<int64_t>("ends", {1}, {10})
      .AddOutput<float>("y", {0}, {}).Run();
  // A step of INT64_MIN takes one element and must not overflow.
  OpTester("Slice", 13).AddInput<float>("x", {3}, {1, 2, 3})
      .AddInput<int64_t>("starts", {1}, {-1}).AddInput<int64_t>("ends", {1}, {kMin})
      .AddInput<int64_t>("axes", {1}, {0}).AddInput<int64_t>("steps", {1}, {kMin})
      .AddOutput<float>("y", {1}, {3}).Run();
}

TEST(SliceTest, FullSliceAliasesAndLargeSliceIsParallel) {
  OpTester("Slice", 13).AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
      .AddInput<int64_t>("starts", {1}, {0}).AddInput<int64_t>("ends", {1}, {kMax})
      .AddOutput<float>("y", {2, 2}, {1, 2, 3, 4}).Run();
  const int64_t rows = 600, cols = 300;
  std::vector<float> x = Iota(rows * cols);
  std::vector<float> expected;
  for (int64_t r = 1; r < rows; r += 2) {
    for (int64_t c = 10; c < 290; ++c) expected.push_back(x[r * cols + c]);
  }
  OpTester("Slice", 13).AddInput<float>("x", {rows, cols}, x)
      .AddInput<int64_t>("starts", {2}, {1, 10}).AddInput<int64_t>("ends", {2}, {rows, 290})
      .AddInput<int64_t>("axes", {2}, {0, 1}).AddInput<int64_t>("steps", {2}, {2, 1})
      .AddOutput<float>("y", {rows / 2, 280}, expected).Run();
}

TEST(SliceTest, Opset1Attributes) {
  OpTester("Slice", 6).AddAttribute("starts", std::vector<int64_t>{1, 0})
      .AddAttribute("ends", std::vector<int64_t>{2, -1})
      .AddInput<float>("x", {3, 4}, Iota(12))
      .AddOutput<float>("y", {1, 3}, {4, 5, 6}).Run();
  OpTester("Slice", 6).AddAttribute("starts", std::vector<int64_t>{2})
      .AddAttribute("ends", std::vector<int64_t>{kMax})
      .AddAttribute("axes", std::vector<int64_t>{1})
      .AddInput<float>("x", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddOutput<float>("y", {2, 1}, {3, 6}).Run();
  auto missing = OpTester("Slice", 6).AddAttribute("starts", std::vector<int64_t>{0})
                     .AddInput<float>("x", {1}, {1}).AddOutput<float>("y", {1}, {1}).RunRaw();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("'ends'"), std::string::npos);
}

TEST(SliceTest, BadParameters) {
  auto zero_step = OpTester("Slice", 13).AddInput<float>("x", {3}, {1, 2, 3})
                       .AddInput<int64_t>("starts", {1}, {0}).AddInput<int64_t>("ends", {1}, {3})
                       .AddInput<int64_t>("axes", {1}, {0}).AddInput<int64_t>("steps", {1}, {0})
                       .AddOutput<float>("y", {3}, {1, 2, 3}).RunRaw();
  EXPECT_EQ(zero_step.status().code(), absl::StatusCode::kInvalidArgument);
  auto repeated_axis = OpTester("Slice", 13).AddInput<float>("x", {3}, {1, 2, 3})
                           .AddInput<int64_t>("starts", {2}, {0, 0})
                           .AddInput<int64_t>("ends", {2}, {3, 3})
                           .AddInput<int64_t>("axes", {2}, {0, -1})
                           .AddOutput<float>("y", {3}, {1, 2, 3}).RunRaw();
  EXPECT_EQ(repeated_axis.status().code(), absl::StatusCode::kInvalidArgument);
  auto length_mismatch = OpTester("Slice", 13).AddInput<float>("x", {3}, {1, 2, 3})
                             .AddInput<int64_t>("starts", {2}, {0, 0})
                             .AddInput<int64_t>("ends", {1}, {3})
                             .AddOutput<float>("y", {3}, {1, 2, 3}).RunRaw();
  EXPECT_EQ(length_mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_axis = OpTester("Slice", 13).AddInput<float>("x", {3}, {1, 2, 3})
                      .AddInput<int64_t>("starts", {1}, {0}).AddInput<int64_t>("ends", {1}, {3})
                      .AddInput<int64_t>("axes", {1}, {1})
                      .AddOutput<float>("y", {3}, {1, 2, 3}).RunRaw();
  EXPECT_EQ(bad_axis.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SplitTest, EqualVariableAndZeroSizedParts) {
  OpTester("Split", 13).AddAttribute("axis", int64_t{1})
      .AddInput<float>("x", {2, 4}, Iota(8))
      .AddOutput<float>("a", {2, 2}, {0, 1, 4, 5})
      .AddOutput<float>("b", {2, 2}, {2, 3, 6, 7}).Run();
  OpTester("Split", 13).AddAttribute("axis", int64_t{-1})
      .AddInput<float>("x", {2, 4}, Iota(8)).AddInput<int64_t>("split", {3}, {1, 0, 3})
      .AddOutput<float>("a", {2, 1}, {0, 4})
      .AddOutput<float>("b", {2, 0}, {})
      .AddOutput<float>("c", {2, 3}, {1, 2, 3, 5, 6, 7}).Run();
  // Opset 2-12: `split` attribute.
  OpTester("Split", 6).AddAttribute("split", std::vector<int64_t>{2, 1})
      .AddInput<int32_t>("x", {3}, {7, 8, 9})
      .AddOutput<int32_t>("a", {2}, {7, 8})
      .AddOutput<int32_t>("b", {1}, {9}).Run();
}

TEST(SplitTest, BadSplits) {
  auto uneven = OpTester("Split", 13).AddInput<float>("x", {3}, {1, 2, 3})
                    .AddOutput<float>("a", {1}, {1}).AddOutput<float>("b", {1}, {2}).RunRaw();
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_sum = OpTester("Split", 13).AddInput<float>("x", {3}, {1, 2, 3})
                       .AddInput<int64_t>("split", {2}, {1, 1})
                       .AddOutput<float>("a", {1}, {1}).AddOutput<float>("b", {1}, {2}).RunRaw();
  EXPECT_EQ(wrong_sum.status().code(), absl::StatusCode::kInvalidArgument);
  auto negative = OpTester("Split", 13).AddInput<float>("x", {3}, {1, 2, 3})
                      .AddInput<int64_t>("split", {2}, {4, -1})
                      .AddOutput<float>("a", {1}, {1}).AddOutput<float>("b", {1}, {2}).RunRaw();
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  auto attribute_count = OpTester("Split", 11).AddAttribute("split", std::vector<int64_t>{3})
                             .AddInput<float>("x", {3}, {1, 2, 3})
                             .AddOutput<float>("a", {1}, {1}).AddOutput<float>("b", {1}, {2})
                             .RunRaw();
  EXPECT_EQ(attribute_count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(attribute_count.status().message().find("'split'"), std::string::npos);
}

}  // namespace
}  // namespace traind::engine
