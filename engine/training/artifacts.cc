#include "engine/training/artifacts.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/autodiff/gradient_builder.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/io/file_util.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/op_registry.h"
#include "onnx/shape_inference/implementation.h"

namespace traind::engine {

std::string GradientAccumulationBufferName(const std::string& parameter) {
  return parameter + "_grad.accumulation.buffer";
}
std::string GradientAccumulationOutputName(const std::string& parameter) {
  return parameter + "_grad.accumulation.out";
}
std::string RunningStatisticOutputName(const std::string& statistic) { return statistic + ".running_update"; }
std::string OptimizerStateName(const std::string& parameter, const std::string& state) {
  return parameter + "." + state;
}
std::string UpdatedName(const std::string& value) { return value + ".updated"; }

namespace {

// The bool constant `true` that switches Dropout (opset 12+) into training mode in the training model.
constexpr const char* kDropoutTrainingModeName = "traind.dropout.training_mode";

using TypeMap = absl::flat_hash_map<std::string, onnx::TypeProto>;

// ---- Reading the forward model ----

int OnnxOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return static_cast<int>(opset.version());
  }
  return 0;
}

int DomainOpset(const onnx::ModelProto& model, const std::string& domain) {
  for (const auto& opset : model.opset_import()) {
    const std::string name = opset.domain() == "ai.onnx" ? "" : opset.domain();
    if (name == (domain == "ai.onnx" ? "" : domain)) return static_cast<int>(opset.version());
  }
  return -1;
}

onnx::TypeProto TypeOfInitializer(const onnx::TensorProto& initializer) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(initializer.data_type());
  auto* shape = type.mutable_tensor_type()->mutable_shape();
  for (int64_t dim : initializer.dims()) shape->add_dim()->set_dim_value(dim);
  return type;
}

// Every typed value of the forward model (inputs, initializers, and what shape inference derives).
TypeMap InferTypes(const onnx::ModelProto& forward) {
  onnx::ModelProto inferred = forward;
  try {
    onnx::shape_inference::InferShapes(inferred);
  } catch (const std::exception&) {
    // Validated models infer; otherwise the declared types below are all there is.
  }
  TypeMap types;
  const onnx::GraphProto& graph = inferred.graph();
  for (const auto* infos : {&graph.input(), &graph.value_info(), &graph.output()}) {
    for (const auto& info : *infos) {
      if (info.has_type()) types[info.name()] = info.type();
    }
  }
  for (const auto& initializer : graph.initializer()) types[initializer.name()] = TypeOfInitializer(initializer);
  return types;
}

