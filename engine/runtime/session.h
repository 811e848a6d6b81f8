// The engine's front door: load + compile a model once, then run it many times.
//
//   TRAIND_ASSIGN_OR_RETURN(auto session, Session::Create(model_proto));
//   TRAIND_ASSIGN_OR_RETURN(auto outputs, session->Run({{"x", x}}));
#ifndef TRAIND_ENGINE_RUNTIME_SESSION_H_
#define TRAIND_ENGINE_RUNTIME_SESSION_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"

namespace traind::engine {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Session {
 public:
  // `model` must come from LoadModelFromBytes/File (validated). Uses a CpuExecutor.
  static absl::StatusOr<std::unique_ptr<Session>> Create(const onnx::ModelProto& model);
  Session(std::shared_ptr<const Plan> plan, std::unique_ptr<Executor> executor)
      : plan_(std::move(plan)), executor_(std::move(executor)) {}

  const Plan& plan() const { return *plan_; }

  // Fast path: inputs in plan().inputs order, outputs in plan().outputs order.
  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs) const {
    return executor_->Run(*plan_, inputs);
  }
  // By name: every graph input exactly once; returns every graph output with its name.
  absl::StatusOr<NamedTensors> Run(const NamedTensors& inputs) const;

 private:
  std::shared_ptr<const Plan> plan_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_SESSION_H_
