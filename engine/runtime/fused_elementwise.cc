#include "engine/runtime/fused_elementwise.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"

namespace traind::engine {
namespace {

// Elements per chunk: a step's chunk is 4 KB, so a group's live chunks stay in L1 / L2 while they are used.
constexpr int64_t kChunk = 1024;

}  // namespace

FusedElementwiseKernel::FusedElementwiseKernel(std::vector<std::unique_ptr<Kernel>> kernels, std::vector<Step> steps,
                                               std::vector<bool> input_is_scalar)
    : kernels_(std::move(kernels)), steps_(std::move(steps)), input_is_scalar_(std::move(input_is_scalar)) {}

absl::Status FusedElementwiseKernel::Compute(KernelContext& context) const {
  // The static shapes Compile fused by must hold at run time: the full inputs share one shape, the others are
  // single elements, all float32.
  const Tensor* full = nullptr;
  std::vector<const float*> inputs(input_is_scalar_.size());
  for (size_t i = 0; i < input_is_scalar_.size(); ++i) {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* input, context.RequiredInput(static_cast<int>(i)));
    if (input->dtype() != DataType::kFloat32) return UnsupportedDtype("fused elementwise", input->dtype());
    if (input_is_scalar_[i]) {
      if (input->num_elements() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("fused elementwise: input ", i, " ", input->DebugString(), " must be one element"));
      }
    } else if (full == nullptr) {
      full = input;
    } else if (input->shape() != full->shape()) {
      return absl::InvalidArgumentError(absl::StrCat("fused elementwise: input ", i, " ", input->DebugString(),
                                                     " differs from input ", full->DebugString()));
    }
    inputs[i] = input->data<float>();
  }
  if (full == nullptr) return absl::InternalError("fused elementwise: no input of the output's shape");
  TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, DataType::kFloat32, full->shape()));
  const int64_t n = full->num_elements();
  float* out = y->mutable_data<float>();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t last = static_cast<int64_t>(steps_.size()) - 1;
  context.threads().ParallelFor(
      chunks, std::max<int64_t>(1, kParallelElementThreshold / kChunk), [&](int64_t begin, int64_t end) {
        // One chunk per step except the last, which writes the output in place.
        std::vector<float> values(static_cast<size_t>(std::max<int64_t>(last, 1) * kChunk));
        const float* operands[kMaxFusedArity];
        bool broadcast[kMaxFusedArity];
        for (int64_t chunk = begin; chunk < end; ++chunk) {
          const int64_t offset = chunk * kChunk, length = std::min(kChunk, n - offset);
          for (int64_t s = 0; s <= last; ++s) {
            const Step& step = steps_[s];
            for (size_t k = 0; k < step.operands.size(); ++k) {
              const int operand = step.operands[k];
              if (operand >= 0) {
                broadcast[k] = input_is_scalar_[operand];
                operands[k] = broadcast[k] ? inputs[operand] : inputs[operand] + offset;
              } else {
                broadcast[k] = false;
                operands[k] = values.data() + (-1 - operand) * kChunk;
              }
            }
            float* target = s == last ? out + offset : values.data() + s * kChunk;
            step.fn->Apply(operands, broadcast, length, target);
          }
        }
      });
  return absl::OkStatus();
}

}  // namespace traind::engine
