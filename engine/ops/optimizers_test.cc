// Expected values come from numpy (float64) transcriptions of the ONNX spec formulas, with the
// attributes rounded to float32 as the kernel receives them (see each test's comment for inputs).
#include <cmath>
#include <vector>

#include "engine/model/model_loader.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

constexpr const char* kDomain = kOnnxPreviewTrainingDomain;
constexpr double kDoubleTolerance = 1e-12;

// ---- Adam ----

// G_reg = nc X + G; V' = a V + (1 - a) G_reg; H' = b H + (1 - b) G_reg^2;
// X' = X - R sqrt(1 - b^T) / (1 - a^T) V' / (sqrt(H') + eps). R 0.1, T 3, a 0.9, b 0.99, nc 0.01.
TEST(AdamTest, BiasCorrectedStepWithL2Float) {
  OpTester("Adam", 1, kDomain)
      .AddAttribute("alpha", 0.9f)
      .AddAttribute("beta", 0.99f)
      .AddAttribute("epsilon", 1e-6f)
      .AddAttribute("norm_coefficient", 0.01f)
      .AddInput<float>("R", {}, {0.1f})
      .AddInput<int64_t>("T", {}, {3})
      .AddInput<float>("X", {4}, {1, -2, 0.5f, 3})
      .AddInput<float>("G", {4}, {0.1f, -0.2f, 0.3f, -0.4f})
      .AddInput<float>("V", {4}, {0.05f, 0.01f, -0.02f, 0})
      .AddInput<float>("H", {4}, {0.01f, 0.02f, 0.005f, 0.1f})
      .AddOutput<float>("X_new", {4}, {0.96442506f, -1.9941953f, 0.48963373f, 3.0074271f})
      .AddOutput<float>("V_new", {4}, {0.056f, -0.013f, 0.0125f, -0.037f})
      .AddOutput<float>("H_new", {4}, {0.010021f, 0.020284f, 0.00588025f, 0.100369f})
      .Run();
}

// T = 0: no bias correction. Defaults a 0.9, b 0.999; eps 0.5 (large, so its placement matters);
// norm_coefficient_post 0.1 scales X' by 0.9 after the step. R 0.5, V = H = 0.
TEST(AdamTest, NoBiasCorrectionAtStepZeroAndPostUpdateDecayDouble) {
  OpTester("Adam", 1, kDomain)
      .AddAttribute("epsilon", 0.5f)
      .AddAttribute("norm_coefficient_post", 0.1f)
      .AddInput<double>("R", {}, {0.5})
      .AddInput<int64_t>("T", {}, {0})
      .AddInput<double>("X", {2}, {2, -1})
      .AddInput<double>("G", {2}, {1, 0.5})
      .AddInput<double>("V", {2}, {0, 0})
      .AddInput<double>("H", {2}, {0, 0})
      .AddOutput<double>("X_new", {2}, {1.7153534584099215, -0.943620613093677})
      .AddOutput<double>("V_new", {2}, {0.10000002384185791, 0.050000011920928955})
      .AddOutput<double>("H_new", {2}, {0.0009999871253967285, 0.00024999678134918213})
      .SetTolerance(kDoubleTolerance, 0)
      .Run();
}

// Two parameters (shapes {2} and {2, 2}); outputs are X1', X2', V1', V2', H1', H2'. T 1, R 0.01,
// default a, b, eps. R is float while the parameters are double (separate ONNX type constraints);
// the reference uses R = float32(0.01) = 0.00999999977648258.
TEST(AdamTest, MultipleParametersDouble) {
  OpTester("Adam", 1, kDomain)
      .AddInput<float>("R", {}, {0.01f})
      .AddInput<int64_t>("T", {}, {1})
      .AddInput<double>("X1", {2}, {1, 2})
      .AddInput<double>("X2", {2, 2}, {0.5, -0.5, 1.5, 0})
      .AddInput<double>("G1", {2}, {-1, 4})
      .AddInput<double>("G2", {2, 2}, {0.2, -0.1, 0, 1})
      .AddInput<double>("V1", {2}, {0, 0})
      .AddInput<double>("V2", {2, 2}, {0.1, 0.1, 0.1, 0.1})
      .AddInput<double>("H1", {2}, {0, 0})
      .AddInput<double>("H2", {2, 2}, {1, 1, 1, 1})
      .AddOutput<double>("X1_new", {2}, {1.0099996835566887, 1.990000079280341})
      .AddOutput<double>("X2_new", {2, 2},
                         {0.4996519850426532, -0.5002531055667969, 1.4997152548028039, -0.0006008281980260255})
      .AddOutput<double>("V1_new", {2}, {-0.10000002384185791, 0.40000009536743164})
      .AddOutput<double>("V2_new", {2, 2},
                         {0.11000000238418581, 0.07999999523162843, 0.08999999761581422, 0.19000002145767214})
      .AddOutput<double>("H1_new", {2}, {0.0009999871253967285, 0.015999794006347656})
      .AddOutput<double>("H2_new", {2, 2}, {0.9990400123596191, 0.9990100127458572, 0.9990000128746033, 1.0})
      .SetTolerance(kDoubleTolerance, 0)
      .Run();
}

