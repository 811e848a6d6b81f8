#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

// x = [[1, 2, 3], [4, 5, 6]]; expected values from numpy.pad.
const std::vector<float> kX = {1, 2, 3, 4, 5, 6};

TEST(PadTest, ConstantWithValueInputAndCropping) {
  // pads: rows (1, 0), cols (0, 2), value 9.
  OpTester("Pad", 13).AddInput<float>("x", {2, 3}, kX)
      .AddInput<int64_t>("pads", {4}, {1, 0, 0, 2}).AddInput<float>("value", {}, {9})
      .AddOutput<float>("y", {3, 5}, {9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 4, 5, 6, 9, 9}).Run();
  // Negative pads crop: drop the first column, add one 0 column at the end.
  OpTester("Pad", 13).AddInput<float>("x", {2, 3}, kX)
      .AddInput<int64_t>("pads", {4}, {0, -1, 0, 1})
      .AddOutput<float>("y", {2, 3}, {2, 3, 0, 5, 6, 0}).Run();
}

TEST(PadTest, ReflectAndEdge) {
  // numpy.pad(x, ((1, 1), (2, 2)), 'reflect').
  OpTester("Pad", 13).AddAttribute("mode", std::string("reflect"))
      .AddInput<float>("x", {2, 3}, kX).AddInput<int64_t>("pads", {4}, {1, 2, 1, 2})
      .AddOutput<float>("y", {4, 7}, {6, 5, 4, 5, 6, 5, 4,
                                      3, 2, 1, 2, 3, 2, 1,
                                      6, 5, 4, 5, 6, 5, 4,
                                      3, 2, 1, 2, 3, 2, 1}).Run();
  // numpy.pad(x, ((0, 1), (1, 3)), 'edge').
  OpTester("Pad", 13).AddAttribute("mode", std::string("edge"))
      .AddInput<int32_t>("x", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<int64_t>("pads", {4}, {0, 1, 1, 3})
      .AddOutput<int32_t>("y", {3, 7}, {1, 1, 2, 3, 3, 3, 3,
                                        4, 4, 5, 6, 6, 6, 6,
                                        4, 4, 5, 6, 6, 6, 6}).Run();
  // Reflect wider than the dim repeats the mirror (numpy): pad [1,2] by 3 on the left.
  OpTester("Pad", 13).AddAttribute("mode", std::string("reflect"))
      .AddInput<float>("x", {2}, {1, 2}).AddInput<int64_t>("pads", {2}, {3, 0})
      .AddOutput<float>("y", {5}, {2, 1, 2, 1, 2}).Run();
}

TEST(PadTest, Opset2Attributes) {
  OpTester("Pad", 6).AddAttribute("pads", std::vector<int64_t>{0, 1, 0, 1})
      .AddAttribute("value", 1.5f)
      .AddInput<float>("x", {1, 2}, {7, 8})
      .AddOutput<float>("y", {1, 4}, {1.5f, 7, 8, 1.5f}).Run();
  OpTester("Pad", 6).AddAttribute("pads", std::vector<int64_t>{1, 1})
      .AddAttribute("mode", std::string("edge"))
      .AddInput<float>("x", {2}, {7, 8})
      .AddOutput<float>("y", {4}, {7, 7, 8, 8}).Run();
}

TEST(PadTest, BadPadsAndModes) {
  auto bad_mode = OpTester("Pad", 13).AddAttribute("mode", std::string("wrap"))
                      .AddInput<float>("x", {1}, {1}).AddInput<int64_t>("pads", {2}, {1, 1})
                      .AddOutput<float>("y", {3}, {0, 1, 0}).RunRaw();
  EXPECT_EQ(bad_mode.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_mode.status().message().find("'mode'"), std::string::npos);
  auto wrong_count = OpTester("Pad", 13).AddInput<float>("x", {1}, {1})
                         .AddInput<int64_t>("pads", {1}, {1})
                         .AddOutput<float>("y", {2}, {0, 1}).RunRaw();
  EXPECT_EQ(wrong_count.status().code(), absl::StatusCode::kInvalidArgument);
  auto over_crop = OpTester("Pad", 13).AddInput<float>("x", {1}, {1})
                       .AddInput<int64_t>("pads", {2}, {-1, -1})
                       .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(over_crop.status().code(), absl::StatusCode::kInvalidArgument);
  auto reflect_empty = OpTester("Pad", 13).AddAttribute("mode", std::string("reflect"))
                           .AddInput<float>("x", {0}, {})
                           .AddInput<int64_t>("pads", {2}, {1, 0})
                           .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(reflect_empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing_pads = OpTester("Pad", 6).AddInput<float>("x", {1}, {1})
                          .AddOutput<float>("y", {1}, {1}).RunRaw();
  EXPECT_EQ(missing_pads.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
