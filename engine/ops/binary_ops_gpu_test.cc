// The GPU kernels of the broadcasting binary ops, Sum/Mean and the aliasing shape ops against the CPU.
#include "engine/gpu/gpu_testing.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

TEST(BinaryGpuTest, ArithmeticBroadcastsAsOnTheCpu) {
  TRAIND_REQUIRE_GPU();
  struct Shapes {
    Shape a, b, out;
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater"}) {
    for (const Shapes& shapes : {Shapes{{4, 5}, {4, 5}, {4, 5}}, Shapes{{4, 5}, {5}, {4, 5}},
                                 Shapes{{3, 1, 5}, {1, 4, 1}, {3, 4, 5}}, Shapes{{}, {2, 3}, {2, 3}},
                                 Shapes{{2, 1, 3, 1, 2}, {2, 4, 1, 5, 1}, {2, 4, 3, 5, 2}}}) {
      SCOPED_TRACE(std::string(op) + " " + ShapeToString(shapes.a) + " " + ShapeToString(shapes.b));
      const bool comparison = std::string(op) == "Equal" || std::string(op) == "Less" || std::string(op) == "Greater";
      OpTester test(op, 14);
      test.AddInputTensor("a", RandomTensor(shapes.a, 0.5f, 2, 1));
      test.AddInputTensor("b", RandomTensor(shapes.b, 0.5f, 2, 2));
      test.AddOutputShape("c", comparison ? DataType::kBool : DataType::kFloat32, shapes.out);
      test.CompareDevices(2e-6, 1e-7);
    }
  }
}

TEST(BinaryGpuTest, VariadicOpsFoldPairwise) {
  TRAIND_REQUIRE_GPU();
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    SCOPED_TRACE(op);
    OpTester test(op, 13);
    test.AddInputTensor("a", RandomTensor({3, 4}, -1, 1, 1));
    test.AddInputTensor("b", RandomTensor({4}, -1, 1, 2));
    test.AddInputTensor("c", RandomTensor({3, 1}, -1, 1, 3));
    test.AddOutputShape("y", DataType::kFloat32, {3, 4});
    test.CompareDevices(1e-6, 1e-7);
  }
}

TEST(ShapeOpsGpuTest, ReshapesForwardTheDeviceBuffer) {
  TRAIND_REQUIRE_GPU();
  OpTester reshape("Reshape", 14);
  reshape.AddInputTensor("x", RandomTensor({2, 3, 4}, -1, 1, 1));
  reshape.AddConstantInput<int64_t>("shape", {2}, {6, -1});
  reshape.AddOutputShape("y", DataType::kFloat32, {6, 4});
  reshape.CompareDevices(0, 0);
  OpTester unsqueeze("Unsqueeze", 13);
  unsqueeze.AddInputTensor("x", RandomTensor({2, 3}, -1, 1, 1));
  unsqueeze.AddConstantInput<int64_t>("axes", {1}, {1});
  unsqueeze.AddOutputShape("y", DataType::kFloat32, {2, 1, 3});
  unsqueeze.CompareDevices(0, 0);
  OpTester flatten("Flatten", 13);
  flatten.AddInputTensor("x", RandomTensor({2, 3, 4}, -1, 1, 1));
  flatten.AddAttribute("axis", int64_t{2});
  flatten.AddOutputShape("y", DataType::kFloat32, {6, 4});
  flatten.CompareDevices(0, 0);
}

}  // namespace
}  // namespace traind::engine
