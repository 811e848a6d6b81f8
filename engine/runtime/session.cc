#include "engine/runtime/session.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

absl::StatusOr<std::unique_ptr<Session>> Session::Create(const onnx::ModelProto& model,
                                                         const SessionOptions& options) {
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, Compile(model));
  if (options.make_executor) {
    TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, options.make_executor(plan, model));
    return std::make_unique<Session>(std::move(plan), std::move(executor));
  }
  return std::make_unique<Session>(
      std::move(plan), std::make_unique<CpuExecutor>(options.threads, nullptr, options.random_seed));
}

absl::StatusOr<NamedTensors> Session::Run(const NamedTensors& inputs) const {
  std::vector<Tensor> ordered(plan_->inputs.size());
  for (const auto& [name, tensor] : inputs) {
    const int index = plan_->InputIndex(name);
    if (index < 0) return absl::InvalidArgumentError(absl::StrCat("unknown input '", name, "'"));
    if (ordered[index].defined()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' given twice"));
    }
    ordered[index] = tensor;
  }
  for (size_t i = 0; i < ordered.size(); ++i) {
    if (!ordered[i].defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing input '", plan_->inputs[i].name, "'"));
    }
  }
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, Run(ordered));
  NamedTensors named;
  named.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    named.emplace_back(plan_->outputs[i].name, std::move(outputs[i]));
  }
  return named;
}

}  // namespace traind::engine
