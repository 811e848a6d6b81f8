// The GPU kernels of the normalisations, their gradients and the fused optimizers against the CPU.
#include <cmath>

#include "engine/gpu/gpu_testing.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

TEST(NormGpuTest, BatchNormalizationInBothModesMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (int64_t training : {0, 1}) {
    SCOPED_TRACE(training);
    OpTester test("BatchNormalization", 15);
    // A mean far from 0 (the statistics are shifted by a value of the channel).
    test.AddInputTensor("x", RandomTensor({4, 3, 5, 6}, 9, 11, 1));
    test.AddInputTensor("scale", RandomTensor({3}, 0.5f, 2, 2)).AddInputTensor("b", RandomTensor({3}, -1, 1, 3));
    test.AddInputTensor("mean", RandomTensor({3}, -1, 1, 4)).AddInputTensor("var", RandomTensor({3}, 0.5f, 2, 5));
    test.AddAttribute("training_mode", training).AddAttribute("momentum", 0.8f);
    test.AddOutputShape("y", DataType::kFloat32, {4, 3, 5, 6});
    if (training) {
      test.AddOutputShape("running_mean", DataType::kFloat32, {3});
      test.AddOutputShape("running_var", DataType::kFloat32, {3});
    }
    test.CompareDevices(1e-4, 1e-5);
  }
}

TEST(NormGpuTest, LayerNormalizationMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester test("LayerNormalization", 17);
  test.AddInputTensor("x", RandomTensor({4, 5, 96}, -3, 3, 1));
  test.AddInputTensor("scale", RandomTensor({96}, 0.5f, 2, 2)).AddInputTensor("b", RandomTensor({96}, -1, 1, 3));
  test.AddOutputShape("y", DataType::kFloat32, {4, 5, 96});
  test.AddOutputShape("mean", DataType::kFloat32, {4, 5, 1});
  test.AddOutputShape("inv_std", DataType::kFloat32, {4, 5, 1});
  test.CompareDevices(1e-5, 1e-5);
}

TEST(NormGpuTest, NormalizationGradientsMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester batch("BatchNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  batch.AddInputTensor("dy", RandomTensor({4, 3, 5, 6}, -1, 1, 1));
  batch.AddInputTensor("x", RandomTensor({4, 3, 5, 6}, 4, 6, 2)).AddInputTensor("scale", RandomTensor({3}, 0.5f, 2, 3));
  batch.AddOutputShape("dx", DataType::kFloat32, {4, 3, 5, 6});
  batch.AddOutputShape("dscale", DataType::kFloat32, {3}).AddOutputShape("db", DataType::kFloat32, {3});
  batch.CompareDevices(1e-4, 1e-5);
  OpTester layer("LayerNormalizationGrad", kTraindTrainingVersion, kTraindTrainingDomain);
  layer.AddInputTensor("dy", RandomTensor({6, 40}, -1, 1, 1));
  layer.AddInputTensor("x", RandomTensor({6, 40}, -2, 2, 2)).AddInputTensor("scale", RandomTensor({40}, 0.5f, 2, 3));
  layer.AddOutputShape("dx", DataType::kFloat32, {6, 40});
  layer.AddOutputShape("dscale", DataType::kFloat32, {40}).AddOutputShape("db", DataType::kFloat32, {40});
  layer.CompareDevices(1e-4, 1e-5);
}

OpTester Optimizer(const char* op, float max_grad_norm, float gradient_value = 0) {
  OpTester test(op, kTraindTrainingVersion, kTraindTrainingDomain);
  const bool adamw = std::string(op) == "AdamW";
  test.AddAttribute("weight_decay", 0.01f).AddAttribute("max_grad_norm", max_grad_norm);
  if (!adamw) test.AddAttribute("momentum", 0.9f).AddAttribute("nesterov", int64_t{1});
  test.AddInput<float>("lr", {}, {0.01f}).AddInput<int64_t>("step", {}, {3});
  for (int p = 0; p < 2; ++p) {
    const Shape shape = p == 0 ? Shape{300, 7} : Shape{5};
    const std::string n = std::to_string(p);
    test.AddInputTensor("p" + n, RandomTensor(shape, -1, 1, 10 + p));
    Tensor g = RandomTensor(shape, -1, 1, 20 + p);
    if (gradient_value != 0) g.mutable_data<float>()[1] = gradient_value;
    test.AddInputTensor("g" + n, g);
    test.AddInputTensor("m" + n, RandomTensor(shape, -0.1f, 0.1f, 30 + p));
    if (adamw) test.AddInputTensor("v" + n, RandomTensor(shape, 0, 0.1f, 40 + p));
  }
  test.AddOutputShape("skipped", DataType::kBool, {});
  for (int p = 0; p < 2; ++p) {
    const Shape shape = p == 0 ? Shape{300, 7} : Shape{5};
    test.AddOutputShape("p_new" + std::to_string(p), DataType::kFloat32, shape);
    test.AddOutputShape("m_new" + std::to_string(p), DataType::kFloat32, shape);
    if (adamw) test.AddOutputShape("v_new" + std::to_string(p), DataType::kFloat32, shape);
  }
  return test;
}

TEST(OptimizerGpuTest, AdamWAndSgdMatchTheCpuWithClippingAndSkipping) {
  TRAIND_REQUIRE_GPU();
  for (const char* op : {"AdamW", "SGD"}) {
    SCOPED_TRACE(op);
    Optimizer(op, 0).CompareDevices(1e-6, 1e-7);
    Optimizer(op, 0.5f).CompareDevices(1e-5, 1e-7);  // clipped
    Optimizer(op, 0, NAN).CompareDevices(0, 0);       // skipped: every output is its input
    Optimizer(op, 0, INFINITY).CompareDevices(0, 0);  // skipped
    // Not skipped: a finite gradient whose float32 square overflows (the GPU's sum is +inf, the CPU's float64 one
    // finite); skipped exactly when an element is not finite, which Module::GradientsCheckedFinite relies on.
    Optimizer(op, 0, 1e30f).CompareDevices(1e-6, 1e-7);
  }
}

}  // namespace
}  // namespace traind::engine
