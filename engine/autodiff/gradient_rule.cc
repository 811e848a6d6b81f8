#include "engine/autodiff/gradient_rule.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace traind::engine {

std::string GradientRuleContext::Label() const {
  return absl::StrCat("node '", node_.name(), "' (", node_.op_type(), ")");
}

absl::StatusOr<int32_t> GradientRuleContext::ElemType(const std::string& value) const {
  const ValueFacts* facts = Facts(value);
  if (facts == nullptr || facts->elem_type == 0) {
    return absl::InvalidArgumentError(absl::StrCat(Label(), ": the type of '", value, "' is unknown"));
  }
  return facts->elem_type;
}

absl::StatusOr<std::vector<int64_t>> GradientRuleContext::StaticShape(const std::string& value) const {
  const ValueFacts* facts = Facts(value);
  if (facts == nullptr || !facts->has_static_shape) {
    return absl::UnimplementedError(absl::StrCat(
        Label(), ": the gradient needs the static shape of '", value, "', which shape inference did not find"));
  }
  return facts->dims;
}

absl::StatusOr<std::vector<int64_t>> GradientRuleContext::PartialShape(const std::string& value) const {
  const ValueFacts* facts = Facts(value);
  if (facts == nullptr || !facts->has_rank) {
    return absl::UnimplementedError(absl::StrCat(
        Label(), ": the gradient needs the rank of '", value, "', which shape inference did not find"));
  }
  return facts->partial_dims;
}

int64_t GradientRuleContext::IntAttr(absl::string_view name, int64_t fallback) const {
  for (const auto& attribute : node_.attribute()) {
    if (attribute.name() == name) return attribute.i();
  }
  return fallback;
}

absl::StatusOr<int64_t> GradientRuleContext::AxisAttr(absl::string_view name, int64_t fallback,
                                                      int64_t rank) const {
  const int64_t axis = IntAttr(name, fallback);
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(Label(), ": attribute '", name, "' is ", axis, ", outside [", -rank, ", ", rank, ") for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

float GradientRuleContext::FloatAttr(absl::string_view name, float fallback) const {
  for (const auto& attribute : node_.attribute()) {
    if (attribute.name() == name) return attribute.f();
  }
  return fallback;
}

std::vector<int64_t> GradientRuleContext::IntsAttr(absl::string_view name) const {
  for (const auto& attribute : node_.attribute()) {
    if (attribute.name() == name) return {attribute.ints().begin(), attribute.ints().end()};
  }
  return {};
}

onnx::NodeProto* GradientRuleContext::Emit(absl::string_view op_type, const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = callbacks_.add_node();
  node->set_op_type(std::string(op_type));
  node->set_name(absl::StrCat(node_.name().empty() ? node_.op_type() : node_.name(), "_Grad/", op_type, "_",
                              outputs.empty() ? "" : outputs.front()));
  for (const std::string& input : inputs) node->add_input(input);
  for (const std::string& output : outputs) node->add_output(output);
  return node;
}

std::string GradientRuleContext::ScalarConstant(double value, int32_t elem_type) {
  const std::string name = Temp("scalar");
  onnx::NodeProto* node = Emit("Constant", {}, {name});
  auto* attribute = node->add_attribute();
  attribute->set_name("value");
  attribute->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* tensor = attribute->mutable_t();
  tensor->set_data_type(elem_type);
  if (elem_type == onnx::TensorProto::DOUBLE) {
    tensor->add_double_data(value);
  } else {
    tensor->add_float_data(static_cast<float>(value));
  }
  return name;
}

std::string GradientRuleContext::Int64Constant(const std::vector<int64_t>& values) {
  const std::string name = Temp("ints");
  onnx::NodeProto* node = Emit("Constant", {}, {name});
  auto* attribute = node->add_attribute();
  attribute->set_name("value");
  attribute->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* tensor = attribute->mutable_t();
  tensor->set_data_type(onnx::TensorProto::INT64);
  tensor->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t value : values) tensor->add_int64_data(value);
  return name;
}

absl::Status GradientRuleContext::ReduceToShapeOf(const std::string& gradient, const std::string& broadcast_value,
                                                  const std::string& input, const std::string& out) {
  absl::StatusOr<std::vector<int64_t>> full = StaticShape(broadcast_value);
  if (full.ok() && StaticShape(input).ok()) return ReduceToShape(gradient, *full, input, out);
  // Dynamic dimensions: decide from what is known which dims were broadcast; the result's shape at run time.
  const ValueFacts* full_facts = Facts(broadcast_value);
  const ValueFacts* target_facts = Facts(input);
  if (full_facts == nullptr || !full_facts->has_rank || target_facts == nullptr || !target_facts->has_rank ||
      full_facts->partial_dims.size() < target_facts->partial_dims.size()) {
    return absl::UnimplementedError(absl::StrCat(Label(), ": the gradient needs the ranks of '", broadcast_value,
                                                 "' and '", input, "', which shape inference did not find"));
  }
  const std::vector<int64_t>& full_dims = full_facts->partial_dims;
  const std::vector<int64_t>& target_dims = target_facts->partial_dims;
  const size_t extra = full_dims.size() - target_dims.size();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < full_dims.size(); ++d) {
    if (d < extra) {
      axes.push_back(static_cast<int64_t>(d));
      continue;
    }
    const int64_t target = target_dims[d - extra], result = full_dims[d];
    const std::string& target_param = target_facts->dim_params[d - extra];
    if (target == 1 && result != 1) {
      axes.push_back(static_cast<int64_t>(d));
    } else if (target < 0 && !(result < 0 && !target_param.empty() && target_param == full_facts->dim_params[d]) &&
               result != 1) {
      return absl::UnimplementedError(absl::StrCat(Label(), ": cannot tell whether '", input,
                                                   "' was broadcast along its dynamic dimension ", d - extra));
    }
  }
  if (axes.empty()) {
    Emit("Identity", {gradient}, {out});
    return absl::OkStatus();
  }
  const std::string summed = Temp("summed");
  Emit("ReduceSum", {gradient, Int64Constant(axes)}, {summed});
  absl::StatusOr<std::vector<int64_t>> target = StaticShape(input);
  std::string shape;
  if (target.ok()) {
    shape = Int64Constant(*target);
  } else {
    shape = Temp("shape");
    Emit("Shape", {input}, {shape});
  }
  Emit("Reshape", {summed, shape}, {out});
  return absl::OkStatus();
}

