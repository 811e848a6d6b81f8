#include "engine/training/training_graph.h"

#include <algorithm>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_builder.h"

namespace traind::engine {
namespace {

onnx::NodeProto* AddNode(onnx::GraphProto* graph, const std::string& op, std::vector<std::string> inputs,
                         std::vector<std::string> outputs) {
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type(op);
  node->set_name(absl::StrCat("loss/", op, "_", outputs.front()));
  for (const auto& input : inputs) node->add_input(input);
  for (const auto& output : outputs) node->add_output(output);
  return node;
}

void SetInt(onnx::NodeProto* node, const char* name, int64_t value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

void AddConstant(onnx::GraphProto* graph, const std::string& name, int32_t type, std::vector<int64_t> dims,
                 const std::vector<double>& values) {
  onnx::TensorProto* tensor = graph->add_initializer();
  tensor->set_name(name);
  tensor->set_data_type(type);
  for (int64_t dim : dims) tensor->add_dims(dim);
  for (double value : values) {
    if (type == onnx::TensorProto::INT64) {
      tensor->add_int64_data(static_cast<int64_t>(value));
    } else if (type == onnx::TensorProto::DOUBLE) {
      tensor->add_double_data(value);
    } else {
      tensor->add_float_data(static_cast<float>(value));
    }
  }
}

const onnx::ValueInfoProto* FindOutput(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& output : graph.output()) {
    if (output.name() == name) return &output;
  }
  return nullptr;
}

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
  if (options.loss.empty()) return absl::InvalidArgumentError("no loss given");
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

  // The loss: sum of weighted terms.
  std::vector<std::string> weighted_terms;
  for (size_t t = 0; t < options.loss.size(); ++t) {
    const LossTerm& term = options.loss[t];
    const onnx::ValueInfoProto* output = FindOutput(*graph, term.output);
    if (output == nullptr) return absl::InvalidArgumentError(absl::StrCat("no model output '", term.output, "'"));
    const auto& tensor_type = output->type().tensor_type();
    const int32_t elem_type = tensor_type.elem_type();
    const std::string prefix = absl::StrCat("loss", t, "/");
    onnx::ValueInfoProto* target = graph->add_input();
    target->set_name(term.target);
    std::string value;
    if (term.kind == LossKind::kMeanSquaredError) {
      *target->mutable_type() = output->type();
      AddNode(graph, "Sub", {term.output, term.target}, {prefix + "diff"});
      AddNode(graph, "Mul", {prefix + "diff", prefix + "diff"}, {prefix + "squared"});
      SetInt(AddNode(graph, "ReduceMean", {prefix + "squared"}, {prefix + "mse"}), "keepdims", 0);
      value = prefix + "mse";
    } else {
      if (tensor_type.shape().dim_size() != 2 || !tensor_type.shape().dim(1).has_dim_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cross entropy needs logits [N, C] with a static C; '", term.output, "' is not"));
      }
      const int64_t classes = tensor_type.shape().dim(1).dim_value();
      auto* target_type = target->mutable_type()->mutable_tensor_type();
      target_type->set_elem_type(onnx::TensorProto::INT64);
      *target_type->mutable_shape()->add_dim() = tensor_type.shape().dim(0);
      // -mean_n sum_c onehot(target)_nc * log_softmax(logits)_nc
      AddConstant(graph, prefix + "depth", onnx::TensorProto::INT64, {}, {static_cast<double>(classes)});
      AddConstant(graph, prefix + "off_on", elem_type, {2}, {0.0, 1.0});
      AddConstant(graph, prefix + "class_axis", onnx::TensorProto::INT64, {1}, {1});
      AddNode(graph, "OneHot", {term.target, prefix + "depth", prefix + "off_on"}, {prefix + "onehot"});
      SetInt(AddNode(graph, "LogSoftmax", {term.output}, {prefix + "log_p"}), "axis", 1);
      AddNode(graph, "Mul", {prefix + "onehot", prefix + "log_p"}, {prefix + "picked"});
      SetInt(AddNode(graph, "ReduceSum", {prefix + "picked", prefix + "class_axis"}, {prefix + "log_likelihood"}),
             "keepdims", 0);
      SetInt(AddNode(graph, "ReduceMean", {prefix + "log_likelihood"}, {prefix + "mean"}), "keepdims", 0);
      AddNode(graph, "Neg", {prefix + "mean"}, {prefix + "ce"});
      value = prefix + "ce";
    }
    if (term.weight != 1.0f) {
      AddConstant(graph, prefix + "weight", elem_type, {}, {term.weight});
      AddNode(graph, "Mul", {value, prefix + "weight"}, {prefix + "weighted"});
      value = prefix + "weighted";
    }
    weighted_terms.push_back(value);
  }
  if (weighted_terms.size() == 1) {
    AddNode(graph, "Identity", {weighted_terms.front()}, {result.loss});
  } else {
    AddNode(graph, "Sum", weighted_terms, {result.loss});
  }
  onnx::ValueInfoProto* loss_output = graph->add_output();
  loss_output->set_name(result.loss);
  auto* loss_type = loss_output->mutable_type()->mutable_tensor_type();
  loss_type->set_elem_type(FindOutput(*graph, options.loss.front().output)->type().tensor_type().elem_type());
  loss_type->mutable_shape();
  // Loss first among the outputs.
  std::rotate(graph->mutable_output()->begin(), graph->mutable_output()->end() - 1, graph->mutable_output()->end());

  GradientGraphOptions gradient_options;
  gradient_options.loss = result.loss;
  gradient_options.parameters = result.trainable;
  absl::StatusOr<onnx::ModelProto> with_gradients = BuildGradientModel(model, gradient_options);
  if (!with_gradients.ok()) return with_gradients.status();
  result.model = std::move(*with_gradients);
  return result;
}

}  // namespace traind::engine
