#include "engine/runtime/session.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

size_t PoolCacheBytes(const PlanMemory& memory) {
  constexpr size_t kMinimum = size_t{1} << 30;
  const size_t peak = static_cast<size_t>(std::max<int64_t>(memory.peak_bytes, 0));
  return peak >= std::numeric_limits<size_t>::max() / 2 ? std::numeric_limits<size_t>::max()
                                                          : std::max(kMinimum, 2 * peak);
}

absl::StatusOr<std::unique_ptr<Session>> Session::Create(const onnx::ModelProto& model,
                                                         const SessionOptions& options) {
  CompileOptions compile_options;
  // Another executor finds each node in the model by its outputs: plans for it keep the model's nodes as they are.
  compile_options.fuse_elementwise = !options.make_executor;
  compile_options.fold_transposes = !options.make_executor;
  compile_options.fold_bias_adds = !options.make_executor;
  compile_options.fuse_attention = !options.make_executor;
  compile_options.fuse_gelu = !options.make_executor;
  compile_options.channels_last = options.channels_last && !options.make_executor;
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, Compile(model, compile_options));
  MemoryReservation constants;
  if (options.memory_budget != nullptr) {
    const PlanMemory& memory = plan->memory;
    TRAIND_ASSIGN_OR_RETURN(constants, MemoryReservation::Make(options.memory_budget, memory.constant_bytes,
                                                               "the model's constants"));
    const int64_t peak = memory.peak_bytes > std::numeric_limits<int64_t>::max() - options.extra_resident_bytes
                             ? std::numeric_limits<int64_t>::max()
                             : memory.peak_bytes + options.extra_resident_bytes;
    // On a GPU executor the plan's peak lives in device memory (a device allocation that fails is
    // RESOURCE_EXHAUSTED); the host budget still covers the constants and what CPU-placed nodes allocate.
    if (!options.make_executor) {
      TRAIND_RETURN_IF_ERROR(options.memory_budget->CheckFits(
          peak, absl::StrCat("running the model (its plan's peak by the shapes shape inference gave ",
                             plan->nodes.size(), " nodes", memory.unknown_sizes > 0
                                 ? absl::StrCat(", ", memory.unknown_sizes, " values of unknown size not counted")
                                 : std::string(),
                             ")")));
    }
  }
  std::shared_ptr<BufferPool> buffers = BufferPool::Create(PoolCacheBytes(plan->memory), options.memory_budget);
  std::unique_ptr<Executor> executor;
  if (options.make_executor) {
    TRAIND_ASSIGN_OR_RETURN(executor, options.make_executor(plan, model, std::move(buffers)));
  } else {
    executor = std::make_unique<CpuExecutor>(options.threads, std::move(buffers), options.random_seed);
  }
  return std::make_unique<Session>(std::move(plan), std::move(executor), std::move(constants));
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
