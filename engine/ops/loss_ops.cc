// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12/13).
//
// Input [N, C, d1, ...] is viewed as [N, C, D] with D = d1 * ...; targets are [N, d1, ...]
// (int32 or int64). For each position p = (n, d) with target t:
//   loss[p] = -w[t] * input[n, t, d],  w = the weight input (or all ones),
// except targets equal to ignore_index, which contribute loss 0 and weight 0.
// reduction "none" returns loss with the target's shape; "sum" the sum; "mean" the weighted mean
//   sum(loss) / sum(w[t] over non-ignored positions)
// (the ONNX definition, also PyTorch's); when every position is ignored that is 0/0 = NaN, as in the
// ONNX reference. A target outside [0, C) that is not ignore_index is an error.
//
// SoftmaxCrossEntropyLoss is the same on log_softmax(scores, axis 1), which it can also return as
// its optional second output.
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/axis_split.h"
#include "engine/ops/softmax_slab.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

enum class Reduction { kNone, kSum, kMean };

class LossKernel final : public Kernel {
 public:
  LossKernel(const char* name, bool softmax_first, Reduction reduction, std::optional<int64_t> ignore_index)
      : name_(name), softmax_first_(softmax_first), reduction_(reduction), ignore_index_(ignore_index) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* input, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* target, context.RequiredInput(1));
    const Tensor* weight = context.input(2);
    TRAIND_RETURN_IF_ERROR(CheckShapes(*input, *target, weight));
    const AxisSplit split = SplitAtAxis(input->shape(), 1);  // [N, C, D].
    return DispatchAmong<TRAIND_FLOAT_TYPES>(input->dtype(), name_, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      const T* log_prob = input->data<T>();
      if (softmax_first_) {
        // Output 1 is scratch when the node does not name it (AllocateOutput's contract).
        TRAIND_ASSIGN_OR_RETURN(Tensor * log_prob_out, context.AllocateOutput(1, input->dtype(), input->shape()));
        LogSoftmaxOverClasses(split, input->data<T>(), log_prob_out->mutable_data<T>(), context.threads());
        log_prob = log_prob_out->data<T>();
      }
      return DispatchAmong<int32_t, int64_t>(target->dtype(), name_, [&](auto target_tag) {
        using Index = typename decltype(target_tag)::type;
        return Gather<T>(context, split, log_prob, *target, target->data<Index>(),
                         weight == nullptr ? nullptr : weight->data<T>());
      });
    });
  }

 private:
  absl::Status CheckShapes(const Tensor& input, const Tensor& target, const Tensor* weight) const {
    bool ok = input.rank() >= 2 && target.rank() == input.rank() - 1 && target.dim(0) == input.dim(0);
    for (int64_t d = 2; ok && d < input.rank(); ++d) ok = target.dim(d - 1) == input.dim(d);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": input ", input.DebugString(), " and target ",
                                                     target.DebugString(), " are not [N, C, d...] and [N, d...]"));
    }
    if (weight != nullptr &&
        (weight->dtype() != input.dtype() || weight->rank() != 1 || weight->dim(0) != input.dim(1))) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": weight ", weight->DebugString(), " must be [C] of the input's dtype"));
    }
    return absl::OkStatus();
  }

  template <typename T>
  static void LogSoftmaxOverClasses(const AxisSplit& split, const T* x, T* y, ThreadPool& threads) {
    const int64_t blocks = (split.inner + kSoftmaxInnerBlock - 1) / kSoftmaxInnerBlock;
    const int64_t slab = split.axis_dim * split.inner;
    threads.ParallelFor(
        split.outer * blocks,
        RowsPerChunk(split.axis_dim * std::min(split.inner, kSoftmaxInnerBlock), kParallelElementThreshold / 8),
        [&](int64_t begin, int64_t end) {
          for (int64_t task = begin; task < end; ++task) {
            const int64_t o = task / blocks;
            const int64_t i0 = (task % blocks) * kSoftmaxInnerBlock;
            SoftmaxSlab(x + o * slab + i0, y + o * slab + i0, split.axis_dim, split.inner,
                        std::min(kSoftmaxInnerBlock, split.inner - i0),
                        /*log=*/true);
          }
        });
  }

  // Picks -w[t] * log_prob[n, t, d] per position and reduces. Sequential: one read per position
  // (N * D), negligible next to the N * C * D log softmax.
  template <typename T, typename Index>
  absl::Status Gather(KernelContext& context, const AxisSplit& split, const T* log_prob, const Tensor& target_tensor,
                      const Index* target, const T* weight) const {
    const int64_t classes = split.axis_dim;
    const int64_t positions_per_sample = split.inner;
    T* per_position = nullptr;
    if (reduction_ == Reduction::kNone) {
      TRAIND_ASSIGN_OR_RETURN(Tensor * loss, context.AllocateOutput(0, DataTypeOf<T>::value, target_tensor.shape()));
      per_position = loss->mutable_data<T>();
    }
    double loss_sum = 0;  // Double: a long sum of float losses keeps its precision.
    double weight_sum = 0;
    for (int64_t n = 0; n < split.outer; ++n) {
      for (int64_t d = 0; d < positions_per_sample; ++d) {
        const int64_t p = n * positions_per_sample + d;
        const int64_t t = static_cast<int64_t>(target[p]);
        T loss = 0;
        if (!(ignore_index_ && t == *ignore_index_)) {
          if (t < 0 || t >= classes) {
            return absl::InvalidArgumentError(
                absl::StrCat(name_, ": target ", t, " at position ", p, " is outside [0, ", classes, ")"));
          }
          const T w = weight == nullptr ? T(1) : weight[t];
          loss = -w * log_prob[(n * classes + t) * positions_per_sample + d];
          weight_sum += w;
        }
        if (per_position != nullptr) per_position[p] = loss;
        loss_sum += loss;
      }
    }
    if (reduction_ == Reduction::kNone) return absl::OkStatus();
    TRAIND_ASSIGN_OR_RETURN(Tensor * scalar, context.AllocateOutput(0, DataTypeOf<T>::value, {}));
    *scalar->mutable_data<T>() = static_cast<T>(reduction_ == Reduction::kSum ? loss_sum : loss_sum / weight_sum);
    return absl::OkStatus();
  }

  const char* name_;
  bool softmax_first_;
  Reduction reduction_;
  std::optional<int64_t> ignore_index_;
};

