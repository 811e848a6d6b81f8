// Preconditions in front of onnx's own shape-inference functions that index an input's dims without checking its
// rank (Debian's onnx 1.12). A hostile model reaches them through the checker and strict shape inference, which
// run on every model the loader accepts; a guard turns what would be an out-of-bounds read into onnx's
// InferenceError, which the loader reports as INVALID_ARGUMENT. Each guard names the fuzz input that found it.
#ifndef TRAIND_ENGINE_MODEL_ONNX_INFERENCE_GUARDS_H_
#define TRAIND_ENGINE_MODEL_ONNX_INFERENCE_GUARDS_H_

namespace traind::engine {

// Wraps the inference function of every version of each guarded op in onnx's global OpSchemaRegistry. Call once,
// before any shape inference runs (RegisterTraindSchemas does); not synchronised with concurrent inference.
void InstallOnnxInferenceGuards();

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_ONNX_INFERENCE_GUARDS_H_
