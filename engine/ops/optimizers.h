// The contract of traind's fused AdamW and SGD (ai.traind.training), one place for both devices (optimizers.cc on the
// CPU, optimizers_gpu.cc on the GPU): attributes, the node's inputs and outputs, and what the tensors must be. ONNX's
// Adam / Momentum / Adagrad run on the CPU only.
#ifndef TRAIND_ENGINE_OPS_OPTIMIZERS_H_
#define TRAIND_ENGINE_OPS_OPTIMIZERS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"
#include "engine/training/optimizer.h"

namespace traind::engine {

// A fused optimizer node: inputs learning_rate, step, then per parameter the parameter, its gradient and `states`
// state tensors; outputs skipped, then per parameter the new parameter and states.
struct FusedAdamWAttributes {
  int parameters = 0;
  float max_grad_norm = 0.0f;  // 0: no clipping
  AdamWOptions options;        // lr comes from the input
};
absl::StatusOr<FusedAdamWAttributes> ParseFusedAdamWAttributes(const KernelInit& init);

struct FusedSgdAttributes {
  int parameters = 0;
  float max_grad_norm = 0.0f;
  SgdOptions options;
  int states() const { return options.momentum != 0.0f ? 1 : 0; }
};
absl::StatusOr<FusedSgdAttributes> ParseFusedSgdAttributes(const KernelInit& init);

// Every input of the node: learning_rate a float scalar, step an int64 scalar >= 1 (the step being taken), and the
// per-parameter tensors float32 (else kUnimplemented) of their parameter's shape. tensors[p] is {parameter, gradient,
// states...}.
struct FusedOptimizerInputs {
  float learning_rate = 0.0f;
  int64_t step = 0;
  std::vector<std::vector<const Tensor*>> tensors;
};
absl::StatusOr<FusedOptimizerInputs> CheckFusedOptimizerInputs(const char* op, absl::Span<const Tensor* const> inputs,
                                                               int parameters, int states);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_OPTIMIZERS_H_
