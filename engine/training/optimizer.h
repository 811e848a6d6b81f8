// Parameter updates with PyTorch 1.13's exact semantics (torch.optim.AdamW and torch.optim.SGD), applied in place
// to float32 parameters. Moments are named per parameter as in ONNX Runtime's checkpoints: "momentum0" (first
// moment / SGD momentum buffer) and "momentum1" (second moment).
#ifndef TRAIND_ENGINE_TRAINING_OPTIMIZER_H_
#define TRAIND_ENGINE_TRAINING_OPTIMIZER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/tensor.h"

namespace traind::engine {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  bool bias_correction = true;
};

struct SgdOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;
};

// One parameter to update: its data (written in place), its gradient, and its named optimizer state tensors
// (created zero-filled on the first step).
struct ParameterUpdate {
  Tensor* data;
  const Tensor* gradient;
  std::map<std::string, Tensor>* state;
};

// True when every gradient element is finite; a step must be skipped otherwise (nothing changes).
bool AllFinite(const std::vector<ParameterUpdate>& updates);

// `step` is the step number being taken, starting at 1 (AdamW's bias correction uses it).
absl::Status AdamWStep(const AdamWOptions& options, int64_t step, std::vector<ParameterUpdate>& updates);
absl::Status SgdStep(const SgdOptions& options, int64_t step, std::vector<ParameterUpdate>& updates);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_OPTIMIZER_H_
