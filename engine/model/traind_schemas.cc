#include "engine/model/traind_schemas.h"

#include <functional>
#include <vector>

#include "absl/base/call_once.h"
#include "onnx/defs/schema.h"
#include "onnx/defs/shape_inference.h"

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

const std::vector<SchemaFactory>& Schemas() {
  static const auto* schemas = new std::vector<SchemaFactory>{
      // Gradient kernels:
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
  });
}

}  // namespace traind::engine
