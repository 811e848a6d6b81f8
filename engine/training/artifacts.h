// GenerateArtifacts: a forward-only ONNX model becomes the four training artifacts of ONNX Runtime's
// `generate_artifacts` (training model, eval model, optimizer model, checkpoint) plus a gradient-coverage report.
//
// ---------------------------------------------------------------------------------------------------------
// The artifact contract (what Module and Optimizer in engine/training/module.h rely on). Names follow ONNX
// Runtime's conventions where it has one.
//
// Parameters: every floating-point initializer of the forward model is a checkpoint parameter, in the forward
// model's initializer order; requires_grad is true for the trainable ones (see ArtifactOptions). Integer
// initializers (shapes, indices) stay initializers of the models. BatchNormalization running statistics are
// frozen parameters.
//
// Training model
//   inputs:  the forward model's own inputs (in its order), then the loss targets (in loss-term order), then
//            every parameter (checkpoint order), then for every trainable parameter p (checkpoint order)
//            GradientAccumulationBufferName(p), then kLazyResetGradName (bool, shape []).
//   outputs: kLossName (scalar), then `additional_output_names`, then for every trainable p
//            GradientAccumulationOutputName(p) = (lazy_reset_grad ? 0 : buffer) + d(loss)/d(p),
//            then for every BatchNormalization running statistic s, RunningStatisticOutputName(s): the value
//            PyTorch's train-mode forward would leave in the buffer (momentum update), which Module writes
//            back into the parameter after a successful step.
//   BatchNormalization runs in training mode, Dropout with its ratio.
// Eval model
//   inputs:  forward inputs, targets, every parameter (checkpoint order).
//   outputs: kLossName, then `additional_output_names`.
//   BatchNormalization uses the running statistics and Dropout is the identity (PyTorch's model.eval()).
// Optimizer model
//   inputs:  kLearningRateName (float, []), kStepName (int64, [], the 1-based step being taken), then for every
//            trainable p: p, GradientName(p), then its state tensors OptimizerStateName(p, s) for each state s
//            of the optimizer (AdamW: "momentum0", "momentum1"; SGD with momentum: "momentum0").
//   outputs: UpdatedName(x) for every p and every state tensor x, in input order, then kSkippedName (bool,
//            []): true when a gradient was not finite, in which case every output equals its input.
//   One fused traind-domain node (kTraindTrainingDomain) with a registered ONNX schema, so the onnx checker and
//   strict shape inference pass. Its kernel follows PyTorch 1.13 exactly (see engine/training/optimizer.h),
//   including the optional global gradient-norm clipping of torch.nn.utils.clip_grad_norm_.
// Checkpoint: parameters with data (requires_grad set, no grads), optimizer state absent until the first
//   step; properties empty.
//
// Without a loss (ArtifactOptions::output_gradients set; the forward/backward style, in which the caller computes
// the loss or receives the gradients of the model's outputs from the layers after it):
// Training model ("vector-Jacobian product" model)
//   inputs:  the forward model's own inputs, then GradientName(o) for every differentiated output o (forward
//            output order; o's type and shape), then every parameter, the gradient buffers and kLazyResetGradName
//            as above.
//   outputs: the forward model's outputs (its order), then GradientName(x) for every differentiated input x
//            (forward input order), then the accumulated gradients and the running statistics as above. The
//            parameters' gradients are sum_o J_o(p)^T GradientName(o), the inputs' likewise.
//   metadata: kDifferentiatedOutputsMetadata and kInputGradientsMetadata list o and x, one per line.
//   Module splits it into a forward part (what Forward runs: outputs, running statistics, and the values the
//   backward part reads) and a backward part (engine/training/forward_backward.h).
// Eval model: inputs forward inputs, every parameter; outputs the forward outputs (model.eval() semantics).
// Optimizer model and checkpoint: as above.
// ---------------------------------------------------------------------------------------------------------
#ifndef TRAIND_ENGINE_TRAINING_ARTIFACTS_H_
#define TRAIND_ENGINE_TRAINING_ARTIFACTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/traind_schemas.h"  // kTraindTrainingDomain
#include "engine/training/checkpoint.h"
#include "engine/training/training_graph.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

inline constexpr const char* kLossName = "loss";
inline constexpr const char* kLazyResetGradName = "lazy_reset_grad";
inline constexpr const char* kLearningRateName = "learning_rate";
inline constexpr const char* kStepName = "step";
inline constexpr const char* kSkippedName = "skipped";
// Optimizer-model metadata: the learning rate of a fresh start (ArtifactOptions::initial_learning_rate).
inline constexpr const char* kInitialLearningRateMetadata = "traind.initial_learning_rate";
// Eval-model metadata: the forward model's outputs, one per line — what an inference model exports by default.
inline constexpr const char* kForwardOutputsMetadata = "traind.forward_outputs";
// Training-model metadata of artifacts without a loss: the differentiated outputs and inputs, one per line.
inline constexpr const char* kDifferentiatedOutputsMetadata = "traind.differentiated_outputs";
inline constexpr const char* kInputGradientsMetadata = "traind.input_gradients";

std::string GradientAccumulationBufferName(const std::string& parameter);  // "<p>_grad.accumulation.buffer"
std::string GradientAccumulationOutputName(const std::string& parameter);  // "<p>_grad.accumulation.out"
std::string RunningStatisticOutputName(const std::string& statistic);      // "<s>.running_update"
std::string OptimizerStateName(const std::string& parameter, const std::string& state);  // "<p>.<state>"
std::string UpdatedName(const std::string& value);                                        // "<value>.updated"