// A tensor large enough for several parallel chunks (OpTester runs 3 threads): every element must
// match a scalar transcription of the formula, including the chunk boundaries.
TEST(AdamTest, LargeTensorMatchesScalarFormulaAcrossChunks) {
  const int64_t n = 200'003;
  std::vector<float> x(n), g(n), v(n), h(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::sin(0.001f * i);
    g[i] = std::cos(0.003f * i) - 0.5f;
    v[i] = 0.01f * std::sin(0.007f * i);
    h[i] = 0.02f + 0.01f * std::cos(0.011f * i);
  }
  const double a = 0.9f, b = 0.999f, eps = 1e-8f, nc = 0.05f, post = 0.02f, r = 0.001f;
  const double rate = r * std::sqrt(1 - std::pow(b, 10)) / (1 - std::pow(a, 10));
  std::vector<float> x_new(n), v_new(n), h_new(n);
  for (int64_t i = 0; i < n; ++i) {
    const double g_reg = nc * x[i] + g[i];
    const double v_i = a * v[i] + (1 - a) * g_reg;
    const double h_i = b * h[i] + (1 - b) * g_reg * g_reg;
    x_new[i] = static_cast<float>((1 - post) * (x[i] - rate * v_i / (std::sqrt(h_i) + eps)));
    v_new[i] = static_cast<float>(v_i);
    h_new[i] = static_cast<float>(h_i);
  }
  OpTester("Adam", 1, kDomain)
      .AddAttribute("alpha", 0.9f)
      .AddAttribute("beta", 0.999f)
      .AddAttribute("epsilon", 1e-8f)
      .AddAttribute("norm_coefficient", 0.05f)
      .AddAttribute("norm_coefficient_post", 0.02f)
      .AddInput<float>("R", {}, {0.001f})
      .AddInput<int64_t>("T", {}, {10})
      .AddInput<float>("X", {n}, x)
      .AddInput<float>("G", {n}, g)
      .AddInput<float>("V", {n}, v)
      .AddInput<float>("H", {n}, h)
      .AddOutput<float>("X_new", {n}, x_new)
      .AddOutput<float>("V_new", {n}, v_new)
      .AddOutput<float>("H_new", {n}, h_new)
      .Run();
}