// Shape inference multiplies what a client declared: a few hundred bytes of model (ConstantOfShape of a huge
// constant, Concat doubling 40 times) infer values of astronomic sizes, whose dims may even have wrapped negative.
// Refused here, naming the limit, before any model is built from them (the generated models would carry them).
absl::Status CheckInferredSizes(const TypeMap& types) {
  // The loader's limit for a tensor: what the generated models must pass when they are loaded again.
  const int64_t limit = ModelLimits().max_tensor_elements;
  for (const auto& [name, type] : types) {
    if (!type.has_tensor_type() || !type.tensor_type().has_shape()) continue;
    int64_t elements = 1;
    for (const auto& dim : type.tensor_type().shape().dim()) {
      if (!dim.has_dim_value()) continue;
      if (dim.dim_value() < 0 || !CheckedMul(elements, dim.dim_value(), &elements) ||
          elements > limit) {
        return absl::ResourceExhaustedError(
            absl::StrCat("value '", name, "' would hold more than the limit of ", limit,
                         " elements (shape inference gives it a dim of ", dim.dim_value(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

bool IsBatchNormalization(const onnx::NodeProto& node) {
  return node.op_type() == "BatchNormalization" && (node.domain().empty() || node.domain() == "ai.onnx");
}
bool IsDropout(const onnx::NodeProto& node) {
  return node.op_type() == "Dropout" && (node.domain().empty() || node.domain() == "ai.onnx");
}

// What GenerateArtifacts needs to know about the forward model's parameters.
struct Parameters {
  std::vector<const onnx::TensorProto*> all;  // every floating-point initializer: checkpoint order
  std::vector<std::string> trainable;         // checkpoint order
  std::set<std::string> running_statistics;   // BatchNormalization inputs 3 and 4
};

absl::StatusOr<Parameters> ClassifyParameters(const onnx::ModelProto& forward, const ArtifactOptions& options) {
  Parameters parameters;
  const onnx::GraphProto& graph = forward.graph();
  for (const auto& node : graph.node()) {
    if (!IsBatchNormalization(node)) continue;
    for (int i = 3; i < node.input_size() && i < 5; ++i) parameters.running_statistics.insert(node.input(i));
  }
  absl::flat_hash_map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& initializer : graph.initializer()) {
    initializers[initializer.name()] = &initializer;
    if (IsFloatingPointType(initializer.data_type())) parameters.all.push_back(&initializer);
  }
  const std::set<std::string> frozen(options.frozen_params.begin(), options.frozen_params.end());
  for (const std::string& name : options.frozen_params) {
    auto it = initializers.find(name);
    if (it == initializers.end() || !IsFloatingPointType(it->second->data_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("frozen parameter '", name, "' is not a floating-point initializer of the model"));
    }
  }
  std::set<std::string> requested;
  for (const std::string& name : options.requires_grad) {
    auto it = initializers.find(name);
    if (it == initializers.end() || !IsFloatingPointType(it->second->data_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainable parameter '", name, "' is not a floating-point initializer of the model"));
    }
    if (frozen.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is both trainable and frozen"));
    }
    if (parameters.running_statistics.count(name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is a BatchNormalization running statistic, which cannot be trained"));
    }
    if (!requested.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("trainable parameter '", name, "' is listed twice"));
    }
  }
  for (const onnx::TensorProto* initializer : parameters.all) {
    const std::string& name = initializer->name();
    const bool trainable = options.requires_grad.empty()
                               ? frozen.count(name) == 0 && parameters.running_statistics.count(name) == 0
                               : requested.count(name) > 0;
    if (trainable) parameters.trainable.push_back(name);
  }
  if (parameters.trainable.empty()) return absl::InvalidArgumentError("nothing to train: no trainable parameter");
  return parameters;
}

// The model outputs a loss term reads: its output, or (loss graphs) the graph's inputs named after model outputs.
std::vector<std::string> LossTermInputs(const LossTerm& term, const onnx::ModelProto& forward) {
  if (term.kind != LossKind::kOnnxGraph) return {term.output};
  std::vector<std::string> inputs;
  for (const auto& input : term.graph.graph().input()) {
    for (const auto& output : forward.graph().output()) {
      if (output.name() == input.name()) inputs.push_back(input.name());
    }
  }
  return inputs;
}

bool IsFloatValue(const TypeMap& types, const std::string& name) {
  auto it = types.find(name);
  return it != types.end() && it->second.has_tensor_type() && IsFloatingPointType(it->second.tensor_type().elem_type());
}

// The forward model's inputs that are not initializers (IR < 4 models list initializers among the inputs).
std::vector<std::string> ForwardInputs(const onnx::GraphProto& forward) {
  absl::flat_hash_set<std::string> initializers;
  for (const auto& initializer : forward.initializer()) initializers.insert(initializer.name());
  std::vector<std::string> inputs;
  for (const auto& input : forward.input()) {
    if (!initializers.contains(input.name())) inputs.push_back(input.name());
  }
  return inputs;
}

// Artifacts without a loss: the outputs and inputs to differentiate, defaults resolved and everything checked.
absl::StatusOr<OutputGradientOptions> ResolveOutputGradients(const onnx::ModelProto& forward,
                                                             const OutputGradientOptions& requested,
                                                             const TypeMap& types) {
  const onnx::GraphProto& graph = forward.graph();
  const std::vector<std::string> inputs = ForwardInputs(graph);
  OutputGradientOptions resolved = requested;
  if (resolved.outputs.empty()) {
    for (const auto& output : graph.output()) {
      if (IsFloatValue(types, output.name())) resolved.outputs.push_back(output.name());
    }
    if (resolved.outputs.empty()) return absl::InvalidArgumentError("the model has no floating-point output");
  }
  std::set<std::string> seen;
  for (const std::string& name : resolved.outputs) {
    bool is_output = false;
    for (const auto& output : graph.output()) is_output |= output.name() == name;
    if (!is_output) return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an output of the model"));
    if (!IsFloatValue(types, name)) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "' is not floating-point: it has no gradient"));
    }
    if (std::count(inputs.begin(), inputs.end(), name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "' is also an input of the model"));
    }
    if (!seen.insert(name).second) return absl::InvalidArgumentError(absl::StrCat("output '", name, "' listed twice"));
  }
  if (requested.no_input_gradients && !requested.inputs.empty()) {
    return absl::InvalidArgumentError("input gradients both listed and turned off");
  }
  if (resolved.inputs.empty() && !resolved.no_input_gradients) {
    // Every floating-point input some differentiated output depends on (nodes are in topological order).
    absl::flat_hash_map<std::string, std::set<std::string>> reaching;  // value -> inputs it depends on
    for (const std::string& input : inputs) reaching[input] = {input};
    for (const auto& node : graph.node()) {
      std::set<std::string> upstream;
      for (const auto& input : node.input()) {
        if (auto it = reaching.find(input); it != reaching.end()) upstream.insert(it->second.begin(), it->second.end());
      }
      if (upstream.empty()) continue;
      for (const auto& output : node.output()) reaching[output].insert(upstream.begin(), upstream.end());
    }
    std::set<std::string> needed;
    for (const std::string& output : resolved.outputs) {
      if (auto it = reaching.find(output); it != reaching.end()) needed.insert(it->second.begin(), it->second.end());
    }
    for (const std::string& input : inputs) {
      if (needed.count(input) > 0 && IsFloatValue(types, input)) resolved.inputs.push_back(input);
    }
  }
  seen.clear();
  for (const std::string& name : resolved.inputs) {
    if (std::count(inputs.begin(), inputs.end(), name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an input of the model"));
    }
    if (!IsFloatValue(types, name)) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is not floating-point: it has no gradient"));
    }
    if (!seen.insert(name).second) return absl::InvalidArgumentError(absl::StrCat("input '", name, "' listed twice"));
  }
  // Inputs in the model's order, as the contract says.
  std::vector<std::string> ordered;
  for (const std::string& input : inputs) {
    if (seen.count(input) > 0) ordered.push_back(input);
  }
  resolved.inputs = std::move(ordered);
  return resolved;
}

absl::Status ValidateOptions(const onnx::ModelProto& forward, const ArtifactOptions& options, const TypeMap& types) {
  absl::flat_hash_set<std::string> values;
  for (const auto& input : forward.graph().input()) values.insert(input.name());
  for (const auto& initializer : forward.graph().initializer()) values.insert(initializer.name());
  for (const auto& node : forward.graph().node()) values.insert(node.output().begin(), node.output().end());
  if (options.output_gradients) {
    if (!options.loss.empty()) return absl::InvalidArgumentError("artifacts without a loss cannot have a loss");
    if (!options.additional_output_names.empty()) {
      return absl::InvalidArgumentError(
          "artifacts without a loss return every output of the model: additional_output_names does not apply");
    }
    std::vector<std::string> added;
    for (const std::string& name : options.output_gradients->outputs) added.push_back(GradientName(name));
    for (const std::string& name : options.output_gradients->inputs) added.push_back(GradientName(name));
    for (const std::string& name : added) {
      if (values.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the model already has a value named '", name, "', a name the artifacts reserve"));
      }
    }
  } else if (options.loss.empty()) {
    return absl::InvalidArgumentError("no loss given");
  }
  for (const LossTerm& term : options.loss) {
    if (term.kind == LossKind::kOnnxGraph) {
      if (LossTermInputs(term, forward).empty()) {
        return absl::InvalidArgumentError("the loss graph reads no output of the model (its inputs must be named after them)");
      }
      std::vector<std::string> targets = term.extra_targets;
      if (!term.target.empty()) targets.push_back(term.target);
      for (const std::string& target : targets) {
        if (values.contains(target)) {
          return absl::InvalidArgumentError(
              absl::StrCat("loss target name '", target, "' already names a value of the model"));
        }
      }
      continue;
    }
    bool is_output = false;
    for (const auto& output : forward.graph().output()) is_output |= output.name() == term.output;
    if (!is_output) {
      return absl::InvalidArgumentError(
          absl::StrCat("the loss reads '", term.output, "', which is not a model output"));
    }
    if (term.target.empty() || values.contains(term.target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss target name '", term.target, "' is empty or already names a value of the model"));
    }
  }
  // The names the artifacts add must be free.
  for (const std::string& reserved :
       {std::string(kLossName), std::string(kLazyResetGradName), std::string(kDropoutTrainingModeName)}) {
    if (values.contains(reserved)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model already has a value named '", reserved, "', a name the artifacts reserve"));
    }
  }
  for (const auto& initializer : forward.graph().initializer()) {
    for (const std::string& added :
         {GradientAccumulationBufferName(initializer.name()), GradientAccumulationOutputName(initializer.name()),
          RunningStatisticOutputName(initializer.name()), GradientName(initializer.name())}) {
      if (values.contains(added)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the model already has a value named '", added, "', a name the artifacts reserve"));
      }
    }
  }
  std::set<std::string> seen;
  for (const std::string& name : options.additional_output_names) {
    if (name.empty() || !values.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("additional output '", name, "' is not a value of the model"));
    }
    if (!types.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("additional output '", name, "' has no known type"));
    }
    if (!seen.insert(name).second || name == kLossName) {
      return absl::InvalidArgumentError(absl::StrCat("additional output '", name, "' is listed twice"));
    }
  }
  const OptimizerSpec& optimizer = options.optimizer;
  if (optimizer.kind == OptimizerKind::kSgd && optimizer.nesterov &&
      (optimizer.momentum <= 0.0f || optimizer.dampening != 0.0f)) {
    return absl::InvalidArgumentError("Nesterov momentum requires momentum > 0 and zero dampening");
  }
  if (!(optimizer.max_grad_norm >= 0.0f)) return absl::InvalidArgumentError("max_grad_norm must be >= 0");
  if (!(optimizer.penalty_alpha >= 0.0f) || !std::isfinite(optimizer.penalty_alpha)) {
    return absl::InvalidArgumentError("the penalty's alpha must be finite and >= 0");
  }
  if (!(optimizer.penalty_l1_ratio >= 0.0f && optimizer.penalty_l1_ratio <= 1.0f)) {
    return absl::InvalidArgumentError("the penalty's l1_ratio must lie in [0, 1]");
  }
  if (optimizer.penalty_alpha > 0.0f && optimizer.onnx_standard_op) {
    return absl::InvalidArgumentError("the elastic-net penalty is not available with ONNX's standard optimizer ops");
  }
  return absl::OkStatus();
}

// ---- Editing graphs ----

class GraphEditor {
 public:
  GraphEditor(onnx::GraphProto* graph, std::string prefix) : graph_(graph), prefix_(std::move(prefix)) {}

  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                        const std::string& domain = "") {
    onnx::NodeProto* node = graph_->add_node();
    node->set_op_type(op);
    node->set_domain(domain);
    node->set_name(absl::StrCat(prefix_, op, "_", outputs.front()));
    for (const auto& input : inputs) node->add_input(input);
    for (const auto& output : outputs) node->add_output(output);
    return node;
  }

  // A scalar initializer named prefix + name.
  std::string Scalar(const std::string& name, int32_t elem_type, double value) {
    onnx::TensorProto* tensor = graph_->add_initializer();
    tensor->set_name(prefix_ + name);
    tensor->set_data_type(elem_type);
    switch (elem_type) {
      case onnx::TensorProto::DOUBLE:
        tensor->add_double_data(value);
        break;
      case onnx::TensorProto::INT64:
        tensor->add_int64_data(static_cast<int64_t>(value));
        break;
      case onnx::TensorProto::BOOL:
        tensor->add_int32_data(value != 0 ? 1 : 0);
        break;
      default:
        tensor->add_float_data(static_cast<float>(value));
    }
    return tensor->name();
  }

  std::string Temp(const std::string& name) const { return prefix_ + name; }

 private:
  onnx::GraphProto* graph_;
  std::string prefix_;
};

void SetIntAttribute(onnx::NodeProto* node, const std::string& name, int64_t value) {
  for (auto& attribute : *node->mutable_attribute()) {
    if (attribute.name() == name) {
      attribute.set_type(onnx::AttributeProto::INT);
      attribute.set_i(value);
      return;
    }
  }
  auto* attribute = node->add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

void SetFloatAttribute(onnx::NodeProto* node, const std::string& name, float value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::FLOAT);
  attribute->set_f(value);
}

float FloatAttribute(const onnx::NodeProto& node, const std::string& name, float fallback) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return attribute.f();
  }
  return fallback;
}

