#include "engine/model/traind_schemas.h"

#include <functional>
#include <vector>

#include "absl/base/call_once.h"
#include "onnx/defs/schema.h"
#include "onnx/defs/shape_inference.h"
#include "engine/model/onnx_inference_guards.h"

namespace traind::engine {
namespace {

using SchemaFactory = onnx::OpSchema (*)();

// ---- Gradient accumulation and optimizers of GenerateArtifacts (engine/training/artifacts.h) ----

// accumulated = reset ? gradient : buffer + gradient, in one pass (ONNX Runtime's lazy gradient reset).
onnx::OpSchema AccumulateGradientSchema() {
  onnx::OpSchema schema;
  schema.SetName("AccumulateGradient")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("accumulated = reset ? gradient : buffer + gradient (buffer and gradient of one shape).")
      .Input(0, "buffer", "The gradient accumulated so far.", "T")
      .Input(1, "gradient", "This step's gradient.", "T")
      .Input(2, "reset", "Scalar: ignore the buffer (the lazy reset of ONNX Runtime's LazyResetGrad).", "B")
      .Output(0, "accumulated", "The new accumulated gradient.", "T")
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Gradient types.")
      .TypeConstraint("B", {"tensor(bool)"}, "The reset flag.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& context) {
        onnx::propagateElemTypeFromInputToOutput(context, 1, 0);
        if (onnx::hasInputShape(context, 0)) onnx::propagateShapeFromInputToOutput(context, 0, 0);
        if (onnx::hasInputShape(context, 1)) {
          onnx::mergeInShapeInfo(context.getInputType(1)->tensor_type().shape(),
                                 *context.getOutputType(0)->mutable_tensor_type());
        }
        if (onnx::hasInputShape(context, 2) && context.getInputType(2)->tensor_type().shape().dim_size() != 0) {
          fail_shape_inference("AccumulateGradient: reset must be a scalar");
        }
      });
  return schema;
}

// The fused optimizers: inputs learning_rate, step, then per parameter (p, gradient, `states` state tensors);
// outputs skipped, then per parameter (p', state'...).
void OptimizerShapeInference(onnx::InferenceContext& context, int states) {
  const int group_in = 2 + states;
  const int group_out = 1 + states;
  const int variadic = static_cast<int>(context.getNumInputs()) - 2;
  if (variadic <= 0 || variadic % group_in != 0) {
    fail_shape_inference("expected learning_rate, step, then ", group_in,
                         " tensors per parameter (p, gradient, states); got ", context.getNumInputs(), " inputs");
  }
  const int parameters = variadic / group_in;
  if (static_cast<int>(context.getNumOutputs()) != 1 + parameters * group_out) {
    fail_shape_inference("expected skipped, then ", group_out, " outputs per parameter; got ", context.getNumOutputs(),
                         " outputs for ", parameters, " parameters");
  }
  for (size_t scalar = 0; scalar < 2; ++scalar) {
    if (onnx::hasInputShape(context, scalar) && context.getInputType(scalar)->tensor_type().shape().dim_size() != 0) {
      fail_shape_inference(scalar == 0 ? "learning_rate" : "step", " must be a scalar");
    }
  }
  onnx::updateOutputElemType(context, 0, onnx::TensorProto::BOOL);
  context.getOutputType(0)->mutable_tensor_type()->mutable_shape();
  for (int p = 0; p < parameters; ++p) {
    for (int k = 0; k < group_out; ++k) {
      // p' from p (group offset 0); state k from its state (group offset 1 + k).
      const size_t input = 2 + p * group_in + (k == 0 ? 0 : 1 + k);
      const size_t output = 1 + p * group_out + k;
      onnx::propagateElemTypeFromInputToOutput(context, input, output);
      if (onnx::hasInputShape(context, input)) onnx::propagateShapeFromInputToOutput(context, input, output);
    }
  }
}

onnx::OpSchema& OptimizerSignature(onnx::OpSchema& schema, const char* name, const char* doc) {
  return schema.SetName(name)
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc(doc)
      .Input(0, "learning_rate", "Scalar learning rate of this step.", "tensor(float)")
      .Input(1, "step", "Scalar: the 1-based number of the step being taken.", "tensor(int64)")
      .Input(2, "tensors", "Per parameter: the parameter, its gradient, then its state tensors.", "T",
             onnx::OpSchema::Variadic)
      .Output(0, "skipped", "True when a gradient was not finite: then every output equals its input.", "tensor(bool)")
      .Output(1, "updated", "Per parameter: the new parameter, then its new state tensors.", "T",
              onnx::OpSchema::Variadic)
      .Attr("max_grad_norm",
            "Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_, L2 over every gradient); 0: off.",
            onnx::AttributeProto::FLOAT, 0.0f)
      .Attr("weight_decay", "Weight decay.", onnx::AttributeProto::FLOAT, 0.0f)
      .TypeConstraint("T", {"tensor(float)"}, "Parameters, gradients and states are float32.");
}

// torch.optim.AdamW (PyTorch 1.13): states momentum0 (first moment), momentum1 (second moment).
onnx::OpSchema AdamWSchema() {
  onnx::OpSchema schema;
  OptimizerSignature(schema, "AdamW",
                     "torch.optim.AdamW (1.13) over every parameter at once, with optional global gradient-norm "
                     "clipping; nothing changes when a gradient is not finite.")
      .Attr("beta1", "First-moment decay.", onnx::AttributeProto::FLOAT, 0.9f)
      .Attr("beta2", "Second-moment decay.", onnx::AttributeProto::FLOAT, 0.999f)
      .Attr("epsilon", "Added to the bias-corrected root of the second moment.", onnx::AttributeProto::FLOAT, 1e-8f)
      .Attr("bias_correction", "1: bias-correct both moments.", onnx::AttributeProto::INT, int64_t{1})
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& context) { OptimizerShapeInference(context, 2); });
  return schema;
}

