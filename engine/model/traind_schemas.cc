#include "engine/model/traind_schemas.h"

#include <functional>
#include <vector>

#include "absl/base/call_once.h"
#include "onnx/defs/schema.h"
#include "onnx/defs/shape_inference.h"

namespace traind::engine {
namespace {

using SchemaFactory = onnx::OpSchema (*)();

// One function per op, returning its complete schema (SetName, SetDomain(kTraindTrainingDomain),
// SinceVersion(kTraindTrainingVersion), inputs, outputs, attributes, type constraints and a shape-inference
// function). Add each new op to kSchemas below.

// ---- Gradient kernels (engine/ops/*_grad.cc) ----

// Output `output` gets the element type and (when known) the shape of input `input`, when the node has that output.
void GradientLikeInput(onnx::InferenceContext& ctx, size_t input, size_t output) {
  if (ctx.getNumOutputs() <= output) return;
  onnx::propagateElemTypeFromInputToOutput(ctx, input, output);
  if (onnx::hasInputShape(ctx, input)) onnx::propagateShapeFromInputToOutput(ctx, input, output);
}

// The attributes of a sliding-window forward op, which its gradient op takes unchanged.
onnx::OpSchema& WindowAttributes(onnx::OpSchema& schema) {
  return schema.Attr("auto_pad", "As the forward op's.", onnx::AttributeProto::STRING, std::string("NOTSET"))
      .Attr("kernel_shape", "As the forward op's.", onnx::AttributeProto::INTS, false)
      .Attr("strides", "As the forward op's.", onnx::AttributeProto::INTS, false)
      .Attr("dilations", "As the forward op's.", onnx::AttributeProto::INTS, false)
      .Attr("pads", "As the forward op's.", onnx::AttributeProto::INTS, false);
}

onnx::OpSchema ConvGradSchema() {
  onnx::OpSchema schema;
  schema.SetName("ConvGrad")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Gradients of Conv(X, W, B) given dY: dX, dW and dB, each computed only when its output is named.")
      .Input(0, "dY", "Gradient of Conv's output.", "T")
      .Input(1, "X", "Conv's input.", "T")
      .Input(2, "W", "Conv's weights.", "T")
      .Output(0, "dX", "Gradient of X.", "T", onnx::OpSchema::Optional)
      .Output(1, "dW", "Gradient of W.", "T", onnx::OpSchema::Optional)
      .Output(2, "dB", "Gradient of the bias, [M].", "T", onnx::OpSchema::Optional)
      .Attr("group", "As Conv's.", onnx::AttributeProto::INT, static_cast<int64_t>(1))
      .TypeConstraint("T", {"tensor(float)"}, "float32 only, like the Conv kernel.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        GradientLikeInput(ctx, 1, 0);
        GradientLikeInput(ctx, 2, 1);
        if (ctx.getNumOutputs() > 2) {
          onnx::propagateElemTypeFromInputToOutput(ctx, 2, 2);
          if (onnx::hasInputShape(ctx, 2) && onnx::getInputShape(ctx, 2).dim_size() > 0) {
            *onnx::getOutputShape(ctx, 2)->add_dim() = onnx::getInputShape(ctx, 2).dim(0);
          }
        }
      });
  return WindowAttributes(schema);
}

onnx::OpSchema MaxPoolGradSchema() {
  onnx::OpSchema schema;
  schema.SetName("MaxPoolGrad")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Gradient of MaxPool's output Y with respect to X: each dY element is added to the input element its "
              "window selected (the first maximum in row-major window order).")
      .Input(0, "dY", "Gradient of MaxPool's output.", "T")
      .Input(1, "X", "MaxPool's input.", "T")
      .Output(0, "dX", "Gradient of X.", "T")
      .Attr("ceil_mode", "As MaxPool's.", onnx::AttributeProto::INT, static_cast<int64_t>(0))
      .Attr("storage_order", "As MaxPool's (does not change the gradient).", onnx::AttributeProto::INT,
            static_cast<int64_t>(0))
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) { GradientLikeInput(ctx, 1, 0); });
  return WindowAttributes(schema);
}

// An elementwise activation gradient: dX from dY and the forward input X, all of one shape.
onnx::OpSchema ActivationGradSchema(const char* name, const char* doc) {
  onnx::OpSchema schema;
  schema.SetName(name)
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc(doc)
      .Input(0, "dY", "Gradient of the activation's output.", "T")
      .Input(1, "X", "The activation's input.", "T")
      .Output(0, "dX", "Gradient of X.", "T")
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) { GradientLikeInput(ctx, 1, 0); });
  return schema;
}

onnx::OpSchema ReluGradSchema() {
  return ActivationGradSchema("ReluGrad", "Gradient of Relu: dX = dY where X > 0, else 0.");
}

onnx::OpSchema ErfGradSchema() {
  return ActivationGradSchema("ErfGrad", "Gradient of Erf: dX = dY * 2/sqrt(pi) * exp(-X^2).");
}

// Normalisation gradients: dX like X, dScale and dB like Scale.
onnx::OpSchema NormalizationGradSchema(const char* name, const char* doc) {
  onnx::OpSchema schema;
  schema.SetName(name)
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc(doc)
      .Input(0, "dY", "Gradient of the forward output.", "T")
      .Input(1, "X", "The forward input.", "T")
      .Input(2, "Scale", "The forward scale.", "T")
      .Output(0, "dX", "Gradient of X.", "T", onnx::OpSchema::Optional)
      .Output(1, "dScale", "Gradient of Scale (Scale's shape).", "T", onnx::OpSchema::Optional)
      .Output(2, "dB", "Gradient of the bias (Scale's shape).", "T", onnx::OpSchema::Optional)
      .Attr("epsilon", "As the forward op's.", onnx::AttributeProto::FLOAT, 1e-5f)
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        GradientLikeInput(ctx, 1, 0);
        GradientLikeInput(ctx, 2, 1);
        GradientLikeInput(ctx, 2, 2);
      });
  return schema;
}

onnx::OpSchema BatchNormalizationGradSchema() {
  return NormalizationGradSchema(
      "BatchNormalizationGrad",
      "Gradients of training-mode BatchNormalization (batch statistics over every axis but 1, recomputed from X; "
      "per-channel Scale [C]).");
}

onnx::OpSchema LayerNormalizationGradSchema() {
  onnx::OpSchema schema = NormalizationGradSchema(
      "LayerNormalizationGrad",
      "Gradients of LayerNormalization over axes axis..rank-1 (statistics recomputed from X); Scale and B have the "
      "full normalized shape.");
  schema.Attr("axis", "As LayerNormalization's.", onnx::AttributeProto::INT, static_cast<int64_t>(-1));
  return schema;
}

const std::vector<SchemaFactory>& Schemas() {
  static const auto* schemas = new std::vector<SchemaFactory>{
      // Gradient kernels:
      ConvGradSchema, MaxPoolGradSchema, BatchNormalizationGradSchema, LayerNormalizationGradSchema, ReluGradSchema,
      ErfGradSchema,
      // Optimizers and gradient accumulation:
  };
  return *schemas;
}

}  // namespace

void RegisterTraindSchemas() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(
        kTraindTrainingDomain, kTraindTrainingVersion, kTraindTrainingVersion);
    for (SchemaFactory factory : Schemas()) {
      onnx::RegisterSchema(factory(), 0);
    }
  });
}

}  // namespace traind::engine
