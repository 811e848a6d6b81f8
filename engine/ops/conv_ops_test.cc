#include <thread>

#include "engine/runtime/session.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(ConvTest, Basic2DWithAndWithoutBias) {
  // x = 0..8 as 3x3, a 2x2 kernel of ones: each output is the sum of a 2x2 window.
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  OpTester("Conv", 11)
      .AddInput<float>("x", {1, 1, 3, 3}, x)
      .AddInput<float>("w", {1, 1, 2, 2}, {1, 1, 1, 1})
      .AddOutput<float>("y", {1, 1, 2, 2}, {8, 12, 20, 24})
      .Run();
  OpTester("Conv", 11)
      .AddAttribute("kernel_shape", std::vector<int64_t>{2, 2})
      .AddInput<float>("x", {1, 1, 3, 3}, x)
      .AddInput<float>("w", {1, 1, 2, 2}, {1, 1, 1, 1})
      .AddInput<float>("b", {1}, {1})
      .AddOutput<float>("y", {1, 1, 2, 2}, {9, 13, 21, 25})
      .Run();
}

TEST(ConvTest, Grouped1DWithDilationStridesAndAsymmetricPads) {
  // Expected values from a direct numpy loop over the padded input.
  OpTester("Conv", 11)
      .AddAttribute("group", int64_t{2})
      .AddAttribute("dilations", std::vector<int64_t>{2})
      .AddAttribute("strides", std::vector<int64_t>{2})
      .AddAttribute("pads", std::vector<int64_t>{2, 1})
      .AddInput<float>("x", {1, 4, 7},
                       {-2, -1, 0, 1, 2, -2, -1, 0, 1, 2, -2, -1, 0, 1, 2, -2, -1, 0, 1, 2, -2, -1, 0, 1, 2, -2, -1, 0})
      .AddInput<float>("w", {4, 2, 3}, {-1.5, -1,  -0.5, 0,  0.5,  1, 1.5, -1.5, -1,  -0.5, 0,  0.5,
                                        1,    1.5, -1.5, -1, -0.5, 0, 0.5, 1,    1.5, -1.5, -1, -0.5})
      .AddInput<float>("b", {4}, {0.5, -1, 2, 0})
      .AddOutput<float>("y", {1, 4, 3}, {4.5, 2.5, -0.5, 3, -6.5, -3.5, 7, 1.5, 5.5, 1, 3, -2})
      .Run();
}

TEST(ConvTest, AutoPadSameUpperAndLowerPutTheOddPadOnOppositeSides) {
  // Kernel [1, 10]: y[i] = x[i - begin] + 10 * x[i + 1 - begin], one pad in total.
  OpTester("Conv", 11)
      .AddAttribute("auto_pad", std::string("SAME_UPPER"))
      .AddInput<float>("x", {1, 1, 4}, {1, 2, 3, 4})
      .AddInput<float>("w", {1, 1, 2}, {1, 10})
      .AddOutput<float>("y", {1, 1, 4}, {21, 32, 43, 4})
      .Run();
  OpTester("Conv", 11)
      .AddAttribute("auto_pad", std::string("SAME_LOWER"))
      .AddInput<float>("x", {1, 1, 4}, {1, 2, 3, 4})
      .AddInput<float>("w", {1, 1, 2}, {1, 10})
      .AddOutput<float>("y", {1, 1, 4}, {10, 21, 32, 43})
      .Run();
  OpTester("Conv", 11)
      .AddAttribute("auto_pad", std::string("VALID"))
      .AddAttribute("strides", std::vector<int64_t>{2})
      .AddInput<float>("x", {1, 1, 5}, {1, 2, 3, 4, 5})
      .AddInput<float>("w", {1, 1, 2}, {1, 10})
      .AddOutput<float>("y", {1, 1, 2}, {21, 43})
      .Run();
}

