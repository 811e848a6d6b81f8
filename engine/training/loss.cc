#include "engine/training/loss.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/autodiff/gradient_builder.h"  // IsFloatingPointType
#include "engine/model/model_loader.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

namespace traind::engine {
namespace {

// ReduceSum takes its axes as an input from opset 13 on, which is how the loss reduces over the class axis;
// BuildGradientModel needs 13 as well.
constexpr int kFirstLossOpset = 13;

bool IsOnnxDomain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// The model's ai.onnx opset; 0 when it imports none.
int64_t OnnxOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (IsOnnxDomain(opset.domain())) return opset.version();
  }
  return 0;
}

std::string ElemTypeName(int32_t elem_type) {
  return onnx::TensorProto_DataType_IsValid(elem_type)
             ? onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type))
             : absl::StrCat("element type ", elem_type);
}

// "FLOAT[4, N, 3]", "FLOAT (shape unknown)".
std::string TypeString(const onnx::TypeProto& type) {
  if (!type.has_tensor_type()) return "a non-tensor type";
  const auto& tensor = type.tensor_type();
  if (!tensor.has_shape()) return absl::StrCat(ElemTypeName(tensor.elem_type()), " (shape unknown)");
  std::vector<std::string> dims;
  for (const auto& dim : tensor.shape().dim()) {
    dims.push_back(dim.has_dim_value() ? absl::StrCat(dim.dim_value())
                                       : (dim.has_dim_param() ? dim.dim_param() : std::string("?")));
  }
  return absl::StrCat(ElemTypeName(tensor.elem_type()), "[", absl::StrJoin(dims, ", "), "]");
}

// Same element type; where both shapes are known, the same rank and equal static dims.
bool TypesCompatible(const onnx::TypeProto& a, const onnx::TypeProto& b) {
  if (!a.has_tensor_type() || !b.has_tensor_type()) return false;
  if (a.tensor_type().elem_type() != b.tensor_type().elem_type()) return false;
  if (!a.tensor_type().has_shape() || !b.tensor_type().has_shape()) return true;
  const auto& a_shape = a.tensor_type().shape();
  const auto& b_shape = b.tensor_type().shape();
  if (a_shape.dim_size() != b_shape.dim_size()) return false;
  for (int d = 0; d < a_shape.dim_size(); ++d) {
    if (a_shape.dim(d).has_dim_value() && b_shape.dim(d).has_dim_value() &&
        a_shape.dim(d).dim_value() != b_shape.dim(d).dim_value()) {
      return false;
    }
  }
  return true;
}

bool HasSubgraph(const onnx::NodeProto& node) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.has_g() || attribute.graphs_size() > 0) return true;
  }
  return false;
}

class LossBuilder {
 public:
  LossBuilder(onnx::ModelProto* model, std::string loss_name)
      : model_(*model), graph_(*model->mutable_graph()), loss_name_(std::move(loss_name)) {}