absl::StatusOr<std::unique_ptr<Kernel>> MakeLossKernel(const KernelInit& init, const char* name, bool softmax_first) {
  TRAIND_ASSIGN_OR_RETURN(std::string reduction_name, init.GetString("reduction", "mean"));
  Reduction reduction;
  if (reduction_name == "none") {
    reduction = Reduction::kNone;
  } else if (reduction_name == "sum") {
    reduction = Reduction::kSum;
  } else if (reduction_name == "mean") {
    reduction = Reduction::kMean;
  } else {
    return init.Error(
        absl::StrCat("attribute 'reduction' is '", reduction_name, "', expected 'none', 'sum' or 'mean'"));
  }
  std::optional<int64_t> ignore_index;
  if (init.HasAttribute("ignore_index")) {
    TRAIND_ASSIGN_OR_RETURN(ignore_index, init.GetInt("ignore_index", std::nullopt));
  }
  return std::unique_ptr<Kernel>(new LossKernel(name, softmax_first, reduction, ignore_index));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateNegativeLogLikelihoodLossKernel(const KernelInit& init) {
  return MakeLossKernel(init, "NegativeLogLikelihoodLoss", /*softmax_first=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxCrossEntropyLossKernel(const KernelInit& init) {
  return MakeLossKernel(init, "SoftmaxCrossEntropyLoss", /*softmax_first=*/true);
}

// Gradients (static input shape [N, C, d...]). With k[n, c, d] = 1 where c is the target of (n, d) and it is not
// ignored (else 0), and w the class weights (or ones), the loss of position (n, d) is -sum_c k w[c] x[n, c, d]
// for the log-probabilities x, so
//   d loss / d x = -dy * k * w                      ("sum": the scalar dy; "mean": dy / W, W = sum k * w)
//   d loss / d w[c] = -sum dy * k[., c, .] x[., c, .]  ("mean": (A_c - loss * B_c) * dy / W with
//                                                       A_c = -sum k x over class c and B_c = sum k over it).
namespace {

struct LossTerms {
  std::string kept_one_hot;  // k
  std::string weighted;      // k * w
  std::string reduction;
  std::vector<int64_t> non_class_axes;
};

absl::StatusOr<LossTerms> EmitLossTerms(GradientRuleContext& g) {
  // The class count must be static; the other dimensions (a batch) may be dynamic.
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.PartialShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(int32_t target_type, g.ElemType(g.I(1)));
  if (shape.size() < 2) return absl::InvalidArgumentError("loss input needs a class axis");
  if (shape[1] < 1) return absl::UnimplementedError("loss gradients need a static class count");
  if (shape[1] > (int64_t{1} << 24)) return absl::UnimplementedError("loss gradients for more than 2^24 classes");
  LossTerms terms;
  terms.reduction = "mean";
  for (const auto& attribute : g.node().attribute()) {
    if (attribute.name() == "reduction") terms.reduction = attribute.s();
  }
  if (terms.reduction != "none" && terms.reduction != "sum" && terms.reduction != "mean") {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduction '", terms.reduction, "'"));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d != 1) terms.non_class_axes.push_back(static_cast<int64_t>(d));
  }
  std::string target = g.I(1);
  if (target_type != onnx::TensorProto::INT64) {
    target = g.Temp("target64");
    GradientRuleContext::SetIntAttr(g.Emit("Cast", {g.I(1)}, {target}), "to", onnx::TensorProto::INT64);
  }
  // A [1, C, 1, ...] view of per-class values.
  std::vector<int64_t> class_shape(shape.size(), 1);
  class_shape[1] = shape[1];
  std::vector<int64_t> class_ids(static_cast<size_t>(shape[1]));
  for (int64_t c = 0; c < shape[1]; ++c) class_ids[c] = c;
  const std::string target_kept = g.Temp("target_kept"), classes = g.Temp("classes"), hit = g.Temp("is_target"),
                    one_hot = g.Temp("one_hot");
  g.Emit("Unsqueeze", {target, g.Int64Constant({1})}, {target_kept});
  g.Emit("Reshape", {g.Int64Constant(class_ids), g.Int64Constant(class_shape)}, {classes});
  g.Emit("Equal", {target_kept, classes}, {hit});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {hit}, {one_hot}), "to", type);
  terms.kept_one_hot = one_hot;
  for (const auto& attribute : g.node().attribute()) {
    if (attribute.name() != "ignore_index") continue;
    const std::string ignored = g.Temp("ignored"), kept = g.Temp("kept"), kept_mask = g.Temp("kept_mask"),
                      kept_mask_u = g.Temp("kept_mask_kept"), masked = g.Temp("one_hot_kept");
    g.Emit("Equal", {target, g.Int64Constant({attribute.i()})}, {ignored});
    g.Emit("Not", {ignored}, {kept});
    GradientRuleContext::SetIntAttr(g.Emit("Cast", {kept}, {kept_mask}), "to", type);
    g.Emit("Unsqueeze", {kept_mask, g.Int64Constant({1})}, {kept_mask_u});
    g.Emit("Mul", {one_hot, kept_mask_u}, {masked});
    terms.kept_one_hot = masked;
  }
  terms.weighted = terms.kept_one_hot;
  if (g.num_inputs() > 2 && !g.I(2).empty()) {
    const std::string class_weights = g.Temp("class_weights");
    terms.weighted = g.Temp("weighted");
    g.Emit("Reshape", {g.I(2), g.Int64Constant(class_shape)}, {class_weights});
    g.Emit("Mul", {terms.kept_one_hot, class_weights}, {terms.weighted});
  }
  return terms;
}

