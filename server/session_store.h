// Durable sessions: what it takes to bring every session back after a restart — clean or kill -9 — under the same
// id, with the same parameters, optimizer state, step and schedulers.
//
//   <tenant dir>/sessions/<id>/record      where the session's models come from and its settings (SessionRecord,
//                                          traind/internal/state.proto), preceded by the hex SHA-256 of the proto
//   <tenant dir>/sessions/<id>/checkpoint  its last automatic checkpoint (checkpoint.h's format, digest inside)
//
// Both are written with WriteFileAtomically (temp file, fsync, rename, fsync of the directory): a crash at any
// moment leaves the old file or the new one, never a torn one. The record is written before the session is first
// reported to its client, the checkpoint at creation, by the session's checkpoint policy, and on drain.
#ifndef TRAIND_SERVER_SESSION_STORE_H_
#define TRAIND_SERVER_SESSION_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/training/checkpoint.h"
#include "server/tenant_spaces.h"

namespace traind {

// Where a session's models come from: an artifact set of the tenant, or uploaded blobs of the tenant.
struct SessionOrigin {
  std::string artifact_id;
  std::string training_model_blob;
  std::string eval_model_blob;       // may be empty
  std::string optimizer_model_blob;  // may be empty
  std::string checkpoint_blob;
};

// The models (validated by the engine's loader) and the initial checkpoint of `origin` (without it when
// `load_checkpoint` is false: the caller starts from another one). NOT_FOUND when the artifact set or a blob is
// gone; DATA_LOSS when one is damaged.
absl::StatusOr<SessionModels> LoadSessionModels(const TenantSpace& space, const SessionOrigin& origin,
                                                bool load_checkpoint = true);

// When a session checkpoints itself. Zero fields are off.
struct CheckpointPolicy {
  int64_t every_steps = 0;
  double every_seconds = 0;
};

// Everything but the state: what the record holds.
struct SessionRecordData {
  std::string session_id;
  std::string tenant;
  std::string display_name;
  SessionOrigin origin;
  int num_threads = 0;
  uint64_t seed = 0;
  CheckpointPolicy checkpoint_policy;
  engine::SchedulerState manual_scheduler;  // empty kind: none
  double created_time = 0;
  bool gpu = false;      // the GPU executor on OpenCL device `device_index`
  int device_index = 0;
};

class SessionStore {
 public:
  explicit SessionStore(std::string state_dir) : state_dir_(std::move(state_dir)) {}

  absl::Status WriteRecord(const SessionRecordData& record) const;
  // Streamed to the file (engine::SaveCheckpoint): never a second copy of the state in memory.
  absl::Status WriteCheckpoint(const std::string& tenant, const std::string& session_id,
                               const engine::CheckpointState& state,
                               const engine::CheckpointSaveOptions& options) const;
  // Forgets a closed session (its directory goes).
  void Remove(const std::string& tenant, const std::string& session_id) const;

  struct Stored {
    SessionRecordData record;
    std::string checkpoint_path;  // empty when none was written (a crash during creation)
  };
  // Every stored session of every tenant. Leftovers of interrupted writes are removed; a damaged record or a
  // directory without one is reported in `problems` (and left in place for an operator to look at).
  std::vector<Stored> LoadAll(std::vector<std::string>* problems) const;

 private:
  std::string SessionDirectory(const std::string& tenant, const std::string& session_id) const;
  const std::string state_dir_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_SESSION_STORE_H_