onnx::ValueInfoProto MakeValueInfo(const std::string& name, const onnx::TypeProto& type) {
  onnx::ValueInfoProto info;
  info.set_name(name);
  *info.mutable_type() = type;
  return info;
}

onnx::TypeProto ScalarType(int32_t elem_type) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(elem_type);
  type.mutable_tensor_type()->mutable_shape();
  return type;
}

void ImportTraindDomain(onnx::ModelProto* model) {
  for (const auto& opset : model->opset_import()) {
    if (opset.domain() == kTraindTrainingDomain) return;
  }
  auto* opset = model->add_opset_import();
  opset->set_domain(kTraindTrainingDomain);
  opset->set_version(kTraindTrainingVersion);
}

// Initializers listed among the graph inputs (IR < 4 style) are constants of the model, not inputs.
void DropInitializerInputs(onnx::GraphProto* graph) {
  absl::flat_hash_set<std::string> initializers;
  for (const auto& initializer : graph->initializer()) initializers.insert(initializer.name());
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (const auto& input : graph->input()) {
    if (!initializers.contains(input.name())) *inputs.Add() = input;
  }
  graph->mutable_input()->Swap(&inputs);
}

void AddOutputs(onnx::GraphProto* graph, const std::vector<std::string>& names, const TypeMap& types) {
  absl::flat_hash_set<std::string> outputs;
  for (const auto& output : graph->output()) outputs.insert(output.name());
  for (const std::string& name : names) {
    if (!outputs.contains(name)) *graph->add_output() = MakeValueInfo(name, types.at(name));
  }
}

// One BatchNormalization's running statistics in the training model.
struct RunningStatisticUpdate {
  std::string statistic;  // the parameter (BatchNormalization input 3 or 4)
  std::string updated;    // the BatchNormalization output holding ONNX's update of it
  bool is_variance = false;
  std::string x;  // the normalised input (its element count per channel corrects the variance)
  float momentum = 0.9f;
};

// Training-mode forward: BatchNormalization with batch statistics and running-statistic outputs, Dropout on.
absl::StatusOr<std::vector<RunningStatisticUpdate>> SwitchToTrainingMode(onnx::ModelProto* model) {
  onnx::GraphProto* graph = model->mutable_graph();
  const int opset = OnnxOpset(*model);
  std::vector<RunningStatisticUpdate> updates;
  bool dropout_constant = false;
  for (int n = 0; n < graph->node_size(); ++n) {
    onnx::NodeProto* node = graph->mutable_node(n);
    if (IsBatchNormalization(*node)) {
      if (opset < 14) {
        return absl::UnimplementedError(absl::StrCat("training BatchNormalization node '", node->name(),
                                                     "' needs ai.onnx opset 14 or later; the model imports ", opset));
      }
      if (node->input_size() != 5) {
        return absl::InvalidArgumentError(
            absl::StrCat("BatchNormalization node '", node->name(), "' must have 5 inputs"));
      }
      SetIntAttribute(node, "training_mode", 1);
      while (node->output_size() < 3) node->add_output("");
      for (int i = 1; i < 3; ++i) {
        if (node->output(i).empty()) node->set_output(i, absl::StrCat(node->input(2 + i), ".batch_blend"));
        RunningStatisticUpdate update;
        update.statistic = node->input(2 + i);
        update.updated = node->output(i);
        update.is_variance = i == 2;
        update.x = node->input(0);
        update.momentum = FloatAttribute(*node, "momentum", 0.9f);
        updates.push_back(update);
      }
    } else if (IsDropout(*node)) {
      if (opset < 12) {
        return absl::UnimplementedError(absl::StrCat("Dropout node '", node->name(),
                                                     "' has no training mode before ai.onnx opset 12; the model "
                                                     "imports ",
                                                     opset));
      }
      while (node->input_size() < 3) node->add_input("");
      node->set_input(2, kDropoutTrainingModeName);
      dropout_constant = true;
    }
  }
  if (dropout_constant) GraphEditor(graph, "").Scalar(kDropoutTrainingModeName, onnx::TensorProto::BOOL, 1);
  std::set<std::string> seen;
  for (const auto& update : updates) {
    if (!seen.insert(update.statistic).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("running statistic '", update.statistic, "' is shared by several BatchNormalization nodes"));
    }
  }
  return updates;
}

// Eval-mode forward (PyTorch's model.eval()): BatchNormalization normalises with the running statistics and
// Dropout is the identity.
absl::Status SwitchToEvalMode(onnx::ModelProto* model) {
  onnx::GraphProto* graph = model->mutable_graph();
  absl::flat_hash_set<std::string> consumed;
  for (const auto& node : graph->node()) consumed.insert(node.input().begin(), node.input().end());
  for (const auto& output : graph->output()) consumed.insert(output.name());
  for (auto& node : *graph->mutable_node()) {
    if (IsBatchNormalization(node)) {
      for (int i = 1; i < node.output_size(); ++i) {
        if (!node.output(i).empty() && consumed.contains(node.output(i))) {
          return absl::InvalidArgumentError(absl::StrCat("BatchNormalization node '", node.name(),
                                                         "' exposes its running statistic '", node.output(i),
                                                         "', which has no value in evaluation mode"));
        }
      }
      if (node.output_size() > 1) node.mutable_output()->DeleteSubrange(1, node.output_size() - 1);
      auto* attributes = node.mutable_attribute();
      for (int a = attributes->size() - 1; a >= 0; --a) {
        if (attributes->Get(a).name() == "training_mode") attributes->DeleteSubrange(a, 1);
      }
    } else if (IsDropout(node) && node.input_size() > 2) {
      node.mutable_input()->DeleteSubrange(2, node.input_size() - 2);  // training_mode defaults to false
    }
  }
  return absl::OkStatus();
}

// Keeps only the nodes the given outputs need (the eval model drops the backward graph).
void PruneTo(onnx::GraphProto* graph, const std::vector<std::string>& outputs) {
  absl::flat_hash_set<std::string> needed(outputs.begin(), outputs.end());
  std::vector<bool> keep(graph->node_size(), false);
  for (int n = graph->node_size() - 1; n >= 0; --n) {
    const auto& node = graph->node(n);
    for (const auto& output : node.output()) keep[n] = keep[n] || needed.contains(output);
    if (keep[n]) needed.insert(node.input().begin(), node.input().end());
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int n = 0; n < graph->node_size(); ++n) {
    if (keep[n]) *nodes.Add() = graph->node(n);
  }
  graph->mutable_node()->Swap(&nodes);
  google::protobuf::RepeatedPtrField<onnx::TensorProto> initializers;
  for (const auto& initializer : graph->initializer()) {
    if (needed.contains(initializer.name())) *initializers.Add() = initializer;
  }
  graph->mutable_initializer()->Swap(&initializers);
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> value_infos;
  for (const auto& info : graph->value_info()) {
    if (needed.contains(info.name())) *value_infos.Add() = info;
  }
  graph->mutable_value_info()->Swap(&value_infos);
}