// dy scaled for the reduction: unsqueezed to [N, 1, d...] ("none"), divided by W ("mean"), as is ("sum").
std::string ReductionFactor(GradientRuleContext& g, const LossTerms& terms, const std::string& dy) {
  if (terms.reduction == "sum") return dy;
  const std::string factor = g.Temp("dy_factor");
  if (terms.reduction == "none") {
    g.Emit("Unsqueeze", {dy, g.Int64Constant({1})}, {factor});
  } else {
    const std::string total = g.Temp("weight_total");
    GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", {terms.weighted}, {total}), "keepdims", 0);
    g.Emit("Div", {dy, total}, {factor});
  }
  return factor;
}

void EmitLogProbabilityGradient(GradientRuleContext& g, const LossTerms& terms, const std::string& dy,
                                const std::string& out) {
  const std::string scaled = g.Temp("scaled");
  g.Emit("Mul", {terms.weighted, ReductionFactor(g, terms, dy)}, {scaled});
  g.Emit("Neg", {scaled}, {out});
}

void EmitClassWeightGradient(GradientRuleContext& g, const LossTerms& terms, const std::string& log_prob,
                             const std::string& dy, const std::string& out) {
  const std::string picked = g.Temp("picked_log_prob"), factor = ReductionFactor(g, terms, dy);
  g.Emit("Mul", {terms.kept_one_hot, log_prob}, {picked});
  auto sum_per_class = [&](const std::string& value) {
    const std::string sum = g.Temp("per_class");
    GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", {value, g.Int64Constant(terms.non_class_axes)}, {sum}),
                                    "keepdims", 0);
    return sum;
  };
  if (terms.reduction != "mean") {
    const std::string scaled = g.Temp("picked_dy");
    g.Emit("Mul", {picked, factor}, {scaled});
    g.Emit("Neg", {sum_per_class(scaled)}, {out});
    return;
  }
  const std::string a = g.Temp("a"), loss_b = g.Temp("loss_b"), difference = g.Temp("a_minus_loss_b");
  g.Emit("Neg", {sum_per_class(picked)}, {a});
  g.Emit("Mul", {g.O(0), sum_per_class(terms.kept_one_hot)}, {loss_b});
  g.Emit("Sub", {a, loss_b}, {difference});
  g.Emit("Mul", {difference, factor}, {out});
}

}  // namespace