TEST(AdamTest, RejectsBadArityAndInputs) {
  // 5 inputs: not R, T + 4 groups.
  auto bad_inputs = OpTester("Adam", 1, kDomain)
                        .AddInput<float>("R", {}, {0.1f})
                        .AddInput<int64_t>("T", {}, {1})
                        .AddInput<float>("X", {1}, {1})
                        .AddInput<float>("G", {1}, {1})
                        .AddInput<float>("V", {1}, {1})
                        .AddOutput<float>("X_new", {1}, {0})
                        .RunRaw();
  EXPECT_EQ(bad_inputs.status().code(), absl::StatusCode::kInvalidArgument) << bad_inputs.status();
  // One parameter but only two outputs.
  auto bad_outputs = OpTester("Adam", 1, kDomain)
                         .AddInput<float>("R", {}, {0.1f})
                         .AddInput<int64_t>("T", {}, {1})
                         .AddInput<float>("X", {1}, {1})
                         .AddInput<float>("G", {1}, {1})
                         .AddInput<float>("V", {1}, {1})
                         .AddInput<float>("H", {1}, {1})
                         .AddOutput<float>("X_new", {1}, {0})
                         .AddOutput<float>("V_new", {1}, {0})
                         .RunRaw();
  EXPECT_EQ(bad_outputs.status().code(), absl::StatusCode::kInvalidArgument) << bad_outputs.status();

  auto run = [](Shape r_shape, std::vector<int64_t> t, Shape g_shape, DataType g_dtype) {
    OpTester test("Adam", 1, kDomain);
    test.AddInput<float>("R", r_shape, std::vector<float>(ElementCount(r_shape).value(), 0.1f))
        .AddInput<int64_t>("T", {}, t)
        .AddInput<float>("X", {2}, {1, 2});
    if (g_dtype == DataType::kFloat64) {
      test.AddInput<double>("G", g_shape, std::vector<double>(ElementCount(g_shape).value(), 1));
    } else {
      test.AddInput<float>("G", g_shape, std::vector<float>(ElementCount(g_shape).value(), 1));
    }
    return test.AddInput<float>("V", {2}, {0, 0})
        .AddInput<float>("H", {2}, {0, 0})
        .AddOutput<float>("X_new", {2}, {0, 0})
        .AddOutput<float>("V_new", {2}, {0, 0})
        .AddOutput<float>("H_new", {2}, {0, 0})
        .RunRaw()
        .status();
  };
  EXPECT_TRUE(run({}, {1}, {2}, DataType::kFloat32).ok());
  EXPECT_EQ(run({2}, {1}, {2}, DataType::kFloat32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({}, {-1}, {2}, DataType::kFloat32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({}, {1}, {2}, DataType::kFloat64).code(), absl::StatusCode::kInvalidArgument);
  // Broadcasting G against X is valid ONNX but not supported: SKIP, not FAIL.
  EXPECT_EQ(run({}, {1}, {1}, DataType::kFloat32).code(), absl::StatusCode::kUnimplemented);
}

TEST(AdamTest, IntegerParametersAreUnsupported) {
  auto result = OpTester("Adam", 1, kDomain)
                    .AddInput<float>("R", {}, {0.1f})
                    .AddInput<int64_t>("T", {}, {1})
                    .AddInput<int32_t>("X", {1}, {1})
                    .AddInput<int32_t>("G", {1}, {1})
                    .AddInput<int32_t>("V", {1}, {1})
                    .AddInput<int32_t>("H", {1}, {1})
                    .AddOutput<int32_t>("X_new", {1}, {0})
                    .AddOutput<int32_t>("V_new", {1}, {0})
                    .AddOutput<int32_t>("H_new", {1}, {0})
                    .RunRaw();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented) << result.status();
}

// ---- Momentum ----
// G_reg = nc X + G; V' = a V + (T > 0 ? b : 1) G_reg; standard X' = X - R V';
// nesterov X' = X - R (G_reg + a V'). All cases: R 0.1, a 0.9, b 0.5, nc 0.1,
// X [1, 2, -3], G [0.5, -1, 2], V [0.2, 0, 1].
OpTester MomentumCase(const std::string& mode, int64_t t) {
  OpTester test("Momentum", 1, kDomain);
  test.AddAttribute("alpha", 0.9f)
      .AddAttribute("beta", 0.5f)
      .AddAttribute("norm_coefficient", 0.1f)
      .AddAttribute("mode", mode)
      .AddInput<float>("R", {}, {0.1f})
      .AddInput<int64_t>("T", {}, {t})
      .AddInput<float>("X", {3}, {1, 2, -3})
      .AddInput<float>("G", {3}, {0.5f, -1, 2})
      .AddInput<float>("V", {3}, {0.2f, 0, 1});
  return test;
}

TEST(MomentumTest, StandardFirstStepUsesBetaOne) {
  MomentumCase("standard", 0)
      .AddOutput<float>("X_new", {3}, {0.922f, 2.08f, -3.26f})
      .AddOutput<float>("V_new", {3}, {0.78f, -0.8f, 2.6f})
      .Run();
}

TEST(MomentumTest, StandardLaterStepUsesBeta) {
  MomentumCase("standard", 5)
      .AddOutput<float>("X_new", {3}, {0.952f, 2.04f, -3.175f})
      .AddOutput<float>("V_new", {3}, {0.48f, -0.4f, 1.75f})
      .Run();
}

TEST(MomentumTest, Nesterov) {
  MomentumCase("nesterov", 5)
      .AddOutput<float>("X_new", {3}, {0.8968f, 2.116f, -3.3275f})
      .AddOutput<float>("V_new", {3}, {0.48f, -0.4f, 1.75f})
      .Run();
  MomentumCase("nesterov", 0)
      .AddOutput<float>("X_new", {3}, {0.8698f, 2.152f, -3.404f})
      .AddOutput<float>("V_new", {3}, {0.78f, -0.8f, 2.6f})
      .Run();
}

// Two double parameters, Nesterov, T 5: the same numbers split as {1} and {2}.
TEST(MomentumTest, MultipleParametersDouble) {
  OpTester("Momentum", 1, kDomain)
      .AddAttribute("alpha", 0.9f)
      .AddAttribute("beta", 0.5f)
      .AddAttribute("norm_coefficient", 0.1f)
      .AddAttribute("mode", std::string("nesterov"))
      .AddInput<double>("R", {}, {0.1})
      .AddInput<int64_t>("T", {}, {5})
      .AddInput<double>("X1", {1}, {1})
      .AddInput<double>("X2", {2}, {2, -3})
      .AddInput<double>("G1", {1}, {0.5})
      .AddInput<double>("G2", {2}, {-1, 2})
      .AddInput<double>("V1", {1}, {0.2})
      .AddInput<double>("V2", {2}, {0, 1})
      .AddOutput<double>("X1_new", {1}, {0.8968000013574957})
      .AddOutput<double>("X2_new", {2}, {2.115999998614192, -3.3274999930337072})
      .AddOutput<double>("V1_new", {1}, {0.4799999959766865})
      .AddOutput<double>("V2_new", {2}, {-0.3999999985098839, 1.749999973922968})
      .SetTolerance(kDoubleTolerance, 0)
      .Run();
}

TEST(MomentumTest, AttributesAreRequiredAndModeIsChecked) {
  auto missing = OpTester("Momentum", 1, kDomain)
                     .AddAttribute("alpha", 0.9f)
                     .AddAttribute("beta", 0.5f)
                     .AddAttribute("norm_coefficient", 0.0f)
                     .AddInput<float>("R", {}, {0.1f})
                     .AddInput<int64_t>("T", {}, {1})
                     .AddInput<float>("X", {1}, {1})
                     .AddInput<float>("G", {1}, {1})
                     .AddInput<float>("V", {1}, {1})
                     .AddOutput<float>("X_new", {1}, {0})
                     .AddOutput<float>("V_new", {1}, {0})
                     .RunRaw();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument) << missing.status();
  EXPECT_NE(missing.status().message().find("mode"), std::string::npos) << missing.status();
  auto bad_mode = MomentumCase("heavy-ball", 1)
                      .AddOutput<float>("X_new", {3}, {0, 0, 0})
                      .AddOutput<float>("V_new", {3}, {0, 0, 0})
                      .RunRaw();
  EXPECT_EQ(bad_mode.status().code(), absl::StatusCode::kInvalidArgument) << bad_mode.status();
}

