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

// Interleaved operands, which a CPU plan's layout folding makes (engine/runtime/attention_fusion.h) so that attention
// reads its heads where the packed projection wrote them and writes where the next projection reads: the operand
// [N, H, L, D] is slot s of a rank-5 [N, L, S, H, D] tensor (queries, keys and values of one projection, S = 3), and
// an interleaved O or dO is a rank-4 [N, L, H, D] tensor. With interleaved Q, B and V (all three slots of one tensor)
// the gradient's output 0 is the gradient of that whole tensor, and it has no outputs 1 and 2.
struct AttentionAttributes {
  float scale = 1.0f;
  bool trans_b = false;                           // B holds the keys as rows, [..., Lk, D]
  int64_t q_slot = -1, b_slot = -1, v_slot = -1;  // `q_slot` ...: interleaved operands; -1 (default): plain
  bool o_interleaved = false;                     // `o_interleaved`: O written as [N, Lq, H, Dv]
  bool dout_interleaved = false;                  // `dO_interleaved`: dO read from [N, Lq, H, Dv]
  bool packed_gradient() const { return q_slot >= 0; }
};
// `scale` (float, finite, default 1), `transB` (0 or 1, default 0), the slots (>= -1; all three or none; an
// interleaved B holds keys as rows, transB = 1; distinct) and the two interleaving flags (0 or 1).
absl::StatusOr<AttentionAttributes> ParseAttentionAttributes(const KernelInit& init);

// Where batch item i's matrix of an operand starts in its tensor, and how far apart its rows are (its columns are
// contiguous): items go `heads` to an outer step.
struct OperandLayout {
  int64_t heads = 1;
  int64_t outer_stride = 0;  // between items i and i + heads
  int64_t inner_stride = 0;  // between items i and i + 1 of one outer step
  int64_t offset = 0;
  int64_t ld = 0;            // between rows
  int64_t Base(int64_t item) const { return offset + (item / heads) * outer_stride + (item % heads) * inner_stride; }
  // A [..., rows, cols] tensor.
  static OperandLayout Plain(int64_t rows, int64_t cols) { return {1, rows * cols, 0, 0, cols}; }
  // Slot `slot` of a [N, length, slots, heads, depth] tensor, as [N, heads, length, depth].
  static OperandLayout Interleaved(int64_t length, int64_t slots, int64_t heads, int64_t depth, int64_t slot) {
    return {heads, length * slots * heads * depth, depth, slot * heads * depth, slots * heads * depth};
  }
};

struct AttentionShapes {
  Shape batch;          // the leading dims, equal for every operand ([N, H] for interleaved ones)
  int64_t batches = 1;  // their product
  int64_t lq = 0, lk = 0, d = 0, dv = 0;
  OperandLayout q, b, v;
};
// Q, B and V of one dtype, rank >= 2 (or interleaved), batch dims equal, inner dims agreeing; InvalidArgument naming
// the operands otherwise.
absl::StatusOr<AttentionShapes> CheckAttentionInputs(const Tensor& q, const Tensor& b, const Tensor& v,
                                                     const AttentionAttributes& attributes);
// The gradient's inputs: Q, B and V as above (one tensor when interleaved), dO [..., Lq, Dv] (or interleaved) and P
// [..., Lq, Lk] of their dtype. `dout_layout`: where dO's items lie.
absl::StatusOr<AttentionShapes> CheckAttentionGradInputs(const Tensor& dout, const Tensor& q, const Tensor& b,
                                                         const Tensor& v, const Tensor& p,
                                                         const AttentionAttributes& attributes,
                                                         OperandLayout* dout_layout);

// The gradient's five inputs from a node's context (the CPU's KernelContext or the GPU's), checked as above.
struct AttentionGradOperands {
  const Tensor* dout = nullptr;
  const Tensor* q = nullptr;
  const Tensor* b = nullptr;
  const Tensor* v = nullptr;
  const Tensor* p = nullptr;
  AttentionShapes shapes;
  OperandLayout dout_layout;
};
template <typename Context>
absl::StatusOr<AttentionGradOperands> AttentionGradInputs(const Context& context, const AttentionAttributes& attributes) {
  AttentionGradOperands operands;
  const Tensor** inputs[] = {&operands.dout, &operands.q, &operands.b, &operands.v, &operands.p};
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<const Tensor*> input = context.RequiredInput(i);
    if (!input.ok()) return input.status();
    *inputs[i] = *input;
  }
  absl::StatusOr<AttentionShapes> shapes = CheckAttentionGradInputs(
      *operands.dout, *operands.q, *operands.b, *operands.v, *operands.p, attributes, &operands.dout_layout);
  if (!shapes.ok()) return shapes.status();
  operands.shapes = *std::move(shapes);
  return operands;
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_ATTENTION_OPS_H_
