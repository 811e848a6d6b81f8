// Building blocks for elementwise kernels: wrap-around integer arithmetic (signed overflow is UB
// in C++; ONNX leaves it unspecified, so the engine defines it as two's complement wrap), and the
// generic unary/binary kernel templates that the op files instantiate.
#ifndef TRAIND_ENGINE_OPS_ELEMENTWISE_H_
#define TRAIND_ENGINE_OPS_ELEMENTWISE_H_

#include <algorithm>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/legacy_broadcast.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

// Unsigned type at least as wide as `unsigned`, so that arithmetic never promotes to signed int.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                    std::make_unsigned_t<T>>;

template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
  } else {
    return a + b;
  }
}
template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(a) - static_cast<WrapType<T>>(b));
  } else {
    return a - b;
  }
}
template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
  } else {
    return a * b;
  }
}
template <typename T>
inline T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(WrapType<T>(0) - static_cast<WrapType<T>>(a));
  } else {
    return -a;
  }
}

// y = op(x) for every element; contiguous, so the loop vectorises; split over threads when large.
// `Op` holds the parsed attributes (alpha, ...) and has `template <class T> T operator()(T)`.
template <typename Op, typename... Ts>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const char* name, Op op) : name_(name), op_(op), fn_(op) {}

  const ElementwiseFloatFn* elementwise_float() const override {
    return (std::is_same_v<float, Ts> || ...) ? &fn_ : nullptr;
  }

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    return DispatchAmong<Ts...>(x->dtype(), name_, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      const Op op = op_;
      context.threads().ParallelFor(x->num_elements(), kParallelElementThreshold,
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t i = begin; i < end; ++i) out[i] = op(in[i]);
                                    });
      return absl::OkStatus();
    });
  }

 private:
  // The same loop as Compute's, for the fusion.
  class Fn final : public ElementwiseFloatFn {
   public:
    explicit Fn(Op op) : op_(op) {}
    int arity() const override { return 1; }
    void Apply(const float* const* inputs, const bool* broadcast, int64_t n, float* out) const override {
      const Op op = op_;
      const float* in = inputs[0];
      if (broadcast[0]) {
        std::fill_n(out, n, static_cast<float>(op(in[0])));
        return;
      }
      for (int64_t i = 0; i < n; ++i) out[i] = op(in[i]);
    }

   private:
    Op op_;
  };

  const char* name_;
  Op op_;
  Fn fn_;
};

// out = op(a, b) with numpy broadcasting; both inputs share one dtype from Ts. The output has the
// input dtype, or bool when kBoolOutput (comparisons). `legacy` is active for opset < 7 nodes,
// whose B broadcasts onto A by the old rules instead.
template <typename Op, bool kBoolOutput, typename... Ts>
class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(const char* name, LegacyBroadcast legacy = {})
      : name_(name), legacy_(legacy) {}

  // Float arithmetic with numpy broadcasting only (legacy opset < 7 broadcasting aligns B differently).
  const ElementwiseFloatFn* elementwise_float() const override {
    return !kBoolOutput && !legacy_.active() && (std::is_same_v<float, Ts> || ...) ? &fn_ : nullptr;
  }

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* a, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* b, context.RequiredInput(1));
    if (a->dtype() != b->dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": input dtypes differ: ", DataTypeName(a->dtype()), " vs ",
          DataTypeName(b->dtype())));
    }
    Shape b_shape = b->shape();
    if (legacy_.active()) {
      TRAIND_ASSIGN_OR_RETURN(b_shape, legacy_.AlignB(a->shape(), b->shape()));
    }
    const Shape* shapes[] = {&a->shape(), &b_shape};
    TRAIND_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(shapes));
    return DispatchAmong<Ts...>(a->dtype(), name_, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using Out = std::conditional_t<kBoolOutput, uint8_t, T>;
      const DataType out_type = kBoolOutput ? DataType::kBool : a->dtype();
      TRAIND_ASSIGN_OR_RETURN(Tensor * out,
                              context.AllocateOutput(0, out_type, plan.output_shape()));
      BinaryBroadcast(plan, a->data<T>(), b->data<T>(), out->mutable_data<Out>(),
                      context.threads(), Op{});
      return absl::OkStatus();
    });
  }

 private:
  // BinaryRow's loops for a full row or a broadcast value on either side, for the fusion.
  class Fn final : public ElementwiseFloatFn {
   public:
    int arity() const override { return 2; }
    void Apply(const float* const* inputs, const bool* broadcast, int64_t n, float* out) const override {
      if constexpr (!kBoolOutput) {
        BinaryRow(inputs[0], broadcast[0] ? 0 : 1, inputs[1], broadcast[1] ? 0 : 1, out, n, Op{});
      }
    }
  };

  const char* name_;
  LegacyBroadcast legacy_;
  Fn fn_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_ELEMENTWISE_H_
