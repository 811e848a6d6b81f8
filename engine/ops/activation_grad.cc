// ReluGrad (domain ai.traind.training): dX = dY where X > 0, else 0, in one pass instead of the
// Greater -> Cast -> Mul chain (three passes and two temporaries) a standard-op rule needs.
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

// Both operands are read unconditionally so that the loop vectorises (a select, no branch).
template <typename T>
void ReluGradRange(const T* __restrict dy, const T* __restrict x, T* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = dy[i];
    dx[i] = x[i] > T(0) ? g : T(0);
  }
}

class ReluGradKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    if (dy->shape() != x->shape() || dy->dtype() != x->dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReluGrad: dY ", dy->DebugString(), " must match X ", x->DebugString()));
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "ReluGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* grad = dy->data<T>();
      const T* in = x->data<T>();
      T* out = dx->mutable_data<T>();
      context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold, [&](int64_t begin, int64_t end) {
        ReluGradRange(grad + begin, in + begin, out + begin, end - begin);
      });
      return absl::OkStatus();
    });
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateReluGradKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new ReluGradKernel());
}

}  // namespace traind::engine
