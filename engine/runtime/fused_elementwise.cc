#include "engine/runtime/fused_elementwise.h"

#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"

namespace traind::engine {
namespace {

// Elements per chunk: a step's chunk is 4 KB, so a group's live chunks stay in L1 / L2 while they are used.
constexpr int64_t kChunk = 1024;

// Input i of a fused computation, as a run finds it: float32, and either of `shape` or one element.
absl::StatusOr<const float*> CheckedInput(const KernelContext& context, int i, bool is_scalar, const Shape& shape,
                                          const char* what) {
  TRAIND_ASSIGN_OR_RETURN(const Tensor* input, context.RequiredInput(i));
  if (input->dtype() != DataType::kFloat32) return UnsupportedDtype(what, input->dtype());
  if (is_scalar ? input->num_elements() != 1 : input->shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": input ", i, " ", input->DebugString(), " must be ",
                                                   is_scalar ? "one element" : ShapeToString(shape)));
  }
  return input->data<float>();
}

}  // namespace

ElementwiseGroup::ElementwiseGroup(std::vector<std::unique_ptr<Kernel>> kernels, std::vector<Step> steps,
                                   std::vector<bool> input_is_scalar)
    : kernels_(std::move(kernels)), steps_(std::move(steps)), input_is_scalar_(std::move(input_is_scalar)) {}

void ElementwiseGroup::Evaluate(const float* const* inputs, int64_t n, float* out,
                                std::vector<float>& scratch) const {
  // One chunk per step except the last, which writes the output.
  const int64_t last = static_cast<int64_t>(steps_.size()) - 1;
  const size_t scratch_size = static_cast<size_t>(std::max<int64_t>(last, 1) * kChunk);
  if (scratch.size() < scratch_size) scratch.resize(scratch_size);
  const float* operands[kMaxFusedArity];
  bool broadcast[kMaxFusedArity];
  for (int64_t offset = 0; offset < n; offset += kChunk) {
    const int64_t length = std::min(kChunk, n - offset);
    for (int64_t s = 0; s <= last; ++s) {
      const Step& step = steps_[s];
      for (size_t k = 0; k < step.operands.size(); ++k) {
        const int operand = step.operands[k];
        if (operand >= 0) {
          broadcast[k] = input_is_scalar_[operand];
          operands[k] = broadcast[k] ? inputs[operand] : inputs[operand] + offset;
        } else {
          broadcast[k] = false;
          operands[k] = scratch.data() + (-1 - operand) * kChunk;
        }
      }
      float* target = s == last ? out + offset : scratch.data() + s * kChunk;
      step.fn->Apply(operands, broadcast, length, target);
    }
  }
}

absl::Status FusedElementwiseKernel::Compute(KernelContext& context) const {
  // The static shapes Compile fused by must hold at run time: the full inputs share one shape, the others are
  // single elements, all float32.
  const Tensor* full = nullptr;
  for (int i = 0; i < group_.num_inputs() && full == nullptr; ++i) {
    if (!group_.input_is_scalar(i)) {
      TRAIND_ASSIGN_OR_RETURN(full, context.RequiredInput(i));
    }
  }
  if (full == nullptr) return absl::InternalError("fused elementwise: no input of the output's shape");
  std::vector<const float*> inputs(static_cast<size_t>(group_.num_inputs()));
  for (int i = 0; i < group_.num_inputs(); ++i) {
    TRAIND_ASSIGN_OR_RETURN(inputs[i],
                            CheckedInput(context, i, group_.input_is_scalar(i), full->shape(), "fused elementwise"));
  }
  TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kFloat32, full->shape()));
  const int64_t n = full->num_elements();
  float* out = y->mutable_data<float>();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  context.threads().ParallelFor(
      chunks, std::max<int64_t>(1, kParallelElementThreshold / kChunk), [&](int64_t begin, int64_t end) {
        std::vector<float> scratch;
        absl::InlinedVector<const float*, kMaxFusedArity> at_offset(inputs.size());
        const int64_t offset = begin * kChunk;
        for (size_t i = 0; i < inputs.size(); ++i) {
          at_offset[i] = group_.input_is_scalar(static_cast<int>(i)) ? inputs[i] : inputs[i] + offset;
        }
        group_.Evaluate(at_offset.data(), std::min(n, end * kChunk) - offset, out + offset, scratch);
      });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<const float*>> ElementwiseEpilogue::Bind(const KernelContext& context,
                                                                    const Shape& shape) const {
  std::vector<const float*> bound(static_cast<size_t>(group_.num_inputs()), nullptr);
  for (int i = 0, node_input = first_input_; i < group_.num_inputs(); ++i) {
    if (i == value_input_) continue;
    TRAIND_ASSIGN_OR_RETURN(bound[i], CheckedInput(context, node_input++, group_.input_is_scalar(i), shape,
                                                   "fused elementwise epilogue"));
  }
  return bound;
}

void ElementwiseEpilogue::Apply(const std::vector<const float*>& bound, const float* values, int64_t offset,
                                int64_t n, float* out, std::vector<float>& scratch) const {
  absl::InlinedVector<const float*, kMaxFusedArity> at_offset(bound.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    const int input = static_cast<int>(i);
    at_offset[i] = input == value_input_ ? values : group_.input_is_scalar(input) ? bound[i] : bound[i] + offset;
  }
  group_.Evaluate(at_offset.data(), n, out, scratch);
}

}  // namespace traind::engine
