#include "engine/training/forward_backward.h"

#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/autodiff/gradient_builder.h"
#include "engine/training/artifacts.h"
#include "onnx/shape_inference/implementation.h"

namespace traind::engine {
namespace {

std::vector<std::string> MetadataLines(const onnx::ModelProto& model, const std::string& key) {
  for (const auto& entry : model.metadata_props()) {
    if (entry.key() == key) return absl::StrSplit(entry.value(), '\n', absl::SkipEmpty());
  }
  return {};
}

// Every value's declared or inferred type.
absl::flat_hash_map<std::string, onnx::ValueInfoProto> ValueInfos(const onnx::ModelProto& model) {
  onnx::ModelProto inferred = model;
  try {
    onnx::shape_inference::InferShapes(inferred);
  } catch (const std::exception&) {
    // The model passed the loader's strict inference; whatever is missing is reported by the caller.
  }
  absl::flat_hash_map<std::string, onnx::ValueInfoProto> infos;
  const onnx::GraphProto& graph = inferred.graph();
  for (const auto* list : {&graph.value_info(), &graph.input(), &graph.output()}) {
    for (const auto& info : *list) {
      if (info.has_type()) infos[info.name()] = info;
    }
  }
  return infos;
}

// A model over `nodes` of `source` (in their order) with these inputs and outputs, the initializers the nodes read,
// and `source`'s opsets and IR version.
onnx::ModelProto Part(const onnx::ModelProto& source, const std::string& name,
                      const std::vector<const onnx::NodeProto*>& nodes,
                      const std::vector<onnx::ValueInfoProto>& inputs,
                      const std::vector<onnx::ValueInfoProto>& outputs) {
  onnx::ModelProto model;
  model.set_ir_version(source.ir_version());
  model.set_producer_name(source.producer_name());
  *model.mutable_opset_import() = source.opset_import();
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name(name);
  absl::flat_hash_set<std::string> read;
  for (const onnx::NodeProto* node : nodes) {
    *graph->add_node() = *node;
    read.insert(node->input().begin(), node->input().end());
  }
  for (const auto& initializer : source.graph().initializer()) {
    if (read.contains(initializer.name())) *graph->add_initializer() = initializer;
  }
  for (const auto& input : inputs) *graph->add_input() = input;
  for (const auto& output : outputs) *graph->add_output() = output;
  return model;
}

}  // namespace

absl::StatusOr<ForwardBackwardSplit> SplitForwardBackward(const onnx::ModelProto& training_model,
                                                          const std::vector<std::string>& parameters) {
  const onnx::GraphProto& graph = training_model.graph();
  const std::vector<std::string> differentiated = MetadataLines(training_model, kDifferentiatedOutputsMetadata);
  const std::vector<std::string> input_gradients = MetadataLines(training_model, kInputGradientsMetadata);
  if (differentiated.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the training model has no '", kDifferentiatedOutputsMetadata,
                                                   "' metadata: it is not a model without a loss"));
  }
  const std::set<std::string> parameter_names(parameters.begin(), parameters.end());

  // Where every input goes.
  absl::flat_hash_set<std::string> backward_values;  // values computed from backward-only inputs
  std::vector<onnx::ValueInfoProto> caller_inputs, output_gradient_inputs, parameter_inputs, backward_only_inputs;
  absl::flat_hash_set<std::string> output_gradient_names;
  for (const std::string& output : differentiated) output_gradient_names.insert(GradientName(output));
  absl::flat_hash_set<std::string> graph_inputs;
  for (const auto& input : graph.input()) {
    graph_inputs.insert(input.name());
    if (parameter_names.count(input.name()) > 0) {
      parameter_inputs.push_back(input);
    } else if (output_gradient_names.contains(input.name())) {
      output_gradient_inputs.push_back(input);
      backward_values.insert(input.name());
    } else if (input.name() == kLazyResetGradName || absl::EndsWith(input.name(), GradientAccumulationBufferName(""))) {
      backward_only_inputs.push_back(input);
      backward_values.insert(input.name());
    } else {
      caller_inputs.push_back(input);
    }
  }
  if (output_gradient_inputs.size() != differentiated.size()) {
    return absl::InvalidArgumentError("the training model does not take the gradient of every differentiated output");
  }

  // Nodes (in topological order) by part.
  std::vector<const onnx::NodeProto*> forward_nodes, backward_nodes;
  absl::flat_hash_set<std::string> forward_computed;
  for (const auto& node : graph.node()) {
    bool backward = false;
    for (const auto& input : node.input()) backward |= backward_values.contains(input);
    if (backward) {
      backward_nodes.push_back(&node);
      backward_values.insert(node.output().begin(), node.output().end());
    } else {
      forward_nodes.push_back(&node);
      forward_computed.insert(node.output().begin(), node.output().end());
    }
  }

  // Saved: what backward nodes read of the forward pass (caller inputs and forward-computed values; parameters
  // come from the checkpoint state again, initializers travel with each part).
  absl::flat_hash_map<std::string, onnx::ValueInfoProto> infos = ValueInfos(training_model);
  ForwardBackwardSplit split;
  absl::flat_hash_set<std::string> saved;
  for (const onnx::NodeProto* node : backward_nodes) {
    for (const auto& input : node->input()) {
      if (input.empty() || backward_values.contains(input) || parameter_names.count(input) > 0) continue;
      if (!forward_computed.contains(input) && !graph_inputs.contains(input)) continue;  // an initializer
      if (!saved.insert(input).second) continue;
      split.saved.push_back(input);
      if (forward_computed.contains(input)) split.computed_saved.push_back(input);
    }
  }

  // Outputs of the training model, by part.
  std::vector<onnx::ValueInfoProto> forward_outputs, statistic_outputs, backward_outputs;
  for (const auto& output : graph.output()) {
    if (backward_values.contains(output.name())) {
      backward_outputs.push_back(output);
    } else if (absl::EndsWith(output.name(), RunningStatisticOutputName(""))) {
      statistic_outputs.push_back(output);
    } else {
      forward_outputs.push_back(output);
    }
  }
  if (backward_outputs.size() < input_gradients.size()) {
    return absl::InternalError("the training model's input gradients do not depend on the outputs' gradients");
  }

  auto info_of = [&infos](const std::string& name) -> absl::StatusOr<onnx::ValueInfoProto> {
    auto it = infos.find(name);
    if (it == infos.end() || !it->second.type().has_tensor_type()) {
      return absl::InternalError(absl::StrCat("no type is known for '", name, "', which the backward pass reads"));
    }
    return it->second;
  };
  std::vector<onnx::ValueInfoProto> forward_part_inputs = caller_inputs;
  forward_part_inputs.insert(forward_part_inputs.end(), parameter_inputs.begin(), parameter_inputs.end());
  std::vector<onnx::ValueInfoProto> forward_part_outputs = forward_outputs;
  forward_part_outputs.insert(forward_part_outputs.end(), statistic_outputs.begin(), statistic_outputs.end());
  absl::flat_hash_set<std::string> already_out;
  for (const auto& output : forward_part_outputs) already_out.insert(output.name());
  for (const std::string& name : split.computed_saved) {
    if (already_out.contains(name)) continue;
    absl::StatusOr<onnx::ValueInfoProto> info = info_of(name);
    if (!info.ok()) return info.status();
    forward_part_outputs.push_back(*info);
  }
  split.forward = Part(training_model, "forward_part", forward_nodes, forward_part_inputs, forward_part_outputs);

  std::vector<onnx::ValueInfoProto> backward_part_inputs;
  for (const std::string& name : split.saved) {
    absl::StatusOr<onnx::ValueInfoProto> info = info_of(name);
    if (!info.ok()) return info.status();
    backward_part_inputs.push_back(*info);
  }
  backward_part_inputs.insert(backward_part_inputs.end(), output_gradient_inputs.begin(),
                              output_gradient_inputs.end());
  backward_part_inputs.insert(backward_part_inputs.end(), parameter_inputs.begin(), parameter_inputs.end());
  backward_part_inputs.insert(backward_part_inputs.end(), backward_only_inputs.begin(), backward_only_inputs.end());
  split.backward = Part(training_model, "backward_part", backward_nodes, backward_part_inputs, backward_outputs);
  for (const auto& entry : training_model.metadata_props()) {
    if (entry.key() == kDifferentiatedOutputsMetadata || entry.key() == kInputGradientsMetadata) {
      *split.backward.add_metadata_props() = entry;
    }
  }
  return split;
}

