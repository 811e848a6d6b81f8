// The GPU kernel registry, built from gpu_op_list.inc.
#include "engine/gpu/kernel.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/op_registry.h"

namespace traind::engine::gpu {

// Every factory named in gpu_op_list.inc, declared from the same lines.
#define TRAIND_GPU_OP(domain, op_type, first, last, factory) \
  absl::StatusOr<std::unique_ptr<GpuKernel>> factory(const GpuKernelInit& init);
#include "engine/ops/gpu_op_list.inc"
#undef TRAIND_GPU_OP

std::vector<GpuOpRegistration> BuiltinGpuOpRegistrations() {
  return {
#define TRAIND_GPU_OP(domain, op_type, first, last, factory) {domain, #op_type, first, last, &factory},
#include "engine/ops/gpu_op_list.inc"
#undef TRAIND_GPU_OP
  };
}

const GpuOpRegistry& GpuOpRegistry::Global() {
  static const auto* registry = new GpuOpRegistry(BuiltinGpuOpRegistrations());
  return *registry;
}

}  // namespace traind::engine::gpu
