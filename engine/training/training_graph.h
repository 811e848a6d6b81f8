// The training graph of GenerateArtifacts: a forward-only model becomes forward + loss + gradients, with the
// trainable parameters turned into graph inputs (fed from CheckpointState at run time).
#ifndef TRAIND_ENGINE_TRAINING_TRAINING_GRAPH_H_
#define TRAIND_ENGINE_TRAINING_TRAINING_GRAPH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

enum class LossKind { kMeanSquaredError, kCrossEntropy };

// weight * loss(output, target), mean reduction. Cross entropy: output [N, C] logits, target [N] int64 classes.
struct LossTerm {
  LossKind kind = LossKind::kMeanSquaredError;
  std::string output;  // a graph output of the forward model
  std::string target;  // the name of the new graph input holding the target
  float weight = 1.0f;
};

struct TrainingGraphOptions {
  // Initializers to train. Empty: every floating-point initializer that is neither in `frozen` nor a
  // BatchNormalization running statistic.
  std::vector<std::string> trainable;
  std::vector<std::string> frozen;
  std::vector<LossTerm> loss;  // summed
};

struct TrainingGraph {
  onnx::ModelProto model;  // inputs: forward inputs, targets, trainable parameters; outputs: loss, forward
                           // outputs, then one gradient per trainable parameter (GradientName(p))
  std::vector<std::string> trainable;
  std::string loss = "loss";
};

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const onnx::ModelProto& forward, const TrainingGraphOptions& options);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_TRAINING_GRAPH_H_