// ---- Adagrad ----
// r = R / (1 + T decay); G_reg = nc X + G; H' = H + G_reg^2; X' = X - r G_reg / (sqrt(H') + eps).
// R 0.2, T 2, decay 0.5, nc 0.1, eps 1e-6.
TEST(AdagradTest, DecayedRateWithL2Double) {
  OpTester("Adagrad", 1, kDomain)
      .AddAttribute("decay_factor", 0.5f)
      .AddAttribute("norm_coefficient", 0.1f)
      .AddInput<double>("R", {}, {0.2})
      .AddInput<int64_t>("T", {}, {2})
      .AddInput<double>("X", {3}, {1, -1, 4})
      .AddInput<double>("G", {3}, {0.5, 2, 0})
      .AddInput<double>("H", {3}, {0.25, 1, 0.5})
      .AddOutput<double>("X_new", {3}, {0.9231779703225994, -1.0884917810084125, 3.9507634636584332})
      .AddOutput<double>("H_new", {3}, {0.6100000017881393, 4.609999994337558, 0.6600000047683716})
      .SetTolerance(kDoubleTolerance, 0)
      .Run();
}

TEST(AdagradTest, MultipleParametersFloat) {
  OpTester("Adagrad", 1, kDomain)
      .AddAttribute("decay_factor", 0.5f)
      .AddAttribute("norm_coefficient", 0.1f)
      .AddInput<float>("R", {}, {0.2f})
      .AddInput<int64_t>("T", {}, {2})
      .AddInput<float>("X1", {3}, {1, -1, 4})
      .AddInput<float>("X2", {1}, {3})
      .AddInput<float>("G1", {3}, {0.5f, 2, 0})
      .AddInput<float>("G2", {1}, {-3})
      .AddInput<float>("H1", {3}, {0.25f, 1, 0.5f})
      .AddInput<float>("H2", {1}, {0})
      .AddOutput<float>("X1_new", {3}, {0.92317797f, -1.0884918f, 3.9507635f})
      .AddOutput<float>("X2_new", {1}, {3.1f})
      .AddOutput<float>("H1_new", {3}, {0.61f, 4.61f, 0.66f})
      .AddOutput<float>("H2_new", {1}, {7.29f})
      .Run();
}

