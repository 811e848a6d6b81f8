// Which ops the engine can run. The single list of registrations is engine/ops/op_list.inc: one
// line per op (domain, op type, opset range, kernel factory, gradient slot).
#ifndef TRAIND_ENGINE_RUNTIME_OP_REGISTRY_H_
#define TRAIND_ENGINE_RUNTIME_OP_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/model_loader.h"  // kOnnxPreviewTrainingDomain (the loader accepts it too).
#include "engine/runtime/kernel.h"

namespace traind::engine {

// The gradient slot of a registration. Issue 4 adds the gradient rule itself (a builder that emits
// the backward nodes) next to each kernel and flips the state to kWritten; ops without a gradient
// say kNotDifferentiable explicitly. A test walks the list and reports every kNotYetWritten.
enum class GradientState {
  kNotYetWritten,
  kNotDifferentiable,
  kWritten,
  // Registrations for opsets below kMinGradientOpset: the gradient builder first converts such models with
  // onnx's version converter, so their nodes are differentiated by the op's modern registration instead.
  kViaVersionConversion,
};

// The oldest ai.onnx opset the gradient rules are written for; older models are converted up to it.
inline constexpr int kMinGradientOpset = 13;

class GradientRuleContext;  // engine/autodiff/gradient_rule.h
// Emits the backward nodes of one forward node (see GradientRuleContext).
using GradientRule = absl::Status (*)(GradientRuleContext& context);

struct GradientSlot {
  GradientState state = GradientState::kNotYetWritten;
  GradientRule rule = nullptr;  // Set exactly when state == kWritten.
};

inline constexpr GradientSlot kGradientNotYetWritten{GradientState::kNotYetWritten, nullptr};
inline constexpr GradientSlot kNotDifferentiable{GradientState::kNotDifferentiable, nullptr};
inline constexpr GradientSlot kGradientViaVersionConversion{GradientState::kViaVersionConversion, nullptr};
// In op_list.inc: TRAIND_OP(..., CreateReluKernel, TRAIND_GRADIENT(ReluGradient)), the rule being defined
// next to the kernel. op_list.cc declares the rule from this same line.
#define TRAIND_GRADIENT(rule) (::traind::engine::GradientSlot{::traind::engine::GradientState::kWritten, &rule})

inline constexpr const char* kOnnxDomain = "";
// Registrations in ONNX's optimizer domain use kOnnxPreviewTrainingDomain (declared beside the
// loader's domain checks in engine/model/model_loader.h) with opset range 1..1.

struct OpRegistration {
  const char* domain;  // "" for ai.onnx, else e.g. kOnnxPreviewTrainingDomain.
  const char* op_type;
  int first_opset;  // Inclusive range of the domain's opset versions this kernel implements.
  int last_opset;
  KernelFactory factory;
  GradientSlot gradient;
};

class OpRegistry {
 public:
  // Built once from engine/ops/op_list.inc (defined in engine/ops/op_list.cc, so that linking
  // the registry pulls in every kernel).
  static const OpRegistry& Global();

  explicit OpRegistry(std::vector<OpRegistration> registrations);

  // nullptr if no registration covers (domain, op_type, opset). "ai.onnx" is treated as "".
  const OpRegistration* Find(absl::string_view domain, absl::string_view op_type,
                             int opset) const;
  const std::vector<OpRegistration>& registrations() const { return registrations_; }

 private:
  std::vector<OpRegistration> registrations_;
  // "domain\0op_type" -> indices into registrations_.
  absl::flat_hash_map<std::string, std::vector<size_t>> by_name_;
};

// Defined in engine/ops/op_list.cc.
std::vector<OpRegistration> BuiltinOpRegistrations();

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_OP_REGISTRY_H_
