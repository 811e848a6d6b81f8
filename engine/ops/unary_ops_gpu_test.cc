// The GPU kernels of the unary ops and activation gradients against their CPU kernels.
#include "engine/gpu/gpu_testing.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

TEST(UnaryGpuTest, EveryOpMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  struct Case {
    const char* op;
    float low, high;
  };
  for (const Case& c : {Case{"Relu", -2, 2}, Case{"Neg", -2, 2}, Case{"Abs", -2, 2}, Case{"Exp", -5, 5},
                        Case{"Log", 0.01f, 5}, Case{"Sqrt", 0, 5}, Case{"Erf", -3, 3}, Case{"Tanh", -4, 4},
                        Case{"Reciprocal", 0.1f, 3}, Case{"Sigmoid", -20, 20}, Case{"Softplus", -30, 30},
                        Case{"LeakyRelu", -2, 2}, Case{"Elu", -2, 2}, Case{"Selu", -2, 2}}) {
    SCOPED_TRACE(c.op);
    OpTester test(c.op, 13);
    test.AddInputTensor("x", RandomTensor({7, 33}, c.low, c.high, 1));
    test.AddOutputShape("y", DataType::kFloat32, {7, 33});
    if (std::string(c.op) == "LeakyRelu") test.AddAttribute("alpha", 0.2f);
    test.CompareDevices(2e-6, 1e-6);
  }
}

TEST(UnaryGpuTest, NonFiniteValuesBehaveAsOnTheCpu) {
  TRAIND_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  for (const char* op : {"Relu", "Exp", "Sigmoid", "Tanh", "Neg"}) {
    SCOPED_TRACE(op);
    OpTester test(op, 13);
    test.AddInput<float>("x", {4}, {NAN, inf, -inf, 0.0f});
    test.AddOutputShape("y", DataType::kFloat32, {4});
    test.CompareDevices(0, 0);
  }
}

TEST(ActivationGradGpuTest, ReluGradErfGradAndGeluGradMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (const char* op : {"ReluGrad", "ErfGrad", "GeluGrad"}) {
    SCOPED_TRACE(op);
    OpTester test(op, kTraindTrainingVersion, kTraindTrainingDomain);
    test.AddInputTensor("dy", RandomTensor({5, 17}, -1, 1, 2)).AddInputTensor("x", RandomTensor({5, 17}, -3, 3, 3));
    test.AddOutputShape("dx", DataType::kFloat32, {5, 17});
    test.CompareDevices(1e-6, 1e-7);
  }
}

}  // namespace
}  // namespace traind::engine
