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

class Executor {
 public:
  virtual ~Executor() = default;
  // `inputs[i]` feeds plan.inputs[i]; returns one tensor per plan.outputs entry. Thread-safe.
  virtual absl::StatusOr<std::vector<Tensor>> Run(const Plan& plan,
                                                  absl::Span<const Tensor> inputs) const = 0;
};

// Checks one input against its declaration: dtype, rank and every static dim.
absl::Status CheckInputMatchesDeclaration(const GraphValue& declared, const Tensor& tensor);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_EXECUTOR_H_
