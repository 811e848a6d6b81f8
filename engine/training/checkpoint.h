// Training state as plain data, and its file format.
//
// Follows ONNX Runtime's orttraining/training_api/checkpoint.h: a CheckpointState is plain data
// {parameters, optimizer state, scheduler state, property bag} with free Save/Load functions; Module and
// Optimizer (later) hold a non-owning pointer to it and update its tensors in place.
//
// ---------------------------------------------------------------------------------------------------------
// File format, version 1. Every integer is little-endian; floats are IEEE-754 binary32 bit patterns.
//
//   header (88 bytes)
//     [0, 8)    magic "TRDCKPT\n"
//     [8, 12)   u32 format version (1). Magic and version keep these offsets in every future version, so a
//               newer file is recognised as such rather than as garbage.
//     [12, 16)  u32 reserved, 0
//     [16, 24)  u64 payload length in bytes
//     [24, 88)  lower-case hex SHA-256 of bytes [0, 24) followed by the payload
//   payload
//     u32 flags: bit 0 nominal (tensors carry dtype and dims only), bit 1 optimizer section present;
//               other bits must be 0
//     u64 parameter count, then per parameter (checkpoint order):
//         string name, u8 requires_grad (0/1), tensor data, u8 has_grad (0/1), [tensor grad]
//     if flag bit 1:
//         i64 step, f32 learning_rate, f32 initial_learning_rate
//         u64 count of parameters with state, then per parameter (sorted by name):
//             string parameter name, u64 state count, then per state (sorted): string state name, tensor
//         string scheduler kind, property map scheduler values
//     property map properties
//   string:       u32 byte length, bytes
//   tensor:       i32 ONNX data type, u32 rank, rank x i64 dims, then (unless nominal) the elements
//                 row-major, element count x element size bytes
//   property map: u64 count, then per entry (sorted by name): string name, u8 kind (0 int64, 1 float,
//                 2 string), value (i64 / f32 / string)
//
// The file ends exactly where the payload ends. Maps are written in sorted order, so equal states give equal
// bytes (and equal digests).
//
// Errors when reading (the input is treated as hostile: every size is checked against the bytes that remain,
// overflow-safely, and counts beyond fixed limits are refused before anything is allocated):
//   - DataLoss: the file is torn or altered: shorter than its header, payload shorter or longer than the
//     header says, or a SHA-256 mismatch. The message says "damaged".
//   - InvalidArgument: not a checkpoint (wrong magic), or a payload whose digest is right but whose content
//     is malformed (a bug in the writer or a crafted file).
//   - FailedPrecondition: a format version this build cannot read.
// Parsing fills a fresh CheckpointState that is returned only when fully valid: never a half-loaded state.
// ---------------------------------------------------------------------------------------------------------
#ifndef TRAIND_ENGINE_TRAINING_CHECKPOINT_H_
#define TRAIND_ENGINE_TRAINING_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// A property value: ONNX Runtime's property bag holds exactly these three types.
using PropertyValue = std::variant<int64_t, float, std::string>;
using PropertyBag = std::map<std::string, PropertyValue>;

// One model parameter (an initializer of the training model).
//
// In a nominal state `data` (and `grad`) are shape-only tensors: constructed with a null buffer, so
// `defined()` is false while dtype(), shape() and num_elements() are valid. CopyBufferToParameters gives them
// storage.
struct Parameter {
  std::string name;
  Tensor data;
  Tensor grad;  // Optional: `grad.dtype() == kUndefined` means no gradient is held.
  bool requires_grad = true;

  bool has_grad() const { return grad.dtype() != DataType::kUndefined; }
};

// The optimizer's parameter-group state (one group, as in ONNX Runtime).
struct OptimizerGroupState {
  int64_t step = 0;
  float learning_rate = 0.0f;
  float initial_learning_rate = 0.0f;  // What schedulers scale from.
};

struct OptimizerState {
  OptimizerGroupState group;
  // Parameter name -> named state tensors ("momentum0", "momentum1" for AdamW). Every key names a parameter
  // of the checkpoint.
  std::map<std::string, std::map<std::string, Tensor>> parameter_states;
};

