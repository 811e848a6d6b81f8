// The training graph of GenerateArtifacts: a forward-only model becomes forward + loss + gradients, with the
// trainable parameters turned into graph inputs (fed from CheckpointState at run time).
#ifndef TRAIND_ENGINE_TRAINING_TRAINING_GRAPH_H_
#define TRAIND_ENGINE_TRAINING_TRAINING_GRAPH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/training/loss.h"  // LossTerm, LossKind, Reduction
#include "onnx/onnx_pb.h"

namespace traind::engine {

struct TrainingGraphOptions {
  // Initializers to train. Empty: every floating-point initializer that is neither in `frozen` nor a
  // BatchNormalization running statistic.
  std::vector<std::string> trainable;
  std::vector<std::string> frozen;
  std::vector<LossTerm> loss;  // sum of weight * term (engine/training/loss.h)
  // Without a loss (`loss` empty): the model's outputs listed here are differentiated instead, their gradients
  // coming in as new graph inputs GradientName(output) (vector-Jacobian products); and the graph inputs listed in
  // `differentiated_inputs` get gradient outputs GradientName(input) beside the parameters'.
  std::vector<std::string> differentiated_outputs;
  std::vector<std::string> differentiated_inputs;
};

struct TrainingGraph {
  onnx::ModelProto model;  // inputs: forward inputs, trainable parameters, targets; outputs: loss, the
                           // per-element losses of reduction-none terms, forward outputs, then one gradient per
                           // trainable parameter (GradientName(p))
  std::vector<std::string> trainable;
  std::string loss = "loss";  // empty without a loss
  std::vector<std::string> targets;             // the loss's target inputs, in term order
  std::vector<std::string> per_element_losses;  // LossTerm::per_element_output of reduction-none terms
};

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const onnx::ModelProto& forward, const TrainingGraphOptions& options);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_TRAINING_GRAPH_H_