// Rebuilds the input list in the contract's order: forward inputs, targets, every parameter (checkpoint order),
// then `extra`. Parameters that are still initializers (frozen ones, running statistics) become inputs.
absl::Status ArrangeInputs(onnx::GraphProto* graph, const onnx::GraphProto& forward,
                           const std::vector<std::string>& targets, const Parameters& parameters,
                           const std::vector<onnx::ValueInfoProto>& extra) {
  absl::flat_hash_map<std::string, onnx::ValueInfoProto> inputs;
  for (const auto& input : graph->input()) inputs[input.name()] = input;
  absl::flat_hash_set<std::string> parameter_names;
  for (const onnx::TensorProto* parameter : parameters.all) {
    parameter_names.insert(parameter->name());
    inputs[parameter->name()] = MakeValueInfo(parameter->name(), TypeOfInitializer(*parameter));
  }
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (const auto& initializer : graph->initializer()) {
    if (!parameter_names.contains(initializer.name())) *kept.Add() = initializer;
  }
  graph->mutable_initializer()->Swap(&kept);

  std::vector<std::string> order;
  absl::flat_hash_set<std::string> forward_initializers;
  for (const auto& initializer : forward.initializer()) forward_initializers.insert(initializer.name());
  for (const auto& input : forward.input()) {
    if (!forward_initializers.contains(input.name())) order.push_back(input.name());
  }
  order.insert(order.end(), targets.begin(), targets.end());
  for (const onnx::TensorProto* parameter : parameters.all) order.push_back(parameter->name());
  graph->clear_input();
  absl::flat_hash_set<std::string> placed;
  for (const std::string& name : order) {
    if (!placed.insert(name).second) continue;  // two loss terms may share a target
    auto it = inputs.find(name);
    if (it == inputs.end()) return absl::InternalError(absl::StrCat("input '", name, "' went missing"));
    *graph->add_input() = it->second;
  }
  for (const auto& info : extra) *graph->add_input() = info;
  return absl::OkStatus();
}

absl::StatusOr<onnx::ValueInfoProto> OutputInfo(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& output : graph.output()) {
    if (output.name() == name) return output;
  }
  return absl::InternalError(absl::StrCat("the training graph has no output '", name, "'"));
}

// The inputs between the forward inputs and the parameters: the loss's targets (a loss graph may declare none, or
// several: target, then extra_targets), or without a loss the gradients of the differentiated outputs.
std::vector<std::string> TargetInputs(const ArtifactOptions& options) {
  std::vector<std::string> targets;
  if (options.output_gradients) {
    for (const std::string& output : options.output_gradients->outputs) targets.push_back(GradientName(output));
    return targets;
  }
  for (const LossTerm& term : options.loss) {
    if (!term.target.empty()) targets.push_back(term.target);
    targets.insert(targets.end(), term.extra_targets.begin(), term.extra_targets.end());
  }
  return targets;
}

TrainingGraphOptions GraphOptions(const ArtifactOptions& options, const Parameters& parameters) {
  TrainingGraphOptions graph_options;
  graph_options.trainable = parameters.trainable;
  graph_options.frozen = options.frozen_params;
  graph_options.loss = options.loss;
  if (options.output_gradients) {
    graph_options.differentiated_outputs = options.output_gradients->outputs;
    graph_options.differentiated_inputs = options.output_gradients->inputs;
  }
  return graph_options;
}

void AddMetadata(onnx::ModelProto* model, const std::string& key, const std::vector<std::string>& lines) {
  auto* entry = model->add_metadata_props();
  entry->set_key(key);
  entry->set_value(absl::StrJoin(lines, "\n"));
}

// running_var as PyTorch leaves it: ONNX blends the biased batch variance (sum / n), PyTorch the unbiased one
// (sum / (n - 1)). With ONNX's r' = m r + (1 - m) v_biased, PyTorch's value is
//   r' + (1 - m) (v_unbiased - v_biased) = r' + (r' - m r) / (n - 1),
// n being the element count per channel (Size(x) / Shape(x)[1], read at run time: the batch may be dynamic).
void EmitUnbiasedVariance(GraphEditor& editor, const RunningStatisticUpdate& update, int32_t elem_type,
                          const std::string& output) {
  const std::string size = editor.Temp("size");
  editor.Node("Size", {update.x}, {size});
  editor.Node("Shape", {update.x}, {editor.Temp("shape")});
  editor.Node("Gather", {editor.Temp("shape"), editor.Scalar("channel_axis", onnx::TensorProto::INT64, 1)},
              {editor.Temp("channels")});
  editor.Node("Div", {size, editor.Temp("channels")}, {editor.Temp("per_channel")});
  SetIntAttribute(editor.Node("Cast", {editor.Temp("per_channel")}, {editor.Temp("n")}), "to", elem_type);
  editor.Node("Sub", {editor.Temp("n"), editor.Scalar("one", elem_type, 1.0)}, {editor.Temp("n_minus_1")});
  editor.Node("Mul", {update.statistic, editor.Scalar("momentum", elem_type, update.momentum)}, {editor.Temp("kept")});
  editor.Node("Sub", {update.updated, editor.Temp("kept")}, {editor.Temp("blended_biased")});
  editor.Node("Div", {editor.Temp("blended_biased"), editor.Temp("n_minus_1")}, {editor.Temp("correction")});
  editor.Node("Add", {update.updated, editor.Temp("correction")}, {output});
}

absl::StatusOr<onnx::ModelProto> BuildTrainingModel(const onnx::ModelProto& forward, const ArtifactOptions& options,
                                                    const Parameters& parameters, const TypeMap& types) {
  onnx::ModelProto model = forward;
  DropInitializerInputs(model.mutable_graph());
  TRAIND_ASSIGN_OR_RETURN(std::vector<RunningStatisticUpdate> statistics, SwitchToTrainingMode(&model));
  AddOutputs(model.mutable_graph(), options.additional_output_names, types);
  TRAIND_ASSIGN_OR_RETURN(TrainingGraph training, BuildTrainingGraph(model, GraphOptions(options, parameters)));
  onnx::GraphProto* graph = training.model.mutable_graph();

  std::vector<onnx::ValueInfoProto> extra_inputs;
  for (const std::string& parameter : parameters.trainable) {
    extra_inputs.push_back(MakeValueInfo(GradientAccumulationBufferName(parameter), types.at(parameter)));
  }
  extra_inputs.push_back(MakeValueInfo(kLazyResetGradName, ScalarType(onnx::TensorProto::BOOL)));
  TRAIND_RETURN_IF_ERROR(ArrangeInputs(graph, forward.graph(), TargetInputs(options), parameters, extra_inputs));

  std::vector<onnx::ValueInfoProto> outputs;
  if (options.output_gradients) {
    // No loss: the forward outputs, then the inputs' gradients.
    for (const auto& output : forward.graph().output()) {
      TRAIND_ASSIGN_OR_RETURN(onnx::ValueInfoProto info, OutputInfo(*graph, output.name()));
      outputs.push_back(info);
    }
    for (const std::string& input : options.output_gradients->inputs) {
      TRAIND_ASSIGN_OR_RETURN(onnx::ValueInfoProto info, OutputInfo(*graph, GradientName(input)));
      outputs.push_back(info);
    }
    AddMetadata(&training.model, kDifferentiatedOutputsMetadata, options.output_gradients->outputs);
    AddMetadata(&training.model, kInputGradientsMetadata, options.output_gradients->inputs);
  } else {
    TRAIND_ASSIGN_OR_RETURN(onnx::ValueInfoProto loss, OutputInfo(*graph, training.loss));
    if (training.loss != kLossName) return absl::InternalError("the training graph's loss is not named 'loss'");
    outputs.push_back(loss);
    for (const std::string& name : options.additional_output_names) {
      TRAIND_ASSIGN_OR_RETURN(onnx::ValueInfoProto info, OutputInfo(*graph, name));
      outputs.push_back(info);
    }
  }
  GraphEditor accumulation(graph, "accumulate/");
  for (const std::string& parameter : parameters.trainable) {
    accumulation.Node("AccumulateGradient",
                      {GradientAccumulationBufferName(parameter), GradientName(parameter), kLazyResetGradName},
                      {GradientAccumulationOutputName(parameter)}, kTraindTrainingDomain);
    outputs.push_back(MakeValueInfo(GradientAccumulationOutputName(parameter), types.at(parameter)));
  }
  for (size_t s = 0; s < statistics.size(); ++s) {
    const RunningStatisticUpdate& update = statistics[s];
    const onnx::TypeProto& type = types.at(update.statistic);
    const std::string output = RunningStatisticOutputName(update.statistic);
    GraphEditor editor(graph, absl::StrCat("running_statistic", s, "/"));
    if (update.is_variance) {
      EmitUnbiasedVariance(editor, update, type.tensor_type().elem_type(), output);
    } else {
      editor.Node("Identity", {update.updated}, {output});
    }
    outputs.push_back(MakeValueInfo(output, type));
  }
  graph->clear_output();
  for (const auto& output : outputs) *graph->add_output() = output;
  ImportTraindDomain(&training.model);
  return std::move(training.model);
}

