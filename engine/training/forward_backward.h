// The forward/backward split of a training model without a loss (artifacts.h: "Without a loss"): the part Forward
// runs (the forward outputs, the BatchNormalization running statistics, and every value the backward pass reads)
// and the part Backward runs (the gradients of the inputs and parameters from the outputs' gradients), as two
// ordinary ONNX models. Module (module.h) compiles both; what passes from one to the other are "saved" values.
//
// A node of the training model belongs to the backward part exactly when it reads, directly or through other
// nodes, an output's gradient, a gradient-accumulation buffer or the lazy-reset flag; every other node runs in the
// forward part (gradient-rule nodes that read forward values only, such as a Shape, run there too and their
// results are saved). So a forward pass followed by a backward pass computes exactly what one run of the training
// model computes.
#ifndef TRAIND_ENGINE_TRAINING_FORWARD_BACKWARD_H_
#define TRAIND_ENGINE_TRAINING_FORWARD_BACKWARD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

struct ForwardBackwardSplit {
  // Inputs: the training model's own inputs but the outputs' gradients, then every parameter. Outputs: the forward
  // model's outputs, then the running-statistic outputs, then `computed_saved`.
  onnx::ModelProto forward;
  // Inputs: `saved` (in order), the outputs' gradients, every parameter, the gradient buffers, the lazy-reset
  // flag. Outputs: the inputs' gradients, then the accumulated gradients.
  onnx::ModelProto backward;
  // What the backward part reads from the forward pass: caller inputs (kept as given) and values the forward part
  // computes (`computed_saved`, a subsequence of `saved`).
  std::vector<std::string> saved;
  std::vector<std::string> computed_saved;
};

// `training_model` follows the contract of artifacts without a loss (validated); `parameters` are the checkpoint's
// parameter names. Both parts pass the model loader's checks.
absl::StatusOr<ForwardBackwardSplit> SplitForwardBackward(const onnx::ModelProto& training_model,
                                                          const std::vector<std::string>& parameters);

// `model` keeping only the graph outputs named in `outputs` (in the model's order) and the nodes and initializers
// they need. Graph inputs are kept when `keep_input` says so or when a kept node reads them.
onnx::ModelProto RestrictToOutputs(const onnx::ModelProto& model, const std::vector<std::string>& outputs,
                                   const std::vector<std::string>& keep_inputs);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_FORWARD_BACKWARD_H_
