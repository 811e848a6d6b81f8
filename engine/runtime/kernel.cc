#include "engine/runtime/kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/model/tensor_proto.h"

namespace traind::engine {

const onnx::AttributeProto* KernelInit::Find(absl::string_view name) const {
  for (const auto& attribute : node_.attribute()) {
    if (attribute.name() == name) return &attribute;
  }
  return nullptr;
}

absl::Status KernelInit::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat("node '", node_.name(), "' (", node_.op_type(),
                                                 ", opset ", opset_, "): ", message));
}

absl::Status KernelInit::Unsupported(absl::string_view message) const {
  return absl::UnimplementedError(absl::StrCat("node '", node_.name(), "' (", node_.op_type(),
                                               ", opset ", opset_, "): ", message));
}

absl::StatusOr<const onnx::AttributeProto*> KernelInit::FindTyped(
    absl::string_view name, onnx::AttributeProto::AttributeType type) const {
  const onnx::AttributeProto* attribute = Find(name);
  if (attribute == nullptr) return nullptr;
  // Old exporters leave `type` unset (UNDEFINED); accept that when the right field is present.
  if (attribute->type() != type && attribute->type() != onnx::AttributeProto::UNDEFINED) {
    return Error(absl::StrCat("attribute '", name, "' has type ",
                              onnx::AttributeProto::AttributeType_Name(attribute->type()),
                              ", expected ", onnx::AttributeProto::AttributeType_Name(type)));
  }
  return attribute;
}

absl::StatusOr<int64_t> KernelInit::GetInt(absl::string_view name,
                                           std::optional<int64_t> fallback) const {
  auto attribute = FindTyped(name, onnx::AttributeProto::INT);
  if (!attribute.ok()) return attribute.status();
  if (*attribute == nullptr) {
    if (fallback) return *fallback;
    return Error(absl::StrCat("required attribute '", name, "' is missing"));
  }
  return (*attribute)->i();
}

absl::StatusOr<float> KernelInit::GetFloat(absl::string_view name,
                                           std::optional<float> fallback) const {
  auto attribute = FindTyped(name, onnx::AttributeProto::FLOAT);
  if (!attribute.ok()) return attribute.status();
  if (*attribute == nullptr) {
    if (fallback) return *fallback;
    return Error(absl::StrCat("required attribute '", name, "' is missing"));
  }
  return (*attribute)->f();
}

absl::StatusOr<std::string> KernelInit::GetString(absl::string_view name,
                                                  std::optional<std::string> fallback) const {
  auto attribute = FindTyped(name, onnx::AttributeProto::STRING);
  if (!attribute.ok()) return attribute.status();
  if (*attribute == nullptr) {
    if (fallback) return *fallback;
    return Error(absl::StrCat("required attribute '", name, "' is missing"));
  }
  return (*attribute)->s();
}

absl::StatusOr<std::vector<int64_t>> KernelInit::GetInts(absl::string_view name,
                                                         std::vector<int64_t> fallback) const {
  auto attribute = FindTyped(name, onnx::AttributeProto::INTS);
  if (!attribute.ok()) return attribute.status();
  if (*attribute == nullptr) return fallback;
  return std::vector<int64_t>((*attribute)->ints().begin(), (*attribute)->ints().end());
}

absl::StatusOr<std::vector<float>> KernelInit::GetFloats(absl::string_view name) const {
  auto attribute = FindTyped(name, onnx::AttributeProto::FLOATS);
  if (!attribute.ok()) return attribute.status();
  if (*attribute == nullptr) return std::vector<float>();
  return std::vector<float>((*attribute)->floats().begin(), (*attribute)->floats().end());
}

absl::StatusOr<Tensor> KernelInit::GetTensor(absl::string_view name) const {
  auto attribute = FindTyped(name, onnx::AttributeProto::TENSOR);
  if (!attribute.ok()) return attribute.status();
  if (*attribute == nullptr) {
    return Error(absl::StrCat("required attribute '", name, "' is missing"));
  }
  auto tensor = TensorFromProto((*attribute)->t());
  if (!tensor.ok()) {
    absl::Status wrapped = tensor.status().code() == absl::StatusCode::kUnimplemented
                               ? Unsupported(tensor.status().message())
                               : Error(tensor.status().message());
    return wrapped;
  }
  return tensor;
}

absl::StatusOr<const Tensor*> KernelContext::RequiredInput(int i) const {
  const Tensor* tensor = input(i);
  if (tensor == nullptr) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
  return tensor;
}

absl::StatusOr<Tensor*> KernelContext::AllocateOutput(int i, DataType dtype, Shape shape) {
  auto tensor = buffers_.AllocateTensor(dtype, std::move(shape));
  if (!tensor.ok()) return tensor.status();
  if (!wants_output(i)) {
    scratch_.push_back(*std::move(tensor));
    return &scratch_.back();
  }
  *outputs_[i] = *std::move(tensor);
  return outputs_[i];
}

void KernelContext::SetOutput(int i, Tensor tensor) {
  if (wants_output(i)) *outputs_[i] = std::move(tensor);
}

bool KernelContext::donated(int input) const {
  return std::binary_search(donated_inputs_.begin(), donated_inputs_.end(), input);
}

Tensor* KernelContext::ReuseInputAsOutput(int input, int output) {
  if (!wants_output(output) || !donated(input) || input >= num_inputs_ || inputs_[input] == nullptr) return nullptr;
  *outputs_[output] = *inputs_[input];
  return outputs_[output];
}

absl::Status UnsupportedDtype(absl::string_view op, DataType dtype) {
  return absl::UnimplementedError(
      absl::StrCat("unsupported dtype ", DataTypeName(dtype), " for ", op));
}

}  // namespace traind::engine
