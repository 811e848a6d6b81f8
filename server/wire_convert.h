// Conversions between the wire schema (traind.v1 messages) and the engine's and the session core's plain C++
// types. Only server/ knows both sides. Everything decoded from a request is checked here or by the engine:
// errors are INVALID_ARGUMENT (RESOURCE_EXHAUSTED for sizes) naming the field.
#ifndef TRAIND_SERVER_WIRE_CONVERT_H_
#define TRAIND_SERVER_WIRE_CONVERT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/tensor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "engine/training/artifacts.h"
#include "engine/training/checkpoint.h"
#include "engine/training/lr_scheduler.h"
#include "google/protobuf/repeated_field.h"
#include "onnx/onnx_pb.h"
#include "server/session_manager.h"
#include "traind/v1/training_service.pb.h"

namespace traind {

absl::StatusOr<engine::DataType> DataTypeFromWire(v1::DataType dtype);
// kInvalidArgument for engine types the wire has no name for.
absl::StatusOr<v1::DataType> DataTypeToWire(engine::DataType dtype);

// `max_bytes` bounds the decoded tensor; `what` names it in errors ("input 'x'"). With a `pool`, the tensor's memory
// comes from it (engine::TensorFromBytes).
absl::StatusOr<engine::Tensor> TensorFromWire(const v1::Tensor& tensor, int64_t max_bytes, const std::string& what,
                                              engine::BufferPool* pool = nullptr);
absl::Status TensorToWire(const std::string& name, const engine::Tensor& tensor, v1::Tensor* wire);
// Named tensors: every name non-empty. `field` names the request field, `item` one entry ("input", "parameter").
absl::StatusOr<engine::NamedTensors> NamedTensorsFromWire(const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors,
                                                          int64_t max_bytes, const std::string& field,
                                                          const std::string& item, engine::BufferPool* pool = nullptr);

void TensorInfoToWire(const engine::GraphValue& value, v1::TensorInfo* wire);

absl::StatusOr<engine::PropertyValue> PropertyFromWire(const std::string& name, const v1::Property& property);
void PropertyToWire(const engine::PropertyValue& value, v1::Property* wire);

void SessionInfoToWire(const SessionInfo& info, v1::Session* wire);

// Resolves a ModelSource (inline bytes or an uploaded blob) to a validated model. `what` names it in errors.
using ModelResolver = std::function<absl::StatusOr<onnx::ModelProto>(const v1::ModelSource&, const std::string& what)>;

// GenerateArtifactsRequest -> ArtifactOptions (loss terms, optimizer, names). Loss graphs are resolved with
// `resolve`; the inputs of a custom loss graph that are not outputs of `forward` are its targets unless the request
// names them.
absl::StatusOr<engine::ArtifactOptions> ArtifactOptionsFromWire(const v1::GenerateArtifactsRequest& request,
                                                                const onnx::ModelProto& forward,
                                                                const ModelResolver& resolve);

void CoverageToWire(const engine::GradientCoverageReport& report, v1::GradientCoverage* wire);

// An empty spec (no kind set) is "no scheduler".
absl::StatusOr<std::optional<engine::LearningRateScheduler>> SchedulerFromWire(const v1::SchedulerSpec& spec);

}  // namespace traind

#endif  // TRAIND_SERVER_WIRE_CONVERT_H_