// Deliberately generic: a scheduler is a pure function of the step, so its state is its kind plus a few
// numbers (warm-up steps, total steps, ...). An empty kind means no scheduler.
struct SchedulerState {
  std::string kind;
  PropertyBag values;
};

struct CheckpointState {
  // Checkpoint order: the order of GetContiguousParameters' buffer. Names are unique.
  std::vector<Parameter> parameters;
  // Absent when the checkpoint was saved without optimizer state (or no optimizer was ever created).
  std::optional<OptimizerState> optimizer;
  SchedulerState scheduler;
  PropertyBag properties;
};

struct CheckpointSaveOptions {
  // Optimizer and scheduler state. On by default (unlike ONNX Runtime's Python API): silently dropping the
  // moments makes a resumed run diverge from an uninterrupted one.
  bool include_optimizer_state = true;
  // Write dtypes and shapes only, no tensor data: a checkpoint "skeleton" to ship before the weights.
  bool nominal = false;
};

// Largest checkpoint file LoadCheckpoint reads by default.
inline constexpr int64_t kDefaultMaxCheckpointBytes = int64_t{16} << 30;

// Checks the invariants every saved or loaded state satisfies: unique non-empty names; storable dtypes;
// grad dtype/shape equal to data's; optimizer state only for existing parameters; tensors with data unless
// `allow_shape_only`. InvalidArgument naming the offending entry.
absl::Status ValidateCheckpointState(const CheckpointState& state, bool allow_shape_only);

// The file's bytes (header + payload). Fails (InvalidArgument) if the state is invalid, or if it is nominal
// (has shape-only tensors) and `options.nominal` is false.
absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointState& state,
                                                const CheckpointSaveOptions& options = {});
// The size of that file, without making it (to refuse what would not fit a message before building it).
absl::StatusOr<int64_t> SerializedCheckpointSize(const CheckpointState& state,
                                                 const CheckpointSaveOptions& options = {});
// `source` names the bytes in error messages (a path, "upload 42").
absl::StatusOr<CheckpointState> ParseCheckpoint(absl::string_view bytes,
                                                absl::string_view source = "checkpoint");

// Streams the file (the same bytes as SerializeCheckpoint, never held in memory: tensor data goes from the
// tensors to the file) into a temporary file published atomically: a crash at any moment leaves the previous file
// or the complete new one. Nothing is written if the state is invalid.
absl::Status SaveCheckpoint(const std::string& path, const CheckpointState& state,
                            const CheckpointSaveOptions& options = {});
// Reads the file front to back once, tensor data straight into the tensors' buffers (memory: one copy of the
// state), checking the digest on the way; the errors of ParseCheckpoint (a damaged file is DataLoss even when it
// also fails to parse). `file_sha256_hex`, if given, gets the SHA-256 of the whole file (for stores that record
// file digests), computed in the same pass.
absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path,
                                               int64_t max_bytes = kDefaultMaxCheckpointBytes,
                                               std::string* file_sha256_hex = nullptr);

// ---- Helpers with ONNX Runtime Module semantics (used for fleet averaging) ----

// Total element count of the parameters (only those with requires_grad if `trainable_only`).
int64_t GetParametersSize(const CheckpointState& state, bool trainable_only);

// All selected parameters, in checkpoint order, flattened into one float tensor of GetParametersSize elements.
// FailedPrecondition for a shape-only parameter; InvalidArgument for a parameter that is not float32.
absl::StatusOr<Tensor> GetContiguousParameters(const CheckpointState& state, bool trainable_only);

// The inverse: copies `buffer` into the selected parameters in checkpoint order. Writes into the existing
// parameter buffers in place, so every tensor sharing them (a Module's session) sees the new values; shape-only
// parameters get fresh storage. All checks (size, dtypes, allocation) happen before the first write: on error
// no parameter has changed.
absl::Status CopyBufferToParameters(absl::Span<const float> buffer, bool trainable_only,
                                    CheckpointState& state);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_CHECKPOINT_H_
