// The GPU kernels of Conv, ConvGrad, the poolings and MaxPoolGrad against the CPU kernels (oneDNN).
#include "engine/gpu/gpu_testing.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> strides, pads, dilations;
  int64_t group;
  Shape y;
};

std::vector<ConvCase> ConvCases() {
  return {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, {2, 4, 9, 8}},     // same padding
      {{2, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {0, 1, 1, 0}, {1, 2}, 2, {2, 6, 4, 7}},     // groups, stride, dilation
      {{3, 5, 6, 6}, {4, 5, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, {3, 4, 6, 6}},     // pointwise
      {{2, 3, 10}, {2, 3, 3}, {2}, {1, 1}, {1}, 1, {2, 2, 5}},                          // 1-D
  };
}

OpTester ConvTester(const char* op, const ConvCase& c) {
  OpTester test(op, op == std::string("Conv") ? 13 : kTraindTrainingVersion,
                op == std::string("Conv") ? "" : kTraindTrainingDomain);
  test.AddAttribute("strides", c.strides).AddAttribute("pads", c.pads).AddAttribute("dilations", c.dilations);
  test.AddAttribute("group", c.group);
  return test;
}

TEST(ConvGpuTest, ConvolutionsMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(ShapeToString(c.x) + " * " + ShapeToString(c.w));
    OpTester test = ConvTester("Conv", c);
    test.AddInputTensor("x", RandomTensor(c.x, -1, 1, 1)).AddInputTensor("w", RandomTensor(c.w, -1, 1, 2));
    test.AddInputTensor("b", RandomTensor({c.w[0]}, -1, 1, 3));
    test.AddOutputShape("y", DataType::kFloat32, c.y);
    test.CompareDevices(1e-5, 2e-6);
  }
}

// The gradient kernels' channels-last form (the CPU plans' pass makes it) has no GPU kernel: it stays on the CPU
// instead of being read as NCHW.
TEST(ConvGpuTest, ChannelsLastGradientsStayOnTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester conv_grad("ConvGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  conv_grad.AddAttribute("channels_last", int64_t{1}).OnDevice(testing::TestDevice::kGpu);
  conv_grad.AddInputTensor("dy", RandomTensor({1, 4, 4, 2}, -1, 1, 4));
  conv_grad.AddInputTensor("x", RandomTensor({1, 4, 4, 3}, -1, 1, 1));
  conv_grad.AddInputTensor("w", RandomTensor({2, 3, 1, 1}, -1, 1, 2));
  conv_grad.AddOutputShape("dx", DataType::kFloat32, {1, 4, 4, 3});
  EXPECT_EQ(conv_grad.RunRaw().status().code(), absl::StatusCode::kFailedPrecondition);
  OpTester norm_grad("BatchNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  norm_grad.AddAttribute("channels_last", int64_t{1}).OnDevice(testing::TestDevice::kGpu);
  norm_grad.AddInputTensor("dy", RandomTensor({2, 2, 2, 3}, -1, 1, 4));
  norm_grad.AddInputTensor("x", RandomTensor({2, 2, 2, 3}, -1, 1, 1));
  norm_grad.AddInputTensor("scale", RandomTensor({3}, -1, 1, 2));
  norm_grad.AddOutputShape("dx", DataType::kFloat32, {2, 2, 2, 3});
  EXPECT_EQ(norm_grad.RunRaw().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ConvGpuTest, ConvGradMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(ShapeToString(c.x) + " * " + ShapeToString(c.w));
    OpTester test = ConvTester("ConvGrad", c);
    test.AddInputTensor("dy", RandomTensor(c.y, -1, 1, 4));
    test.AddInputTensor("x", RandomTensor(c.x, -1, 1, 1)).AddInputTensor("w", RandomTensor(c.w, -1, 1, 2));
    test.AddOutputShape("dx", DataType::kFloat32, c.x).AddOutputShape("dw", DataType::kFloat32, c.w);
    test.AddOutputShape("db", DataType::kFloat32, {c.w[0]});
    test.CompareDevices(1e-5, 1e-5);
  }
}

TEST(PoolGpuTest, PoolingsMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (const char* op : {"MaxPool", "AveragePool"}) {
    for (int64_t ceil_mode : {0, 1}) {
      SCOPED_TRACE(std::string(op) + " ceil " + std::to_string(ceil_mode));
      OpTester test(op, 13);
      test.AddInputTensor("x", RandomTensor({2, 3, 9, 7}, -1, 1, 1));
      test.AddAttribute("kernel_shape", std::vector<int64_t>{3, 2}).AddAttribute("strides", std::vector<int64_t>{2, 2});
      test.AddAttribute("pads", std::vector<int64_t>{1, 0, 1, 1}).AddAttribute("ceil_mode", ceil_mode);
      if (std::string(op) == "AveragePool") test.AddAttribute("count_include_pad", int64_t{1});
      test.AddOutputShape("y", DataType::kFloat32, ceil_mode ? Shape{2, 3, 6, 5} : Shape{2, 3, 5, 4});
      test.CompareDevices(1e-6, 1e-7);
    }
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    SCOPED_TRACE(op);
    OpTester test(op, 13);
    test.AddInputTensor("x", RandomTensor({2, 3, 9, 7}, -1, 1, 1));
    test.AddOutputShape("y", DataType::kFloat32, {2, 3, 1, 1});
    test.CompareDevices(1e-6, 1e-7);
  }
}

TEST(PoolGpuTest, MaxPoolGradMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  struct Case {
    std::vector<int64_t> kernel, strides, pads;
    Shape y;
  };
  for (const Case& c : {Case{{2, 2}, {2, 2}, {0, 0, 0, 0}, {2, 3, 4, 3}}, Case{{3, 3}, {1, 2}, {1, 1, 1, 1}, {2, 3, 8, 4}}}) {
    OpTester test("MaxPoolGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddAttribute("kernel_shape", c.kernel).AddAttribute("strides", c.strides).AddAttribute("pads", c.pads);
    test.AddInputTensor("dy", RandomTensor(c.y, -1, 1, 2));
    // Repeated values: ties go to the first maximum on both devices.
    Tensor x = RandomTensor({2, 3, 8, 7}, -1, 1, 1);
    for (int64_t i = 0; i < x.num_elements(); i += 3) x.mutable_data<float>()[i] = 0.5f;
    test.AddInputTensor("x", x);
    test.AddOutputShape("dx", DataType::kFloat32, {2, 3, 8, 7});
    test.CompareDevices(1e-6, 1e-7);
  }
}

}  // namespace
}  // namespace traind::engine