enum class OptimizerKind { kAdamW, kSgd };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  // AdamW (torch.optim.AdamW's defaults: betas, eps, weight_decay 1e-2, bias correction on).
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;  // SGD: set explicitly (its default is 0).
  bool bias_correction = true;
  // SGD.
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  // Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_, L2 norm over every gradient); 0: off.
  float max_grad_norm = 0.0f;
  // Emit ONNX's standard ai.onnx.preview.training op instead of the fused traind op (Adam for kAdamW, Momentum for
  // kSgd, which needs momentum > 0), for runtimes that know only standard ONNX. Same interface (inputs, outputs,
  // clipping and the non-finite skip, composed from standard ops around it), but ONNX's arithmetic, which differs
  // from PyTorch's (see engine/ops/optimizers.cc): Adam gets alpha = beta1, beta = beta2, epsilon = eps,
  // norm_coefficient = weight_decay (an L2 term added to the gradient, not AdamW's decoupled decay),
  // norm_coefficient_post = onnx_norm_coefficient_post and T = step (0 turns bias correction off, as ONNX
  // specifies); Momentum gets alpha = momentum, beta = 1 - dampening, norm_coefficient = weight_decay and
  // T = step - 1, which makes it torch.optim.SGD exactly.
  bool onnx_standard_op = false;
  float onnx_norm_coefficient_post = 0.0f;  // Adam only
  // scikit-learn's elastic-net penalty alpha * (l1_ratio * |w|_1 + (1 - l1_ratio) / 2 * |w|_2^2) on the
  // `penalized` parameters (empty: every trainable one), as its SGD applies it (sklearn/linear_model/_sgd_fast.pyx):
  // the L2 part is added to the gradient before the update (coupled L2; AdamW's weight_decay is the decoupled
  // kind), the L1 part is applied after the update by the cumulative truncated gradient of Tsuruoka, Tsujii and
  // Ananiadou (2009): with u the running sum of learning_rate * alpha * l1_ratio over the steps taken and q what L1
  // has taken from a weight so far, a positive weight becomes max(0, w - (u + q)), a negative one
  // min(0, w + (u - q)), and q grows by the change. With l1_ratio > 0 every trainable parameter gets the optimizer
  // states kL1TotalState (u, repeated per element) and kL1AppliedState (q); the unpenalized ones pass them through.
  // Composed from standard ONNX ops around the optimizer node; not with onnx_standard_op.
  float penalty_alpha = 0.0f;
  float penalty_l1_ratio = 0.0f;
  std::vector<std::string> penalized;
};

inline constexpr const char* kL1TotalState = "l1_total";
inline constexpr const char* kL1AppliedState = "l1_applied";

// Artifacts without a loss: which outputs the caller sends gradients for and which inputs get gradients back.
struct OutputGradientOptions {
  // Forward outputs to differentiate; empty: every floating-point output.
  std::vector<std::string> outputs;
  // Forward inputs whose gradients the training model returns; empty: every floating-point input that a
  // differentiated output depends on (unless no_input_gradients).
  std::vector<std::string> inputs;
  bool no_input_gradients = false;
};

struct ArtifactOptions {
  // Initializers to train; empty: every floating-point initializer neither frozen nor a BatchNormalization
  // running statistic. (Same meaning as TrainingGraphOptions.)
  std::vector<std::string> requires_grad;
  std::vector<std::string> frozen_params;
  std::vector<LossTerm> loss;  // summed
  // Set (with `loss` and `additional_output_names` empty): artifacts without a loss, as the contract above says.
  std::optional<OutputGradientOptions> output_gradients;
  OptimizerSpec optimizer;
  // Forward-model values to expose as extra outputs of the training and eval models (after the loss).
  std::vector<std::string> additional_output_names;
  // The learning rate training starts with: the optimizer model records it (kInitialLearningRateMetadata) and an
  // Optimizer over a checkpoint without optimizer state starts from it.
  float initial_learning_rate = 1e-3f;
};

// One op type of the forward model, for the coverage report.
struct OpCoverage {
  std::string domain;
  std::string op_type;
  int count = 0;                 // nodes of this type in the forward model
  bool has_gradient = false;     // a rule exists (or the op is declared not differentiable)
  bool on_gradient_path = false; // some node of this type lies between a trainable parameter and the loss
  std::vector<std::string> blocked_parameters;  // trainable parameters whose gradient needs a missing rule
};

struct GradientCoverageReport {
  std::vector<OpCoverage> ops;  // sorted by (domain, op_type)
  bool complete() const;        // no blocked parameter
  std::string ToText() const;   // human-readable table, one op per line
};

struct Artifacts {
  onnx::ModelProto training_model;
  onnx::ModelProto eval_model;
  onnx::ModelProto optimizer_model;
  CheckpointState checkpoint;
  GradientCoverageReport coverage;
  std::vector<std::string> trainable;  // checkpoint order
};

// kUnimplemented with the coverage report's text in the message when a trainable parameter is blocked by an
// op without a gradient rule; kInvalidArgument for bad options (unknown names, non-float parameters, ...).
// Every returned model passes the onnx checker and strict shape inference.
absl::StatusOr<Artifacts> GenerateArtifacts(const onnx::ModelProto& forward, const ArtifactOptions& options);

// The coverage report alone (never fails on missing rules; reports them).
absl::StatusOr<GradientCoverageReport> AnalyzeGradientCoverage(const onnx::ModelProto& forward,
                                                               const ArtifactOptions& options);

// Writes <dir>/<prefix>training_model.onnx, eval_model.onnx, optimizer_model.onnx and checkpoint, each
// atomically.
absl::Status WriteArtifacts(const Artifacts& artifacts, const std::string& directory, const std::string& prefix);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_ARTIFACTS_H_