TEST(ConvTest, PointwiseConvolutionsStayInThePlainLayout) {
  // 1x1: y[m] = sum_c w[m, c] * x[c] at every position; x channels [1, 2] and [3, 4].
  OpTester("Conv", 11)
      .AddInput<float>("x", {1, 2, 1, 2}, {1, 2, 3, 4})
      .AddInput<float>("w", {3, 2, 1, 1}, {1, 0, 0, 1, 1, -1})
      .AddInput<float>("b", {3}, {0, 0, 10})
      .AddOutput<float>("y", {1, 3, 1, 2}, {1, 2, 3, 4, 8, 8})
      .Run();
  // Grouped and strided 1x1 (depthwise scaling of every other position).
  OpTester("Conv", 11)
      .AddAttribute("group", int64_t{2})
      .AddAttribute("strides", std::vector<int64_t>{2})
      .AddInput<float>("x", {1, 2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<float>("w", {2, 1, 1}, {2, -1})
      .AddOutput<float>("y", {1, 2, 2}, {2, 6, -4, -6})
      .Run();
}

TEST(ConvTest, ThreeDimensionalAndBatched) {
  std::vector<float> ones(16, 1.0f);
  OpTester("Conv", 11)
      .AddInput<float>("x", {2, 1, 2, 2, 2}, ones)
      .AddInput<float>("w", {2, 1, 2, 2, 2}, ones)
      .AddInput<float>("b", {2}, {0, 1})
      .AddOutput<float>("y", {2, 2, 1, 1, 1}, {8, 9, 8, 9})
      .Run();
}

TEST(ConvTest, ConcurrentRunsWithSeveralShapesShareOneKernel) {
  // One compiled Conv (2x2 kernel of ones) whose input has dynamic batch and spatial dims; four
  // threads run it with different shapes at once, so they build and reuse per-shape primitives
  // in the kernel's cache concurrently.
  OpTester tester("Conv", 11);
  tester.AddInput<float>("x", {1, 1, 3, 3}, std::vector<float>(9, 1.0f))
      .AddConstantInput<float>("w", {1, 1, 2, 2}, {1, 1, 1, 1})
      .AddOutput<float>("y", {1, 1, 2, 2}, {4, 4, 4, 4});
  ASSERT_TRUE(tester.RunRaw().ok());
  onnx::ModelProto model = tester.model();
  for (auto& value : {model.mutable_graph()->mutable_input(0), model.mutable_graph()->mutable_output(0)}) {
    for (auto& dim : *value->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      dim.set_dim_param("dynamic");
    }
  }
  auto session = Session::Create(model);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const int64_t batch = 1 + (t + i) % 2;
        const int64_t size = 3 + (t + i / 2) % 3;
        const float value = static_cast<float>(t + 1);
        auto x = Tensor::FromVector<float>({batch, 1, size, size}, std::vector<float>(batch * size * size, value));
        auto outputs = (*session)->Run({*x});
        const int64_t out_size = size - 1;
        bool ok = outputs.ok() && (*outputs)[0].shape() == Shape{batch, 1, out_size, out_size};
        for (int64_t k = 0; ok && k < (*outputs)[0].num_elements(); ++k) {
          ok = (*outputs)[0].data<float>()[k] == 4 * value;
        }
        failures[t] += ok ? 0 : 1;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST(ConvTest, ShapeErrorsAndBadAttributes) {
  auto run = [](OpTester tester) { return tester.RunRaw().status(); };
  // C = 3 does not equal W.dim(1) * group = 2.
  EXPECT_EQ(run(OpTester("Conv", 11)
                    .AddInput<float>("x", {1, 3, 3}, std::vector<float>(9))
                    .AddInput<float>("w", {1, 2, 1}, {1, 1})
                    .AddOutput<float>("y", {1, 1, 3}, {0, 0, 0}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  // kernel_shape disagrees with the weights.
  EXPECT_EQ(run(OpTester("Conv", 11)
                    .AddAttribute("kernel_shape", std::vector<int64_t>{3})
                    .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
                    .AddInput<float>("w", {1, 1, 2}, {1, 1})
                    .AddOutput<float>("y", {1, 1, 2}, {0, 0}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status bad_auto_pad = run(OpTester("Conv", 11)
                                            .AddAttribute("auto_pad", std::string("SAME"))
                                            .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
                                            .AddInput<float>("w", {1, 1, 2}, {1, 1})
                                            .AddOutput<float>("y", {1, 1, 2}, {0, 0}));
  EXPECT_EQ(bad_auto_pad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_auto_pad.message().find("auto_pad"), std::string::npos) << bad_auto_pad;
  EXPECT_EQ(run(OpTester("Conv", 11)
                    .AddAttribute("pads", std::vector<int64_t>{1, 1, 1})
                    .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
                    .AddInput<float>("w", {1, 1, 2}, {1, 1})
                    .AddOutput<float>("y", {1, 1, 2}, {0, 0}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(OpTester("Conv", 11)
                    .AddAttribute("group", int64_t{0})
                    .AddInput<float>("x", {1, 1, 3}, {1, 2, 3})
                    .AddInput<float>("w", {1, 1, 2}, {1, 1})
                    .AddOutput<float>("y", {1, 1, 2}, {0, 0}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Kernel larger than the padded input.
  EXPECT_EQ(run(OpTester("Conv", 11)
                    .AddInput<float>("x", {1, 1, 1}, {1})
                    .AddInput<float>("w", {1, 1, 2}, {1, 1})
                    .AddOutput<float>("y", {1, 1, 1}, {0}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(OpTester("Conv", 11)
                    .AddInput<double>("x", {1, 1, 2}, {1, 2})
                    .AddInput<double>("w", {1, 1, 2}, {1, 1})
                    .AddOutput<double>("y", {1, 1, 1}, {3}))
                .code(),
            absl::StatusCode::kUnimplemented);
}

TEST(ConvTransposeTest, StridesOutputPaddingAndBias) {
  // x0 places [1,2,3] at 0, x1 places [2,4,6] at 2; output_padding adds one trailing position.
  OpTester("ConvTranspose", 11)
      .AddAttribute("strides", std::vector<int64_t>{2})
      .AddAttribute("output_padding", std::vector<int64_t>{1})
      .AddInput<float>("x", {1, 1, 2}, {1, 2})
      .AddInput<float>("w", {1, 1, 3}, {1, 2, 3})
      .AddInput<float>("b", {1}, {10})
      .AddOutput<float>("y", {1, 1, 6}, {11, 12, 15, 14, 16, 10})
      .Run();
  OpTester("ConvTranspose", 11)
      .AddInput<double>("x", {1, 1, 3}, {1, 2, 3})
      .AddInput<double>("w", {1, 1, 2}, {1, 1})
      .AddOutput<double>("y", {1, 1, 4}, {1, 3, 5, 3})
      .Run();
}

TEST(ConvTransposeTest, PadsOutputShapeAndAutoPad) {
  // Unpadded result for these inputs: [1, 2, 5, 4, 6].
  auto make = [] {
    OpTester tester("ConvTranspose", 11);
    tester.AddAttribute("strides", std::vector<int64_t>{2})
        .AddInput<float>("x", {1, 1, 2}, {1, 2})
        .AddInput<float>("w", {1, 1, 3}, {1, 2, 3});
    return tester;
  };
  make().AddAttribute("pads", std::vector<int64_t>{1, 1}).AddOutput<float>("y", {1, 1, 3}, {2, 5, 4}).Run();
  // output_shape one longer than the unpadded size: the extra position is at the end.
  make()
      .AddAttribute("output_shape", std::vector<int64_t>{6})
      .AddOutput<float>("y", {1, 1, 6}, {1, 2, 5, 4, 6, 0})
      .Run();
  // SAME_*: output = input * stride = 4, one pad in total.
  make().AddAttribute("auto_pad", std::string("SAME_UPPER")).AddOutput<float>("y", {1, 1, 4}, {1, 2, 5, 4}).Run();
  make().AddAttribute("auto_pad", std::string("SAME_LOWER")).AddOutput<float>("y", {1, 1, 4}, {2, 5, 4, 6}).Run();
}

TEST(ConvTransposeTest, GroupsAndDilations) {
  // Two groups of one channel each: a 1x1 kernel scales each channel.
  OpTester("ConvTranspose", 11)
      .AddAttribute("group", int64_t{2})
      .AddInput<float>("x", {1, 2, 2}, {1, 2, 3, 4})
      .AddInput<float>("w", {2, 1, 1}, {2, 3})
      .AddOutput<float>("y", {1, 2, 2}, {2, 4, 9, 12})
      .Run();
  // Dilation 2 spreads the taps: x0 -> positions 0, 2; x1 -> 1, 3.
  OpTester("ConvTranspose", 11)
      .AddAttribute("dilations", std::vector<int64_t>{2})
      .AddInput<float>("x", {1, 1, 2}, {1, 2})
      .AddInput<float>("w", {1, 1, 2}, {1, 10})
      .AddOutput<float>("y", {1, 1, 4}, {1, 2, 10, 20})
      .Run();
}

TEST(ConvTransposeTest, BadAttributes) {
  auto status = OpTester("ConvTranspose", 11)
                    .AddAttribute("strides", std::vector<int64_t>{2})
                    .AddAttribute("output_padding", std::vector<int64_t>{2})
                    .AddInput<float>("x", {1, 1, 2}, {1, 2})
                    .AddInput<float>("w", {1, 1, 2}, {1, 1})
                    .AddOutput<float>("y", {1, 1, 5}, {0, 0, 0, 0, 0})
                    .RunRaw()
                    .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("output_padding"), std::string::npos) << status;
  // Weights' first dim must equal the input channels.
  status = OpTester("ConvTranspose", 11)
               .AddInput<float>("x", {1, 2, 1}, {1, 2})
               .AddInput<float>("w", {1, 1, 1}, {1})
               .AddOutput<float>("y", {1, 1, 1}, {0})
               .RunRaw()
               .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
