// Device-neutral execution interface. The CPU executor is the first implementation; a CUDA
// executor will implement the same interface over the same Plan (with device kernels).
#ifndef TRAIND_ENGINE_RUNTIME_EXECUTOR_H_
#define TRAIND_ENGINE_RUNTIME_EXECUTOR_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/runtime/plan.h"

namespace traind::engine {

struct RunOptions {
  // Indices into plan.inputs whose buffers the caller donates to this run, for in-place updates (an optimizer
  // writing parameters and moments where they are). The executor may let a donated input's only reader (see
  // Plan::donation_targets) write its output into the input's buffer, and does so only when no other input of the
  // run shares that buffer; the output then shares the caller's buffer. Donating is permission, not a promise: an
  // executor may ignore it (the output is then a fresh tensor). Whoever else holds a donated buffer sees the
  // update; after a failed run a donated buffer holds its old value unless the failure came after the writing node
  // (kernels that take donations check everything before their first write).
  absl::Span<const int> donated_inputs;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // `inputs[i]` feeds plan.inputs[i]; returns one tensor per plan.outputs entry. Thread-safe.
  virtual absl::StatusOr<std::vector<Tensor>> Run(const Plan& plan,
                                                  absl::Span<const Tensor> inputs) const = 0;
  // The same with options; executors without in-place support ignore the donations.
  virtual absl::StatusOr<std::vector<Tensor>> RunWithOptions(const Plan& plan, absl::Span<const Tensor> inputs,
                                                             const RunOptions& options) const {
    (void)options;
    return Run(plan, inputs);
  }
  // After a run: makes `scalar` (a loss) readable on the host and says, per group of float tensors (batch
  // statistics, gradients), whether every element of the group is finite. The default brings all of them to the
  // host; an executor whose values live on a device answers with one download and may replace `scalar` by a host
  // tensor of equal value.
  virtual absl::StatusOr<std::vector<bool>> SyncScalarCheckingFinite(
      Tensor& scalar, absl::Span<const std::vector<Tensor>> groups) const;
};

// Whether every element of a float tensor is finite (true for other dtypes); reads it on the host.
bool AllFinite(const Tensor& tensor);

// Checks one input against its declaration: dtype, rank and every static dim.
absl::Status CheckInputMatchesDeclaration(const GraphValue& declared, const Tensor& tensor);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_EXECUTOR_H_
