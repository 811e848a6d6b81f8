#include "engine/autodiff/gradient_builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/model/tensor_proto.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/node_list.h"
#include "engine/runtime/session.h"
#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

namespace traind::engine {
namespace {

// What evaluating one constant integer subgraph of a client's model (shapes, axes) may allocate.
constexpr int64_t kMaxConstantEvaluationBytes = int64_t{64} << 20;

// Values of unknown type (shape inference found none) may carry gradients; integer and bool values never do.
bool MayCarryGradient(const ValueFacts* facts) {
  return facts == nullptr || facts->elem_type == 0 || IsFloatingPointType(facts->elem_type);
}

ValueFacts FactsOf(const onnx::TypeProto& type) {
  ValueFacts facts;
  if (!type.has_tensor_type()) return facts;
  facts.elem_type = type.tensor_type().elem_type();
  if (!type.tensor_type().has_shape()) return facts;
  facts.has_rank = true;
  for (const auto& dim : type.tensor_type().shape().dim()) {
    facts.partial_dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    facts.dim_params.push_back(dim.has_dim_param() ? dim.dim_param() : "");
  }
  facts.has_static_shape = true;
  for (const auto& dim : type.tensor_type().shape().dim()) {
    if (!dim.has_dim_value()) {
      facts.has_static_shape = false;
      break;
    }
    facts.dims.push_back(dim.dim_value());
  }
  return facts;
}

class Builder {
 public:
  Builder(onnx::ModelProto model, const GradientGraphOptions& options)
      : model_(std::move(model)),
        graph_(*model_.mutable_graph()),
        options_(options),
        registry_(options.registry != nullptr ? *options.registry : OpRegistry::Global()) {}

  absl::StatusOr<onnx::ModelProto> Build() {
    CollectFacts();
    for (const auto& opset : model_.opset_import()) {
      opsets_[opset.domain() == "ai.onnx" ? "" : opset.domain()] = static_cast<int>(opset.version());
    }
    if (opsets_[""] < kMinGradientOpset) {
      return absl::UnimplementedError(absl::StrCat("training needs ai.onnx opset ", kMinGradientOpset,
                                                   " or later; the model imports ", opsets_[""]));
    }
    const bool seeded = !options_.output_gradients.empty();
    if (seeded != options_.loss.empty()) {
      return absl::InvalidArgumentError("differentiate either a loss or values with given output gradients");
    }
    for (const auto& [value, gradient] : options_.output_gradients) {
      const ValueFacts* facts = Facts(value);
      if (facts == nullptr || !IsFloatingPointType(facts->elem_type)) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", value, "' must be a floating-point value of the graph to be differentiated"));
      }
      seeds_.insert(value);
    }
    const ValueFacts* loss = seeded ? nullptr : Facts(options_.loss);
    if (!seeded &&
        (loss == nullptr || !IsFloatingPointType(loss->elem_type) || !loss->has_static_shape || !loss->dims.empty())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the loss '", options_.loss, "' must be a floating-point scalar of the graph"));
    }
    if (!seeded) seeds_.insert(options_.loss);
    const int num_forward_nodes = graph_.node_size();
    IndexForwardGraph(num_forward_nodes);
    MarkDependents();
    std::vector<bool> on_path = NodesBetweenParametersAndLoss(num_forward_nodes);

    if (seeded) {
      // Seeds: the given gradients of the differentiated values.
      for (const auto& [value, gradient] : options_.output_gradients) partials_[value].push_back(gradient);
    } else {
      // Seed: d(loss)/d(loss) = 1.
      GradientRuleContext seed_context(graph_.node(0), 0, {}, {}, Callbacks());
      partials_[options_.loss].push_back(seed_context.ScalarConstant(1.0, loss->elem_type));
    }

