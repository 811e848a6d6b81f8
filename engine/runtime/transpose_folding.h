// Matrix transposes folded into the products that read or make them, on the node list the compiler plans (the
// model, its artifacts and its exports keep their nodes).
//
// PyTorch exports a Linear layer as MatMul(x, Transpose(W)); in a training graph the transposed weight is read by
// the forward MatMul and by the gradient Gemm of x, and the weight's gradient comes out transposed and goes through
// a second Transpose. Both Transposes copy the whole weight every step (1.3 ms of the transformer workload's
// 25 ms), yet every product can read an operand transposed in place (Gemm's transA / transB, FusedMatMul's):
//
// - Wt = Transpose(W) with perm [1, 0] (or none) on a matrix W that is not a plan constant (constants are
//   transposed once by constant folding), Wt not a graph output, every reader of Wt a product taking it as one
//   operand: MatMul(X, Wt) -> FusedMatMul(X, W, transB = 1) (X of rank >= 2), MatMul(Wt, Y) -> FusedMatMul(W, Y,
//   transA = 1) (Y of rank >= 2), Gemm and FusedMatMul flip that operand's attribute. The Transpose goes.
// - Z = Transpose(G) with perm [1, 0] (or none), G = Gemm(A, B) without C, read by nothing else and not a graph
//   output: Z = Gemm(B, A, transA = !transB, transB = !transA) with G's alpha, since (op(A) op(B))^T =
//   op(B)^T op(A)^T. The Transpose goes.
//
// Results are unchanged up to the products' own rounding (the same sums, the operands read in another order).
#ifndef TRAIND_ENGINE_RUNTIME_TRANSPOSE_FOLDING_H_
#define TRAIND_ENGINE_RUNTIME_TRANSPOSE_FOLDING_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

struct TransposeFoldingGraph {
  absl::flat_hash_map<std::string, int> ranks;  // every value whose rank is known
  absl::flat_hash_set<std::string> constants;   // initializers
  absl::flat_hash_set<std::string> outputs;     // graph outputs
};

// Rewrites `nodes` in place as above and returns how many Transposes went. Nodes that use FusedMatMul need the
// ai.traind.training domain imported by the caller.
int FoldTransposesIntoProducts(std::vector<onnx::NodeProto>& nodes, const TransposeFoldingGraph& graph);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_TRANSPOSE_FOLDING_H_