absl::Status NegativeLogLikelihoodLossGradient(GradientRuleContext& g) {
  const bool weight_gradient = g.num_inputs() > 2 && g.NeedsGI(2);
  if (!g.NeedsGI(0) && !weight_gradient) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(LossTerms terms, EmitLossTerms(g));
  if (g.NeedsGI(0)) EmitLogProbabilityGradient(g, terms, g.GO(0), g.GI(0));
  if (weight_gradient) EmitClassWeightGradient(g, terms, g.I(0), g.GO(0), g.GI(2));
  return absl::OkStatus();
}

// SoftmaxCrossEntropyLoss = NegativeLogLikelihoodLoss(LogSoftmax(scores, axis 1)), whose log-probabilities may
// also be an output: with G the gradient reaching them, dScores = G - softmax * sum_c G.
absl::Status SoftmaxCrossEntropyLossGradient(GradientRuleContext& g) {
  const bool weight_gradient = g.num_inputs() > 2 && g.NeedsGI(2) && g.HasGO(0);
  if (g.num_inputs() > 2 && g.NeedsGI(2) && !g.HasGO(0)) {
    // Only the log-probabilities carry a gradient, and they do not depend on the weights.
    TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(2)));
    const std::string shape = g.Temp("weight_shape");
    g.Emit("Shape", {g.I(2)}, {shape});
    g.Emit("Identity", {g.Zeros(shape, type)}, {g.GI(2)});
  }
  if (!g.NeedsGI(0) && !weight_gradient) return absl::OkStatus();
  std::string log_prob;
  if (g.node().output_size() > 1 && !g.O(1).empty()) {
    log_prob = g.O(1);
  } else {
    const std::string normalizer = g.Temp("log_sum_exp");
    log_prob = g.Temp("log_prob");
    onnx::NodeProto* lse = g.Emit("ReduceLogSumExp", {g.I(0)}, {normalizer});
    GradientRuleContext::SetIntsAttr(lse, "axes", {1});
    GradientRuleContext::SetIntAttr(lse, "keepdims", 1);
    g.Emit("Sub", {g.I(0), normalizer}, {log_prob});
  }
  std::optional<LossTerms> terms;
  if (g.HasGO(0)) {
    TRAIND_ASSIGN_OR_RETURN(terms, EmitLossTerms(g));
  }
  if (weight_gradient) EmitClassWeightGradient(g, *terms, log_prob, g.GO(0), g.GI(2));
  if (!g.NeedsGI(0)) return absl::OkStatus();
  std::vector<std::string> parts;
  if (terms.has_value()) {
    parts.push_back(g.Temp("dlogp_loss"));
    EmitLogProbabilityGradient(g, *terms, g.GO(0), parts.back());
  }
  if (g.HasGO(1)) parts.push_back(g.GO(1));
  std::string dlogp = parts.front();
  if (parts.size() > 1) {
    dlogp = g.Temp("dlogp");
    g.Emit("Sum", parts, {dlogp});
  }
  const std::string prob = g.Temp("prob"), total = g.Temp("dlogp_total"), spread = g.Temp("prob_total");
  g.Emit("Exp", {log_prob}, {prob});
  GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", {dlogp, g.Int64Constant({1})}, {total}), "keepdims", 1);
  g.Emit("Mul", {prob, total}, {spread});
  g.Emit("Sub", {dlogp, spread}, {g.GI(0)});
  return absl::OkStatus();
}

}  // namespace traind::engine
