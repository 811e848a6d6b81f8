// Loss construction for the training graph: PyTorch 1.13's built-in losses (MSELoss, L1Loss, CrossEntropyLoss,
// BCEWithLogitsLoss) with reductions mean / sum / none, user loss graphs (an ONNX ModelProto with one scalar
// output), and weighted sums of them, appended to a forward model as ordinary ONNX nodes. Every node on the path
// from the model's outputs to the loss is an op with a gradient rule (engine/ops/op_list.inc), so the result
// differentiates with BuildGradientModel; the values checked against PyTorch autograd are in
// tests/golden/make_golden.py (loss cases) and tests/golden/loss_golden_test.cc.
#ifndef TRAIND_ENGINE_TRAINING_LOSS_H_
#define TRAIND_ENGINE_TRAINING_LOSS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

enum class LossKind {
  // torch.nn.MSELoss: (output - target)^2; the target has the output's type and shape.
  kMeanSquaredError,
  // torch.nn.CrossEntropyLoss over class logits [N, C] or [N, C, d1, ...] (static C) with int64 class ids
  // [N] or [N, d1, ...]. Element i: -class_weight[y_i] * log_softmax(output)_i[y_i], 0 where y_i == ignore_index;
  // mean = sum of elements / sum of class_weight[y_i] over non-ignored i (PyTorch's weighted mean; NaN when every
  // target is ignored, as in PyTorch). The graph alone cannot refuse ids outside [0, C) (OneHot semantics), so
  // AppendLoss records each target's class count in the model's metadata (kClassTargetMetadataPrefix) and Module
  // refuses such ids with kInvalidArgument before running, as PyTorch raises.
  kCrossEntropy,
  // torch.nn.L1Loss: |output - target|.
  kL1,
  // torch.nn.BCEWithLogitsLoss: weight * ((1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)), the numerically
  // stable form PyTorch uses (softplus computed as max(z, 0) + log1p(exp(-|z|))); t may be soft labels in [0, 1].
  kBinaryCrossEntropyWithLogits,
  // A user loss graph (LossTerm::graph), merged into the training graph.
  kOnnxGraph,
};

// How the per-element loss of a built-in kind becomes the term's scalar.
//   kMean, kSum: as PyTorch.
//   kNone: the per-element loss tensor becomes an extra graph output named LossTerm::per_element_output, and the
//     term's scalar (what training differentiates) is its sum: the gradient of
//     loss.backward(torch.ones_like(loss)) in PyTorch.
enum class Reduction { kMean, kSum, kNone };

const char* LossKindName(LossKind kind);     // "MSELoss", "CrossEntropyLoss", ...
const char* ReductionName(Reduction reduction);  // "mean", "sum", "none"

// A float constant of a loss, row-major with shape `dims` (empty dims: a scalar). No values: absent.
struct LossConstant {
  std::vector<int64_t> dims;
  std::vector<float> values;
  bool present() const { return !values.empty(); }
};

// One term of the loss: weight * reduction(loss(output, target)). Fields after `weight` are new in issue 4 and
// default to PyTorch's defaults, so {kind, output, target, weight} keeps its meaning (a constructor rather than
// aggregate initialisation, which -Wmissing-field-initializers would flag for every new field).
struct LossTerm {
  LossTerm() = default;
  LossTerm(LossKind kind, std::string output, std::string target, float weight = 1.0f)
      : kind(kind), output(std::move(output)), target(std::move(target)), weight(weight) {}

  LossKind kind = LossKind::kMeanSquaredError;
  std::string output;  // a graph output of the forward model (built-in kinds; empty for kOnnxGraph)
  std::string target;  // the new graph input holding the target (kOnnxGraph: optional, see `graph`)
  float weight = 1.0f;
  Reduction reduction = Reduction::kMean;  // built-in kinds only
  std::string per_element_output;          // kNone: the name of the per-element loss output (required)

  // kCrossEntropy.
  std::vector<float> class_weight;  // empty or [C]
  int64_t ignore_index = -100;
  // kBinaryCrossEntropyWithLogits.
  LossConstant bce_weight;          // broadcast (unidirectionally, numpy rules) to the output's shape
  std::vector<float> pos_weight;    // empty or [C], C the output's last dimension (or 1)

  // kOnnxGraph: a ModelProto whose single graph output is a floating-point scalar. Each graph input (other than
  // an initializer) is either a graph output of the forward model of that name (same element type; shapes must
  // agree where both are known) or a target: `target` (if not empty) and `extra_targets` name the inputs that
  // become new graph inputs of the training graph, typed as the loss graph declares them. Its ai.onnx opset is
  // converted to the model's by onnx's version converter (refused when that fails); other domains must be
  // imported by the model at the same version. Node, value and initializer names are prefixed so nothing
  // collides; initializers become Constant nodes (so they are never mistaken for parameters).
  onnx::ModelProto graph;
  std::vector<std::string> extra_targets;
};

// For every CrossEntropy target, AppendLoss adds the model metadata entry "<prefix><target>" =
// "<classes> <ignore_index>". The graph itself cannot refuse a class id outside [0, C) (OneHot gives it an
// all-zero row), so whoever feeds the model (Module) checks the ids against it.
inline constexpr const char* kClassTargetMetadataPrefix = "traind.class_target:";

// What AppendLoss added to the model.
struct AppendedLoss {
  std::string loss;                              // the scalar loss output
  std::vector<std::string> targets;              // new graph inputs, in term order (a shared target once)
  std::vector<std::string> per_element_outputs;  // graph outputs of kNone terms, in term order
};

// Appends sum_t weight_t * term_t to `model` (a forward model whose graph outputs the terms name). The targets
// become graph inputs (after the existing ones) and the graph outputs become: `loss_name`, the per-element
// outputs, then the model's own outputs. On error `model` is unchanged and the status is kInvalidArgument
// (a bad term or loss graph; the message names the term and what is wrong), kUnimplemented (a model opset below
// 13, loss graphs with subgraphs, functions or sparse initializers) or kResourceExhausted (loss graph limits).
absl::StatusOr<AppendedLoss> AppendLoss(onnx::ModelProto* model, const std::vector<LossTerm>& terms,
                                        const std::string& loss_name = "loss");

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_LOSS_H_
