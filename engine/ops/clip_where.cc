// Clip (bounds from attributes before opset 11, from optional scalar inputs since) and Where
// (three-way broadcasting select).
#include <limits>

#include "engine/ops/elementwise.h"

namespace traind::engine {
namespace {

class ClipKernel final : public Kernel {
 public:
  // Before opset 11 the bounds are float attributes; afterwards they are inputs 1 and 2.
  ClipKernel(bool bounds_are_inputs, float attr_min, float attr_max)
      : bounds_are_inputs_(bounds_are_inputs), attr_min_(attr_min), attr_max_(attr_max) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    return DispatchAmong<TRAIND_NUMERIC_TYPES>(x->dtype(), "Clip", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T low = std::numeric_limits<T>::lowest();
      T high = std::numeric_limits<T>::max();
      if (bounds_are_inputs_) {
        TRAIND_RETURN_IF_ERROR(ReadBound<T>(context.input(1), x->dtype(), &low));
        TRAIND_RETURN_IF_ERROR(ReadBound<T>(context.input(2), x->dtype(), &high));
      } else {
        if constexpr (std::is_floating_point_v<T>) {
          low = static_cast<T>(attr_min_);
          high = static_cast<T>(attr_max_);
        }
      }
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      // max-then-min, so low > high yields high everywhere (numpy.clip, as the spec says).
      context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold,
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t i = begin; i < end; ++i) {
                                        const T v = in[i] < low ? low : in[i];
                                        out[i] = v > high ? high : v;
                                      }
                                    });
      return absl::OkStatus();
    });
  }

 private:
  template <typename T>
  static absl::Status ReadBound(const Tensor* bound, DataType dtype, T* value) {
    if (bound == nullptr) return absl::OkStatus();  // Omitted: keep the type's limit.
    if (bound->dtype() != dtype || bound->num_elements() != 1) {
      return absl::InvalidArgumentError("Clip: min/max must be one-element tensors of X's dtype");
    }
    *value = *bound->data<T>();
    return absl::OkStatus();
  }

  bool bounds_are_inputs_;
  float attr_min_;
  float attr_max_;
};

// Where copies elements, so it dispatches on element size only: one instantiation serves all
// dtypes of that width.
class WhereKernel final : public Kernel {
 public:
  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* condition, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* y, context.RequiredInput(2));
    if (condition->dtype() != DataType::kBool || x->dtype() != y->dtype()) {
      return absl::InvalidArgumentError("Where: condition must be bool and X, Y one dtype");
    }
    const Shape* shapes[] = {&condition->shape(), &x->shape(), &y->shape()};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, x->dtype(), plan.output_shape()));
    return DispatchAmong<uint8_t, uint16_t, uint32_t, uint64_t>(
        UnsignedOfSameSize(x->dtype()), "Where", [&](auto tag) -> absl::Status {
          using T = typename decltype(tag)::type;
          const uint8_t* c = condition->data<uint8_t>();
          const T* a = x->data<T>();
          const T* b = y->data<T>();
          T* o = out->mutable_data<T>();
          const int64_t sc = plan.inner_stride(0), sa = plan.inner_stride(1),
                        sb = plan.inner_stride(2);
          plan.ForEachRow(context.threads(), [&](int64_t base, const int64_t* offsets, int64_t n) {
            const uint8_t* cr = c + offsets[0];
            const T* ar = a + offsets[1];
            const T* br = b + offsets[2];
            T* orow = o + base;
            for (int64_t i = 0; i < n; ++i) orow[i] = cr[i * sc] ? ar[i * sa] : br[i * sb];
          });
          return absl::OkStatus();
        });
  }

 private:
  static DataType UnsignedOfSameSize(DataType dtype) {
    switch (ElementSize(dtype)) {
      case 1: return DataType::kUint8;
      case 2: return DataType::kUint16;
      case 4: return DataType::kUint32;
      case 8: return DataType::kUint64;
      default: return dtype;  // Unstorable: DispatchAmong reports it.
    }
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateClipKernel(const KernelInit& init) {
  const bool bounds_are_inputs = init.opset() >= 11;
  float min_value = std::numeric_limits<float>::lowest();
  float max_value = std::numeric_limits<float>::max();
  if (!bounds_are_inputs) {
    TRAIND_ASSIGN_OR_RETURN(min_value, init.GetFloat("min", min_value));
    TRAIND_ASSIGN_OR_RETURN(max_value, init.GetFloat("max", max_value));
  }
  return std::unique_ptr<Kernel>(new ClipKernel(bounds_are_inputs, min_value, max_value));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateWhereKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new WhereKernel());
}

}  // namespace traind::engine