// torch.optim.SGD (PyTorch 1.13): state momentum0 (the momentum buffer) when momentum != 0, none otherwise.
onnx::OpSchema SgdSchema() {
  onnx::OpSchema schema;
  OptimizerSignature(schema, "SGD",
                     "torch.optim.SGD (1.13) over every parameter at once, with optional global gradient-norm "
                     "clipping; nothing changes when a gradient is not finite.")
      .Attr("momentum", "Momentum factor; 0: no momentum buffer.", onnx::AttributeProto::FLOAT, 0.0f)
      .Attr("dampening", "Dampening of the momentum.", onnx::AttributeProto::FLOAT, 0.0f)
      .Attr("nesterov", "1: Nesterov momentum.", onnx::AttributeProto::INT, int64_t{0})
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& context) {
        const onnx::AttributeProto* momentum = context.getAttribute("momentum");
        OptimizerShapeInference(context, momentum != nullptr && momentum->f() != 0.0f ? 1 : 0);
      });
  return schema;
}

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
      .Attr("channels_last", "1: dY, X and dX are [N, spatial..., C] (the channels-last plan pass).",
            onnx::AttributeProto::INT, static_cast<int64_t>(0))
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
      .Attr("channels_last", "1: dY, X and dX are [N, H, W, C] (the channels-last plan pass).",
            onnx::AttributeProto::INT, static_cast<int64_t>(0))
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) { GradientLikeInput(ctx, 1, 0); });
  return WindowAttributes(schema);
}

onnx::OpSchema ChannelsLastMaxPoolSchema() {
  onnx::OpSchema schema;
  schema.SetName("ChannelsLastMaxPool")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("MaxPool's Y of a channels-last X [N, H, W, C]: Y [N, OH, OW, C] (2-D windows, no Indices output).")
      .Input(0, "X", "Input, channels-last.", "T")
      .Output(0, "Y", "Output, channels-last.", "T")
      .Attr("ceil_mode", "As MaxPool's.", onnx::AttributeProto::INT, static_cast<int64_t>(0))
      .Attr("storage_order", "As MaxPool's (Y does not depend on it).", onnx::AttributeProto::INT,
            static_cast<int64_t>(0))
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
      });
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

onnx::OpSchema GeluGradSchema() {
  return ActivationGradSchema("GeluGrad",
                              "Gradient of exact GELU, X * Phi(X): dX = dY * (Phi(X) + X * phi(X)), Phi the standard "
                              "normal CDF, phi its density.");
}

