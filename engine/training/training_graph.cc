#include "engine/training/training_graph.h"

#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_builder.h"

namespace traind::engine {
namespace {

// Dropout gradients read the mask output; give every Dropout node one. (MaxPool's gradient finds its maxima again
// in X: an Indices output would only slow the forward MaxPool down.)
void ExposeGradientOutputs(onnx::GraphProto* graph) {
  for (auto& node : *graph->mutable_node()) {
    if (node.op_type() == "Dropout" && (node.output_size() < 2 || node.output(1).empty())) {
      const std::string name = absl::StrCat(node.output(0), "/mask");
      if (node.output_size() < 2) {
        node.add_output(name);
      } else {
        node.set_output(1, name);
      }
    }
  }
}

}  // namespace

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const onnx::ModelProto& forward, const TrainingGraphOptions& options) {
  const bool no_loss = options.loss.empty();
  if (no_loss && options.differentiated_outputs.empty()) return absl::InvalidArgumentError("no loss given");
  if (!no_loss && !options.differentiated_outputs.empty()) {
    return absl::InvalidArgumentError("give a loss or outputs to differentiate, not both");
  }
  onnx::ModelProto model = forward;
  onnx::GraphProto* graph = model.mutable_graph();

  // Which initializers train.
  std::set<std::string> frozen(options.frozen.begin(), options.frozen.end());
  for (const auto& node : graph->node()) {
    if (node.op_type() == "BatchNormalization") {
      for (int i = 3; i < node.input_size(); ++i) frozen.insert(node.input(i));
    }
  }
  TrainingGraph result;
  absl::flat_hash_map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& initializer : graph->initializer()) initializers[initializer.name()] = &initializer;
  if (options.trainable.empty()) {
    for (const auto& initializer : graph->initializer()) {
      if (IsFloatingPointType(initializer.data_type()) && frozen.count(initializer.name()) == 0) {
        result.trainable.push_back(initializer.name());
      }
    }
  } else {
    for (const std::string& name : options.trainable) {
      auto it = initializers.find(name);
      if (it == initializers.end() || !IsFloatingPointType(it->second->data_type())) {
        return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a floating-point initializer"));
      }
      if (frozen.count(name) > 0) return absl::InvalidArgumentError(absl::StrCat("'", name, "' is frozen"));
      result.trainable.push_back(name);
    }
  }
  if (result.trainable.empty()) return absl::InvalidArgumentError("nothing to train");

  // Trainable initializers become graph inputs.
  std::set<std::string> trainable(result.trainable.begin(), result.trainable.end());
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (const auto& initializer : graph->initializer()) {
    if (trainable.count(initializer.name()) == 0) {
      *kept.Add() = initializer;
      continue;
    }
    onnx::ValueInfoProto* input = graph->add_input();
    input->set_name(initializer.name());
    auto* type = input->mutable_type()->mutable_tensor_type();
    type->set_elem_type(initializer.data_type());
    auto* shape = type->mutable_shape();
    for (int64_t dim : initializer.dims()) shape->add_dim()->set_dim_value(dim);
  }
  graph->mutable_initializer()->Swap(&kept);
  ExposeGradientOutputs(graph);

  GradientGraphOptions gradient_options;
  gradient_options.parameters = result.trainable;
  if (no_loss) {
    // The outputs' gradients are inputs, of their outputs' declared types.
    result.loss.clear();
    for (const std::string& output : options.differentiated_outputs) {
      const onnx::ValueInfoProto* declared = nullptr;
      for (const auto& candidate : graph->output()) {
        if (candidate.name() == output) declared = &candidate;
      }
      if (declared == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("'", output, "' is not an output of the model"));
      }
      onnx::ValueInfoProto* gradient = graph->add_input();
      *gradient = *declared;
      gradient->set_name(GradientName(output));
      gradient_options.output_gradients.emplace_back(output, GradientName(output));
    }
    gradient_options.parameters.insert(gradient_options.parameters.end(), options.differentiated_inputs.begin(),
                                       options.differentiated_inputs.end());
  } else {
    // The loss: sum of weighted terms (engine/training/loss.h).
    absl::StatusOr<AppendedLoss> loss = AppendLoss(&model, options.loss, result.loss);
    if (!loss.ok()) return loss.status();
    result.targets = loss->targets;
    result.per_element_losses = loss->per_element_outputs;
    gradient_options.loss = result.loss;
  }
  absl::StatusOr<onnx::ModelProto> with_gradients = BuildGradientModel(model, gradient_options);
  if (!with_gradients.ok()) return with_gradients.status();
  result.model = std::move(*with_gradients);
  return result;
}

}  // namespace traind::engine