    for (int n = num_forward_nodes - 1; n >= 0; --n) {
      if (!on_path[n]) continue;
      const onnx::NodeProto node = graph_.node(n);  // A copy: emitting nodes may reallocate the graph.
      std::vector<std::string> output_gradients;
      bool any_output_gradient = false;
      for (const std::string& output : node.output()) {
        output_gradients.push_back(FinalGradient(output));
        any_output_gradient |= !output_gradients.back().empty();
      }
      if (!any_output_gradient) continue;
      if (const std::string gelu_input = ExactGeluInput(node); !gelu_input.empty()) {
        // The whole GELU at once; its inner nodes get no gradients, so the loop passes them by.
        if (requires_grad_.contains(gelu_input)) {
          const std::string part = TempName(gelu_input + "_grad_part");
          GradientRuleContext context(node, OpsetOf(node), output_gradients, {part}, Callbacks());
          context.Emit("GeluGrad", {output_gradients[0], gelu_input}, {part})->set_domain(kTraindTrainingDomain);
          partials_[gelu_input].push_back(part);
        }
        continue;
      }
      if (const std::optional<AttentionMatch> attention = MatchAttention(node); attention.has_value()) {
        // The whole attention chain at once, as for GELU: its inner values get no gradients.
        EmitAttentionGradient(node, *attention, output_gradients[0]);
        continue;
      }
      const OpRegistration* registration = registry_.Find(node.domain(), node.op_type(), OpsetOf(node));
      if (registration != nullptr && registration->gradient.state == GradientState::kNotDifferentiable) continue;
      if (registration != nullptr && registration->gradient.state == GradientState::kViaVersionConversion) {
        return absl::InternalError(absl::StrCat(node.op_type(), " (node '", node.name(), "') resolved to a pre-opset-",
                                                kMinGradientOpset, " registration after version conversion"));
      }
      if (registration == nullptr || registration->gradient.rule == nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            "no gradient rule for ", node.op_type(), " (node '", node.name(), "'), which lies between the loss and ",
            absl::StrJoin(ParametersBehind(node), ", ")));
      }
      std::vector<std::string> input_gradients;
      for (const std::string& input : node.input()) {
        const ValueFacts* facts = Facts(input);
        const bool needed = !input.empty() && requires_grad_.contains(input) && MayCarryGradient(facts);
        input_gradients.push_back(needed ? TempName(input + "_grad_part") : "");
      }
      GradientRuleContext context(node, OpsetOf(node), output_gradients, input_gradients, Callbacks());
      const int first_emitted = graph_.node_size();
      if (absl::Status status = registration->gradient.rule(context); !status.ok()) {
        return absl::Status(status.code(), absl::StrCat("gradient of ", context.Label(), ": ", status.message()));
      }
      // Invariant of every rule: each requested input gradient is produced.
      absl::flat_hash_set<std::string> produced;
      for (int e = first_emitted; e < graph_.node_size(); ++e) {
        produced.insert(graph_.node(e).output().begin(), graph_.node(e).output().end());
      }
      for (size_t i = 0; i < input_gradients.size(); ++i) {
        if (!input_gradients[i].empty() && !produced.contains(input_gradients[i])) {
          return absl::InternalError(absl::StrCat("the gradient rule of ", context.Label(),
                                                  " did not produce the gradient of input ", i));
        }
      }
      for (size_t i = 0; i < input_gradients.size(); ++i) {
        if (!input_gradients[i].empty()) partials_[node.input(i)].push_back(input_gradients[i]);
      }
    }

