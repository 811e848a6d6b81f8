#include "engine/runtime/executor.h"

#include <cmath>

#include "engine/core/status_macros.h"

namespace traind::engine {

bool AllFinite(const Tensor& tensor) {
  if (tensor.dtype() == DataType::kFloat32) {
    const float* values = tensor.data<float>();
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (!std::isfinite(values[i])) return false;
    }
  } else if (tensor.dtype() == DataType::kFloat64) {
    const double* values = tensor.data<double>();
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (!std::isfinite(values[i])) return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<bool>> Executor::SyncScalarCheckingFinite(
    Tensor& scalar, absl::Span<const std::vector<Tensor>> groups) const {
  TRAIND_RETURN_IF_ERROR(scalar.buffer()->SyncToHost());
  std::vector<bool> finite(groups.size(), true);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& tensor : groups[g]) {
      TRAIND_RETURN_IF_ERROR(tensor.buffer()->SyncToHost());
      finite[g] = finite[g] && AllFinite(tensor);
    }
  }
  return finite;
}

}  // namespace traind::engine