// ---- Domain: loader and compiler ----

// A one-node model importing only ai.onnx.preview.training passes the loader (onnx checker and
// strict shape inference included) and compiles; version 2 of the domain is refused.
TEST(OptimizerDomainTest, TrainingDomainModelLoadsAndCompiles) {
  OpTester test = MomentumCase("standard", 1);
  test.AddOutput<float>("X_new", {3}, {0, 0, 0}).AddOutput<float>("V_new", {3}, {0, 0, 0});
  ASSERT_TRUE(test.RunRaw().ok());
  onnx::ModelProto model = test.model();
  auto loaded = LoadModelFromBytes(model.SerializeAsString());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto plan = Compile(*loaded);
  EXPECT_TRUE(plan.ok()) << plan.status();

  model.mutable_opset_import(0)->set_version(2);
  auto refused = LoadModelFromBytes(model.SerializeAsString());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
}

// ---- traind AdamW / SGD (ai.traind.training) ----
// Their PyTorch references are trajectories of torch.optim (engine/training/artifacts_test.cc, through the optimizer
// model); these tests cover what a single node shows: where SGD meets ONNX's Momentum, the non-finite skip, the
// clipping scale and the errors.

OpTester SgdCase(float momentum, float dampening, bool nesterov, int64_t step, std::vector<float> v) {
  OpTester test("SGD", 1, kTraindTrainingDomain);
  test.AddAttribute("momentum", momentum)
      .AddAttribute("dampening", dampening)
      .AddAttribute("nesterov", int64_t{nesterov ? 1 : 0})
      .AddAttribute("weight_decay", 0.01f)
      .AddInput<float>("lr", {}, {0.1f})
      .AddInput<int64_t>("step", {}, {step})
      .AddInput<float>("X", {4}, {1.2f, -2.8f, 0.5f, 3})
      .AddInput<float>("G", {4}, {-0.94f, 2.5f, 0.125f, -1})
      .AddInput<float>("V", {4}, v)
      .AddOutput<uint8_t>("skipped", {}, {0}, DataType::kBool)
      .AddOutput<float>("X_new", {4}, {0, 0, 0, 0})
      .AddOutput<float>("V_new", {4}, {0, 0, 0, 0});
  return test;
}

// SGD at step t equals ONNX Momentum(alpha = momentum, beta = 1 - dampening, norm_coefficient = weight_decay) at
// T = t - 1, given a zero buffer before the first step (at T = 0 ONNX takes beta = 1: torch's buffer = gradient).
TEST(TraindSgdTest, CoincidesWithOnnxMomentumAtTEqualsStepMinusOne) {
  for (bool nesterov : {false, true}) {
    for (int64_t step : {1, 2, 5}) {
      const float dampening = nesterov ? 0.0f : 0.25f;
      const std::vector<float> v = step == 1 ? std::vector<float>{0, 0, 0, 0} : std::vector<float>{0.5f, -1, 2, 0.1f};
      auto sgd = SgdCase(0.9f, dampening, nesterov, step, v).RunRaw();
      ASSERT_TRUE(sgd.ok()) << sgd.status();
      auto momentum = OpTester("Momentum", 1, kDomain)
                          .AddAttribute("alpha", 0.9f)
                          .AddAttribute("beta", 1.0f - dampening)
                          .AddAttribute("norm_coefficient", 0.01f)
                          .AddAttribute("mode", std::string(nesterov ? "nesterov" : "standard"))
                          .AddInput<float>("R", {}, {0.1f})
                          .AddInput<int64_t>("T", {}, {step - 1})
                          .AddInput<float>("X", {4}, {1.2f, -2.8f, 0.5f, 3})
                          .AddInput<float>("G", {4}, {-0.94f, 2.5f, 0.125f, -1})
                          .AddInput<float>("V", {4}, v)
                          .AddOutput<float>("X_new", {4}, {0, 0, 0, 0})
                          .AddOutput<float>("V_new", {4}, {0, 0, 0, 0})
                          .RunRaw();
      ASSERT_TRUE(momentum.ok()) << momentum.status();
      EXPECT_EQ((*sgd)[0].data<uint8_t>()[0], 0);
      for (int output = 0; output < 2; ++output) {
        for (int i = 0; i < 4; ++i) {
          EXPECT_NEAR((*sgd)[1 + output].data<float>()[i], (*momentum)[output].data<float>()[i], 1e-6)
              << "nesterov " << nesterov << " step " << step << " output " << output << " element " << i;
        }
      }
    }
  }
}