onnx::ModelProto RestrictToOutputs(const onnx::ModelProto& model, const std::vector<std::string>& outputs,
                                   const std::vector<std::string>& keep_inputs) {
  const onnx::GraphProto& graph = model.graph();
  absl::flat_hash_set<std::string> needed(outputs.begin(), outputs.end());
  std::vector<bool> keep(graph.node_size(), false);
  for (int n = graph.node_size() - 1; n >= 0; --n) {
    const auto& node = graph.node(n);
    for (const auto& output : node.output()) keep[n] = keep[n] || needed.contains(output);
    if (keep[n]) needed.insert(node.input().begin(), node.input().end());
  }
  std::vector<const onnx::NodeProto*> nodes;
  for (int n = 0; n < graph.node_size(); ++n) {
    if (keep[n]) nodes.push_back(&graph.node(n));
  }
  const absl::flat_hash_set<std::string> kept_inputs(keep_inputs.begin(), keep_inputs.end());
  std::vector<onnx::ValueInfoProto> inputs, kept_outputs;
  for (const auto& input : graph.input()) {
    if (needed.contains(input.name()) || kept_inputs.contains(input.name())) inputs.push_back(input);
  }
  const absl::flat_hash_set<std::string> wanted(outputs.begin(), outputs.end());
  for (const auto& output : graph.output()) {
    if (wanted.contains(output.name())) kept_outputs.push_back(output);
  }
  onnx::ModelProto restricted = Part(model, graph.name(), nodes, inputs, kept_outputs);
  *restricted.mutable_metadata_props() = model.metadata_props();
  return restricted;
}

}  // namespace traind::engine
