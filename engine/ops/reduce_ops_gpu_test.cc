// The GPU kernels of the reductions, softmaxes, Where / Clip / Cast, ConstantOfShape and AccumulateGradient against
// their CPU kernels.
#include "engine/gpu/gpu_testing.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/float64_reference.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::TestDevice;
using testing::RandomTensor;

TEST(ReduceGpuTest, EveryReductionOverEveryAxisSetMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  struct Axes {
    std::vector<int64_t> axes;
    Shape out;
  };
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1",
                         "ReduceL2"}) {
    for (const Axes& a : {Axes{{1}, {3, 1, 5}}, Axes{{0, 2}, {1, 4, 1}}, Axes{{}, {1, 1, 1}}, Axes{{-1}, {3, 4, 1}}}) {
      SCOPED_TRACE(std::string(op) + " axes " + ShapeToString(a.axes));
      OpTester test(op, 13);
      test.AddInputTensor("x", RandomTensor({3, 4, 5}, -2, 2, 7));
      if (std::string(op) == "ReduceSum") {
        if (!a.axes.empty()) test.AddConstantInput<int64_t>("axes", {static_cast<int64_t>(a.axes.size())}, a.axes);
      } else if (!a.axes.empty()) {
        test.AddAttribute("axes", a.axes);
      }
      test.AddOutputShape("y", DataType::kFloat32, a.out);
      test.CompareDevices(2e-6, 1e-6);
    }
  }
  // A long reduction into few outputs takes the work-group path.
  OpTester sum("ReduceMean", 13);
  sum.AddInputTensor("x", RandomTensor({2, 3000}, -1, 1, 3)).AddAttribute("axes", std::vector<int64_t>{1});
  sum.AddAttribute("keepdims", int64_t{0}).AddOutputShape("y", DataType::kFloat32, {2});
  sum.CompareDevices(1e-5, 1e-7);
}

// Both devices against float64 rather than against each other: two accurate float kernels may differ by the sum of
// their errors. The bounds are softmax_ops_test.cc's for the CPU kernels.
TEST(SoftmaxGpuTest, BothAxisConventionsMatchFloat64OnBothDevices) {
  TRAIND_REQUIRE_GPU();
  constexpr double kLogSoftmaxBound = 4 * 1.1920929e-7;
  constexpr double kSoftmaxBound = 9.5367432e-7 + 4 * 1.1920929e-7;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const bool log_softmax = std::string(op) == "LogSoftmax";
    for (int opset : {11, 13}) {
      for (int64_t axis : {0, 1, 2, -1}) {
        SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " axis " + std::to_string(axis));
        const Tensor x = RandomTensor({3, 4, 6}, -10, 10, 5);
        OpTester test(op, opset);
        test.AddInputTensor("x", x).AddAttribute("axis", axis).AddOutputShape("y", DataType::kFloat32, {3, 4, 6});
        const std::vector<double> reference = testing::SoftmaxFloat64Reference(x, axis, opset, log_softmax);
        for (TestDevice device : {TestDevice::kCpu, TestDevice::kGpu}) {
          auto y = test.OnDevice(device).RunRaw();
          ASSERT_TRUE(y.ok()) << y.status();
          EXPECT_LE(testing::MaxScaledError((*y)[0], reference, log_softmax ? 1.0 : 0.0),
                    log_softmax ? kLogSoftmaxBound : kSoftmaxBound)
              << (device == TestDevice::kGpu ? "GPU" : "CPU");
        }
      }
    }
  }
}

TEST(SoftmaxGpuTest, SoftmaxGradMatchesTheCpuOverEveryAxisConvention) {
  TRAIND_REQUIRE_GPU();
  for (const auto& [axis, coerce_to_2d] : {std::pair<int64_t, int64_t>{-1, 0}, {1, 0}, {0, 0}, {1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "axis " << axis << " coerce_to_2d " << coerce_to_2d);
    OpTester test("SoftmaxGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("dy", RandomTensor({3, 4, 6}, -1, 1, 5)).AddInputTensor("y", RandomTensor({3, 4, 6}, 0, 1, 6));
    test.AddAttribute("axis", axis).AddAttribute("coerce_to_2d", coerce_to_2d);
    test.AddOutputShape("dx", DataType::kFloat32, {3, 4, 6});
    test.CompareDevices(1e-5, 1e-6);
  }
}

TEST(ElementwiseGpuTest, WhereClipCastMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester where("Where", 16);
  where.AddInput<uint8_t>("c", {2, 1}, {1, 0}, DataType::kBool);
  where.AddInputTensor("x", RandomTensor({2, 3}, -1, 1, 1)).AddInputTensor("y", RandomTensor({3}, -1, 1, 2));
  where.AddOutputShape("z", DataType::kFloat32, {2, 3});
  where.CompareDevices(0, 0);
  OpTester clip("Clip", 13);
  clip.AddInputTensor("x", RandomTensor({20}, -3, 3, 1));
  clip.AddConstantInput<float>("min", {}, {-0.5f}).AddConstantInput<float>("max", {}, {1.25f});
  clip.AddOutputShape("y", DataType::kFloat32, {20});
  clip.CompareDevices(0, 0);
  OpTester to_bool("Cast", 13);
  to_bool.AddInput<float>("x", {4}, {0.0f, -0.0f, 2.5f, NAN}).AddAttribute("to", int64_t{9});
  to_bool.AddOutputShape("y", DataType::kBool, {4});
  to_bool.CompareDevices(0, 0);
  OpTester to_float("Cast", 13);
  to_float.AddInput<uint8_t>("x", {3}, {1, 0, 1}, DataType::kBool).AddAttribute("to", int64_t{1});
  to_float.AddOutputShape("y", DataType::kFloat32, {3});
  to_float.CompareDevices(0, 0);
}

TEST(TrainingOpsGpuTest, ConstantOfShapeAndAccumulateGradientMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester fill("ConstantOfShape", 9);
  fill.AddConstantInput<int64_t>("shape", {2}, {3, 7});
  fill.AddAttribute("value", *Tensor::FromVector<float>({1}, {2.5f}));
  fill.AddOutputShape("y", DataType::kFloat32, {3, 7});
  fill.CompareDevices(0, 0);
  for (uint8_t reset : {0, 1}) {
    OpTester accumulate("AccumulateGradient", kTraindTrainingVersion, kTraindTrainingDomain);
    accumulate.AddInputTensor("buffer", RandomTensor({4, 5}, -1, 1, 1));
    accumulate.AddInputTensor("gradient", RandomTensor({4, 5}, -1, 1, 2));
    accumulate.AddInput<uint8_t>("reset", {}, {reset}, DataType::kBool);
    accumulate.AddOutputShape("sum", DataType::kFloat32, {4, 5});
    accumulate.CompareDevices(0, 0);
  }
}

}  // namespace
}  // namespace traind::engine
