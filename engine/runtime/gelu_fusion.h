// Exact GELU as one node, on the node list the compiler plans (the model, its artifacts and its exports keep their
// nodes).
//
// Exporters write exact GELU as x * 0.5 * (1 + erf(x / sqrt(2))): Div (or Mul by 1 / sqrt(2)), Erf, Add, Mul, Mul.
// Elementwise fusion runs them chunk by chunk in one node, bit for bit the separate nodes, but each op is still a pass
// over the chunk and the Div a vdivps per 16 values (half of the chain's time). The gradient builder already
// differentiates the chain as one GeluGrad (engine/autodiff/gradient_builder.cc); its forward becomes one Gelu
// (ai.traind.training, activation_grad.cc): X * Phi(X), Phi as GeluGrad computes it (x / sqrt(2) as x * (1 /
// sqrt(2)): results differ from the chain by an ulp or so).
//
// - Y = Mul(Mul(a, b), c) in any nesting and operand order where {a, b, c} = {x, 0.5, 1 + erf(x / sqrt(2))}, the
//   1 + erf as Add(Erf(s), 1) or Add(1, Erf(s)), s = Div(x, sqrt(2)) or Mul(x, 1 / sqrt(2)) (either order), the
//   constants float32 scalars within 1e-6 of those values, x float32, every inner value read only by the next node
//   of the chain and not a graph output -> Y = Gelu(x). The chain's other nodes go.
//
// CPU plans only, like the other node-list passes.
#ifndef TRAIND_ENGINE_RUNTIME_GELU_FUSION_H_
#define TRAIND_ENGINE_RUNTIME_GELU_FUSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/node_list.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Rewrites `nodes` in place as above and returns how many chains became one Gelu. The Gelu nodes need the
// ai.traind.training domain imported by the caller.
int FuseExactGelu(std::vector<onnx::NodeProto>& nodes, const GraphValueFacts& graph);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_GELU_FUSION_H_