// torch.optim.SGD's first step takes the gradient as the buffer, whatever the state input holds.
TEST(TraindSgdTest, FirstStepIgnoresTheStateInput) {
  auto from_zero = SgdCase(0.9f, 0.0f, false, 1, {0, 0, 0, 0}).RunRaw();
  auto from_garbage = SgdCase(0.9f, 0.0f, false, 1, {7, 7, 7, 7}).RunRaw();
  ASSERT_TRUE(from_zero.ok() && from_garbage.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*from_zero)[1].data<float>()[i], (*from_garbage)[1].data<float>()[i]);
}

// Plain SGD, with global-norm clipping: the gradients of both parameters are scaled by max_norm / (|g| + 1e-6),
// |g| = sqrt(3^2 + 4^2 + 12^2) = 13. X' = X - lr * g * 6.5 / (13 + 1e-6).
TEST(TraindSgdTest, ClipsTheGlobalGradientNorm) {
  const float scale = 6.5f / (13.0f + 1e-6f);
  OpTester("SGD", 1, kTraindTrainingDomain)
      .AddAttribute("max_grad_norm", 6.5f)
      .AddInput<float>("lr", {}, {0.5f})
      .AddInput<int64_t>("step", {}, {3})
      .AddInput<float>("X1", {2}, {1, 1})
      .AddInput<float>("G1", {2}, {3, 4})
      .AddInput<float>("X2", {1}, {0})
      .AddInput<float>("G2", {1}, {-12})
      .AddOutput<uint8_t>("skipped", {}, {0}, DataType::kBool)
      .AddOutput<float>("X1_new", {2}, {1 - 0.5f * 3 * scale, 1 - 0.5f * 4 * scale})
      .AddOutput<float>("X2_new", {1}, {0.5f * 12 * scale})
      .SetTolerance(1e-6, 0)
      .Run();
  // Below max_norm nothing is scaled.
  OpTester("SGD", 1, kTraindTrainingDomain)
      .AddAttribute("max_grad_norm", 100.0f)
      .AddInput<float>("lr", {}, {0.5f})
      .AddInput<int64_t>("step", {}, {3})
      .AddInput<float>("X1", {2}, {1, 1})
      .AddInput<float>("G1", {2}, {3, 4})
      .AddOutput<uint8_t>("skipped", {}, {0}, DataType::kBool)
      .AddOutput<float>("X1_new", {2}, {-0.5f, -1})
      .SetTolerance(0, 0)
      .Run();
}

TEST(TraindAdamWTest, NonFiniteGradientSkipsAndPassesEverythingThrough) {
  OpTester("AdamW", 1, kTraindTrainingDomain)
      .AddAttribute("weight_decay", 0.1f)
      .AddInput<float>("lr", {}, {0.1f})
      .AddInput<int64_t>("step", {}, {2})
      .AddInput<float>("X", {2}, {1, 2})
      .AddInput<float>("G", {2}, {0.5f, std::nanf("")})
      .AddInput<float>("M", {2}, {0.25f, 0.5f})
      .AddInput<float>("V", {2}, {1, 3})
      .AddOutput<uint8_t>("skipped", {}, {1}, DataType::kBool)
      .AddOutput<float>("X_new", {2}, {1, 2})
      .AddOutput<float>("M_new", {2}, {0.25f, 0.5f})
      .AddOutput<float>("V_new", {2}, {1, 3})
      .SetTolerance(0, 0)
      .Run();
}