    for (const std::string& parameter : options_.parameters) {
      const std::string gradient = FinalGradient(parameter);
      if (gradient.empty()) {
        return absl::InvalidArgumentError(
            seeded ? absl::StrCat("no differentiated output depends on '", parameter, "'")
                   : absl::StrCat("the loss '", options_.loss, "' does not depend on parameter '", parameter, "'"));
      }
      GradientRuleContext context(graph_.node(0), 0, {}, {}, Callbacks());
      context.Emit("Identity", {gradient}, {GradientName(parameter)});
      // The gradient has its parameter's type, symbolic dims included.
      onnx::ValueInfoProto* output = graph_.add_output();
      output->set_name(GradientName(parameter));
      *output->mutable_type() = types_.at(parameter);
    }
    RecomputeCheapForwardValues(num_forward_nodes);
    ImportTraindDomainIfUsed();
    return std::move(model_);
  }

 private:
  void IndexForwardGraph(int num_forward_nodes) {
    for (int n = 0; n < num_forward_nodes; ++n) {
      const onnx::NodeProto& node = graph_.node(n);
      for (const auto& output : node.output()) {
        if (!output.empty()) forward_producer_[output] = n;
      }
      for (const auto& input : node.input()) {
        if (!input.empty()) ++forward_readers_[input];
      }
    }
    for (int i = 0; i < graph_.initializer_size(); ++i) initializer_index_[graph_.initializer(i).name()] = i;
    for (const auto& output : graph_.output()) graph_output_names_.insert(output.name());
  }

  // The forward node that makes `value` when it is the standard `op`; null otherwise.
  const onnx::NodeProto* ForwardProducer(const std::string& value, absl::string_view op) const {
    auto it = forward_producer_.find(value);
    if (it == forward_producer_.end()) return nullptr;
    const onnx::NodeProto& node = graph_.node(it->second);
    const bool standard = node.domain().empty() || node.domain() == "ai.onnx";
    return standard && node.op_type() == op ? &node : nullptr;
  }

  // A value only the next node of a fused pattern reads: one forward reader, not a graph output nor a seed.
  bool PrivateToPattern(const std::string& value) const {
    auto readers = forward_readers_.find(value);
    return readers != forward_readers_.end() && readers->second == 1 && !graph_output_names_.contains(value) &&
           !seeds_.contains(value);
  }

  // A float or double constant of one element (an initializer that is not trained, or a Constant node), or none.
  std::optional<double> ScalarFloatConstant(const std::string& value) const {
    if (std::find(options_.parameters.begin(), options_.parameters.end(), value) != options_.parameters.end()) {
      return std::nullopt;
    }
    const onnx::TensorProto* tensor = nullptr;
    if (auto it = initializer_index_.find(value); it != initializer_index_.end()) {
      tensor = &graph_.initializer(it->second);
    } else if (const onnx::NodeProto* constant = ForwardProducer(value, "Constant"); constant != nullptr) {
      for (const auto& attribute : constant->attribute()) {
        if (attribute.name() == "value_float") return attribute.f();
        if (attribute.name() == "value" && attribute.has_t()) tensor = &attribute.t();
      }
    }
    if (tensor == nullptr || tensor->data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
    absl::StatusOr<Tensor> scalar = TensorFromProto(*tensor, /*max_elements=*/1);
    if (!scalar.ok() || scalar->num_elements() != 1) return std::nullopt;
    if (scalar->dtype() == DataType::kFloat32) return scalar->data<float>()[0];
    if (scalar->dtype() == DataType::kFloat64) return scalar->data<double>()[0];
    return std::nullopt;
  }

  bool IsScalarConstant(const std::string& value, double expected) const {
    const std::optional<double> scalar = ScalarFloatConstant(value);
    return scalar.has_value() && std::fabs(*scalar - expected) <= 1e-6 * std::fabs(expected);
  }

  // Exact GELU as exporters write it, x * 0.5 * (1 + erf(x / sqrt(2))): PyTorch's export of F.gelu, Mul(Mul(x,
  // 1 + erf), 0.5), and the other nestings of the three factors, with Div by sqrt(2) or Mul by 1/sqrt(2) and the
  // operands of each commutative op in either order. When `root` is the last Mul of such a chain whose inner
  // values feed nothing else, returns x; otherwise "". The backward of the chain is then one GeluGrad(dY, x)
  // instead of its nodes' rules: a pass over the feed-forward width instead of nine, and nothing alive but x and
  // dY, where the rules' backward kept (or recomputed) x / sqrt(2) and 1 + erf beside x and made five temporaries.
  std::string ExactGeluInput(const onnx::NodeProto& root) const {
    if (root.op_type() != "Mul" || !(root.domain().empty() || root.domain() == "ai.onnx") ||
        root.input_size() != 2 || root.output_size() != 1) {
      return "";
    }
    const ValueFacts* facts = Facts(root.output(0));
    if (facts == nullptr ||
        (facts->elem_type != onnx::TensorProto::FLOAT && facts->elem_type != onnx::TensorProto::DOUBLE)) {
      return "";
    }
    // The three factors of the product: one operand of the root is itself a Mul that only the root reads.
    for (int nested = 0; nested < 2; ++nested) {
      const std::string& inner_value = root.input(nested);
      const onnx::NodeProto* inner = ForwardProducer(inner_value, "Mul");
      if (inner == nullptr || inner->input_size() != 2 || !PrivateToPattern(inner_value)) continue;
      const std::string factors[3] = {inner->input(0), inner->input(1), root.input(1 - nested)};
      for (int half = 0; half < 3; ++half) {
        if (!IsScalarConstant(factors[half], 0.5)) continue;
        for (int cdf_term = 0; cdf_term < 3; ++cdf_term) {
          if (cdf_term == half) continue;
          const std::string& x = factors[3 - half - cdf_term];
          if (OnePlusErfOfScaled(factors[cdf_term], x)) return x;
        }
      }
    }
    return "";
  }

  // `value` is 1 + erf(x / sqrt(2)) (or erf(x * (1 / sqrt(2))) + 1, ...), its inner values read by nothing else.
  bool OnePlusErfOfScaled(const std::string& value, const std::string& x) const {
    const onnx::NodeProto* add = ForwardProducer(value, "Add");
    if (add == nullptr || add->input_size() != 2 || !PrivateToPattern(value)) return false;
    for (int erf_side = 0; erf_side < 2; ++erf_side) {
      if (!IsScalarConstant(add->input(1 - erf_side), 1.0)) continue;
      const std::string& erf_value = add->input(erf_side);
      const onnx::NodeProto* erf = ForwardProducer(erf_value, "Erf");
      if (erf == nullptr || erf->input_size() != 1 || !PrivateToPattern(erf_value)) continue;
      const std::string& scaled = erf->input(0);
      if (!PrivateToPattern(scaled)) continue;
      if (const onnx::NodeProto* div = ForwardProducer(scaled, "Div");
          div != nullptr && div->input_size() == 2 && div->input(0) == x && IsScalarConstant(div->input(1), M_SQRT2)) {
        return true;
      }
      if (const onnx::NodeProto* mul = ForwardProducer(scaled, "Mul"); mul != nullptr && mul->input_size() == 2) {
        for (int side = 0; side < 2; ++side) {
          if (mul->input(side) == x && IsScalarConstant(mul->input(1 - side), M_SQRT1_2)) return true;
        }
      }
    }
    return false;
  }

  // Scaled dot-product attention as exporters write it: `root` = MatMul(P, V), P = Softmax(S') over the last axis,
  // S' = S * c, c * S or S / c for a scalar constant c (or S' = S), S = MatMul(Q, B); S, S' and P read by nothing
  // else; float32; Q, B and V of one rank >= 2 with batch dims known equal (MatMul would broadcast them). The
  // backward of the chain is then one ScaledDotProductAttentionGrad(dO, Q, B, V, P) (engine/ops/attention_ops.h),
  // which keeps each head's scores in the cache, instead of the four nodes' rules: two products, a Mul, a
  // SoftmaxGrad and two more products, each a pass over the [..., Lq, Lk] scores. Where B = Transpose(K) swaps K's
  // last two axes, the gradient goes to K directly (transB) rather than through the Transpose's rule.
  struct AttentionMatch {
    std::string q, b, v, p;
    float scale = 1.0f;
    bool trans_b = false;
  };

  std::optional<AttentionMatch> MatchAttention(const onnx::NodeProto& root) const {
    if (root.op_type() != "MatMul" || !(root.domain().empty() || root.domain() == "ai.onnx") ||
        root.input_size() != 2 || root.output_size() != 1) {
      return std::nullopt;
    }
    AttentionMatch match;
    match.p = root.input(0);
    match.v = root.input(1);
    const onnx::NodeProto* softmax = ForwardProducer(match.p, "Softmax");
    if (softmax == nullptr || softmax->input_size() != 1 || !PrivateToPattern(match.p)) return std::nullopt;
    const ValueFacts* p_facts = Facts(match.p);
    if (p_facts == nullptr || p_facts->elem_type != onnx::TensorProto::FLOAT || !p_facts->has_rank ||
        p_facts->partial_dims.size() < 2) {
      return std::nullopt;
    }
    const int64_t rank = static_cast<int64_t>(p_facts->partial_dims.size());
    // The last axis: opset 13's default, or named; before 13 the input coerced to 2-D at the last axis is the same.
    int64_t axis = OpsetOf(*softmax) >= 13 ? -1 : 1;
    for (const auto& attribute : softmax->attribute()) {
      if (attribute.name() == "axis") axis = attribute.i();
    }
    if (axis != -1 && axis != rank - 1) return std::nullopt;
    std::string scores = softmax->input(0);
    if (!PrivateToPattern(scores)) return std::nullopt;
    if (const onnx::NodeProto* scaling = ForwardProducer(scores, "Mul");
        scaling != nullptr && scaling->input_size() == 2) {
      const int factor = ScalarFloatConstant(scaling->input(1)).has_value() ? 1 : 0;
      const std::optional<double> c = ScalarFloatConstant(scaling->input(factor));
      if (!c.has_value()) return std::nullopt;
      match.scale = static_cast<float>(*c);
      scores = scaling->input(1 - factor);
    } else if (const onnx::NodeProto* division = ForwardProducer(scores, "Div");
               division != nullptr && division->input_size() == 2) {
      const std::optional<double> c = ScalarFloatConstant(division->input(1));
      if (!c.has_value() || *c == 0.0) return std::nullopt;
      match.scale = static_cast<float>(1.0 / *c);
      scores = division->input(0);
    }
    if (!std::isfinite(match.scale)) return std::nullopt;
    const onnx::NodeProto* product = ForwardProducer(scores, "MatMul");
    if (product == nullptr || product->input_size() != 2 || (scores != softmax->input(0) && !PrivateToPattern(scores))) {
      return std::nullopt;
    }
    match.q = product->input(0);
    match.b = product->input(1);
    if (const onnx::NodeProto* transpose = ForwardProducer(match.b, "Transpose");
        transpose != nullptr && transpose->input_size() == 1 && SwapsLastTwoAxes(*transpose, rank)) {
      match.b = transpose->input(0);
      match.trans_b = true;
    }
    // Every operand float32 of P's rank, the batch dims equal (static and equal, or the same symbol).
    const ValueFacts* q_facts = Facts(match.q);
    const ValueFacts* b_facts = Facts(match.b);
    const ValueFacts* v_facts = Facts(match.v);
    for (const ValueFacts* facts : {q_facts, b_facts, v_facts}) {
      if (facts == nullptr || facts->elem_type != onnx::TensorProto::FLOAT || !facts->has_rank ||
          static_cast<int64_t>(facts->partial_dims.size()) != rank) {
        return std::nullopt;
      }
    }
    for (int64_t i = 0; i + 2 < rank; ++i) {
      const int64_t dim = q_facts->partial_dims[i];
      const std::string& param = q_facts->dim_params[i];
      for (const ValueFacts* facts : {b_facts, v_facts}) {
        const bool same = dim >= 0 ? facts->partial_dims[i] == dim
                                   : facts->partial_dims[i] < 0 && !param.empty() && facts->dim_params[i] == param;
        if (!same) return std::nullopt;
      }
    }
    return match;
  }

  void EmitAttentionGradient(const onnx::NodeProto& root, const AttentionMatch& match, const std::string& dout) {
    std::vector<std::string> gradients;
    bool any = false;
    for (const std::string* input : {&match.q, &match.b, &match.v}) {
      const bool needed = requires_grad_.contains(*input) && MayCarryGradient(Facts(*input));
      gradients.push_back(needed ? TempName(*input + "_grad_part") : "");
      any |= needed;
    }
    if (!any) return;
    GradientRuleContext context(root, OpsetOf(root), {dout}, gradients, Callbacks());
    onnx::NodeProto* node =
        context.Emit("ScaledDotProductAttentionGrad", {dout, match.q, match.b, match.v, match.p}, gradients);
    node->set_domain(kTraindTrainingDomain);
    GradientRuleContext::SetFloatAttr(node, "scale", match.scale);
    GradientRuleContext::SetIntAttr(node, "transB", match.trans_b ? 1 : 0);
    const std::string* inputs[] = {&match.q, &match.b, &match.v};
    for (int i = 0; i < 3; ++i) {
      if (!gradients[i].empty()) partials_[*inputs[i]].push_back(gradients[i]);
    }
  }

  // Elementwise ops without attributes that cost one pass over their output and give the same bits every time.
  static bool IsCheapElementwise(const onnx::NodeProto& node) {
    static const auto* const kOps =
        new absl::flat_hash_set<std::string>{"Add", "Sub", "Mul", "Div", "Neg", "Erf", "Tanh", "Sigmoid"};
    return (node.domain().empty() || node.domain() == "ai.onnx") && kOps->contains(node.op_type()) &&
           node.output_size() == 1 && node.attribute_size() == 0;
  }

  // Rematerialisation of cheap values. A forward value the backward pass reads stays alive from the forward pass to
  // its last backward reader, across every later layer's forward and backward. When a short chain of cheap
  // elementwise ops (IsCheapElementwise, at most kMaxRecomputedChain long) makes it from values that stay alive
  // anyway — graph inputs, initializers, constants, tiny values, and values the backward pass reads itself — the
  // chain is run again in the backward pass, right before the value's first backward reader, and the forward value
  // dies with its last forward reader. PyTorch's exported GELU, x * 0.5 * (1 + erf(x / sqrt(2))), is the case that
  // matters: its gradient would keep x / sqrt(2) and 1 + erf(...) beside x, three activations of the feed-forward
  // width where x alone suffices. The recomputation gives the same bits as the forward pass (same kernels, same
  // inputs), and since an elementwise op's output is at least as large as each of its inputs, the values it extends
  // the life of are never larger than the one it frees.
  void RecomputeCheapForwardValues(int num_forward_nodes) {
    constexpr int kMaxRecomputedChain = 3;
    constexpr int64_t kTinyElements = 1024;
    absl::flat_hash_map<std::string, int> forward_producer;
    for (int n = 0; n < num_forward_nodes; ++n) {
      for (const auto& output : graph_.node(n).output()) {
        if (!output.empty()) forward_producer[output] = n;
      }
    }
    absl::flat_hash_set<std::string> read_by_backward;
    for (int n = num_forward_nodes; n < graph_.node_size(); ++n) {
      for (const auto& input : graph_.node(n).input()) {
        if (forward_producer.contains(input)) read_by_backward.insert(input);
      }
    }
    absl::flat_hash_set<std::string> graph_outputs;
    for (const auto& output : graph_.output()) graph_outputs.insert(output.name());
    auto always_alive = [&](const std::string& value) {
      auto producer = forward_producer.find(value);
      if (producer == forward_producer.end()) return true;  // a graph input or an initializer
      if (graph_.node(producer->second).op_type() == "Constant" || graph_outputs.contains(value)) return true;
      const ValueFacts* facts = Facts(value);
      if (facts == nullptr || !facts->has_static_shape) return false;
      int64_t elements = 1;
      for (int64_t dim : facts->dims) elements *= dim;
      return elements <= kTinyElements;
    };
    // The length of the cheap chain that remakes each recomputable forward value (in forward order, so inputs come
    // first).
    absl::flat_hash_map<std::string, int> chain_length;
    for (int n = 0; n < num_forward_nodes; ++n) {
      const onnx::NodeProto& node = graph_.node(n);
      if (!IsCheapElementwise(node) || node.output(0).empty() || graph_outputs.contains(node.output(0))) continue;
      int length = 1;
      bool recomputable = true;
      for (const auto& input : node.input()) {
        if (input.empty()) {
          recomputable = false;
        } else if (auto chained = chain_length.find(input); chained != chain_length.end()) {
          length = std::max(length, chained->second + 1);
        } else if (!always_alive(input) && !read_by_backward.contains(input)) {
          recomputable = false;
        }
      }
      if (recomputable && length <= kMaxRecomputedChain) chain_length[node.output(0)] = length;
    }
    bool any = false;
    for (const std::string& value : read_by_backward) any |= chain_length.contains(value);
    if (!any) return;

    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (int n = 0; n < num_forward_nodes; ++n) *nodes.Add() = graph_.node(n);
    absl::flat_hash_map<std::string, std::string> recomputed;  // forward value -> its backward copy
    std::function<std::string(const std::string&)> recompute = [&](const std::string& value) -> std::string {
      if (auto done = recomputed.find(value); done != recomputed.end()) return done->second;
      onnx::NodeProto copy = graph_.node(forward_producer.at(value));
      copy.set_name(absl::StrCat(copy.name().empty() ? copy.op_type() : copy.name(), "_Grad/Recompute"));
      for (int i = 0; i < copy.input_size(); ++i) {
        if (chain_length.contains(copy.input(i))) copy.set_input(i, recompute(copy.input(i)));
      }
      const std::string name = TempName(value + "_recomputed");
      copy.set_output(0, name);
      *nodes.Add() = std::move(copy);
      recomputed[value] = name;
      return name;
    };
    for (int n = num_forward_nodes; n < graph_.node_size(); ++n) {
      onnx::NodeProto node = graph_.node(n);
      for (int i = 0; i < node.input_size(); ++i) {
        if (read_by_backward.contains(node.input(i)) && chain_length.contains(node.input(i))) {
          node.set_input(i, recompute(node.input(i)));
        }
      }
      *nodes.Add() = std::move(node);
    }
    graph_.mutable_node()->Swap(&nodes);
  }

  // Rules may emit fused gradient ops of traind's own domain; the model must then import it.
  void ImportTraindDomainIfUsed() {
    if (opsets_.count(kTraindTrainingDomain) > 0) return;
    for (const auto& node : graph_.node()) {
      if (node.domain() == kTraindTrainingDomain) {
        onnx::OperatorSetIdProto* opset = model_.add_opset_import();
        opset->set_domain(kTraindTrainingDomain);
        opset->set_version(kTraindTrainingVersion);
        return;
      }
    }
  }

  GradientRuleContext::Callbacks Callbacks() {
    return {[this](const std::string& value) { return Facts(value); },
            [this](absl::string_view hint) { return TempName(hint); }, [this] { return graph_.add_node(); },
            [this](const std::string& value) { return ConstantInts(value); }};
  }

  void CollectFacts() {
    onnx::ModelProto inferred = model_;
    try {
      onnx::shape_inference::InferShapes(inferred);
    } catch (const std::exception&) {
      // Rules that need a fact report its absence.
    }
    const onnx::GraphProto& graph = inferred.graph();
    for (const auto& infos : {&graph.input(), &graph.value_info(), &graph.output()}) {
      for (const auto& info : *infos) {
        facts_[info.name()] = FactsOf(info.type());
        types_[info.name()] = info.type();
      }
    }
    for (const auto& initializer : graph.initializer()) {
      onnx::TypeProto type;
      type.mutable_tensor_type()->set_elem_type(initializer.data_type());
      auto* shape = type.mutable_tensor_type()->mutable_shape();
      for (int64_t dim : initializer.dims()) shape->add_dim()->set_dim_value(dim);
      facts_[initializer.name()] = FactsOf(type);
      types_[initializer.name()] = type;
    }
    for (const auto& node : graph.node()) {
      for (const auto& output : node.output()) used_names_.insert(output);
      if (node.op_type() == "Constant" && node.output_size() == 1) {
        for (const auto& attribute : node.attribute()) {
          if (attribute.name() == "value" && attribute.t().data_type() == onnx::TensorProto::INT64) {
            RememberInts(node.output(0), attribute.t());
          }
        }
      }
    }
    for (const auto& initializer : graph.initializer()) {
      if (initializer.data_type() == onnx::TensorProto::INT64) RememberInts(initializer.name(), initializer);
    }
    for (const auto& [name, facts] : facts_) used_names_.insert(name);
  }

  // The value of an int64 value computed from constants alone — literal constants, initializers, and Shape of
  // values whose shape is static (PyTorch exports compute slice bounds that way) — by running that subgraph.
  std::optional<std::vector<int64_t>> ConstantInts(const std::string& value) {
    if (auto it = constant_ints_.find(value); it != constant_ints_.end()) return it->second;
    absl::flat_hash_map<std::string, int> producer;
    for (int n = 0; n < graph_.node_size(); ++n) {
      for (const auto& output : graph_.node(n).output()) producer[output] = n;
    }
    absl::flat_hash_set<std::string> initializer_names;
    for (const auto& initializer : graph_.initializer()) initializer_names.insert(initializer.name());
    onnx::ModelProto subgraph_model;
    subgraph_model.set_ir_version(model_.ir_version());
    *subgraph_model.mutable_opset_import() = model_.opset_import();
    onnx::GraphProto* subgraph = subgraph_model.mutable_graph();
    subgraph->set_name("constant_subgraph");
    std::set<int> nodes;
    std::vector<std::string> pending = {value};
    absl::flat_hash_set<std::string> seen;
    while (!pending.empty()) {
      const std::string current = pending.back();
      pending.pop_back();
      if (current.empty() || !seen.insert(current).second) continue;
      if (initializer_names.contains(current)) {
        for (const auto& initializer : graph_.initializer()) {
          if (initializer.name() == current) *subgraph->add_initializer() = initializer;
        }
        continue;
      }
      auto it = producer.find(current);
      if (it == producer.end()) return std::nullopt;  // a graph input: not a constant
      const onnx::NodeProto& node = graph_.node(it->second);
      if (node.op_type() == "Shape" && node.input_size() == 1) {
        const ValueFacts* facts = Facts(node.input(0));
        if (facts == nullptr || !facts->has_static_shape) return std::nullopt;
        onnx::TensorProto* shape = subgraph->add_initializer();
        shape->set_name(current);
        shape->set_data_type(onnx::TensorProto::INT64);
        shape->add_dims(static_cast<int64_t>(facts->dims.size()));
        for (int64_t dim : facts->dims) shape->add_int64_data(dim);
        continue;
      }
      nodes.insert(it->second);
      for (const auto& input : node.input()) pending.push_back(input);
    }
    for (int n : nodes) *subgraph->add_node() = graph_.node(n);  // in the graph's (topological) order
    onnx::ValueInfoProto* output = subgraph->add_output();
    output->set_name(value);
    output->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
    // The subgraph comes from the client's model: its evaluation is bounded (an int64 ConstantOfShape of 2^40
    // elements is refused before it allocates, and the value is then simply not known to be constant).
    SessionOptions options;
    options.memory_budget = MemoryBudget::Create(kMaxConstantEvaluationBytes, "constant evaluation budget");
    absl::StatusOr<std::unique_ptr<Session>> session = Session::Create(subgraph_model, options);
    if (!session.ok()) return std::nullopt;
    absl::StatusOr<NamedTensors> outputs = (*session)->Run(NamedTensors{});
    if (!outputs.ok() || outputs->size() != 1 || (*outputs)[0].second.dtype() != DataType::kInt64) return std::nullopt;
    const Tensor& tensor = (*outputs)[0].second;
    std::vector<int64_t> values(tensor.data<int64_t>(), tensor.data<int64_t>() + tensor.num_elements());
    constant_ints_[value] = values;
    return values;
  }

  void RememberInts(const std::string& name, const onnx::TensorProto& tensor) {
    std::vector<int64_t> values(tensor.int64_data().begin(), tensor.int64_data().end());
    if (tensor.has_raw_data()) {
      values.resize(tensor.raw_data().size() / sizeof(int64_t));
      std::memcpy(values.data(), tensor.raw_data().data(), values.size() * sizeof(int64_t));
    }
    constant_ints_[name] = std::move(values);
  }

  const ValueFacts* Facts(const std::string& value) const {
    auto it = facts_.find(value);
    return it == facts_.end() ? nullptr : &it->second;
  }

  std::string TempName(absl::string_view hint) {
    std::string name;
    do {
      name = absl::StrCat(hint, "__", next_temp_++);
    } while (used_names_.contains(name));
    used_names_.insert(name);
    return name;
  }

  int OpsetOf(const onnx::NodeProto& node) const {
    auto it = opsets_.find(node.domain() == "ai.onnx" ? "" : node.domain());
    return it == opsets_.end() ? -1 : it->second;
  }

  // requires_grad_: values that depend on a parameter (the nodes are in topological order, as ONNX requires).
  void MarkDependents() {
    for (const std::string& parameter : options_.parameters) requires_grad_.insert(parameter);
    for (const auto& node : graph_.node()) {
      bool depends = false;
      for (const auto& input : node.input()) depends |= requires_grad_.contains(input);
      if (!depends) continue;
      for (const auto& output : node.output()) {
        if (MayCarryGradient(Facts(output))) requires_grad_.insert(output);
      }
    }
  }

  std::vector<bool> NodesBetweenParametersAndLoss(int num_nodes) {
    std::vector<bool> on_path(num_nodes, false);
    absl::flat_hash_set<std::string> reaches_loss(seeds_.begin(), seeds_.end());
    for (int n = num_nodes - 1; n >= 0; --n) {
      const auto& node = graph_.node(n);
      bool feeds_loss = false;
      for (const auto& output : node.output()) feeds_loss |= reaches_loss.contains(output);
      if (!feeds_loss) continue;
      bool depends = false;
      for (const auto& input : node.input()) depends |= requires_grad_.contains(input);
      on_path[n] = depends;
      for (const auto& input : node.input()) reaches_loss.insert(input);
    }
    return on_path;
  }

  // The parameters whose gradient would have to pass through `node`.
  std::vector<std::string> ParametersBehind(const onnx::NodeProto& node) const {
    absl::flat_hash_set<std::string> upstream(node.input().begin(), node.input().end());
    for (int n = graph_.node_size() - 1; n >= 0; --n) {
      const auto& other = graph_.node(n);
      bool produces = false;
      for (const auto& output : other.output()) produces |= upstream.contains(output);
      if (produces) upstream.insert(other.input().begin(), other.input().end());
    }
    std::vector<std::string> blocked;
    for (const std::string& parameter : options_.parameters) {
      if (upstream.contains(parameter)) blocked.push_back(parameter);
    }
    return blocked;
  }

  // The gradient of `value`: the one partial, or the Sum of several; "" when none arrived.
  std::string FinalGradient(const std::string& value) {
    auto it = partials_.find(value);
    if (it == partials_.end() || it->second.empty()) return "";
    if (it->second.size() == 1) return it->second.front();
    const std::string total = TempName(value + "_grad");
    GradientRuleContext context(graph_.node(0), 0, {}, {}, Callbacks());
    if (std::optional<std::vector<std::string>> slices = SliceGradientsInOrder(value, it->second)) {
      GradientRuleContext::SetIntAttr(context.Emit("Concat", *slices, {total}), "axis", 0);
    } else {
      context.Emit("Sum", it->second, {total});
    }
    it->second = {total};
    return total;
  }

  // The gradient of a one-slice Gather along axis 0 (PyTorch's q, k, v = qkv[0], qkv[1], qkv[2]) is dY unsqueezed
  // and padded with zeros to the whole input (GatherGradient). When the partials of `value` are such Pads and
  // their slices cover every index of axis 0 exactly once, their Sum is the Concat of the unpadded slices: one copy
  // of the tensor instead of a zero-padded copy per slice and a sum over all of them. Returns the slices in index
  // order after removing the Pads (nothing else reads them), or nullopt and changes nothing.
  std::optional<std::vector<std::string>> SliceGradientsInOrder(const std::string& value,
                                                                const std::vector<std::string>& partials) {
    const ValueFacts* facts = Facts(value);
    if (facts == nullptr || !facts->has_static_shape || facts->dims.empty() ||
        facts->dims[0] != static_cast<int64_t>(partials.size())) {
      return std::nullopt;
    }
    const size_t rank = facts->dims.size();
    absl::flat_hash_map<std::string, int> producer;
    for (int n = 0; n < graph_.node_size(); ++n) {
      for (const auto& output : graph_.node(n).output()) producer[output] = n;
    }
    auto standard = [](const onnx::NodeProto& node, absl::string_view op) {
      return (node.domain().empty() || node.domain() == "ai.onnx") && node.op_type() == op;
    };
    std::vector<std::string> slices(partials.size());
    std::vector<int> pad_nodes;
    for (const std::string& partial : partials) {
      auto pad = producer.find(partial);
      if (pad == producer.end()) return std::nullopt;
      const onnx::NodeProto& pad_node = graph_.node(pad->second);
      if (!standard(pad_node, "Pad") || pad_node.input_size() != 2 || pad_node.attribute_size() != 0) {
        return std::nullopt;
      }
      const std::optional<std::vector<int64_t>> pads = ConstantInts(pad_node.input(1));
      if (!pads || pads->size() != 2 * rank) return std::nullopt;
      for (size_t axis = 1; axis < rank; ++axis) {
        if ((*pads)[axis] != 0 || (*pads)[axis + rank] != 0) return std::nullopt;
      }
      const int64_t slice = (*pads)[0];
      if (slice < 0 || slice >= facts->dims[0] || (*pads)[rank] != facts->dims[0] - 1 - slice ||
          !slices[slice].empty()) {
        return std::nullopt;
      }
      // Padded to `value`'s shape by pads on axis 0 alone that add up to dims[0] - 1: the padded input is one
      // slice, [1, dims[1], ...].
      slices[slice] = pad_node.input(0);
      pad_nodes.push_back(pad->second);
    }
    std::sort(pad_nodes.rbegin(), pad_nodes.rend());
    for (int n : pad_nodes) graph_.mutable_node()->DeleteSubrange(n, 1);
    return slices;
  }

  onnx::ModelProto model_;
  onnx::GraphProto& graph_;
  const GradientGraphOptions& options_;
  const OpRegistry& registry_;
  std::map<std::string, int> opsets_;
  absl::flat_hash_map<std::string, ValueFacts> facts_;
  absl::flat_hash_map<std::string, onnx::TypeProto> types_;
  absl::flat_hash_map<std::string, std::vector<int64_t>> constant_ints_;
  absl::flat_hash_set<std::string> used_names_;
  absl::flat_hash_set<std::string> requires_grad_;
  absl::flat_hash_map<std::string, std::vector<std::string>> partials_;
  absl::flat_hash_set<std::string> seeds_;  // the loss, or the values whose gradients are given
  // The forward graph as the client gave it (IndexForwardGraph), for recognising fused patterns.
  absl::flat_hash_map<std::string, int> forward_producer_;
  absl::flat_hash_map<std::string, int> forward_readers_;  // how many input slots of forward nodes read each value
  absl::flat_hash_map<std::string, int> initializer_index_;
  absl::flat_hash_set<std::string> graph_output_names_;
  int64_t next_temp_ = 0;
};

int ImportedOnnxOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return static_cast<int>(opset.version());
  }
  return 0;
}

// Models older than kMinGradientOpset go through onnx's own version converter rather than through a second set of
// gradient rules for every legacy form (opset-6 `broadcast`/`axis`, Clip's attributes, axes attributes): the
// converter rewrites those forms into the modern ones (e.g. Unsqueeze for a legacy `axis` broadcast), and every
// rule is then written, and tested, once. The converted model is checked again, since an adapter can produce a
// model the checker refuses (onnx 1.12's Clip 10->11 adapter makes float bounds for a double input).
absl::StatusOr<onnx::ModelProto> ConvertToGradientOpset(const onnx::ModelProto& model, int opset) {
  const std::string failure = absl::StrCat("the model imports ai.onnx opset ", opset, "; converting it to opset ",
                                           kMinGradientOpset, " for differentiation failed: ");
  try {
    // The broadcasting adapters read the shapes of intermediate values, so infer them first.
    onnx::ModelProto with_shapes = model;
    onnx::shape_inference::InferShapes(with_shapes);
    onnx::ModelProto converted = onnx::version_conversion::ConvertVersion(with_shapes, kMinGradientOpset);
    onnx::checker::check_model(converted);
    onnx::ModelProto inferred = converted;  // Strict inference checks the types the adapters chose.
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1));
    return converted;
  } catch (const std::exception& error) {
    return absl::UnimplementedError(absl::StrCat(failure, error.what()));
  } catch (...) {
    return absl::UnimplementedError(absl::StrCat(failure, "unknown exception"));
  }
}

}  // namespace

