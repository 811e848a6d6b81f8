// Elementwise fusion: a chain or tree of float32 elementwise nodes (each kernel's ElementwiseFloatFn) runs as one
// node that walks its output in chunks small enough for L1, applying every step to a chunk before the next chunk.
// The values inside the group never exist whole: no buffer, no pass over memory, no pool bytes for them. An
// exported GELU (Div, Erf, Add, Mul, Mul over a [batch, sequence, 3072] activation) becomes one pass instead of
// five, and its backward chain likewise.
//
// A group whose input is the sole use of a kernel's output 0 can go one step further: a kernel that takes an
// ElementwiseEpilogue (Kernel::TakeEpilogue) applies the group to its values as it writes them, so a
// BatchNormalization and the Relu after it (or its residual Add and Relu) write memory once.
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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/shape.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// The most operands one fused step takes (Compile fuses no kernel of a larger arity).
inline constexpr int kMaxFusedArity = 8;

// The steps of one fused group, evaluated over any range of positions.
class ElementwiseGroup {
 public:
  // One step: `fn` (owned by one of the kernels) over operands, each an input of the group (>= 0) or the value of
  // an earlier step (-1 - step index). The last step's value is the group's value.
  struct Step {
    const ElementwiseFloatFn* fn = nullptr;
    std::vector<int> operands;
  };

  // `input_is_scalar[i]`: input i is one element used for every position (else it has the group's shape).
  ElementwiseGroup(std::vector<std::unique_ptr<Kernel>> kernels, std::vector<Step> steps,
                   std::vector<bool> input_is_scalar);

  int num_inputs() const { return static_cast<int>(input_is_scalar_.size()); }
  bool input_is_scalar(int i) const { return input_is_scalar_[i]; }

  // out[0, n) = the group's value where input i is inputs[i][0, n) (a scalar input: inputs[i][0] everywhere).
  // Walks n in chunks that keep the steps' values in L1, held in `scratch` (the caller's, one per thread, reused).
  // `out` aliases no input.
  void Evaluate(const float* const* inputs, int64_t n, float* out, std::vector<float>& scratch) const;

 private:
  std::vector<std::unique_ptr<Kernel>> kernels_;  // the fused nodes' kernels: they own the steps' functions
  std::vector<Step> steps_;
  std::vector<bool> input_is_scalar_;
};

class FusedElementwiseKernel final : public Kernel {
 public:
  explicit FusedElementwiseKernel(ElementwiseGroup group) : group_(std::move(group)) {}

  absl::Status Compute(KernelContext& context) const override;

 private:
  ElementwiseGroup group_;
};

// A group applied by a kernel to its output 0 as it writes it (Kernel::TakeEpilogue). Group input `value_input` is
// the kernel's own value; the group's other inputs, in order, are the node's inputs from `first_input` on (the
// kernel's own inputs come first).
class ElementwiseEpilogue {
 public:
  ElementwiseEpilogue(ElementwiseGroup group, int value_input, int first_input)
      : group_(std::move(group)), value_input_(value_input), first_input_(first_input) {}

  // Run time, once per call: the other inputs' data, checked to be float32 and of `shape` (the kernel's output)
  // or one element, as at compile time. The entry of `value_input` stays null.
  absl::StatusOr<std::vector<const float*>> Bind(const KernelContext& context, const Shape& shape) const;

  // out[0, n) = the group's value at the output's positions [offset, offset + n), where the kernel's own values
  // there are values[0, n). `bound` from Bind; `scratch` as for ElementwiseGroup::Evaluate.
  void Apply(const std::vector<const float*>& bound, const float* values, int64_t offset, int64_t n, float* out,
             std::vector<float>& scratch) const;

 private:
  ElementwiseGroup group_;
  int value_input_;
  int first_input_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_FUSED_ELEMENTWISE_H_
