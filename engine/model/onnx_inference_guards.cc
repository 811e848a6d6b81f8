#include "engine/model/onnx_inference_guards.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "onnx/defs/schema.h"
#include "onnx/defs/shape_inference.h"
#include "engine/model/model_loader.h"

namespace traind::engine {
namespace {

// The rank of input `index` when shape inference knows it, else -1.
int KnownRank(onnx::InferenceContext& ctx, size_t index) {
  if (index >= ctx.getNumInputs()) return -1;
  const onnx::TypeProto* type = ctx.getInputType(index);
  if (type == nullptr || !type->has_tensor_type() || !type->tensor_type().has_shape()) return -1;
  return type->tensor_type().shape().dim_size();
}

// Window attributes that onnx's convPoolShapeInference divides by (strides: SIGFPE,
// crash-conv-stride-0, train_fuzzer) or that size its per-axis loops: every one must be positive.
void PositiveWindowAttributes(onnx::InferenceContext& ctx) {
  for (const char* name : {"strides", "dilations", "kernel_shape"}) {
    const onnx::AttributeProto* attribute = ctx.getAttribute(name);
    if (attribute == nullptr) continue;
    for (int64_t value : attribute->ints()) {
      if (value <= 0) fail_shape_inference("attribute '", name, "' holds ", value, "; every value must be positive");
    }
  }
}

// Inputs `x` and `w` of a convolution: onnx reads W's dim 1 (ConvTranspose; crash-convtranspose-weight-rank-1,
// train_fuzzer) or W's trailing dims as the kernel and then X's dim 2 + i and the dilations for each of them
// (Conv), so both must have the same rank, at least 3; the kernels need that anyway.
void SameRankWindowInputs(onnx::InferenceContext& ctx, size_t x, size_t w, const char* x_name, const char* w_name) {
  const int x_rank = KnownRank(ctx, x);
  const int w_rank = KnownRank(ctx, w);
  if (x_rank < 0 || w_rank < 0) return;
  if (w_rank != x_rank || x_rank < 3) {
    fail_shape_inference(w_name, " has rank ", w_rank, " and ", x_name, " rank ", x_rank,
                         "; both must be the same, at least 3");
  }
}

void ConvInputs(onnx::InferenceContext& ctx) {
  PositiveWindowAttributes(ctx);
  SameRankWindowInputs(ctx, 0, 1, "X", "W");
}

void QLinearConvInputs(onnx::InferenceContext& ctx) {  // x, x_scale, x_zero_point, w, ...
  PositiveWindowAttributes(ctx);
  SameRankWindowInputs(ctx, 0, 3, "x", "w");
}

void MaxUnpoolInputs(onnx::InferenceContext& ctx) {  // reads I's dim 1 as the channels
  PositiveWindowAttributes(ctx);
  SameRankWindowInputs(ctx, 0, 1, "X", "I");
}

struct Guard {
  const char* op_type;
  void (*precondition)(onnx::InferenceContext&);
};

constexpr Guard kGuards[] = {
    {"Conv", ConvInputs},
    {"ConvInteger", ConvInputs},
    {"ConvTranspose", ConvInputs},
    {"QLinearConv", QLinearConvInputs},
    {"AveragePool", PositiveWindowAttributes},
    {"MaxPool", PositiveWindowAttributes},
    {"LpPool", PositiveWindowAttributes},
    {"MaxRoiPool", PositiveWindowAttributes},
    {"MaxUnpool", MaxUnpoolInputs},
};

}  // namespace

void InstallOnnxInferenceGuards() {
  for (const Guard& guard : kGuards) {
    // Schema(name, version) is the registered object itself (get_all_schemas_with_history copies): every version
    // of the op up to the newest opset the loader accepts, each wrapped once.
    std::vector<const onnx::OpSchema*> versions;
    for (int opset = kMinOnnxOpset; opset <= kMaxOnnxOpset; ++opset) {
      const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(guard.op_type, opset, "");
      if (schema != nullptr && std::find(versions.begin(), versions.end(), schema) == versions.end()) {
        versions.push_back(schema);
      }
    }
    for (const onnx::OpSchema* schema : versions) {
      // The registry hands out const schemas; replacing the inference function of a registered schema is the
      // only way in, done once before any inference runs.
      auto* mutable_schema = const_cast<onnx::OpSchema*>(schema);
      onnx::InferenceFunction original = mutable_schema->GetTypeAndShapeInferenceFunction();
      auto precondition = guard.precondition;
      mutable_schema->TypeAndShapeInferenceFunction([original, precondition](onnx::InferenceContext& ctx) {
        precondition(ctx);
        if (original) original(ctx);
      });
    }
  }
}

}  // namespace traind::engine