absl::StatusOr<onnx::ModelProto> BuildEvalModel(const onnx::ModelProto& forward, const ArtifactOptions& options,
                                                const Parameters& parameters, const TypeMap& types) {
  onnx::ModelProto model = forward;
  DropInitializerInputs(model.mutable_graph());
  TRAIND_RETURN_IF_ERROR(SwitchToEvalMode(&model));
  std::vector<std::string> forward_outputs;
  for (const auto& output : forward.graph().output()) forward_outputs.push_back(output.name());
  if (options.output_gradients) {
    // No loss: the forward model in eval mode, its parameters as inputs.
    TRAIND_RETURN_IF_ERROR(ArrangeInputs(model.mutable_graph(), forward.graph(), {}, parameters, {}));
    AddMetadata(&model, kForwardOutputsMetadata, forward_outputs);
    return model;
  }
  AddOutputs(model.mutable_graph(), options.additional_output_names, types);
  // The loss is built exactly as in the training model; the backward part is then pruned away.
  TRAIND_ASSIGN_OR_RETURN(TrainingGraph training, BuildTrainingGraph(model, GraphOptions(options, parameters)));
  onnx::GraphProto* graph = training.model.mutable_graph();
  std::vector<std::string> output_names = {training.loss};
  output_names.insert(output_names.end(), options.additional_output_names.begin(),
                      options.additional_output_names.end());
  std::vector<onnx::ValueInfoProto> outputs;
  for (const std::string& name : output_names) {
    TRAIND_ASSIGN_OR_RETURN(onnx::ValueInfoProto info, OutputInfo(*graph, name));
    outputs.push_back(info);
  }
  graph->clear_output();
  for (const auto& output : outputs) *graph->add_output() = output;
  PruneTo(graph, output_names);
  // Parameters are inputs whether or not the pruned graph reads them (the contract's fixed input list).
  TRAIND_RETURN_IF_ERROR(ArrangeInputs(graph, forward.graph(), TargetInputs(options), parameters, {}));
  AddMetadata(&training.model, kForwardOutputsMetadata, forward_outputs);
  return std::move(training.model);
}

onnx::ModelProto EmptyOptimizerModel(const onnx::ModelProto& forward) {
  onnx::ModelProto model;
  model.set_ir_version(std::max<int64_t>(forward.ir_version(), 7));
  model.set_producer_name("traind GenerateArtifacts");
  auto* onnx_opset = model.add_opset_import();
  onnx_opset->set_domain("");
  onnx_opset->set_version(std::max(OnnxOpset(forward), 14));
  model.mutable_graph()->set_name("optimizer");
  return model;
}

std::vector<std::string> OptimizerStates(const OptimizerSpec& spec) {
  if (spec.kind == OptimizerKind::kAdamW) return {"momentum0", "momentum1"};
  if (spec.momentum != 0.0f) return {"momentum0"};
  return {};
}

absl::Status CheckFloat32(const std::vector<std::string>& trainable, const TypeMap& types) {
  for (const std::string& parameter : trainable) {
    if (types.at(parameter).tensor_type().elem_type() != onnx::TensorProto::FLOAT) {
      return absl::UnimplementedError(
          absl::StrCat("the optimizers update float32 parameters only; '", parameter, "' is not float32"));
    }
  }
  return absl::OkStatus();
}