  absl::StatusOr<AppendedLoss> Build(const std::vector<LossTerm>& terms) {
    if (terms.empty()) return absl::InvalidArgumentError("no loss term given");
    if (loss_name_.empty()) return absl::InvalidArgumentError("the loss output needs a name");
    model_opset_ = OnnxOpset(model_);
    if (model_opset_ < kFirstLossOpset) {
      return absl::UnimplementedError(
          absl::StrCat("training needs ai.onnx opset ", kFirstLossOpset, " or later; the model imports ", model_opset_));
    }
    for (const auto& output : graph_.output()) model_outputs_[output.name()] = output.type();
    CollectNames();
    if (names_.contains(loss_name_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the loss output '", loss_name_, "' would collide with a value of the model"));
    }
    for (size_t t = 0; t < terms.size(); ++t) {
      if (absl::Status status = CheckTermFields(terms[t], static_cast<int>(t)); !status.ok()) return status;
    }
    names_.insert(loss_name_);
    for (const LossTerm& term : terms) {
      for (const std::string& target : DeclaredTargets(term)) {
        if (per_element_names_.contains(target)) {
          return absl::InvalidArgumentError(absl::StrCat("'", target, "' is both a target and a per-element output"));
        }
        names_.insert(target);
      }
    }
    names_.insert(per_element_names_.begin(), per_element_names_.end());

    std::vector<std::string> term_values;
    int32_t loss_elem_type = 0;
    for (size_t t = 0; t < terms.size(); ++t) {
      const LossTerm& term = terms[t];
      label_ = absl::StrCat("loss term ", t, " (", LossKindName(term.kind),
                            term.output.empty() ? "" : absl::StrCat(" of '", term.output, "'"), ")");
      prefix_ = UniquePrefix(absl::StrCat("loss", t, "/"));
      absl::StatusOr<std::string> value =
          term.kind == LossKind::kOnnxGraph ? AddLossGraph(term) : AddBuiltInLoss(term);
      if (!value.ok()) return value.status();
      if (t == 0) loss_elem_type = term_elem_type_;
      if (term_elem_type_ != loss_elem_type) {
        return Invalid(absl::StrCat("its loss is ", ElemTypeName(term_elem_type_), " but term 0's is ",
                                    ElemTypeName(loss_elem_type), "; the terms of one loss share a type"));
      }
      std::string weighted = *value;
      if (term.weight != 1.0f) {
        weighted = Name("weighted");
        Emit("Mul", {*value, Constant("weight", term_elem_type_, {}, {term.weight})}, {weighted});
      }
      term_values.push_back(weighted);
    }
    Emit(term_values.size() == 1 ? "Identity" : "Sum", term_values, {loss_name_});

    // Outputs: the loss, the per-element losses, then the model's own outputs.
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> outputs;
    onnx::ValueInfoProto* loss_output = outputs.Add();
    loss_output->set_name(loss_name_);
    loss_output->mutable_type()->mutable_tensor_type()->set_elem_type(loss_elem_type);
    loss_output->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (auto& output : per_element_outputs_) *outputs.Add() = std::move(output);
    for (const auto& output : graph_.output()) *outputs.Add() = output;
    graph_.mutable_output()->Swap(&outputs);
    result_.loss = loss_name_;
    return result_;
  }

 private:
  void CollectNames() {
    for (const auto& input : graph_.input()) names_.insert(input.name());
    for (const auto& output : graph_.output()) names_.insert(output.name());
    for (const auto& info : graph_.value_info()) names_.insert(info.name());
    for (const auto& initializer : graph_.initializer()) names_.insert(initializer.name());
    for (const auto& node : graph_.node()) {
      names_.insert(node.name());
      names_.insert(node.input().begin(), node.input().end());
      names_.insert(node.output().begin(), node.output().end());
    }
    names_.erase("");
  }

  static std::vector<std::string> DeclaredTargets(const LossTerm& term) {
    std::vector<std::string> targets;
    if (!term.target.empty()) targets.push_back(term.target);
    targets.insert(targets.end(), term.extra_targets.begin(), term.extra_targets.end());
    return targets;
  }

  // Field checks that need no graph: mistakes here are configuration errors, caught before anything is built.
  absl::Status CheckTermFields(const LossTerm& term, int t) {
    label_ = absl::StrCat("loss term ", t, " (", LossKindName(term.kind), ")");
    const bool cross_entropy = term.kind == LossKind::kCrossEntropy;
    const bool bce = term.kind == LossKind::kBinaryCrossEntropyWithLogits;
    const bool user_graph = term.kind == LossKind::kOnnxGraph;
    if (!std::isfinite(term.weight)) return Invalid(absl::StrCat("weight ", term.weight, " is not finite"));
    if (!cross_entropy && (!term.class_weight.empty() || term.ignore_index != -100)) {
      return Invalid("class_weight and ignore_index apply to CrossEntropyLoss only");
    }
    if (!bce && (term.bce_weight.present() || !term.pos_weight.empty())) {
      return Invalid("bce_weight and pos_weight apply to BCEWithLogitsLoss only");
    }
    if (!user_graph && (term.graph.has_graph() || !term.extra_targets.empty())) {
      return Invalid("graph and extra_targets apply to kOnnxGraph terms only");
    }
    if (user_graph) {
      if (!term.output.empty()) {
        return Invalid("a loss graph names the model outputs it reads by its input names; leave `output` empty");
      }
      if (term.reduction != Reduction::kMean || !term.per_element_output.empty()) {
        return Invalid("a loss graph's output is already a scalar: leave reduction and per_element_output unset");
      }
    } else {
      if (term.output.empty()) return Invalid("no model output named");
      if (term.target.empty()) return Invalid("no target name given");
      if (term.reduction == Reduction::kNone && term.per_element_output.empty()) {
        return Invalid("reduction none needs per_element_output, the name of the per-element loss output");
      }
      if (term.reduction != Reduction::kNone && !term.per_element_output.empty()) {
        return Invalid("per_element_output applies to reduction none only");
      }
    }
    for (const std::string& target : DeclaredTargets(term)) {
      if (target.empty()) return Invalid("an extra target has no name");
      if (names_.contains(target)) {
        return Invalid(absl::StrCat("target '", target, "' would collide with a value of the model"));
      }
      if (target == loss_name_) return Invalid(absl::StrCat("target '", target, "' is the loss output's name"));
    }
    if (!term.per_element_output.empty()) {
      const std::string& name = term.per_element_output;
      if (names_.contains(name) || name == loss_name_ || per_element_names_.contains(name)) {
        return Invalid(absl::StrCat("per_element_output '", name, "' would collide with another value"));
      }
      per_element_names_.insert(name);
    }
    if (term.bce_weight.present()) {
      int64_t count = 1;
      for (int64_t dim : term.bce_weight.dims) {
        if (dim <= 0 || dim > (int64_t{1} << 31)) return Invalid(absl::StrCat("bce_weight has dim ", dim));
        count *= dim;
        if (count > (int64_t{1} << 31)) return Invalid("bce_weight is too large");
      }
      if (count != static_cast<int64_t>(term.bce_weight.values.size())) {
        return Invalid(absl::StrCat("bce_weight has ", term.bce_weight.values.size(), " values for dims [",
                                    absl::StrJoin(term.bce_weight.dims, ", "), "]"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Invalid(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(label_, ": ", message));
  }

  // A prefix no existing name starts with, so the term's own names cannot collide.
  std::string UniquePrefix(const std::string& base) const {
    std::string prefix = base;
    for (int attempt = 1;; ++attempt) {
      bool clash = false;
      for (const std::string& name : names_) {
        if (absl::StartsWith(name, prefix)) {
          clash = true;
          break;
        }
      }
      if (!clash) return prefix;
      prefix = absl::StrCat(base.substr(0, base.size() - 1), "_", attempt, "/");
    }
  }

  std::string Name(absl::string_view hint) const { return absl::StrCat(prefix_, hint); }

  onnx::NodeProto* Emit(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto* node = graph_.add_node();
    node->set_op_type(op);
    node->set_name(absl::StrCat(outputs.front(), "/", op));
    for (const auto& input : inputs) node->add_input(input);
    for (const auto& output : outputs) node->add_output(output);
    return node;
  }

  static void SetInt(onnx::NodeProto* node, const char* name, int64_t value) {
    onnx::AttributeProto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INT);
    attribute->set_i(value);
  }

  void EmitConstant(const std::string& name, onnx::TensorProto tensor) {
    tensor.set_name(name);
    onnx::NodeProto* node = Emit("Constant", {}, {name});
    onnx::AttributeProto* attribute = node->add_attribute();
    attribute->set_name("value");
    attribute->set_type(onnx::AttributeProto::TENSOR);
    *attribute->mutable_t() = std::move(tensor);
  }

  // A floating-point constant of `elem_type` (float and double directly, other types through a Cast). Constant
  // nodes rather than initializers: float initializers of a training graph read as parameters elsewhere.
  std::string Constant(absl::string_view hint, int32_t elem_type, const std::vector<int64_t>& dims,
                       const std::vector<double>& values) {
    const std::string name = Name(hint);
    onnx::TensorProto tensor;
    for (int64_t dim : dims) tensor.add_dims(dim);
    if (elem_type == onnx::TensorProto::DOUBLE) {
      tensor.set_data_type(onnx::TensorProto::DOUBLE);
      for (double value : values) tensor.add_double_data(value);
      EmitConstant(name, std::move(tensor));
      return name;
    }
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    for (double value : values) tensor.add_float_data(static_cast<float>(value));
    if (elem_type == onnx::TensorProto::FLOAT) {
      EmitConstant(name, std::move(tensor));
      return name;
    }
    EmitConstant(name + "_float", std::move(tensor));
    SetInt(Emit("Cast", {name + "_float"}, {name}), "to", elem_type);
    return name;
  }

  std::string Int64Constant(absl::string_view hint, const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& values) {
    const std::string name = Name(hint);
    onnx::TensorProto tensor;
    tensor.set_data_type(onnx::TensorProto::INT64);
    for (int64_t dim : dims) tensor.add_dims(dim);
    for (int64_t value : values) tensor.add_int64_data(value);
    EmitConstant(name, std::move(tensor));
    return name;
  }

  // Adds `name` as a graph input of `type`, or checks that an earlier term declared it compatibly.
  absl::Status DeclareTarget(const std::string& name, const onnx::TypeProto& type) {
    if (auto it = targets_.find(name); it != targets_.end()) {
      if (!TypesCompatible(it->second, type)) {
        return Invalid(absl::StrCat("target '", name, "' must be ", TypeString(type), " here but an earlier term ",
                                    "declared it ", TypeString(it->second)));
      }
      return absl::OkStatus();
    }
    targets_[name] = type;
    onnx::ValueInfoProto* input = graph_.add_input();
    input->set_name(name);
    *input->mutable_type() = type;
    result_.targets.push_back(name);
    return absl::OkStatus();
  }

  // ---- Built-in losses ----

  absl::StatusOr<std::string> AddBuiltInLoss(const LossTerm& term) {
    auto it = model_outputs_.find(term.output);
    if (it == model_outputs_.end()) {
      return Invalid(absl::StrCat("'", term.output, "' is not a graph output of the model"));
    }
    const onnx::TypeProto& type = it->second;
    if (!type.has_tensor_type() || !IsFloatingPointType(type.tensor_type().elem_type())) {
      return Invalid(absl::StrCat("the output must be a floating-point tensor; it is ", TypeString(type)));
    }
    term_elem_type_ = type.tensor_type().elem_type();
    onnx::TypeProto elements_type = type;  // the per-element loss's type
    std::string elements, value;
    switch (term.kind) {
      case LossKind::kMeanSquaredError:
      case LossKind::kL1: {
        if (absl::Status status = DeclareTarget(term.target, type); !status.ok()) return status;
        const std::string difference = Name("difference");
        Emit("Sub", {term.output, term.target}, {difference});
        elements = Name(term.kind == LossKind::kL1 ? "absolute_error" : "squared_error");
        if (term.kind == LossKind::kL1) {
          Emit("Abs", {difference}, {elements});
        } else {
          Emit("Mul", {difference, difference}, {elements});
        }
        break;
      }
      case LossKind::kBinaryCrossEntropyWithLogits: {
        absl::StatusOr<std::string> bce = AddBinaryCrossEntropyWithLogits(term, type);
        if (!bce.ok()) return bce.status();
        elements = *bce;
        break;
      }
      case LossKind::kCrossEntropy: {
        absl::StatusOr<std::pair<std::string, std::string>> ce = AddCrossEntropy(term, type, &elements_type);
        if (!ce.ok()) return ce.status();
        elements = ce->first;
        if (term.reduction == Reduction::kMean) {
          // PyTorch's weighted mean: sum(w_y * nll) / sum(w_y) over the targets not ignored.
          const std::string total = Name("total"), total_weight = Name("total_weight");
          SetInt(Emit("ReduceSum", {elements}, {total}), "keepdims", 0);
          SetInt(Emit("ReduceSum", {ce->second}, {total_weight}), "keepdims", 0);
          value = Name("mean");
          Emit("Div", {total, total_weight}, {value});
          return value;
        }
        break;
      }
      case LossKind::kOnnxGraph:
        return absl::InternalError("a loss graph is not a built-in loss");
    }
    value = Name(ReductionName(term.reduction));
    switch (term.reduction) {
      case Reduction::kMean:
        SetInt(Emit("ReduceMean", {elements}, {value}), "keepdims", 0);
        break;
      case Reduction::kSum:
        SetInt(Emit("ReduceSum", {elements}, {value}), "keepdims", 0);
        break;
      case Reduction::kNone: {
        Emit("Identity", {elements}, {term.per_element_output});
        onnx::ValueInfoProto output;
        output.set_name(term.per_element_output);
        *output.mutable_type() = elements_type;
        per_element_outputs_.push_back(std::move(output));
        result_.per_element_outputs.push_back(term.per_element_output);
        // Training differentiates the sum: loss.backward(torch.ones_like(loss)).
        value = Name("sum_of_elements");
        SetInt(Emit("ReduceSum", {elements}, {value}), "keepdims", 0);
        break;
      }
    }
    return value;
  }

  // (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), times weight: PyTorch's stable form (the Softplus kernel
  // computes max(z, 0) + log1p(exp(-|z|))). Returns the per-element loss.
  absl::StatusOr<std::string> AddBinaryCrossEntropyWithLogits(const LossTerm& term, const onnx::TypeProto& type) {
    const int32_t elem_type = type.tensor_type().elem_type();
    const bool has_shape = type.tensor_type().has_shape();
    const auto& shape = type.tensor_type().shape();
    if (!term.pos_weight.empty()) {
      if (has_shape && shape.dim_size() == 0) return Invalid("pos_weight needs an output of rank 1 or more");
      const int64_t classes = static_cast<int64_t>(term.pos_weight.size());
      if (has_shape && shape.dim(shape.dim_size() - 1).has_dim_value() && classes != 1 &&
          classes != shape.dim(shape.dim_size() - 1).dim_value()) {
        return Invalid(absl::StrCat("pos_weight has ", classes, " values; the output ", TypeString(type),
                                    " needs one per class of its last dimension"));
      }
    }
    if (term.bce_weight.present() && has_shape) {
      const std::vector<int64_t>& dims = term.bce_weight.dims;
      if (static_cast<int>(dims.size()) > shape.dim_size()) {
        return Invalid(absl::StrCat("bce_weight [", absl::StrJoin(dims, ", "), "] has a higher rank than the output ",
                                    TypeString(type)));
      }
      for (size_t i = 0; i < dims.size(); ++i) {
        const auto& dim = shape.dim(shape.dim_size() - static_cast<int>(dims.size()) + static_cast<int>(i));
        if (dims[i] != 1 && dim.has_dim_value() && dim.dim_value() != dims[i]) {
          return Invalid(absl::StrCat("bce_weight [", absl::StrJoin(dims, ", "), "] does not broadcast to the output ",
                                      TypeString(type)));
        }
      }
    }
    if (absl::Status status = DeclareTarget(term.target, type); !status.ok()) return status;
    const std::string one = Constant("one", elem_type, {}, {1.0});
    const std::string one_minus_target = Name("one_minus_target"), linear = Name("linear");
    Emit("Sub", {one, term.target}, {one_minus_target});
    Emit("Mul", {one_minus_target, term.output}, {linear});
    const std::string negated = Name("negated_logits"), softplus = Name("softplus");
    Emit("Neg", {term.output}, {negated});
    Emit("Softplus", {negated}, {softplus});
    std::string log_term = softplus;
    if (!term.pos_weight.empty()) {
      std::vector<double> minus_one;
      for (float w : term.pos_weight) minus_one.push_back(static_cast<double>(w) - 1.0);
      const std::string scaled_target = Name("scaled_target"), log_weight = Name("log_weight");
      Emit("Mul",
           {term.target,
            Constant("pos_weight_minus_one", elem_type, {static_cast<int64_t>(minus_one.size())}, minus_one)},
           {scaled_target});
      Emit("Add", {scaled_target, one}, {log_weight});
      log_term = Name("weighted_softplus");
      Emit("Mul", {log_weight, softplus}, {log_term});
    }
    std::string elements = Name("bce");
    Emit("Add", {linear, log_term}, {elements});
    if (term.bce_weight.present()) {
      std::vector<double> values(term.bce_weight.values.begin(), term.bce_weight.values.end());
      const std::string weighted = Name("weighted_bce");
      Emit("Mul", {elements, Constant("bce_weight", elem_type, term.bce_weight.dims, values)}, {weighted});
      elements = weighted;
    }
    return elements;
  }

  // Returns {per-element loss -w_y log_softmax(x)_y (0 where ignored), per-element weight w_y (0 where
  // ignored)}, both of shape [N, d1, ...]; sets the per-element type.
  absl::StatusOr<std::pair<std::string, std::string>> AddCrossEntropy(const LossTerm& term,
                                                                      const onnx::TypeProto& type,
                                                                      onnx::TypeProto* elements_type) {
    const int32_t elem_type = type.tensor_type().elem_type();
    const auto& shape = type.tensor_type().shape();
    if (!type.tensor_type().has_shape() || shape.dim_size() < 2 || !shape.dim(1).has_dim_value() ||
        shape.dim(1).dim_value() <= 0) {
      return Invalid(absl::StrCat("cross entropy needs logits [N, C] or [N, C, d1, ...] with a static C; '",
                                  term.output, "' is ", TypeString(type)));
    }
    const int64_t classes = shape.dim(1).dim_value();
    const int rank = shape.dim_size();
    if (!term.class_weight.empty() && static_cast<int64_t>(term.class_weight.size()) != classes) {
      return Invalid(absl::StrCat("class_weight has ", term.class_weight.size(), " values for ", classes, " classes"));
    }
    onnx::TypeProto target_type;
    target_type.mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
    auto* target_shape = target_type.mutable_tensor_type()->mutable_shape();
    for (int d = 0; d < rank; ++d) {
      if (d != 1) *target_shape->add_dim() = shape.dim(d);
    }
    if (absl::Status status = DeclareTarget(term.target, target_type); !status.ok()) return status;
    auto* class_target = model_.add_metadata_props();
    class_target->set_key(absl::StrCat(kClassTargetMetadataPrefix, term.target));
    class_target->set_value(absl::StrCat(classes, " ", term.ignore_index));
    *elements_type = target_type;
    elements_type->mutable_tensor_type()->set_elem_type(elem_type);

    // Targets: valid = (y != ignore_index); ignored ids become class 0 (then masked out) so OneHot never sees them.
    const std::string is_ignored = Name("is_ignored"), valid = Name("valid"), safe_target = Name("safe_target");
    Emit("Equal", {term.target, Int64Constant("ignore_index", {}, {term.ignore_index})}, {is_ignored});
    Emit("Not", {is_ignored}, {valid});
    Emit("Where", {valid, term.target, Int64Constant("class_zero", {}, {0})}, {safe_target});
    const std::string one_hot = Name("one_hot");
    SetInt(Emit("OneHot",
                {safe_target, Int64Constant("depth", {}, {classes}), Constant("off_on", elem_type, {2}, {0.0, 1.0})},
                {one_hot}),
           "axis", 1);
    const std::string class_axis = Int64Constant("class_axis", {1}, {1});
    std::string weighted_one_hot = one_hot;
    if (!term.class_weight.empty()) {
      std::vector<int64_t> weight_dims(rank, 1);
      weight_dims[1] = classes;
      weighted_one_hot = Name("weighted_one_hot");
      Emit("Mul",
           {one_hot, Constant("class_weight", elem_type, weight_dims,
                              std::vector<double>(term.class_weight.begin(), term.class_weight.end()))},
           {weighted_one_hot});
    }
    const std::string unmasked_weight = Name("unmasked_target_weight"), mask = Name("mask");
    const std::string target_weight = Name("target_weight");
    SetInt(Emit("ReduceSum", {weighted_one_hot, class_axis}, {unmasked_weight}), "keepdims", 0);
    SetInt(Emit("Cast", {valid}, {mask}), "to", elem_type);
    Emit("Mul", {unmasked_weight, mask}, {target_weight});

    // nll = -w_y * log_softmax(x)_y.
    const std::string log_probabilities = Name("log_probabilities"), picked = Name("picked");
    const std::string log_likelihood = Name("log_likelihood"), weighted = Name("weighted_log_likelihood");
    const std::string elements = Name("nll");
    SetInt(Emit("LogSoftmax", {term.output}, {log_probabilities}), "axis", 1);
    Emit("Mul", {one_hot, log_probabilities}, {picked});
    SetInt(Emit("ReduceSum", {picked, class_axis}, {log_likelihood}), "keepdims", 0);
    Emit("Mul", {log_likelihood, target_weight}, {weighted});
    Emit("Neg", {weighted}, {elements});
    return std::make_pair(elements, target_weight);
  }

  // ---- User loss graphs ----

  absl::Status GraphError(const absl::Status& status, absl::string_view context) const {
    const absl::StatusCode code = status.code() == absl::StatusCode::kResourceExhausted
                                      ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kInvalidArgument;
    return absl::Status(code, absl::StrCat(label_, ": ", context, status.message()));
  }

  absl::StatusOr<std::string> AddLossGraph(const LossTerm& term) {
    if (!term.graph.has_graph()) return Invalid("no loss graph given");
    // The graph on its own: limits, opsets 1..17, the onnx checker and strict shape inference.
    std::string bytes;
    if (!term.graph.SerializeToString(&bytes)) return Invalid("the loss graph does not serialize");
    absl::StatusOr<onnx::ModelProto> loaded = LoadModelFromBytes(bytes);
    if (!loaded.ok()) return GraphError(loaded.status(), "bad loss graph: ");
    onnx::ModelProto loss = std::move(*loaded);
    if (loss.functions_size() > 0 || loss.graph().sparse_initializer_size() > 0) {
      return absl::UnimplementedError(
          absl::StrCat(label_, ": loss graphs with model-local functions or sparse initializers are not supported"));
    }
    for (const auto& node : loss.graph().node()) {
      if (HasSubgraph(node)) {
        return absl::UnimplementedError(absl::StrCat(label_, ": loss graphs with subgraphs (node '", node.name(),
                                                     "', ", node.op_type(), ") are not supported"));
      }
    }
    if (loss.graph().output_size() != 1) {
      return Invalid(absl::StrCat("a loss graph has a single output; this one has ", loss.graph().output_size()));
    }

    // Opsets: ai.onnx is converted to the model's; other domains must match the model's exactly.
    for (const auto& opset : loss.opset_import()) {
      if (IsOnnxDomain(opset.domain())) continue;
      bool imported = false;
      for (const auto& model_opset : model_.opset_import()) {
        imported |= model_opset.domain() == opset.domain() && model_opset.version() == opset.version();
      }
      if (!imported) {
        return Invalid(absl::StrCat("the loss graph imports domain '", opset.domain(), "' version ", opset.version(),
                                    ", which the model does not import"));
      }
    }
    const int64_t loss_opset = OnnxOpset(loss);
    if (loss_opset != 0 && loss_opset != model_opset_) {
      onnx::ModelProto converted;
      try {
        converted = onnx::version_conversion::ConvertVersion(loss, static_cast<int>(model_opset_));
      } catch (const std::exception& e) {
        return Invalid(absl::StrCat("cannot convert the loss graph from ai.onnx opset ", loss_opset,
                                    " to the model's opset ", model_opset_, ": ", e.what()));
      } catch (...) {
        return Invalid(absl::StrCat("cannot convert the loss graph from ai.onnx opset ", loss_opset,
                                    " to the model's opset ", model_opset_));
      }
      std::string converted_bytes;
      if (!converted.SerializeToString(&converted_bytes)) return Invalid("the converted loss graph does not serialize");
      loaded = LoadModelFromBytes(converted_bytes);
      if (!loaded.ok()) {
        return GraphError(loaded.status(), absl::StrCat("the loss graph converted from opset ", loss_opset,
                                                        " to the model's opset ", model_opset_, " is invalid: "));
      }
      loss = std::move(*loaded);
    }

    // Inputs: model outputs (read under the model's own types) or declared targets.
    absl::flat_hash_set<std::string> initializers;
    for (const auto& initializer : loss.graph().initializer()) initializers.insert(initializer.name());
    const std::vector<std::string> declared = DeclaredTargets(term);
    absl::flat_hash_set<std::string> kept_names;  // names the merge keeps as they are
    onnx::ModelProto typed = loss;                 // the loss graph with the model's output types
    for (int i = 0; i < loss.graph().input_size(); ++i) {
      const onnx::ValueInfoProto& input = loss.graph().input(i);
      if (initializers.contains(input.name())) continue;
      if (std::find(declared.begin(), declared.end(), input.name()) != declared.end()) {
        if (absl::Status status = DeclareTarget(input.name(), input.type()); !status.ok()) return status;
        kept_names.insert(input.name());
        continue;
      }
      auto output = model_outputs_.find(input.name());
      if (output == model_outputs_.end()) {
        std::vector<std::string> outputs;
        for (const auto& model_output : graph_.output()) outputs.push_back(model_output.name());
        return Invalid(absl::StrCat("loss graph input '", input.name(), "' names no output of the model (",
                                    absl::StrJoin(outputs, ", "), ") and is not declared a target"));
      }
      const int32_t want = output->second.tensor_type().elem_type();
      const int32_t have = input.type().tensor_type().elem_type();
      if (want != have) {
        return Invalid(absl::StrCat("loss graph input '", input.name(), "' is ", ElemTypeName(have),
                                    " but the model output is ", ElemTypeName(want)));
      }
      if (!TypesCompatible(input.type(), output->second)) {
        return Invalid(absl::StrCat("loss graph input '", input.name(), "' is ", TypeString(input.type()),
                                    " but the model output is ", TypeString(output->second)));
      }
      *typed.mutable_graph()->mutable_input(i)->mutable_type() = output->second;
      kept_names.insert(input.name());
    }
    for (const std::string& target : declared) {
      if (!kept_names.contains(target)) {
        return Invalid(absl::StrCat("declared target '", target, "' is not an input of the loss graph"));
      }
    }

    // The output, inferred with the model's types, must be a floating-point scalar.
    try {
      onnx::shape_inference::InferShapes(typed, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1));
    } catch (const std::exception& e) {
      return Invalid(absl::StrCat("shape inference with the model's output types failed: ", e.what()));
    } catch (...) {
      return Invalid("shape inference with the model's output types failed");
    }
    const onnx::ValueInfoProto& output = typed.graph().output(0);
    if (!output.type().has_tensor_type() || !IsFloatingPointType(output.type().tensor_type().elem_type())) {
      return Invalid(absl::StrCat("loss graph output '", output.name(), "' must be a floating-point tensor; it is ",
                                  TypeString(output.type())));
    }
    if (!output.type().tensor_type().has_shape()) {
      return Invalid(absl::StrCat("the shape of loss graph output '", output.name(),
                                  "' is unknown; declare it a scalar (shape [])"));
    }
    if (output.type().tensor_type().shape().dim_size() != 0) {
      return Invalid(absl::StrCat("loss graph output '", output.name(), "' must be a scalar; it is ",
                                  TypeString(output.type())));
    }
    term_elem_type_ = output.type().tensor_type().elem_type();

    // Merge: every name but the bound inputs and targets gets the term's prefix; initializers become Constants.
    auto rename = [&](const std::string& name) {
      return name.empty() || kept_names.contains(name) ? name : Name(name);
    };
    for (const auto& initializer : loss.graph().initializer()) EmitConstant(rename(initializer.name()), initializer);
    for (int n = 0; n < loss.graph().node_size(); ++n) {
      onnx::NodeProto node = loss.graph().node(n);
      for (auto& input : *node.mutable_input()) input = rename(input);
      for (auto& output_name : *node.mutable_output()) output_name = rename(output_name);
      node.set_name(node.name().empty() ? Name(absl::StrCat(node.op_type(), "_", n)) : Name(node.name()));
      *graph_.add_node() = std::move(node);
    }
    return rename(output.name());
  }

  onnx::ModelProto& model_;
  onnx::GraphProto& graph_;
  const std::string loss_name_;
  int64_t model_opset_ = 0;
  absl::flat_hash_map<std::string, onnx::TypeProto> model_outputs_;
  absl::flat_hash_set<std::string> names_;              // every name the model (and the loss's own names) uses
  absl::flat_hash_set<std::string> per_element_names_;  // LossTerm::per_element_output of every term
  absl::flat_hash_map<std::string, onnx::TypeProto> targets_;
  std::vector<onnx::ValueInfoProto> per_element_outputs_;
  AppendedLoss result_;
  // The term being built.
  std::string label_;
  std::string prefix_;
  int32_t term_elem_type_ = 0;
};

}  // namespace

const char* LossKindName(LossKind kind) {
  switch (kind) {
    case LossKind::kMeanSquaredError:
      return "MSELoss";
    case LossKind::kCrossEntropy:
      return "CrossEntropyLoss";
    case LossKind::kL1:
      return "L1Loss";
    case LossKind::kBinaryCrossEntropyWithLogits:
      return "BCEWithLogitsLoss";
    case LossKind::kOnnxGraph:
      return "loss graph";
  }
  return "unknown loss";
}

const char* ReductionName(Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean:
      return "mean";
    case Reduction::kSum:
      return "sum";
    case Reduction::kNone:
      return "none";
  }
  return "unknown";
}

absl::StatusOr<AppendedLoss> AppendLoss(onnx::ModelProto* model, const std::vector<LossTerm>& terms,
                                        const std::string& loss_name) {
  if (model == nullptr || !model->has_graph()) return absl::InvalidArgumentError("no model graph");
  onnx::ModelProto working = *model;  // `model` stays unchanged on error
  absl::StatusOr<AppendedLoss> appended = LossBuilder(&working, loss_name).Build(terms);
  if (appended.ok()) *model = std::move(working);
  return appended;
}

}  // namespace traind::engine
