#include <limits>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(MaxPoolTest, IndicesInRowAndColumnMajorOrder) {
  // x = [[1, 5, 2], [4, 3, 6]]: the maxima are 5 at (0, 1) and 6 at (1, 2).
  for (int64_t storage_order : {0, 1}) {
    const std::vector<int64_t> indices = storage_order == 0 ? std::vector<int64_t>{1, 5} : std::vector<int64_t>{2, 5};
    OpTester("MaxPool", 12)
        .AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
        .AddAttribute("storage_order", storage_order)
        .AddInput<float>("x", {1, 1, 2, 3}, {1, 5, 2, 4, 3, 6})
        .AddOutput<float>("y", {1, 1, 1, 2}, {5, 6})
        .AddOutput<int64_t>("indices", {1, 1, 1, 2}, indices)
        .Run();
  }
  // Indices count from the start of the whole tensor, across images and channels.
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddInput<float>("x", {2, 1, 2}, {1, 2, 4, 3})
      .AddOutput<float>("y", {2, 1, 1}, {2, 4})
      .AddOutput<int64_t>("indices", {2, 1, 1}, {1, 2})
      .Run();
}

// The 2x2, stride 2 case runs its own vectorised kernel (long rows in place, short rows packed); it must pick the
// same values as the general loop, which runs when Indices are asked for: ties, infinities and NaN included (a NaN
// wins only as a window's first element, as "strictly greater" decides).
TEST(MaxPoolTest, TwoByTwoStrideTwoAgreesWithTheGeneralLoop) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float palette[] = {0, 1, 2, 2, nan, -inf, inf, 1};
  for (const int64_t out_width : {35, 14, 7}) {
    SCOPED_TRACE(out_width);
    const int64_t planes = 3, height = 11, width = 2 * out_width + 1, out_height = 5;
    std::vector<float> x(planes * height * width);
    for (size_t i = 0; i < x.size(); ++i) x[i] = palette[(i * 7 + i / 5) % 8];
    std::vector<float> expected;
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t oh = 0; oh < out_height; ++oh) {
        for (int64_t ow = 0; ow < out_width; ++ow) {
          const float* top = &x[(p * height + 2 * oh) * width + 2 * ow];
          float best = top[0];
          for (const float value : {top[1], top[width], top[width + 1]}) best = value > best ? value : best;
          expected.push_back(best);
        }
      }
    }
    for (const bool with_indices : {false, true}) {
      OpTester max_pool("MaxPool", 12);
      max_pool.AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
          .AddAttribute("strides", std::vector<int64_t>{2, 2})
          .AddInput<float>("x", {1, planes, height, width}, x);
      absl::StatusOr<std::vector<Tensor>> outputs =
          with_indices ? max_pool.AddOutput<float>("y", {1, planes, out_height, out_width}, expected)
                             .AddOutputShape("indices", DataType::kInt64, {1, planes, out_height, out_width})
                             .RunRaw()
                       : max_pool.AddOutput<float>("y", {1, planes, out_height, out_width}, expected).RunRaw();
      ASSERT_TRUE(outputs.ok()) << outputs.status();
      testing::ExpectTensorNear(*Tensor::FromVector<float>({1, planes, out_height, out_width}, expected), (*outputs)[0],
                                0, 0, with_indices ? "general loop" : "2x2 kernel");
    }
  }
}

TEST(MaxPoolTest, CeilModeDilationsAndPads) {
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("strides", std::vector<int64_t>{2})
      .AddAttribute("ceil_mode", int64_t{1})
      .AddInput<float>("x", {1, 1, 5}, {1, 2, 3, 4, 5})
      .AddOutput<float>("y", {1, 1, 3}, {2, 4, 5})
      .Run();
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("strides", std::vector<int64_t>{2})
      .AddInput<float>("x", {1, 1, 5}, {1, 2, 3, 4, 5})
      .AddOutput<float>("y", {1, 1, 2}, {2, 4})
      .Run();
  // Taps at i - 1 and i + 1 (dilation 2, one pad each side).
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("dilations", std::vector<int64_t>{2})
      .AddAttribute("pads", std::vector<int64_t>{1, 1})
      .AddInput<float>("x", {1, 1, 5}, {3, 1, 4, 1, 5})
      .AddOutput<float>("y", {1, 1, 5}, {1, 4, 1, 5, 1})
      .Run();
  // Same case through the direct loop (the Indices output forces it).
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("dilations", std::vector<int64_t>{2})
      .AddAttribute("pads", std::vector<int64_t>{1, 1})
      .AddInput<float>("x", {1, 1, 5}, {3, 1, 4, 1, 5})
      .AddOutput<float>("y", {1, 1, 5}, {1, 4, 1, 5, 1})
      .AddOutput<int64_t>("indices", {1, 1, 5}, {1, 2, 1, 4, 3})
      .Run();
}

TEST(MaxPoolTest, IntegerAndDoubleInputs) {
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
      .AddInput<uint8_t>("x", {1, 1, 2, 2}, {7, 200, 3, 9})
      .AddOutput<uint8_t>("y", {1, 1, 1, 1}, {200})
      .Run();
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("pads", std::vector<int64_t>{1, 0})
      .AddInput<int8_t>("x", {1, 1, 2}, {-5, -7})
      .AddOutput<int8_t>("y", {1, 1, 2}, {-5, -5})
      .Run();
  OpTester("MaxPool", 12)
      .AddAttribute("kernel_shape", std::vector<int64_t>{1, 1, 2})
      .AddInput<double>("x", {1, 1, 1, 1, 3}, {0.5, -1, 2})
      .AddOutput<double>("y", {1, 1, 1, 1, 2}, {0.5, 2})
      .Run();
}

