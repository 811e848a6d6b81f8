// Checkpoint bytes from a client (LoadCheckpoint, CreateSession from an uploaded checkpoint): parsing, digest,
// validation; what parses is serialized again and must parse to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "engine/training/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<traind::engine::CheckpointState> state = traind::engine::ParseCheckpoint(bytes);
  if (!state.ok()) return 0;
  (void)traind::engine::ValidateCheckpointState(*state, /*allow_shape_only=*/true);
  absl::StatusOr<std::string> again = traind::engine::SerializeCheckpoint(*state);
  if (!again.ok()) return 0;
  absl::StatusOr<traind::engine::CheckpointState> reparsed = traind::engine::ParseCheckpoint(*again);
  if (!reparsed.ok()) std::abort();  // what the engine writes, it must read
  return 0;
}