onnx::OpSchema GeluSchema() {
  onnx::OpSchema schema;
  schema.SetName("Gelu")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Exact GELU, Y = X * 0.5 * (1 + erf(X / sqrt(2))): what a CPU plan makes of that decomposition "
              "(plan-only, never in an artifact).")
      .Input(0, "X", "Any shape.", "T")
      .Output(0, "Y", "Like X.", "T")
      .TypeConstraint("T", {"tensor(float)"}, "float32.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) { GradientLikeInput(ctx, 0, 0); });
  return schema;
}

onnx::OpSchema SoftmaxGradSchema() {
  onnx::OpSchema schema;
  schema.SetName("SoftmaxGrad")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Gradient of Softmax from its output Y: dX = Y * (dY - sum(dY * Y)), the sum over the elements one "
              "normalisation covers (Softmax's axis; with coerce_to_2d, every dim from axis on, as before opset 13).")
      .Input(0, "dY", "Gradient of Softmax's output.", "T")
      .Input(1, "Y", "Softmax's output.", "T")
      .Output(0, "dX", "Gradient of Softmax's input.", "T")
      .Attr("axis", "Softmax's axis.", onnx::AttributeProto::INT, int64_t{-1})
      .Attr("coerce_to_2d", "1: normalised over dims [axis, rank) (Softmax before opset 13).",
            onnx::AttributeProto::INT, int64_t{0})
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) { GradientLikeInput(ctx, 1, 0); });
  return schema;
}

// Scaled dot-product attention (engine/ops/attention_ops.h): the fused forward a CPU plan makes of MatMul -> Mul ->
// Softmax -> MatMul, and the gradient the gradient builder emits for that chain.
onnx::OpSchema& AttentionAttributes(onnx::OpSchema& schema) {
  return schema.Attr("scale", "The scores' factor before the softmax.", onnx::AttributeProto::FLOAT, 1.0f)
      .Attr("transB", "1: B holds the keys as rows, [..., Lk, D]; 0: transposed, [..., D, Lk].",
            onnx::AttributeProto::INT, int64_t{0})
      .Attr("q_slot", "Interleaved operands (a CPU plan's layout folding): Q, B and V are slots q_slot, b_slot, v_slot "
            "of [N, L, S, H, D] tensors, read as [N, H, L, D] (B as keys, transB = 1); -1: plain tensors.",
            onnx::AttributeProto::INT, int64_t{-1})
      .Attr("b_slot", "See q_slot.", onnx::AttributeProto::INT, int64_t{-1})
      .Attr("v_slot", "See q_slot.", onnx::AttributeProto::INT, int64_t{-1})
      .Attr("o_interleaved", "1: O written as [N, Lq, H, Dv] (ScaledDotProductAttention).", onnx::AttributeProto::INT,
            int64_t{0})
      .Attr("dO_interleaved", "1: dO read from [N, Lq, H, Dv] (ScaledDotProductAttentionGrad).",
            onnx::AttributeProto::INT, int64_t{0})
      .TypeConstraint("T", {"tensor(float)"}, "float32.");
}

onnx::OpSchema ScaledDotProductAttentionSchema() {
  onnx::OpSchema schema;
  schema.SetName("ScaledDotProductAttention")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("P = softmax(scale * Q op(B)) over the last axis, O = P V, per batch item (equal batch dims, no "
              "broadcasting).")
      .Input(0, "Q", "[..., Lq, D].", "T")
      .Input(1, "B", "The keys: [..., D, Lk], or [..., Lk, D] with transB.", "T")
      .Input(2, "V", "[..., Lk, Dv].", "T")
      .Output(0, "O", "[..., Lq, Dv].", "T")
      .Output(1, "P", "Optional: the attention weights, [..., Lq, Lk].", "T", onnx::OpSchema::Optional);
  AttentionAttributes(schema).TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
    if (ctx.getNumOutputs() > 1) onnx::propagateElemTypeFromInputToOutput(ctx, 0, 1);
  });
  return schema;
}