// The optimizer model with ONNX's own Adam / Momentum node (OptimizerSpec::onnx_standard_op). The global gradient
// norm, the clipping and the non-finite skip are standard ops: skipped = !(total - total == 0) with total the sum
// of squares (inf - inf and NaN - NaN are NaN), and every output is Where(skipped, old, new).
absl::StatusOr<onnx::ModelProto> BuildOnnxOptimizerModel(const onnx::ModelProto& forward, const OptimizerSpec& spec,
                                                         const Parameters& parameters, const TypeMap& types) {
  const bool adam = spec.kind == OptimizerKind::kAdamW;
  if (!adam && spec.momentum <= 0.0f) {
    return absl::InvalidArgumentError("ONNX's Momentum op needs momentum > 0");
  }
  if (adam && !spec.bias_correction) {
    return absl::InvalidArgumentError("ONNX's Adam op always bias-corrects (for steps > 0)");
  }
  onnx::ModelProto model = EmptyOptimizerModel(forward);
  auto* training_opset = model.add_opset_import();
  training_opset->set_domain(kOnnxPreviewTrainingDomain);
  training_opset->set_version(kOnnxPreviewTrainingVersion);
  onnx::GraphProto* graph = model.mutable_graph();
  GraphEditor editor(graph, "optimizer/");
  const std::vector<std::string> states = OptimizerStates(spec);
  *graph->add_input() = MakeValueInfo(kLearningRateName, ScalarType(onnx::TensorProto::FLOAT));
  *graph->add_input() = MakeValueInfo(kStepName, ScalarType(onnx::TensorProto::INT64));
  std::vector<std::string> squares;
  for (const std::string& parameter : parameters.trainable) {
    const onnx::TypeProto& type = types.at(parameter);
    *graph->add_input() = MakeValueInfo(parameter, type);
    *graph->add_input() = MakeValueInfo(GradientName(parameter), type);
    for (const std::string& state : states)
      *graph->add_input() = MakeValueInfo(OptimizerStateName(parameter, state), type);
    squares.push_back(editor.Temp(GradientName(parameter) + "/sum_of_squares"));
    SetIntAttribute(editor.Node("ReduceSumSquare", {GradientName(parameter)}, {squares.back()}), "keepdims", 0);
  }
  const std::string total = editor.Temp("sum_of_squares");
  editor.Node("Sum", squares, {total});
  editor.Node("Sub", {total, total}, {editor.Temp("zero_if_finite")});
  editor.Node("Equal", {editor.Temp("zero_if_finite"), editor.Scalar("zero", onnx::TensorProto::FLOAT, 0.0)},
              {editor.Temp("finite")});
  editor.Node("Not", {editor.Temp("finite")}, {kSkippedName});
  std::string gradient_scale;
  if (spec.max_grad_norm > 0.0f) {  // torch.nn.utils.clip_grad_norm_
    editor.Node("Sqrt", {total}, {editor.Temp("norm")});
    editor.Node("Add", {editor.Temp("norm"), editor.Scalar("norm_eps", onnx::TensorProto::FLOAT, 1e-6)},
                {editor.Temp("norm_plus_eps")});
    editor.Node("Div",
                {editor.Scalar("max_norm", onnx::TensorProto::FLOAT, spec.max_grad_norm), editor.Temp("norm_plus_eps")},
                {editor.Temp("clip")});
    gradient_scale = editor.Temp("clip_clamped");
    editor.Node("Min", {editor.Temp("clip"), editor.Scalar("one", onnx::TensorProto::FLOAT, 1.0)}, {gradient_scale});
  }
  std::string update_count = kStepName;
  if (!adam) {
    update_count = editor.Temp("update_count");
    editor.Node("Sub", {kStepName, editor.Scalar("one_step", onnx::TensorProto::INT64, 1)}, {update_count});
  }
  // ONNX's layout: R, T, X..., G..., then each state's tensors...; outputs X_new..., then each state's.
  std::vector<std::string> inputs = {kLearningRateName, update_count};
  std::vector<std::vector<std::string>> groups(2 + states.size());
  for (const std::string& parameter : parameters.trainable) {
    groups[0].push_back(parameter);
    std::string gradient = GradientName(parameter);
    if (!gradient_scale.empty()) {
      const std::string clipped = editor.Temp(gradient + "/clipped");
      editor.Node("Mul", {gradient, gradient_scale}, {clipped});
      gradient = clipped;
    }
    groups[1].push_back(gradient);
    for (size_t s = 0; s < states.size(); ++s) groups[2 + s].push_back(OptimizerStateName(parameter, states[s]));
  }
  for (const auto& group : groups) inputs.insert(inputs.end(), group.begin(), group.end());
  std::vector<std::string> old_values = groups[0];
  for (size_t s = 0; s < states.size(); ++s)
    old_values.insert(old_values.end(), groups[2 + s].begin(), groups[2 + s].end());
  std::vector<std::string> new_values;
  for (const std::string& value : old_values) new_values.push_back(editor.Temp(value + "/new"));
  onnx::NodeProto* node = editor.Node(adam ? "Adam" : "Momentum", inputs, new_values, kOnnxPreviewTrainingDomain);
  if (adam) {
    SetFloatAttribute(node, "alpha", spec.beta1);
    SetFloatAttribute(node, "beta", spec.beta2);
    SetFloatAttribute(node, "epsilon", spec.eps);
    SetFloatAttribute(node, "norm_coefficient", spec.weight_decay);
    SetFloatAttribute(node, "norm_coefficient_post", spec.onnx_norm_coefficient_post);
  } else {
    SetFloatAttribute(node, "alpha", spec.momentum);
    SetFloatAttribute(node, "beta", 1.0f - spec.dampening);
    SetFloatAttribute(node, "norm_coefficient", spec.weight_decay);
    auto* mode = node->add_attribute();
    mode->set_name("mode");
    mode->set_type(onnx::AttributeProto::STRING);
    mode->set_s(spec.nesterov ? "nesterov" : "standard");
  }
  for (size_t v = 0; v < old_values.size(); ++v) {
    editor.Node("Where", {kSkippedName, old_values[v], new_values[v]}, {UpdatedName(old_values[v])});
  }
  // Outputs in the contract's order: per parameter, p then its states; skipped last.
  for (const std::string& parameter : parameters.trainable) {
    *graph->add_output() = MakeValueInfo(UpdatedName(parameter), types.at(parameter));
    for (const std::string& state : states) {
      *graph->add_output() = MakeValueInfo(UpdatedName(OptimizerStateName(parameter, state)), types.at(parameter));
    }
  }
  *graph->add_output() = MakeValueInfo(kSkippedName, ScalarType(onnx::TensorProto::BOOL));
  return model;
}

// The elastic-net penalty's L2 part for one parameter: gradient + l2 * parameter (OptimizerSpec::penalty_alpha).
std::string PenalizedGradient(GraphEditor& editor, const std::string& parameter, float l2) {
  const std::string decay = editor.Temp("l2_term");
  editor.Node("Mul", {parameter, editor.Scalar("l2", onnx::TensorProto::FLOAT, l2)}, {decay});
  const std::string gradient = editor.Temp("gradient");
  editor.Node("Add", {GradientName(parameter), decay}, {gradient});
  return gradient;
}

// The L1 part after the optimizer's update `stepped` of `parameter`: scikit-learn's cumulative truncated gradient
// (OptimizerSpec::penalty_alpha). Writes UpdatedName of the parameter and of its two L1 states; a skipped step
// (`skipped`) changes none of them.
void TruncateL1(GraphEditor& editor, const std::string& parameter, const std::string& stepped, float l1) {
  const std::string total = OptimizerStateName(parameter, kL1TotalState);
  const std::string applied = OptimizerStateName(parameter, kL1AppliedState);
  const std::string zero = editor.Scalar("zero", onnx::TensorProto::FLOAT, 0.0);
  editor.Node("Mul", {kLearningRateName, editor.Scalar("l1", onnx::TensorProto::FLOAT, l1)}, {editor.Temp("l1_step")});
  editor.Node("Add", {total, editor.Temp("l1_step")}, {editor.Temp("u")});
  // w > 0: max(0, w - (u + q)); w < 0: min(0, w + (u - q)); w = 0 stays.
  editor.Node("Add", {editor.Temp("u"), applied}, {editor.Temp("u_plus_q")});
  editor.Node("Sub", {stepped, editor.Temp("u_plus_q")}, {editor.Temp("shrunk_down")});
  editor.Node("Max", {editor.Temp("shrunk_down"), zero}, {editor.Temp("positive")});
  editor.Node("Sub", {editor.Temp("u"), applied}, {editor.Temp("u_minus_q")});
  editor.Node("Add", {stepped, editor.Temp("u_minus_q")}, {editor.Temp("shrunk_up")});
  editor.Node("Min", {editor.Temp("shrunk_up"), zero}, {editor.Temp("negative")});
  editor.Node("Less", {stepped, zero}, {editor.Temp("is_negative")});
  editor.Node("Where", {editor.Temp("is_negative"), editor.Temp("negative"), stepped}, {editor.Temp("not_positive")});
  editor.Node("Greater", {stepped, zero}, {editor.Temp("is_positive")});
  editor.Node("Where", {editor.Temp("is_positive"), editor.Temp("positive"), editor.Temp("not_positive")},
              {editor.Temp("truncated")});
  editor.Node("Sub", {editor.Temp("truncated"), stepped}, {editor.Temp("change")});
  editor.Node("Add", {applied, editor.Temp("change")}, {editor.Temp("q")});
  editor.Node("Where", {kSkippedName, parameter, editor.Temp("truncated")}, {UpdatedName(parameter)});
  editor.Node("Where", {kSkippedName, total, editor.Temp("u")}, {UpdatedName(total)});
  editor.Node("Where", {kSkippedName, applied, editor.Temp("q")}, {UpdatedName(applied)});
}

std::vector<std::string> PenaltyStates(const OptimizerSpec& spec) {
  if (spec.penalty_alpha > 0.0f && spec.penalty_l1_ratio > 0.0f) return {kL1TotalState, kL1AppliedState};
  return {};
}

