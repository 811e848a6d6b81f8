// Dropout, opsets 7-17.
//
// Opsets 7-11 have no training switch: the op is the identity (output aliases the input) and the
// optional mask is all ones (opset 7-9: of the input's dtype; 10+: bool). From opset 12, `ratio`
// (default 0.5) and `training_mode` (default false) are optional inputs; with training_mode false
// or ratio 0 the op is again the identity with an all-true mask.
//
// Training mode draws a Bernoulli keep-mask and scales kept elements by 1 / (1 - ratio).
// The RNG is MT19937 (std::mt19937) seeded with the `seed` attribute (taken mod 2^32); element i,
// in row-major order, draws u_i = (a >> 5) * 2^26 + (b >> 6)) / 2^53 from the next two 32-bit
// outputs (a, b) and is kept iff u_i >= ratio. This is exactly numpy's legacy
// `np.random.seed(seed); np.random.uniform(0, 1, shape) >= ratio`, the ONNX reference, so the
// same seed gives the same mask across runs, machines and the ONNX test data. Without a seed each
// run draws a fresh seed from std::random_device. The draw is sequential by construction.
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

// numpy's random_sample(): 53 random bits from two MT19937 outputs.
double NextUniform(std::mt19937& rng) {
  const uint32_t high = rng() >> 5;  // 27 bits.
  const uint32_t low = rng() >> 6;   // 26 bits.
  return (high * 67108864.0 + low) / 9007199254740992.0;
}

class DropoutKernel final : public Kernel {
 public:
  DropoutKernel(int opset, float attribute_ratio, std::optional<int64_t> seed)
      : opset_(opset), attribute_ratio_(attribute_ratio), seed_(seed) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    bool training = false;
    double ratio = attribute_ratio_;
    if (opset_ >= 12) {
      TRAIND_ASSIGN_OR_RETURN(training, ReadTrainingMode(context.input(2)));
      TRAIND_ASSIGN_OR_RETURN(ratio, ReadRatio(context.input(1)));
    }
    if (!(ratio >= 0 && ratio < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("Dropout: ratio ", ratio, " is outside [0, 1)"));
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "Dropout", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if (!training || ratio == 0) {
        context.SetOutput(0, *x);  // Identity; outputs may alias inputs (never written).
        if (context.wants_output(1)) {
          // Opsets 7-9 type the mask like the data; bool (stored as uint8 1) from opset 10.
          if (opset_ < 10) {
            TRAIND_ASSIGN_OR_RETURN(Tensor * mask, context.AllocateOutput(1, x->dtype(), x->shape()));
            std::fill_n(mask->mutable_data<T>(), mask->num_elements(), T(1));
          } else {
            TRAIND_ASSIGN_OR_RETURN(Tensor * mask, context.AllocateOutput(1, DataType::kBool, x->shape()));
            std::memset(mask->mutable_raw_data(), 1, mask->byte_size());
          }
        }
        return absl::OkStatus();
      }
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      TRAIND_ASSIGN_OR_RETURN(Tensor * mask, context.AllocateOutput(1, DataType::kBool, x->shape()));
      const uint64_t session_seed = context.random_seed();
      std::mt19937 rng(seed_                ? static_cast<uint32_t>(*seed_)
                       : session_seed != 0 ? static_cast<uint32_t>(session_seed ^ (session_seed >> 32))
                                           : std::random_device{}());
      const T scale = static_cast<T>(1.0 / (1.0 - ratio));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      uint8_t* keep = mask->mutable_data<uint8_t>();
      for (int64_t i = 0; i < x->num_elements(); ++i) {
        keep[i] = NextUniform(rng) >= ratio ? 1 : 0;
        out[i] = keep[i] ? in[i] * scale : T(0);
      }
      return absl::OkStatus();
    });
  }

 private:
  static absl::StatusOr<bool> ReadTrainingMode(const Tensor* tensor) {
    if (tensor == nullptr) return false;
    if (tensor->dtype() != DataType::kBool || tensor->num_elements() != 1) {
      return absl::InvalidArgumentError("Dropout: training_mode must be a bool scalar");
    }
    return *tensor->data<uint8_t>() != 0;
  }

  static absl::StatusOr<double> ReadRatio(const Tensor* tensor) {
    if (tensor == nullptr) return 0.5;
    if (tensor->num_elements() != 1) {
      return absl::InvalidArgumentError("Dropout: ratio must be a scalar");
    }
    switch (tensor->dtype()) {
      case DataType::kFloat32:
        return *tensor->data<float>();
      case DataType::kFloat64:
        return *tensor->data<double>();
      default:
        return UnsupportedDtype("Dropout ratio", tensor->dtype());
    }
  }

  int opset_;
  float attribute_ratio_;  // Opsets 7-11 only.
  std::optional<int64_t> seed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateDropoutKernel(const KernelInit& init) {
  float ratio = 0.5f;
  if (init.opset() < 12) {
    TRAIND_ASSIGN_OR_RETURN(ratio, init.GetFloat("ratio", 0.5f));
    if (!(ratio >= 0 && ratio < 1)) {
      return init.Error(absl::StrCat("attribute 'ratio' is ", ratio, ", expected [0, 1)"));
    }
  }
  std::optional<int64_t> seed;
  if (init.HasAttribute("seed")) {
    TRAIND_ASSIGN_OR_RETURN(seed, init.GetInt("seed", std::nullopt));
  }
  return std::unique_ptr<Kernel>(new DropoutKernel(init.opset(), ratio, seed));
}

// dx = dy * mask / (1 - ratio) in training; the mask is the forward node's second output, which the gradient
// needs (GenerateArtifacts adds it where a model omits it). Without a mask the node must be in inference mode
// or have ratio 0, where it is the identity.
absl::Status DropoutGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  const bool has_mask = g.node().output_size() > 1 && !g.O(1).empty();
  if (!has_mask) {
    if (g.num_inputs() > 2 && !g.I(2).empty()) {
      return absl::UnimplementedError("Dropout with a training_mode input needs its mask output for a gradient");
    }
    g.Emit("Identity", {g.GO(0)}, {g.GI(0)});
    return absl::OkStatus();
  }
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string mask = g.Temp("mask"), masked = g.Temp("masked");
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {g.O(1)}, {mask}), "to", type);
  g.Emit("Mul", {g.GO(0), mask}, {masked});
  // scale = 1 / (1 - ratio); ratio is the optional second input (default 0.5) or, before opset 12, an attribute.
  std::string ratio;
  if (g.opset() >= 12) {
    if (g.num_inputs() > 1 && !g.I(1).empty()) {
      ratio = g.Temp("ratio");
      GradientRuleContext::SetIntAttr(g.Emit("Cast", {g.I(1)}, {ratio}), "to", type);
    } else {
      ratio = g.ScalarConstant(0.5, type);
    }
  } else {
    ratio = g.ScalarConstant(g.FloatAttr("ratio", 0.5f), type);
  }
  const std::string keep = g.Temp("keep");
  g.Emit("Sub", {g.ScalarConstant(1.0, type), ratio}, {keep});
  g.Emit("Div", {masked, keep}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
