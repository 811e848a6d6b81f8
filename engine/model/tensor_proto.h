// Conversion between onnx::TensorProto and engine Tensor.
#ifndef TRAIND_ENGINE_MODEL_TENSOR_PROTO_H_
#define TRAIND_ENGINE_MODEL_TENSOR_PROTO_H_

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Copies a TensorProto's data into a new Tensor. The proto's data must be inline (raw_data or the
// typed field) or external data the loader pinned (LoadOptions::map_external_data), which is mapped
// from its file instead of copied (external_tensor.h). Validates
// dims (non-negative, count <= limit) and that the data size matches dims exactly. Unsupported
// dtypes (string, complex) give kUnimplemented.
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                       int64_t max_elements = kMaxTensorElements);

// Writes a tensor as raw_data (used by tests and tools).
onnx::TensorProto TensorToProto(const Tensor& tensor, const std::string& name);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_TENSOR_PROTO_H_
