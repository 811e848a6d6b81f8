#include "engine/runtime/op_registry.h"

#include "absl/strings/str_cat.h"

namespace traind::engine {
namespace {

std::string Key(absl::string_view domain, absl::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  return absl::StrCat(domain, absl::string_view("\0", 1), op_type);
}

}  // namespace

OpRegistry::OpRegistry(std::vector<OpRegistration> registrations)
    : registrations_(std::move(registrations)) {
  for (size_t i = 0; i < registrations_.size(); ++i) {
    by_name_[Key(registrations_[i].domain, registrations_[i].op_type)].push_back(i);
  }
}

const OpRegistration* OpRegistry::Find(absl::string_view domain, absl::string_view op_type,
                                       int opset) const {
  auto it = by_name_.find(Key(domain, op_type));
  if (it == by_name_.end()) return nullptr;
  for (size_t index : it->second) {
    const OpRegistration& registration = registrations_[index];
    if (opset >= registration.first_opset && opset <= registration.last_opset) {
      return &registration;
    }
  }
  return nullptr;
}

}  // namespace traind::engine
