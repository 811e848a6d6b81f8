// Scaled dot-product attention fused into one node, on the node list the compiler plans (the model, its artifacts and
// its exports keep their nodes).
//
// Exporters write attention as MatMul(Q, Kt) -> Mul(scale) (or Div, or nothing) -> Softmax(last axis) -> MatMul(P, V):
// four nodes, each a pass over the [..., Lq, Lk] scores in memory (the transformer workload's attention: four 1 MB
// passes per layer besides its products). ScaledDotProductAttention (engine/ops/attention_ops.h) does one batch item
// (a head of one sequence) at a time with its scores in the cache, and writes P only where something else reads it
// (the gradient, ScaledDotProductAttentionGrad).
//
// - O = MatMul(P, V), P = Softmax(S') over the last axis, S' = Mul(S, c) / Mul(c, S) / Div(S, c) for a float32 scalar
//   constant c (or S' = S), S = MatMul(Q, B) or FusedMatMul(Q, B) without bias or transA; S and S' read by nothing
//   else and not graph outputs; Q, B, V and P float32 of one rank >= 2, their batch dims statically equal (MatMul
//   would broadcast others) -> O, P = ScaledDotProductAttention(Q, B, V, scale = c (or 1 / c), transB), P kept only
//   when something else reads it or it is a graph output. The Softmax, the scaling node and the first product go.
// - B = Transpose(K) swapping K's last two axes (MatMul of Q and K^T, PyTorch's export of q @ k.transpose(-2, -1)):
//   the fused node reads K with transB = 1, and the Transpose goes too when nothing else reads B.
//
// Results differ from the unfused plan by the products' rounding (another order of the same sums; a Div by c
// becomes a multiplication by 1 / c). CPU plans only, like the other node-list passes.
//
// FoldAttentionLayouts then lets the fused nodes (and the ScaledDotProductAttentionGrad the gradient builder emits)
// read and write the heads where the projections around them keep them, as multi-head attention is written by hand
// (qkv.reshape(N, L, 3, H, D).permute(2, 0, 3, 1, 4), q, k, v = qkv[0], qkv[1], qkv[2], out.transpose(1, 2)): each
// of those moves copies a [N, L, H * D] activation (forward: the permute, three Gathers, the output's transpose;
// backward: their gradients, a transpose, three Unsqueezes into a Concat and the permute back).
//
// - Q, K and V = Gather(T, s, axis 0) for three distinct scalar constants s, T = Transpose(R, perm [2, 0, 3, 1, 4]),
//   R a static [N, L, S, H, D], keys as rows (transB): the attention node reads slots s of R (q_slot, b_slot, v_slot).
//   A gradient node folds them only together with its outputs: dQ, dK and dV each Unsqueezed at axis 0 into one
//   Concat along axis 0, each at its own slot's position, transposed by perm [1, 3, 0, 2, 4] into dR of R's shape:
//   the node writes dR itself (its one output), and the Unsqueezes, the Concat and the Transpose go.
// - O of a fused node read only by a Transpose(perm [0, 2, 1, 3]): the node writes that [N, Lq, H, Dv] value itself
//   (o_interleaved); dO of a gradient node = Transpose(G, perm [0, 2, 1, 3]) read by nothing else: the node reads G
//   (dO_interleaved). The Transposes go.
// - Gathers and Transposes left without readers go.
//
// The results are the unfolded plan's, bit for bit (the same products read from other addresses).
#ifndef TRAIND_ENGINE_RUNTIME_ATTENTION_FUSION_H_
#define TRAIND_ENGINE_RUNTIME_ATTENTION_FUSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/node_list.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Rewrites `nodes` in place as above and returns how many attention chains became one node. The fused nodes need the
// ai.traind.training domain imported by the caller.
int FuseAttention(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph);

// Rewrites `nodes` in place as above (after FuseAttention) and returns how many operands and results of attention
// nodes it folded.
int FoldAttentionLayouts(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_ATTENTION_FUSION_H_