bool IsFloatingPointType(int32_t elem_type) {
  return elem_type == onnx::TensorProto::FLOAT || elem_type == onnx::TensorProto::DOUBLE ||
         elem_type == onnx::TensorProto::FLOAT16 || elem_type == onnx::TensorProto::BFLOAT16;
}

std::string GradientName(const std::string& parameter) { return parameter + "_grad"; }

absl::StatusOr<onnx::ModelProto> ConvertForDifferentiation(const onnx::ModelProto& model) {
  const int opset = ImportedOnnxOpset(model);
  if (opset > 0 && opset < kMinGradientOpset) return ConvertToGradientOpset(model, opset);
  return model;
}

absl::StatusOr<onnx::ModelProto> BuildGradientModel(const onnx::ModelProto& model,
                                                    const GradientGraphOptions& options) {
  if (model.graph().node_size() == 0) return absl::InvalidArgumentError("the model has no nodes");
  // Shape inference below must know traind's own ops (FusedMatMul, the gradient kernels) even when no model went
  // through the loader first in this process (a model built in memory).
  RegisterTraindSchemas();
  absl::StatusOr<onnx::ModelProto> converted = ConvertForDifferentiation(model);
  if (!converted.ok()) return converted.status();
  return Builder(*std::move(converted), options).Build();
}

}  // namespace traind::engine
