// What a gradient rule sees: one forward node, the names of the gradients flowing into its outputs, the
// names it must produce for its inputs' gradients, and helpers that emit backward ONNX nodes.
//
// A rule lives next to its op's kernel (engine/ops/<family>.cc) and is registered on the op's line of
// engine/ops/op_list.inc with TRAIND_GRADIENT(rule). Vocabulary, after ONNX Runtime's gradient builders:
//   I(i)   forward input i            O(i)   forward output i
//   GO(i)  gradient of output i (empty when no gradient reaches that output)
//   GI(i)  name to produce for the gradient of input i, only when NeedsGI(i)
// Invariants: a rule writes each GI(i) with NeedsGI(i) exactly once and nothing else that is visible; every
// other value it creates comes from Temp(); it never changes the forward graph.
#ifndef TRAIND_ENGINE_AUTODIFF_GRADIENT_RULE_H_
#define TRAIND_ENGINE_AUTODIFF_GRADIENT_RULE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Static facts about forward values, from onnx shape inference.
struct ValueFacts {
  int32_t elem_type = 0;      // onnx::TensorProto::DataType; 0 when unknown.
  bool has_static_shape = false;
  std::vector<int64_t> dims;  // Valid when has_static_shape.
  // When the rank is known: every dimension, -1 where it is dynamic, and the symbolic names of the dynamic ones
  // (dim_param; "" when it has none), so that two dynamic dims can be told equal (a batch dimension "N").
  bool has_rank = false;
  std::vector<int64_t> partial_dims;
  std::vector<std::string> dim_params;
};

class GradientRuleContext {
 public:
  // Everything the context needs from the builder that owns the backward graph.
  struct Callbacks {
    std::function<const ValueFacts*(const std::string& value)> facts;
    std::function<std::string(absl::string_view hint)> temp_name;
    std::function<onnx::NodeProto*()> add_node;
    // The values of an int64 constant of the graph (initializer or Constant node); nullopt otherwise.
    std::function<std::optional<std::vector<int64_t>>(const std::string& value)> constant_ints;
  };

  GradientRuleContext(const onnx::NodeProto& node, int opset, std::vector<std::string> output_gradients,
                      std::vector<std::string> input_gradients, Callbacks callbacks)
      : node_(node),
        opset_(opset),
        output_gradients_(std::move(output_gradients)),
        input_gradients_(std::move(input_gradients)),
        callbacks_(std::move(callbacks)) {}

  const onnx::NodeProto& node() const { return node_; }
  // The opset of the node's domain that the model imports (attributes changed meaning across opsets).
  int opset() const { return opset_; }
  int num_inputs() const { return node_.input_size(); }
  const std::string& I(int i) const { return node_.input(i); }
  const std::string& O(int i) const { return node_.output(i); }
  const std::string& GO(int i) const { return output_gradients_[i]; }
  bool HasGO(int i) const { return i < static_cast<int>(output_gradients_.size()) && !output_gradients_[i].empty(); }
  bool NeedsGI(int i) const { return i < static_cast<int>(input_gradients_.size()) && !input_gradients_[i].empty(); }
  const std::string& GI(int i) const { return input_gradients_[i]; }

  // Shape inference's facts about a forward value; null when it has none.
  const ValueFacts* Facts(const std::string& value) const { return callbacks_.facts(value); }
  // The element type of a forward value; an error naming the node when unknown.
  absl::StatusOr<int32_t> ElemType(const std::string& value) const;
  // The static shape of a forward value; an error naming the node when it is dynamic or unknown.
  absl::StatusOr<std::vector<int64_t>> StaticShape(const std::string& value) const;
  // The shape with -1 for dynamic dimensions (a symbolic batch); an error naming the node when the rank is unknown.
  absl::StatusOr<std::vector<int64_t>> PartialShape(const std::string& value) const;

  // An int/float attribute of the forward node, or `fallback`.
  int64_t IntAttr(absl::string_view name, int64_t fallback) const;
  float FloatAttr(absl::string_view name, float fallback) const;
  // An axis attribute (or `fallback`) normalised into [0, rank); INVALID_ARGUMENT naming the node when it is out of
  // range. Shape inference does not check every op's axis, and rules index shapes with it.
  absl::StatusOr<int64_t> AxisAttr(absl::string_view name, int64_t fallback, int64_t rank) const;
  std::vector<int64_t> IntsAttr(absl::string_view name) const;

  // The values of `value` when it is an int64 constant of the graph (e.g. an axes operand).
  std::optional<std::vector<int64_t>> ConstantInts(const std::string& value) const {
    return callbacks_.constant_ints ? callbacks_.constant_ints(value) : std::nullopt;
  }

  // A fresh value name, unique in the whole graph.
  std::string Temp(absl::string_view hint) { return callbacks_.temp_name(hint); }
  // Appends a backward node computing `outputs` from `inputs`; returns it for attributes.
  onnx::NodeProto* Emit(absl::string_view op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs);
  // A scalar constant of `elem_type` (float, double) holding `value`.
  std::string ScalarConstant(double value, int32_t elem_type);
  // A 1-D int64 constant.
  std::string Int64Constant(const std::vector<int64_t>& values);
  // Zeros of `elem_type` whose shape is the value of the 1-D int64 `shape` (ConstantOfShape).
  std::string Zeros(const std::string& shape, int32_t elem_type);

  // Writes into `out` the gradient `gradient` (shaped like `broadcast_value`) summed over the dimensions that
  // numpy broadcasting added to `input` — identity when the shapes agree. Dynamic dimensions are fine where the
  // shapes say which dims were broadcast (a symbolic batch dim against a static bias); an ambiguous case (a dynamic
  // dim of `input` against a different one of the result) is kUnimplemented.
  absl::Status ReduceToShapeOf(const std::string& gradient, const std::string& broadcast_value,
                               const std::string& input, const std::string& out);
  // The same with the gradient's (broadcast) shape given explicitly.
  absl::Status ReduceToShape(const std::string& gradient, const std::vector<int64_t>& full_shape,
                             const std::string& input, const std::string& out);
  // An attribute for `node`.
  static void SetIntAttr(onnx::NodeProto* node, absl::string_view name, int64_t value);
  static void SetIntsAttr(onnx::NodeProto* node, absl::string_view name, const std::vector<int64_t>& values);
  static void SetFloatAttr(onnx::NodeProto* node, absl::string_view name, float value);
  static void SetStringAttr(onnx::NodeProto* node, absl::string_view name, absl::string_view value);

  std::string Label() const;

 private:
  const onnx::NodeProto& node_;
  int opset_;
  std::vector<std::string> output_gradients_;
  std::vector<std::string> input_gradients_;
  Callbacks callbacks_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_AUTODIFF_GRADIENT_RULE_H_
