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

// ConvTranspose reads W's dim 1 (output channels) whenever X has rank >= 2 (crash-convtranspose-weight-rank-1,
// train_fuzzer). The kernel needs W of X's rank anyway.
void ConvTransposeRanks(onnx::InferenceContext& ctx) {
  const int x_rank = KnownRank(ctx, 0);
  const int w_rank = KnownRank(ctx, 1);
  if (x_rank < 0 || w_rank < 0) return;
  if (w_rank != x_rank || x_rank < 3) {
    fail_shape_inference("ConvTranspose: W has rank ", w_rank, " and X rank ", x_rank,
                         "; both must be the same, at least 3");
  }
}

struct Guard {
  const char* op_type;
  void (*precondition)(onnx::InferenceContext&);
};

constexpr Guard kGuards[] = {
    {"ConvTranspose", ConvTransposeRanks},
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
