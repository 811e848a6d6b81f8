#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(RangeTest, FloatIntNegativeDeltaAndEmpty) {
  OpTester("Range", 11).AddInput<float>("start", {}, {1}).AddInput<float>("limit", {}, {2})
      .AddInput<float>("delta", {}, {0.3f})
      .AddOutput<float>("y", {4}, {1, 1.3f, 1.6f, 1.9f}).Run();
  OpTester("Range", 11).AddInput<int32_t>("start", {}, {10})
      .AddInput<int32_t>("limit", {}, {4}).AddInput<int32_t>("delta", {}, {-3})
      .AddOutput<int32_t>("y", {2}, {10, 7}).Run();
  OpTester("Range", 11).AddInput<int64_t>("start", {}, {5}).AddInput<int64_t>("limit", {}, {5})
      .AddInput<int64_t>("delta", {}, {1}).AddOutput<int64_t>("y", {0}, {}).Run();
  // Extreme int64 bounds: the span overflows int64 but the count is exact.
  const int64_t min = std::numeric_limits<int64_t>::min();
  const int64_t max = std::numeric_limits<int64_t>::max();
  OpTester("Range", 11).AddInput<int64_t>("start", {}, {min})
      .AddInput<int64_t>("limit", {}, {max}).AddInput<int64_t>("delta", {}, {int64_t{1} << 62})
      .AddOutput<int64_t>("y", {4}, {min, min + (int64_t{1} << 62), 0, int64_t{1} << 62}).Run();
}

TEST(RangeTest, BadInputs) {
  auto zero_delta = OpTester("Range", 11).AddInput<float>("start", {}, {0})
                        .AddInput<float>("limit", {}, {1}).AddInput<float>("delta", {}, {0})
                        .AddOutput<float>("y", {0}, {}).RunRaw();
  EXPECT_EQ(zero_delta.status().code(), absl::StatusCode::kInvalidArgument);
  auto too_long = OpTester("Range", 11).AddInput<int64_t>("start", {}, {0})
                      .AddInput<int64_t>("limit", {}, {std::numeric_limits<int64_t>::max()})
                      .AddInput<int64_t>("delta", {}, {1})
                      .AddOutput<int64_t>("y", {0}, {}).RunRaw();
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  auto mixed = OpTester("Range", 11).AddInput<float>("start", {}, {0})
                   .AddInput<double>("limit", {}, {1}).AddInput<float>("delta", {}, {1})
                   .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  auto nan = OpTester("Range", 11).AddInput<float>("start", {}, {0})
                 .AddInput<float>("limit", {}, {std::numeric_limits<float>::infinity()})
                 .AddInput<float>("delta", {}, {1}).AddOutput<float>("y", {0}, {}).RunRaw();
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SizeTest, CountsElements) {
  OpTester("Size", 13).AddInput<float>("x", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddOutput<int64_t>("n", {}, {6}).Run();
  OpTester("Size", 6).AddInput<int32_t>("x", {0, 4}, {}).AddOutput<int64_t>("n", {}, {0}).Run();
}

TEST(TriluTest, UpperLowerWithK) {
  // x = arange(1, 13).reshape(3, 4); numpy.triu(x, 1) and numpy.tril(x, -1).
  std::vector<int64_t> x(12);
  for (int i = 0; i < 12; ++i) x[i] = i + 1;
  OpTester("Trilu", 14).AddInput<int64_t>("x", {3, 4}, x).AddInput<int64_t>("k", {}, {1})
      .AddOutput<int64_t>("y", {3, 4}, {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}).Run();
  OpTester("Trilu", 14).AddAttribute("upper", int64_t{0})
      .AddInput<int64_t>("x", {3, 4}, x).AddInput<int64_t>("k", {}, {-1})
      .AddOutput<int64_t>("y", {3, 4}, {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}).Run();
  // Batched, default k = 0, float; and a huge k keeps nothing (upper) without overflow.
  OpTester("Trilu", 14).AddAttribute("upper", int64_t{0})
      .AddInput<float>("x", {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})
      .AddOutput<float>("y", {2, 2, 2}, {1, 0, 3, 4, 5, 0, 7, 8}).Run();
  OpTester("Trilu", 14).AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
      .AddInput<int64_t>("k", {}, {std::numeric_limits<int64_t>::max()})
      .AddOutput<float>("y", {2, 2}, {0, 0, 0, 0}).Run();
}

TEST(TriluTest, BadInputs) {
  auto vector = OpTester("Trilu", 14).AddInput<float>("x", {3}, {1, 2, 3})
                    .AddOutput<float>("y", {3}, {1, 2, 3}).RunRaw();
  EXPECT_EQ(vector.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_upper = OpTester("Trilu", 14).AddAttribute("upper", int64_t{2})
                       .AddInput<float>("x", {1, 1}, {1})
                       .AddOutput<float>("y", {1, 1}, {1}).RunRaw();
  EXPECT_EQ(bad_upper.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_upper.status().message().find("'upper'"), std::string::npos);
}

TEST(OneHotTest, AxesNegativeAndOutOfRangeIndices) {
  // Default axis -1: indices [2] -> [2, depth].
  OpTester("OneHot", 11).AddInput<int64_t>("indices", {3}, {0, -1, 5})
      .AddInput<float>("depth", {}, {3}).AddInput<float>("values", {2}, {0, 1})
      .AddOutput<float>("y", {3, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0}).Run();
  // axis 0 with float indices and int32 values [off, on] = [-1, 7].
  OpTester("OneHot", 11).AddAttribute("axis", int64_t{0})
      .AddInput<float>("indices", {2}, {1, 0}).AddInput<int64_t>("depth", {1}, {2})
      .AddInput<int32_t>("values", {2}, {-1, 7})
      .AddOutput<int32_t>("y", {2, 2}, {-1, 7, 7, -1}).Run();
  auto bad_depth = OpTester("OneHot", 11).AddInput<int64_t>("indices", {1}, {0})
                       .AddInput<int64_t>("depth", {}, {0})
                       .AddInput<float>("values", {2}, {0, 1})
                       .AddOutput<float>("y", {1, 0}, {}).RunRaw();
  EXPECT_EQ(bad_depth.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_axis = OpTester("OneHot", 11).AddAttribute("axis", int64_t{2})
                      .AddInput<int64_t>("indices", {1}, {0})
                      .AddInput<int64_t>("depth", {}, {2})
                      .AddInput<float>("values", {2}, {0, 1})
                      .AddOutput<float>("y", {1, 2}, {1, 0}).RunRaw();
  EXPECT_EQ(bad_axis.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NonZeroTest, CoordinatesInRowMajorOrder) {
  OpTester("NonZero", 13).AddInput<uint8_t>("x", {2, 2}, {1, 0, 1, 1}, DataType::kBool)
      .AddOutput<int64_t>("y", {2, 3}, {0, 1, 1, 0, 0, 1}).Run();
  OpTester("NonZero", 13).AddInput<float>("x", {3}, {0, -2, 0})
      .AddOutput<int64_t>("y", {1, 1}, {1}).Run();
  OpTester("NonZero", 13).AddInput<int32_t>("x", {2, 0}, {})
      .AddOutput<int64_t>("y", {2, 0}, {}).Run();
  OpTester("NonZero", 13).AddInput<int64_t>("x", {}, {5})
      .AddOutput<int64_t>("y", {1, 1}, {0}).Run();
}

}  // namespace
}  // namespace traind::engine
