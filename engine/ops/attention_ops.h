// The contract of ScaledDotProductAttention and ScaledDotProductAttentionGrad (ai.traind.training), one place for every
// kernel of them (attention_ops.cc on the CPU).
//
// ScaledDotProductAttention(Q, B, V) -> (O, P): P = softmax(scale * Q * op(B)) over the last axis, O = P * V, per
// batch item — the nodes MatMul(Q, B) -> Mul(scale) (or Div, or none) -> Softmax(last axis) -> MatMul(P, V) of
// attention as exporters write it, which the compiler fuses on CPU plans (engine/runtime/attention_fusion.h).
// ScaledDotProductAttentionGrad(dO, Q, B, V, P) -> (dQ, dB, dV): the gradients of that whole chain, which the gradient
// builder emits in place of the four nodes' rules (engine/autodiff/gradient_builder.cc):
//   dV = P^T dO,  dP = dO V^T,  dS = scale * P * (dP - rowsum(dP * P)),  dQ = dS op(B)^T,  d op(B) = Q^T dS.
// Both run one batch item at a time with its score matrix in the core's cache, never written to memory but as P.
//
// Shapes: Q [..., Lq, D]; B [..., D, Lk] (the keys transposed), or with transB = 1 the keys as stored, [..., Lk, D];
// V [..., Lk, Dv]; O and dO [..., Lq, Dv]; P [..., Lq, Lk]. The batch dims "..." are equal for all (no broadcasting).
#ifndef TRAIND_ENGINE_OPS_ATTENTION_OPS_H_
#define TRAIND_ENGINE_OPS_ATTENTION_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

struct AttentionAttributes {
  float scale = 1.0f;
  bool trans_b = false;  // B holds the keys as rows, [..., Lk, D]
};
// `scale` (float, finite, default 1) and `transB` (0 or 1, default 0).
absl::StatusOr<AttentionAttributes> ParseAttentionAttributes(const KernelInit& init);

struct AttentionShapes {
  Shape batch;          // the leading dims, equal for every operand
  int64_t batches = 1;  // their product
  int64_t lq = 0, lk = 0, d = 0, dv = 0;
};
// Q, B and V of one dtype and rank >= 2, batch dims equal, inner dims agreeing; InvalidArgument naming the operands
// otherwise.
absl::StatusOr<AttentionShapes> CheckAttentionInputs(const Tensor& q, const Tensor& b, const Tensor& v,
                                                     const AttentionAttributes& attributes);
// The gradient's inputs: Q, B and V as above, dO [..., Lq, Dv] and P [..., Lq, Lk] of their dtype.
absl::StatusOr<AttentionShapes> CheckAttentionGradInputs(const Tensor& dout, const Tensor& q, const Tensor& b,
                                                         const Tensor& v, const Tensor& p,
                                                         const AttentionAttributes& attributes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_ATTENTION_OPS_H_