void GradientRuleContext::SetIntAttr(onnx::NodeProto* node, absl::string_view name, int64_t value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(std::string(name));
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

void GradientRuleContext::SetIntsAttr(onnx::NodeProto* node, absl::string_view name,
                                      const std::vector<int64_t>& values) {
  auto* attribute = node->add_attribute();
  attribute->set_name(std::string(name));
  attribute->set_type(onnx::AttributeProto::INTS);
  for (int64_t value : values) attribute->add_ints(value);
}

void GradientRuleContext::SetStringAttr(onnx::NodeProto* node, absl::string_view name, absl::string_view value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(std::string(name));
  attribute->set_type(onnx::AttributeProto::STRING);
  attribute->set_s(std::string(value));
}

std::string GradientRuleContext::Zeros(const std::string& shape, int32_t elem_type) {
  const std::string zeros = Temp("zeros");
  onnx::NodeProto* fill = Emit("ConstantOfShape", {shape}, {zeros});
  auto* value = fill->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(elem_type);
  value->mutable_t()->add_dims(1);
  if (elem_type == onnx::TensorProto::DOUBLE) {
    value->mutable_t()->add_double_data(0.0);
  } else {
    value->mutable_t()->add_float_data(0.0f);
  }
  return zeros;
}

void GradientRuleContext::SetFloatAttr(onnx::NodeProto* node, absl::string_view name, float value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(std::string(name));
  attribute->set_type(onnx::AttributeProto::FLOAT);
  attribute->set_f(value);
}

absl::Status GradientRuleContext::ReduceToShape(const std::string& gradient, const std::vector<int64_t>& full_shape,
                                                const std::string& input, const std::string& out) {
  const std::vector<int64_t>* full = &full_shape;
  absl::StatusOr<std::vector<int64_t>> target = StaticShape(input);
  if (!target.ok()) return target.status();
  if (*full == *target) {
    Emit("Identity", {gradient}, {out});
    return absl::OkStatus();
  }
  // numpy broadcasting aligns trailing dims: leading extra dims and target dims of 1 were broadcast.
  const size_t extra = full->size() - target->size();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < full->size(); ++d) {
    if (d < extra || ((*target)[d - extra] == 1 && (*full)[d] != 1)) axes.push_back(static_cast<int64_t>(d));
  }
  const std::string summed = Temp("summed");
  Emit("ReduceSum", {gradient, Int64Constant(axes)}, {summed});
  Emit("Reshape", {summed, Int64Constant(*target)}, {out});
  return absl::OkStatus();
}

}  // namespace traind::engine
