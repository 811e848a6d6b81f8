// Elementwise fusion: a chain or tree of float32 elementwise nodes (each kernel's ElementwiseFloatFn) runs as one
// node that walks its output in chunks small enough for L1, applying every step to a chunk before the next chunk.
// The values inside the group never exist whole: no buffer, no pass over memory, no pool bytes for them. An
// exported GELU (Div, Erf, Add, Mul, Mul over a [batch, sequence, 3072] activation) becomes one pass instead of
// five, and its backward chain likewise.
//
// Exactness: each step applies the node's own ElementwiseFloatFn, the loop its kernel runs, to the same float
// values in the same order, so fused and unfused plans give bitwise-equal results (runtime_test checks it).
//
// What fuses (Compile's FuseElementwise): nodes whose kernel offers elementwise_float(), whose output and inputs
// are float32 with static shapes, every input either of the output's exact shape or a single element (a scalar
// constant: 0.5, sqrt(2), 1), and which form a group where every value produced inside is read by exactly one
// node of the group and by nothing else (not a graph output). Only plans run by the CPU executor fuse
// (CompileOptions::fuse_elementwise): the GPU executor places nodes by op type.
#ifndef TRAIND_ENGINE_RUNTIME_FUSED_ELEMENTWISE_H_
#define TRAIND_ENGINE_RUNTIME_FUSED_ELEMENTWISE_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/kernel.h"

namespace traind::engine {

// The most operands one fused step takes (Compile fuses no kernel of a larger arity).
inline constexpr int kMaxFusedArity = 8;

class FusedElementwiseKernel final : public Kernel {
 public:
  // One step: `fn` (owned by one of `kernels`) over operands, each an input of the fused node (>= 0) or the value
  // of an earlier step (-1 - step index). The last step's value is the output.
  struct Step {
    const ElementwiseFloatFn* fn = nullptr;
    std::vector<int> operands;
  };

  // `input_is_scalar[i]`: input i is one element used for every position (else it has the output's shape).
  FusedElementwiseKernel(std::vector<std::unique_ptr<Kernel>> kernels, std::vector<Step> steps,
                         std::vector<bool> input_is_scalar);

  absl::Status Compute(KernelContext& context) const override;

 private:
  std::vector<std::unique_ptr<Kernel>> kernels_;  // the fused nodes' kernels: they own the steps' functions
  std::vector<Step> steps_;
  std::vector<bool> input_is_scalar_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_FUSED_ELEMENTWISE_H_
