// The GPU kernels of ScaledDotProductAttention and its gradient (CLBlast products) against the CPU kernels.
#include "engine/gpu/gpu_testing.h"
#include "engine/model/traind_schemas.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

TEST(AttentionGpuTest, ForwardAndGradientMatchTheCpuWithKeysEitherWayRound) {
  TRAIND_REQUIRE_GPU();
  const Shape q_shape = {2, 3, 5, 4}, v_shape = {2, 3, 6, 2}, p_shape = {2, 3, 5, 6}, o_shape = {2, 3, 5, 2};
  for (int trans_b = 0; trans_b < 2; ++trans_b) {
    SCOPED_TRACE(trans_b);
    const Shape b_shape = trans_b ? Shape{2, 3, 6, 4} : Shape{2, 3, 4, 6};
    OpTester forward("ScaledDotProductAttention", kTraindTrainingVersion, kTraindTrainingDomain);
    forward.AddInputTensor("q", RandomTensor(q_shape, -1, 1, 1)).AddInputTensor("b", RandomTensor(b_shape, -1, 1, 2));
    forward.AddInputTensor("v", RandomTensor(v_shape, -1, 1, 3));
    forward.AddAttribute("scale", 0.4f).AddAttribute("transB", int64_t{trans_b});
    forward.AddOutputShape("o", DataType::kFloat32, o_shape).AddOutputShape("p", DataType::kFloat32, p_shape);
    forward.CompareDevices(1e-5, 1e-6);

    OpTester backward("ScaledDotProductAttentionGrad", kTraindTrainingVersion, kTraindTrainingDomain);
    backward.AddInputTensor("dout", RandomTensor(o_shape, -1, 1, 4)).AddInputTensor("q", RandomTensor(q_shape, -1, 1, 5));
    backward.AddInputTensor("b", RandomTensor(b_shape, -1, 1, 6)).AddInputTensor("v", RandomTensor(v_shape, -1, 1, 7));
    backward.AddInputTensor("p", RandomTensor(p_shape, 0, 0.3f, 8));
    backward.AddAttribute("scale", 0.4f).AddAttribute("transB", int64_t{trans_b});
    backward.AddOutputShape("dq", DataType::kFloat32, q_shape).AddOutputShape("db", DataType::kFloat32, b_shape);
    backward.AddOutputShape("dv", DataType::kFloat32, v_shape);
    backward.CompareDevices(1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace traind::engine