onnx::OpSchema ScaledDotProductAttentionGradSchema() {
  onnx::OpSchema schema;
  schema.SetName("ScaledDotProductAttentionGrad")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Gradients of ScaledDotProductAttention's inputs from dO and the forward's P: dV = P^T dO, dS = scale * "
              "P * (dP - rowsum(dP * P)) with dP = dO V^T, dQ = dS op(B)^T, d op(B) = Q^T dS.")
      .Input(0, "dO", "Gradient of O, [..., Lq, Dv].", "T")
      .Input(1, "Q", "The forward's Q.", "T")
      .Input(2, "B", "The forward's B.", "T")
      .Input(3, "V", "The forward's V.", "T")
      .Input(4, "P", "The forward's attention weights.", "T")
      .Output(0, "dQ", "Optional: like Q (with interleaved inputs: the gradient of their one tensor).", "T",
              onnx::OpSchema::Optional)
      .Output(1, "dB", "Optional: like B.", "T", onnx::OpSchema::Optional)
      .Output(2, "dV", "Optional: like V.", "T", onnx::OpSchema::Optional);
  AttentionAttributes(schema).TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
    for (size_t output = 0; output < 3 && output < ctx.getNumOutputs(); ++output) {
      GradientLikeInput(ctx, output + 1, output);
    }
  });
  return schema;
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
  onnx::OpSchema schema = NormalizationGradSchema(
      "BatchNormalizationGrad",
      "Gradients of training-mode BatchNormalization (batch statistics over every axis but 1, recomputed from X; "
      "per-channel Scale [C]).");
  schema.Attr("channels_last", "1: dY, X and dX are [N, spatial..., C], statistics over every axis but the last.",
              onnx::AttributeProto::INT, static_cast<int64_t>(0));
  return schema;
}

// ---- The channels-last plan pass's forward ops (engine/runtime/channels_last.h): activations [N, spatial..., C] ----

onnx::OpSchema ChannelsLastConvSchema() {
  onnx::OpSchema schema;
  schema.SetName("ChannelsLastConv")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Conv with X and Y channels-last ([N, spatial..., C] / [N, out spatial..., M]); W [M, C/group, k...] "
              "and B [M] as Conv's.")
      .Input(0, "X", "Input, channels-last.", "T")
      .Input(1, "W", "Weights, as Conv's.", "T")
      .Input(2, "B", "Bias, as Conv's.", "T", onnx::OpSchema::Optional)
      .Output(0, "Y", "Output, channels-last.", "T")
      .Attr("group", "As Conv's.", onnx::AttributeProto::INT, static_cast<int64_t>(1))
      .TypeConstraint("T", {"tensor(float)"}, "float32 only, like the Conv kernel.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
      });
  return WindowAttributes(schema);
}

onnx::OpSchema ChannelsLastBatchNormalizationSchema() {
  onnx::OpSchema schema;
  schema.SetName("ChannelsLastBatchNormalization")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("BatchNormalization (opset 15, spatial) of a channels-last X [N, spatial..., C]: statistics over every "
              "axis but the last.")
      .Input(0, "X", "Input, channels-last.", "T")
      .Input(1, "scale", "[C]", "T")
      .Input(2, "B", "[C]", "T")
      .Input(3, "input_mean", "[C]", "T")
      .Input(4, "input_var", "[C]", "T")
      .Output(0, "Y", "Output, channels-last.", "T")
      .Output(1, "running_mean", "As BatchNormalization's (training_mode = 1).", "T", onnx::OpSchema::Optional)
      .Output(2, "running_var", "As BatchNormalization's (training_mode = 1).", "T", onnx::OpSchema::Optional)
      .Attr("epsilon", "As BatchNormalization's.", onnx::AttributeProto::FLOAT, 1e-5f)
      .Attr("momentum", "As BatchNormalization's.", onnx::AttributeProto::FLOAT, 0.9f)
      .Attr("training_mode", "As BatchNormalization's.", onnx::AttributeProto::INT, static_cast<int64_t>(0))
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateShapeAndTypeFromFirstInput(ctx);
        for (size_t i = 1; i < ctx.getNumOutputs(); ++i) {
          onnx::propagateElemTypeFromInputToOutput(ctx, 0, i);
          if (onnx::hasInputShape(ctx, 3)) onnx::propagateShapeFromInputToOutput(ctx, 3, i);
        }
      });
  return schema;
}

