// Expands engine/ops/op_list.inc twice: once to declare every kernel factory, once to build the
// registration table. Adding an op never touches this file.
#include "engine/runtime/op_registry.h"

namespace traind::engine {

#define TRAIND_OP(domain, op_type, first_opset, last_opset, factory, gradient) \
  absl::StatusOr<std::unique_ptr<Kernel>> factory(const KernelInit& init);
#include "engine/ops/op_list.inc"
#undef TRAIND_OP

std::vector<OpRegistration> BuiltinOpRegistrations() {
  return {
#define TRAIND_OP(domain, op_type, first_opset, last_opset, factory, gradient) \
  OpRegistration{domain, #op_type, first_opset, last_opset, &factory, gradient},
#include "engine/ops/op_list.inc"
#undef TRAIND_OP
  };
}

const OpRegistry& OpRegistry::Global() {
  static const auto* registry = new OpRegistry(BuiltinOpRegistrations());
  return *registry;
}

}  // namespace traind::engine
