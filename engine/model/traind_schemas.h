// ONNX schemas for traind's own ops (domain kTraindTrainingDomain): fused gradient kernels, optimizers and
// gradient accumulation. Registering a schema is what lets the onnx checker and strict shape inference accept
// the models GenerateArtifacts writes; the kernels themselves are registered in engine/ops/op_list.inc.
#ifndef TRAIND_ENGINE_MODEL_TRAIND_SCHEMAS_H_
#define TRAIND_ENGINE_MODEL_TRAIND_SCHEMAS_H_

namespace traind::engine {

// The domain of every traind op, and its only version.
inline constexpr const char* kTraindTrainingDomain = "ai.traind.training";
inline constexpr int kTraindTrainingVersion = 1;

// Registers the domain and every schema in onnx's global OpSchemaRegistry. Idempotent and thread-safe; the model
// loader calls it before running the checker.
void RegisterTraindSchemas();

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_TRAIND_SCHEMAS_H_