TEST(TraindAdamWTest, RejectsBadStepsShapesAndArity) {
  auto make = [](int64_t step, Shape gradient_shape) {
    OpTester test("AdamW", 1, kTraindTrainingDomain);
    test.AddInput<float>("lr", {}, {0.1f})
        .AddInput<int64_t>("step", {}, {step})
        .AddInput<float>("X", {2}, {1, 2})
        .AddInput<float>("G", gradient_shape, std::vector<float>(ElementCount(gradient_shape).value_or(0), 1.0f))
        .AddInput<float>("M", {2}, {0, 0})
        .AddInput<float>("V", {2}, {0, 0})
        .AddOutput<uint8_t>("skipped", {}, {0}, DataType::kBool)
        .AddOutput<float>("X_new", {2}, {0, 0})
        .AddOutput<float>("M_new", {2}, {0, 0})
        .AddOutput<float>("V_new", {2}, {0, 0});
    return test.RunRaw().status();
  };
  EXPECT_TRUE(make(1, {2}).ok());
  EXPECT_EQ(make(0, {2}).code(), absl::StatusCode::kInvalidArgument);  // steps are 1-based
  EXPECT_EQ(make(1, {3}).code(), absl::StatusCode::kInvalidArgument);
  // Arity: four tensors per parameter after lr and step, and 1 + 3 outputs per parameter.
  auto arity = OpTester("AdamW", 1, kTraindTrainingDomain)
                   .AddInput<float>("lr", {}, {0.1f})
                   .AddInput<int64_t>("step", {}, {1})
                   .AddInput<float>("X", {2}, {1, 2})
                   .AddInput<float>("G", {2}, {1, 2})
                   .AddInput<float>("M", {2}, {0, 0})
                   .AddOutput<uint8_t>("skipped", {}, {0}, DataType::kBool)
                   .AddOutput<float>("X_new", {2}, {0, 0})
                   .RunRaw();
  EXPECT_EQ(arity.status().code(), absl::StatusCode::kInvalidArgument) << arity.status();
  auto nesterov = SgdCase(0.9f, 0.5f, true, 1, {0, 0, 0, 0}).RunRaw();
  EXPECT_EQ(nesterov.status().code(), absl::StatusCode::kInvalidArgument) << nesterov.status();
}

// The schemas let the checker and strict shape inference validate optimizer nodes, arity included.
TEST(TraindOptimizerSchemaTest, CheckerAcceptsValidNodesAndRejectsBadArity) {
  OpTester test = SgdCase(0.9f, 0.0f, true, 2, {0, 0, 0, 0});
  ASSERT_TRUE(test.RunRaw().ok());
  onnx::ModelProto model = test.model();
  auto* ai_onnx = model.add_opset_import();
  ai_onnx->set_domain("");
  ai_onnx->set_version(17);
  auto loaded = LoadModelFromBytes(model.SerializeAsString());
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  // Without momentum SGD keeps no state: the same node then has one input and one output too many.
  for (auto& attribute : *model.mutable_graph()->mutable_node(0)->mutable_attribute()) {
    if (attribute.name() == "momentum") attribute.set_f(0.0f);
    if (attribute.name() == "nesterov") attribute.set_i(0);
  }
  EXPECT_FALSE(LoadModelFromBytes(model.SerializeAsString()).ok());
}

