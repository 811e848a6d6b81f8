// A Linear layer's bias Add folded into its product, on the node list the compiler plans (the model, its artifacts
// and its exports keep their nodes).
//
// PyTorch exports Linear on a sequence as MatMul(x, Transpose(W)) then Add(b, ·) (after transpose folding:
// FusedMatMul(x, W, transB = 1), then the Add). The Add reads the whole product back and writes it again: for the
// transformer workload's feed-forward layer a [1024, 512] pass. FusedMatMul takes the bias as an optional third
// input instead and starts each row of its result at the bias, the product added onto it (beta = 1: one write of
// the result, none read back; PyTorch's addmm does the same).
//
// - Y = Add(P, b) or Add(b, P), P = MatMul(A, B) or FusedMatMul(A, B) (without a bias), P read by nothing else and
//   not a graph output, A and B of rank >= 2 (MatMul of a 1-D operand means something else), b of static shape [N]
//   and P of static shape [..., N] with the same N (so that Y has P's shape: Add broadcasting b over the rows):
//   P becomes FusedMatMul(A, B, b) writing Y, with MatMul's transA = transB = 0 or FusedMatMul's own. The Add goes.
//
// Results differ from the unfused plan by the products' rounding only (the bias joins the sum first instead of
// last). CPU plans only, like transpose folding: the GPU executor finds each planned node in the model.
#ifndef TRAIND_ENGINE_RUNTIME_BIAS_FOLDING_H_
#define TRAIND_ENGINE_RUNTIME_BIAS_FOLDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

struct BiasFoldingGraph {
  // Static dims of every value with a stated shape (-1 for a symbolic or unknown dimension).
  absl::flat_hash_map<std::string, std::vector<int64_t>> dims;
  absl::flat_hash_set<std::string> outputs;  // graph outputs
};

// Rewrites `nodes` in place as above and returns how many Adds went. The FusedMatMuls it makes need the
// ai.traind.training domain imported by the caller.
int FoldBiasAddsIntoProducts(std::vector<onnx::NodeProto>& nodes, const BiasFoldingGraph& graph);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_BIAS_FOLDING_H_
