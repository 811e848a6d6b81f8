#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(ExpandTest, BidirectionalBroadcast) {
  // [3,1] to [2,1,6]: the 1 in the target keeps nothing; the input's 1 expands.
  OpTester("Expand", 13).AddInput<float>("x", {3, 1}, {1, 2, 3})
      .AddInput<int64_t>("shape", {3}, {2, 1, 2})
      .AddOutput<float>("y", {2, 3, 2}, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}).Run();
  // Target smaller than the input: the output keeps the input's dims (numpy broadcast).
  OpTester("Expand", 13).AddInput<int32_t>("x", {2, 2}, {1, 2, 3, 4})
      .AddInput<int64_t>("shape", {1}, {1})
      .AddOutput<int32_t>("y", {2, 2}, {1, 2, 3, 4}).Run();
  // Scalar to a row.
  OpTester("Expand", 13).AddInput<uint8_t>("x", {}, {7}, DataType::kBool)
      .AddInput<int64_t>("shape", {1}, {3})
      .AddOutput<uint8_t>("y", {3}, {7, 7, 7}, DataType::kBool).Run();
}

TEST(ExpandTest, IncompatibleOrNegativeShape) {
  auto incompatible = OpTester("Expand", 13).AddInput<float>("x", {3}, {1, 2, 3})
                          .AddInput<int64_t>("shape", {1}, {2})
                          .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(incompatible.status().code(), absl::StatusCode::kInvalidArgument);
  auto negative = OpTester("Expand", 13).AddInput<float>("x", {1}, {1})
                      .AddInput<int64_t>("shape", {1}, {-2})
                      .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TileTest, RepeatsEveryDim) {
  // numpy.tile([[1,2],[3,4]], (2,3)).
  OpTester("Tile", 13).AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
      .AddInput<int64_t>("repeats", {2}, {2, 3})
      .AddOutput<float>("y", {4, 6}, {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,
                                      1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}).Run();
  OpTester("Tile", 6).AddInput<int64_t>("x", {3}, {1, 2, 3})
      .AddInput<int64_t>("repeats", {1}, {0})
      .AddOutput<int64_t>("y", {0}, {}).Run();
  OpTester("Tile", 13).AddInput<double>("x", {1, 2}, {5, 6})
      .AddInput<int64_t>("repeats", {2}, {3, 1})
      .AddOutput<double>("y", {3, 2}, {5, 6, 5, 6, 5, 6}).Run();
}

TEST(TileTest, BadRepeats) {
  auto wrong_length = OpTester("Tile", 13).AddInput<float>("x", {2}, {1, 2})
                          .AddInput<int64_t>("repeats", {2}, {1, 1})
                          .AddOutput<float>("y", {2}, {1, 2}).RunRaw();
  EXPECT_EQ(wrong_length.status().code(), absl::StatusCode::kInvalidArgument);
  auto negative = OpTester("Tile", 13).AddInput<float>("x", {2}, {1, 2})
                      .AddInput<int64_t>("repeats", {1}, {-1})
                      .AddOutput<float>("y", {2}, {1, 2}).RunRaw();
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  auto huge = OpTester("Tile", 13).AddInput<float>("x", {2}, {1, 2})
                  .AddInput<int64_t>("repeats", {1}, {int64_t{1} << 62})
                  .AddOutput<float>("y", {2}, {1, 2}).RunRaw();
  EXPECT_FALSE(huge.ok());
}

}  // namespace
}  // namespace traind::engine