// In-place updates by donation: with X, M and V donated, the node writes its results into their buffers (the
// outputs share them), computing exactly what the out-of-place run computes; the gradient is never written. A
// donated input whose buffer another input shares is not written (the copy path runs instead).
TEST(TraindAdamWTest, DonatedParametersAndStatesAreUpdatedInPlace) {
  OpTester test("AdamW", 1, kTraindTrainingDomain);
  const int64_t n = 3 * kParallelElementThreshold + 5;  // several chunks, a remainder
  std::vector<float> x(n), g(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::sin(0.1f * i);
    g[i] = std::cos(0.3f * i);
    m[i] = 0.01f * std::sin(0.7f * i);
    v[i] = 0.02f + 0.01f * std::cos(0.5f * i);
  }
  test.AddAttribute("weight_decay", 0.1f)
      .AddAttribute("max_grad_norm", 1.0f)
      .AddInput<float>("lr", {}, {0.01f})
      .AddInput<int64_t>("step", {}, {3})
      .AddInput<float>("X", {n}, x)
      .AddInput<float>("G", {n}, g)
      .AddInput<float>("M", {n}, m)
      .AddInput<float>("V", {n}, v)
      .AddOutput<uint8_t>("skipped", {}, {0}, DataType::kBool)
      .AddOutput<float>("X_new", {n}, x)
      .AddOutput<float>("M_new", {n}, m)
      .AddOutput<float>("V_new", {n}, v);
  auto expected = test.RunRaw();
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto plan = Compile(test.model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ((*plan)->nodes.size(), 1u);
  auto feeds = [&] {
    return std::vector<Tensor>{*Tensor::FromVector<float>({}, {0.01f}), *Tensor::FromVector<int64_t>({}, {3}),
                               *Tensor::FromVector<float>({n}, x), *Tensor::FromVector<float>({n}, g),
                               *Tensor::FromVector<float>({n}, m), *Tensor::FromVector<float>({n}, v)};
  };
  const std::vector<int> donated = {2, 4, 5};
  RunOptions options;
  options.donated_inputs = donated;
  CpuExecutor executor;

  std::vector<Tensor> inputs = feeds();
  auto in_place = executor.RunWithOptions(**plan, inputs, options);
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ((*in_place)[1 + k].raw_data(), inputs[donated[k]].raw_data()) << "output " << k << " not in place";
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ((*in_place)[1 + k].data<float>()[i], (*expected)[1 + k].data<float>()[i]) << "output " << k << " at " << i;
    }
  }
  EXPECT_EQ(std::vector<float>(inputs[3].data<float>(), inputs[3].data<float>() + n), g);

  // X and M the same buffer: neither is written.
  inputs = feeds();
  inputs[4] = inputs[2];
  auto shared = executor.RunWithOptions(**plan, inputs, options);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_NE((*shared)[1].raw_data(), inputs[2].raw_data());
  EXPECT_EQ(std::vector<float>(inputs[2].data<float>(), inputs[2].data<float>() + n), x);

  // Donating something that is no input of the plan is an error.
  const std::vector<int> bad = {9};
  options.donated_inputs = bad;
  EXPECT_EQ(executor.RunWithOptions(**plan, feeds(), options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A skipped step (non-finite gradient) writes nothing, donated or not.
TEST(TraindAdamWTest, SkippedStepLeavesDonatedInputsAlone) {
  OpTester test("AdamW", 1, kTraindTrainingDomain);
  test.AddInput<float>("lr", {}, {0.1f})
      .AddInput<int64_t>("step", {}, {1})
      .AddInput<float>("X", {2}, {1, 2})
      .AddInput<float>("G", {2}, {1, std::nanf("")})
      .AddInput<float>("M", {2}, {0, 0})
      .AddInput<float>("V", {2}, {0, 0})
      .AddOutput<uint8_t>("skipped", {}, {1}, DataType::kBool)
      .AddOutput<float>("X_new", {2}, {1, 2})
      .AddOutput<float>("M_new", {2}, {0, 0})
      .AddOutput<float>("V_new", {2}, {0, 0});
  ASSERT_TRUE(test.RunRaw().ok());  // builds test.model()
  auto plan = Compile(test.model());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Tensor> inputs = {*Tensor::FromVector<float>({}, {0.1f}), *Tensor::FromVector<int64_t>({}, {1}),
                                *Tensor::FromVector<float>({2}, {1, 2}), *Tensor::FromVector<float>({2}, {1, std::nanf("")}),
                                *Tensor::FromVector<float>({2}, {0, 0}), *Tensor::FromVector<float>({2}, {0, 0})};
  const std::vector<int> donated = {2, 4, 5};
  RunOptions options;
  options.donated_inputs = donated;
  auto outputs = CpuExecutor().RunWithOptions(**plan, inputs, options);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ((*outputs)[0].data<uint8_t>()[0], 1);
  EXPECT_EQ(inputs[2].data<float>()[0], 1.0f);
  EXPECT_EQ(inputs[2].data<float>()[1], 2.0f);
  EXPECT_EQ(inputs[4].data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace traind::engine