TEST(AveragePoolTest, CountIncludePad) {
  // Windows over [pad, 1, 2, 3, pad].
  OpTester("AveragePool", 11)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("pads", std::vector<int64_t>{1, 1})
      .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
      .AddOutput<float>("y", {1, 1, 4}, {1, 1.5, 2.5, 3})
      .Run();
  OpTester("AveragePool", 11)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2})
      .AddAttribute("pads", std::vector<int64_t>{1, 1})
      .AddAttribute("count_include_pad", int64_t{1})
      .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
      .AddOutput<float>("y", {1, 1, 4}, {0.5, 1.5, 2.5, 1.5})
      .Run();
}

TEST(AveragePoolTest, CeilModeWindowPastTheEndPaddingIsNotCountedAsPadding) {
  // Padded input [pad, 1..6, pad]; windows start at -1, 1, 3, 5; the last one covers 6, the end
  // pad, and a position beyond the padding that ceil_mode added (never counted).
  for (int64_t include_pad : {0, 1}) {
    const std::vector<float> expected = include_pad ? std::vector<float>{1, 3, 5, 3} : std::vector<float>{1.5, 3, 5, 6};
    OpTester("AveragePool", 11)
        .AddAttribute("kernel_shape", std::vector<int64_t>{3})
        .AddAttribute("strides", std::vector<int64_t>{2})
        .AddAttribute("pads", std::vector<int64_t>{1, 1})
        .AddAttribute("ceil_mode", int64_t{1})
        .AddAttribute("count_include_pad", include_pad)
        .AddInput<float>("x", {1, 1, 6}, {1, 2, 3, 4, 5, 6})
        .AddOutput<float>("y", {1, 1, 4}, expected)
        .Run();
  }
}

TEST(AveragePoolTest, SameUpperTwoDimensionalDouble) {
  // 2x2 input, 2x2 kernel, SAME_UPPER: one pad at the end of each dim, excluded from the count.
  OpTester("AveragePool", 11)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
      .AddAttribute("auto_pad", std::string("SAME_UPPER"))
      .AddInput<double>("x", {1, 1, 2, 2}, {1, 2, 3, 4})
      .AddOutput<double>("y", {1, 1, 2, 2}, {2.5, 3, 3.5, 4})
      .Run();
}

TEST(PoolTest, BadAttributes) {
  auto code = [](OpTester tester) { return tester.RunRaw().status().code(); };
  // kernel_shape is required.
  EXPECT_EQ(code(OpTester("MaxPool", 12).AddInput<float>("x", {1, 1, 2}, {1, 2}).AddOutput<float>("y", {1, 1, 1}, {2})),
            absl::StatusCode::kInvalidArgument);
  // AveragePool has no dilations before opset 19.
  EXPECT_EQ(code(OpTester("AveragePool", 11)
                     .AddAttribute("kernel_shape", std::vector<int64_t>{2})
                     .AddAttribute("dilations", std::vector<int64_t>{2})
                     .AddInput<float>("x", {1, 1, 4}, {1, 2, 3, 4})
                     .AddOutput<float>("y", {1, 1, 2}, {0, 0})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OpTester("MaxPool", 12)
                     .AddAttribute("kernel_shape", std::vector<int64_t>{2})
                     .AddAttribute("storage_order", int64_t{2})
                     .AddInput<float>("x", {1, 1, 2}, {1, 2})
                     .AddOutput<float>("y", {1, 1, 1}, {2})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OpTester("MaxPool", 12)
                     .AddAttribute("kernel_shape", std::vector<int64_t>{0})
                     .AddInput<float>("x", {1, 1, 2}, {1, 2})
                     .AddOutput<float>("y", {1, 1, 1}, {2})),
            absl::StatusCode::kInvalidArgument);
  // kernel_shape rank differs from the input's spatial rank.
  EXPECT_EQ(code(OpTester("MaxPool", 12)
                     .AddAttribute("kernel_shape", std::vector<int64_t>{1, 1})
                     .AddInput<float>("x", {1, 1, 2}, {1, 2})
                     .AddOutput<float>("y", {1, 1, 2}, {1, 2})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OpTester("AveragePool", 11)
                     .AddAttribute("kernel_shape", std::vector<int64_t>{1})
                     .AddInput<int32_t>("x", {1, 1, 1}, {1})
                     .AddOutput<int32_t>("y", {1, 1, 1}, {1})),
            absl::StatusCode::kUnimplemented);
}

TEST(GlobalPoolTest, AverageAndMaxOverAllSpatialDims) {
  const std::vector<float> x = {1, 2, 3, 6, -1, -2, -3, -4};
  OpTester("GlobalAveragePool", 11)
      .AddInput<float>("x", {1, 2, 2, 2}, x)
      .AddOutput<float>("y", {1, 2, 1, 1}, {3, -2.5})
      .Run();
  OpTester("GlobalMaxPool", 11)
      .AddInput<float>("x", {1, 2, 2, 2}, x)
      .AddOutput<float>("y", {1, 2, 1, 1}, {6, -1})
      .Run();
  // Long planes exercise the vectorised partial sums and their tail.
  std::vector<double> ramp(37);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<double>(i);
  OpTester("GlobalAveragePool", 11)
      .AddInput<double>("x", {1, 1, 37}, ramp)
      .AddOutput<double>("y", {1, 1, 1}, {18})
      .Run();
  OpTester("GlobalMaxPool", 11).AddInput<double>("x", {1, 1, 37}, ramp).AddOutput<double>("y", {1, 1, 1}, {36}).Run();
  EXPECT_EQ(OpTester("GlobalMaxPool", 11)
                .AddInput<float>("x", {2, 2}, {1, 2, 3, 4})
                .AddOutput<float>("y", {2, 2}, {1, 2, 3, 4})
                .RunRaw()
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
