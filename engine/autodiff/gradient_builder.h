// Reverse-mode automatic differentiation of an ONNX graph, as ONNX nodes: the backward graph is appended to the
// forward one, so the result is an ordinary model the engine compiles and runs (and the onnx checker validates).
#ifndef TRAIND_ENGINE_AUTODIFF_GRADIENT_BUILDER_H_
#define TRAIND_ENGINE_AUTODIFF_GRADIENT_BUILDER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/op_registry.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

struct GradientGraphOptions {
  // A scalar floating-point value of the graph (usually its loss output).
  std::string loss;
  // Graph inputs or initializers to differentiate with respect to.
  std::vector<std::string> parameters;
  const OpRegistry* registry = nullptr;  // nullptr: OpRegistry::Global().
  // Instead of a loss (which must then be empty): vector-Jacobian products. Each pair names a floating-point value
  // of the graph and a graph input holding the gradient of something (computed by the caller) with respect to it,
  // of the value's type and shape; the parameters' gradients are then sum over the pairs of J(value)^T gradient.
  std::vector<std::pair<std::string, std::string>> output_gradients = {};
};

// True for the ONNX element types gradients flow through (float, double, float16, bfloat16).
bool IsFloatingPointType(int32_t onnx_elem_type);

// The name of the gradient output of `parameter` (ONNX Runtime's convention).
std::string GradientName(const std::string& parameter);

// Returns `model` with the backward graph appended and one more graph output per parameter, GradientName(p),
// holding d(loss)/d(p). Only nodes between a parameter and the loss are differentiated; gradients reaching a
// value along several paths are summed. Errors (kUnimplemented) name an op on that path without a gradient
// rule and the parameters it blocks; kInvalidArgument for a non-scalar loss or a parameter the loss does not
// depend on. A model importing ai.onnx opset < kMinGradientOpset (13) is first converted to that opset with
// onnx's version converter, so the result then imports opset 13 (kUnimplemented if the conversion fails).
// `model` itself when it imports ai.onnx opset >= kMinGradientOpset (or none), else the model converted to that
// opset by onnx's version converter and checked again (kUnimplemented naming the conversion if that fails).
// BuildGradientModel applies it; callers that add their own opset-13 nodes (a loss) apply it first.
absl::StatusOr<onnx::ModelProto> ConvertForDifferentiation(const onnx::ModelProto& model);

absl::StatusOr<onnx::ModelProto> BuildGradientModel(const onnx::ModelProto& model,
                                                    const GradientGraphOptions& options);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_AUTODIFF_GRADIENT_BUILDER_H_