absl::StatusOr<onnx::ModelProto> BuildFusedOptimizerModel(const onnx::ModelProto& forward, const OptimizerSpec& spec,
                                                          const Parameters& parameters, const TypeMap& types) {
  onnx::ModelProto model;
  model = EmptyOptimizerModel(forward);
  ImportTraindDomain(&model);
  onnx::GraphProto* graph = model.mutable_graph();
  const std::vector<std::string> states = OptimizerStates(spec);
  const std::vector<std::string> penalty_states = PenaltyStates(spec);
  const float l2 = spec.penalty_alpha * (1.0f - spec.penalty_l1_ratio);
  const float l1 = spec.penalty_alpha * spec.penalty_l1_ratio;
  const std::set<std::string> penalized = spec.penalized.empty()
                                              ? std::set<std::string>(parameters.trainable.begin(),
                                                                      parameters.trainable.end())
                                              : std::set<std::string>(spec.penalized.begin(), spec.penalized.end());
  *graph->add_input() = MakeValueInfo(kLearningRateName, ScalarType(onnx::TensorProto::FLOAT));
  *graph->add_input() = MakeValueInfo(kStepName, ScalarType(onnx::TensorProto::INT64));
  GraphEditor editor(graph, "");
  // The optimizer node's inputs and outputs; the node itself comes after the L2 terms it reads.
  std::vector<std::string> node_inputs = {kLearningRateName, kStepName};
  std::vector<std::string> node_outputs = {kSkippedName};
  std::vector<std::pair<std::string, std::string>> truncations;  // (parameter, its stepped value)
  for (const std::string& parameter : parameters.trainable) {
    const onnx::TypeProto& type = types.at(parameter);
    const bool is_penalized = penalized.count(parameter) > 0;
    GraphEditor penalty(graph, absl::StrCat("penalty/", parameter, "/"));
    std::vector<std::string> declared = {parameter, GradientName(parameter)};
    std::vector<std::string> updated = {parameter};
    for (const std::string& state : states) {
      declared.push_back(OptimizerStateName(parameter, state));
      updated.push_back(OptimizerStateName(parameter, state));
    }
    for (const std::string& state : penalty_states) declared.push_back(OptimizerStateName(parameter, state));
    for (const std::string& input : declared) *graph->add_input() = MakeValueInfo(input, type);
    std::vector<std::string> inputs(declared.begin(), declared.begin() + 2 + states.size());
    if (is_penalized && l2 > 0.0f) inputs[1] = PenalizedGradient(penalty, parameter, l2);
    node_inputs.insert(node_inputs.end(), inputs.begin(), inputs.end());
    for (size_t v = 0; v < updated.size(); ++v) {
      // With L1 on this parameter, the optimizer's update is truncated afterwards.
      const bool truncated = v == 0 && is_penalized && !penalty_states.empty();
      const std::string output = truncated ? penalty.Temp("stepped") : UpdatedName(updated[v]);
      if (truncated) truncations.emplace_back(parameter, output);
      node_outputs.push_back(output);
    }
    for (const std::string& value : updated) *graph->add_output() = MakeValueInfo(UpdatedName(value), type);
    for (const std::string& state : penalty_states) {
      *graph->add_output() = MakeValueInfo(UpdatedName(OptimizerStateName(parameter, state)), type);
      if (!is_penalized) {
        editor.Node("Identity", {OptimizerStateName(parameter, state)},
                    {UpdatedName(OptimizerStateName(parameter, state))});
      }
    }
  }
  *graph->add_output() = MakeValueInfo(kSkippedName, ScalarType(onnx::TensorProto::BOOL));
  onnx::NodeProto* node = editor.Node(spec.kind == OptimizerKind::kAdamW ? "AdamW" : "SGD", node_inputs,
                                      node_outputs, kTraindTrainingDomain);
  node->set_name("optimizer");
  // After the optimizer node (ONNX needs nodes in topological order).
  for (const auto& [parameter, stepped] : truncations) {
    GraphEditor penalty(graph, absl::StrCat("penalty/", parameter, "/"));
    TruncateL1(penalty, parameter, stepped, l1);
  }
  SetFloatAttribute(node, "max_grad_norm", spec.max_grad_norm);
  SetFloatAttribute(node, "weight_decay", spec.weight_decay);
  if (spec.kind == OptimizerKind::kAdamW) {
    SetFloatAttribute(node, "beta1", spec.beta1);
    SetFloatAttribute(node, "beta2", spec.beta2);
    SetFloatAttribute(node, "epsilon", spec.eps);
    SetIntAttribute(node, "bias_correction", spec.bias_correction ? 1 : 0);
  } else {
    SetFloatAttribute(node, "momentum", spec.momentum);
    SetFloatAttribute(node, "dampening", spec.dampening);
    SetIntAttribute(node, "nesterov", spec.nesterov ? 1 : 0);
  }
  return model;
}

absl::StatusOr<onnx::ModelProto> BuildOptimizerModel(const onnx::ModelProto& forward, const OptimizerSpec& spec,
                                                     const Parameters& parameters, const TypeMap& types) {
  TRAIND_RETURN_IF_ERROR(CheckFloat32(parameters.trainable, types));
  if (spec.onnx_standard_op) return BuildOnnxOptimizerModel(forward, spec, parameters, types);
  return BuildFusedOptimizerModel(forward, spec, parameters, types);
}

void RecordInitialLearningRate(float learning_rate, onnx::ModelProto* optimizer_model) {
  auto* entry = optimizer_model->add_metadata_props();
  entry->set_key(kInitialLearningRateMetadata);
  entry->set_value(absl::StrFormat("%.9g", learning_rate));  // round-trips a float exactly
}

absl::StatusOr<CheckpointState> BuildCheckpoint(const Parameters& parameters) {
  const std::set<std::string> trainable(parameters.trainable.begin(), parameters.trainable.end());
  CheckpointState checkpoint;
  for (const onnx::TensorProto* initializer : parameters.all) {
    Parameter parameter;
    parameter.name = initializer->name();
    TRAIND_ASSIGN_OR_RETURN(parameter.data, TensorFromProto(*initializer));
    parameter.requires_grad = trainable.count(parameter.name) > 0;
    checkpoint.parameters.push_back(std::move(parameter));
  }
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(checkpoint, /*allow_shape_only=*/false));
  return checkpoint;
}

// ---- Gradient coverage ----

// Walks the forward graph backwards from the loss outputs the way BuildGradientModel does (only nodes between
// a trainable parameter and the loss, gradients stop at non-differentiable ops), but instead of stopping at the
// first op without a rule it records every one, and the trainable parameters each blocks, and carries on past
// it as if a rule existed.
// The forward values gradients start from: what the loss reads, or the differentiated outputs.
std::vector<std::string> GradientSeeds(const onnx::ModelProto& forward, const ArtifactOptions& options) {
  if (options.output_gradients) return options.output_gradients->outputs;
  std::vector<std::string> seeds;
  for (const LossTerm& term : options.loss) {
    for (const std::string& output : LossTermInputs(term, forward)) seeds.push_back(output);
  }
  return seeds;
}