onnx::OpSchema LayerNormalizationGradSchema() {
  onnx::OpSchema schema = NormalizationGradSchema(
      "LayerNormalizationGrad",
      "Gradients of LayerNormalization over axes axis..rank-1 (statistics recomputed from X); Scale and B have the "
      "full normalized shape.");
  schema.Attr("axis", "As LayerNormalization's.", onnx::AttributeProto::INT, static_cast<int64_t>(-1));
  return schema;
}

// ---- Products the gradient rules emit ----

onnx::OpSchema FusedMatMulSchema() {
  onnx::OpSchema schema;
  schema.SetName("FusedMatMul")
      .SetDomain(kTraindTrainingDomain)
      .SinceVersion(kTraindTrainingVersion)
      .SetDoc("Y = op(A) op(B), op swapping the last two axes where transA / transB is 1, otherwise MatMul's batched "
              "semantics (ranks >= 2, batch dims broadcast). The batched MatMul gradient reads its transposed "
              "operands in place through it instead of materialising Transposes.")
      .Input(0, "A", "Rank >= 2.", "T")
      .Input(1, "B", "Rank >= 2.", "T")
      .Input(2, "bias", "Optional: Y's last dimension's values (or one value), added to every row; what a CPU plan "
             "folds a Linear layer's bias Add into.", "T", onnx::OpSchema::Optional)
      .Output(0, "Y", "The product.", "T")
      .Attr("transA", "1: A's last two axes swapped.", onnx::AttributeProto::INT, static_cast<int64_t>(0))
      .Attr("transB", "1: B's last two axes swapped.", onnx::AttributeProto::INT, static_cast<int64_t>(0))
      .TypeConstraint("T", {"tensor(float)", "tensor(double)"}, "Floating point.")
      .TypeAndShapeInferenceFunction([](onnx::InferenceContext& ctx) {
        onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
        if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 1)) return;
        const onnx::TensorShapeProto& a = onnx::getInputShape(ctx, 0);
        const onnx::TensorShapeProto& b = onnx::getInputShape(ctx, 1);
        if (a.dim_size() < 2 || b.dim_size() < 2) fail_shape_inference("FusedMatMul: inputs must have rank >= 2");
        const auto attribute = [&ctx](const char* name) {
          const onnx::AttributeProto* value = ctx.getAttribute(name);
          return value != nullptr && value->i() != 0;
        };
        const bool trans_a = attribute("transA"), trans_b = attribute("transB");
        onnx::TensorShapeProto a_batch, b_batch, y;
        for (int d = 0; d + 2 < a.dim_size(); ++d) *a_batch.add_dim() = a.dim(d);
        for (int d = 0; d + 2 < b.dim_size(); ++d) *b_batch.add_dim() = b.dim(d);
        onnx::bidirectionalBroadcastShapeInference(a_batch, b_batch, y);
        *y.add_dim() = a.dim(a.dim_size() - (trans_a ? 1 : 2));
        *y.add_dim() = b.dim(b.dim_size() - (trans_b ? 2 : 1));
        *onnx::getOutputShape(ctx, 0) = y;
      });
  return schema;
}

const std::vector<SchemaFactory>& Schemas() {
  static const auto* schemas = new std::vector<SchemaFactory>{
      // Gradient kernels:
      ConvGradSchema, MaxPoolGradSchema, BatchNormalizationGradSchema, LayerNormalizationGradSchema, ReluGradSchema,
      ErfGradSchema, GeluGradSchema, SoftmaxGradSchema, ScaledDotProductAttentionGradSchema,
      // The attention and GELU fusions' forward ops:
      ScaledDotProductAttentionSchema, GeluSchema,
      // The channels-last plan pass's forward ops:
      ChannelsLastConvSchema, ChannelsLastBatchNormalizationSchema, ChannelsLastMaxPoolSchema,
      // Products:
      FusedMatMulSchema,
      // Optimizers and gradient accumulation:
      AccumulateGradientSchema,
      AdamWSchema,
      SgdSchema,
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
    InstallOnnxInferenceGuards();
  });
}

}  // namespace traind::engine
