// Expands engine/ops/op_list.inc twice: once to declare every kernel factory, once to build the
// registration table. Adding an op never touches this file.
#include "engine/model/traind_schemas.h"  // kTraindTrainingDomain
#include "engine/runtime/op_registry.h"

namespace traind::engine {

// First pass: declare each kernel factory and each gradient rule. A gradient slot expands into the
// initializer of a throw-away constant; TRAIND_GRADIENT(rule) there also declares `rule`.
#define TRAIND_CONCAT_INNER(a, b) a##b
#define TRAIND_CONCAT(a, b) TRAIND_CONCAT_INNER(a, b)
#pragma push_macro("TRAIND_GRADIENT")
#undef TRAIND_GRADIENT
#define TRAIND_GRADIENT(rule) \
  GradientSlot{};             \
  absl::Status rule(GradientRuleContext& context)
#define TRAIND_OP(domain, op_type, first_opset, last_opset, factory, gradient) \
  absl::StatusOr<std::unique_ptr<Kernel>> factory(const KernelInit& init);     \
  [[maybe_unused]] constexpr GradientSlot TRAIND_CONCAT(kSlotOfLine, __LINE__) = gradient;
#include "engine/ops/op_list.inc"
#undef TRAIND_OP
#undef TRAIND_GRADIENT
#pragma pop_macro("TRAIND_GRADIENT")

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