GradientCoverageReport AnalyzeCoverage(const onnx::ModelProto& forward, const std::vector<std::string>& trainable,
                                       const std::vector<std::string>& seeds, const TypeMap& types) {
  const onnx::GraphProto& graph = forward.graph();
  const OpRegistry& registry = OpRegistry::Global();
  auto may_carry_gradient = [&types](const std::string& value) {
    auto it = types.find(value);
    if (it == types.end() || !it->second.has_tensor_type()) return true;
    const int32_t elem_type = it->second.tensor_type().elem_type();
    return elem_type == 0 || IsFloatingPointType(elem_type);
  };
  // Values that depend on a trainable parameter (nodes are in topological order).
  absl::flat_hash_set<std::string> requires_grad(trainable.begin(), trainable.end());
  for (const auto& node : graph.node()) {
    bool depends = false;
    for (const auto& input : node.input()) depends |= requires_grad.contains(input);
    if (!depends) continue;
    for (const auto& output : node.output()) {
      if (may_carry_gradient(output)) requires_grad.insert(output);
    }
  }
  absl::flat_hash_set<std::string> has_gradient;
  for (const std::string& output : seeds) {
    if (requires_grad.contains(output)) has_gradient.insert(output);
  }
  std::map<std::pair<std::string, std::string>, OpCoverage> ops;
  std::map<std::pair<std::string, std::string>, std::set<std::string>> blocked;
  for (int n = graph.node_size() - 1; n >= 0; --n) {
    const onnx::NodeProto& node = graph.node(n);
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    const auto key = std::make_pair(domain, node.op_type());
    const OpRegistration* registration = registry.Find(domain, node.op_type(), DomainOpset(forward, domain));
    OpCoverage& op = ops[key];
    op.domain = domain.empty() ? "ai.onnx" : domain;
    op.op_type = node.op_type();
    ++op.count;
    op.has_gradient = registration != nullptr && registration->gradient.state != GradientState::kNotYetWritten;
    bool receives = false;
    for (const auto& output : node.output()) receives |= has_gradient.contains(output);
    bool depends = false;
    for (const auto& input : node.input()) depends |= requires_grad.contains(input);
    if (!receives || !depends) continue;
    op.on_gradient_path = true;
    if (registration != nullptr && registration->gradient.state == GradientState::kNotDifferentiable) continue;
    if (!op.has_gradient) {
      // The trainable parameters upstream of this node.
      absl::flat_hash_set<std::string> upstream(node.input().begin(), node.input().end());
      for (int m = n - 1; m >= 0; --m) {
        bool produces = false;
        for (const auto& output : graph.node(m).output()) produces |= upstream.contains(output);
        if (produces) upstream.insert(graph.node(m).input().begin(), graph.node(m).input().end());
      }
      for (const std::string& parameter : trainable) {
        if (upstream.contains(parameter)) blocked[key].insert(parameter);
      }
    }
    for (const auto& input : node.input()) {
      if (!input.empty() && requires_grad.contains(input)) has_gradient.insert(input);
    }
  }
  GradientCoverageReport report;
  for (auto& [key, op] : ops) {
    const std::set<std::string>& parameters = blocked[key];
    // Checkpoint order, as everywhere else.
    for (const std::string& parameter : trainable) {
      if (parameters.count(parameter) > 0) op.blocked_parameters.push_back(parameter);
    }
    report.ops.push_back(op);
  }
  return report;
}

}  // namespace

bool GradientCoverageReport::complete() const {
  for (const OpCoverage& op : ops) {
    if (!op.blocked_parameters.empty()) return false;
  }
  return true;
}

std::string GradientCoverageReport::ToText() const {
  std::string text = absl::StrFormat("%-40s %6s  %-9s %-8s %s\n", "op", "nodes", "gradient", "on path", "blocks");
  for (const OpCoverage& op : ops) {
    absl::StrAppendFormat(&text, "%-40s %6d  %-9s %-8s %s\n", absl::StrCat(op.domain, "::", op.op_type), op.count,
                          op.has_gradient ? "yes" : "MISSING", op.on_gradient_path ? "yes" : "no",
                          absl::StrJoin(op.blocked_parameters, ", "));
  }
  return text;
}

namespace {

// The options with the defaults of artifacts without a loss filled in.
absl::StatusOr<ArtifactOptions> Resolve(const onnx::ModelProto& forward, const ArtifactOptions& options,
                                        const TypeMap& types) {
  ArtifactOptions resolved = options;
  if (options.output_gradients) {
    TRAIND_ASSIGN_OR_RETURN(resolved.output_gradients,
                            ResolveOutputGradients(forward, *options.output_gradients, types));
  }
  TRAIND_RETURN_IF_ERROR(ValidateOptions(forward, resolved, types));
  return resolved;
}

absl::Status CheckPenalized(const OptimizerSpec& spec, const Parameters& parameters) {
  for (const std::string& name : spec.penalized) {
    if (std::count(parameters.trainable.begin(), parameters.trainable.end(), name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("penalized parameter '", name, "' is not a trainable parameter"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GradientCoverageReport> AnalyzeGradientCoverage(const onnx::ModelProto& forward,
                                                               const ArtifactOptions& requested) {
  const TypeMap types = InferTypes(forward);
  TRAIND_ASSIGN_OR_RETURN(const ArtifactOptions options, Resolve(forward, requested, types));
  TRAIND_ASSIGN_OR_RETURN(Parameters parameters, ClassifyParameters(forward, options));
  return AnalyzeCoverage(forward, parameters.trainable, GradientSeeds(forward, options), types);
}

absl::StatusOr<Artifacts> GenerateArtifacts(const onnx::ModelProto& forward, const ArtifactOptions& requested) {
  const TypeMap types = InferTypes(forward);
  TRAIND_RETURN_IF_ERROR(CheckInferredSizes(types));
  TRAIND_ASSIGN_OR_RETURN(const ArtifactOptions options, Resolve(forward, requested, types));
  TRAIND_ASSIGN_OR_RETURN(Parameters parameters, ClassifyParameters(forward, options));
  TRAIND_RETURN_IF_ERROR(CheckPenalized(options.optimizer, parameters));
  Artifacts artifacts;
  artifacts.coverage = AnalyzeCoverage(forward, parameters.trainable, GradientSeeds(forward, options), types);
  if (!artifacts.coverage.complete()) {
    return absl::UnimplementedError(
        absl::StrCat("some trainable parameters get no gradient: ops on their path have no gradient rule\n",
                     artifacts.coverage.ToText()));
  }
  artifacts.trainable = parameters.trainable;
  TRAIND_ASSIGN_OR_RETURN(artifacts.training_model, BuildTrainingModel(forward, options, parameters, types));
  TRAIND_ASSIGN_OR_RETURN(artifacts.eval_model, BuildEvalModel(forward, options, parameters, types));
  TRAIND_ASSIGN_OR_RETURN(artifacts.optimizer_model,
                          BuildOptimizerModel(forward, options.optimizer, parameters, types));
  RecordInitialLearningRate(options.initial_learning_rate, &artifacts.optimizer_model);
  TRAIND_ASSIGN_OR_RETURN(artifacts.checkpoint, BuildCheckpoint(parameters));
  // The contract promises models the loader accepts; a failure here is a bug of this file, not of the input.
  for (const auto& [name, model] :
       {std::make_pair("training", &artifacts.training_model), std::make_pair("eval", &artifacts.eval_model),
        std::make_pair("optimizer", &artifacts.optimizer_model)}) {
    absl::StatusOr<onnx::ModelProto> loaded = LoadModelFromBytes(model->SerializeAsString());
    if (!loaded.ok()) {
      return absl::InternalError(
          absl::StrCat("the generated ", name, " model is invalid: ", loaded.status().message()));
    }
  }
  return artifacts;
}

absl::Status WriteArtifacts(const Artifacts& artifacts, const std::string& directory, const std::string& prefix) {
  const std::string base = absl::StrCat(directory, "/", prefix);
  // Serialize everything first: nothing is written unless every part can be.
  std::string training, eval, optimizer;
  if (!artifacts.training_model.SerializeToString(&training) || !artifacts.eval_model.SerializeToString(&eval) ||
      !artifacts.optimizer_model.SerializeToString(&optimizer)) {
    return absl::InvalidArgumentError("an artifact model cannot be serialized (over 2 GiB?)");
  }
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(artifacts.checkpoint, /*allow_shape_only=*/false));
  TRAIND_RETURN_IF_ERROR(WriteFileAtomically(base + "training_model.onnx", training));
  TRAIND_RETURN_IF_ERROR(WriteFileAtomically(base + "eval_model.onnx", eval));
  TRAIND_RETURN_IF_ERROR(WriteFileAtomically(base + "optimizer_model.onnx", optimizer));
  // Streamed: the parameters (possibly mapped from the forward model's external data) are never copied whole.
  return SaveCheckpoint(base + "checkpoint", artifacts.checkpoint);
}

}  // namespace traind::engine
