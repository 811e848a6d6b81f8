// Artifact sets and named checkpoints on disk, under the state directory:
//   artifacts/<id>/MANIFEST and the four files of GenerateArtifacts (training model, eval model, optimizer model,
//                   checkpoint), named with the request's prefix
//   checkpoints/<name>   what SaveCheckpoint stored under a name
// An artifact set is written into a temporary directory and renamed into place (then the parent directory is
// fsynced), so it is visible complete or not at all; a checkpoint is written with WriteFileAtomically. Leftovers of
// writes interrupted by a crash are removed when the store opens.
#ifndef TRAIND_SERVER_ARTIFACT_STORE_H_
#define TRAIND_SERVER_ARTIFACT_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/training/artifacts.h"
#include "engine/training/checkpoint.h"
#include "onnx/onnx_pb.h"

namespace traind {

// The kinds, in the order files are listed.
inline constexpr const char* kTrainingModelKind = "training_model";
inline constexpr const char* kEvalModelKind = "eval_model";
inline constexpr const char* kOptimizerModelKind = "optimizer_model";
inline constexpr const char* kCheckpointKind = "checkpoint";

struct ArtifactFileInfo {
  std::string kind;       // one of the kinds above
  std::string file_name;  // prefix + "training_model.onnx", ..., prefix + "checkpoint"
  int64_t size_bytes = 0;
  std::string sha256_hex;
  std::string content;    // filled only when asked for
  std::string path;       // FileOf: where it is (read it in pieces)
};

struct StoredArtifacts {
  std::string artifact_id;
  std::vector<ArtifactFileInfo> files;  // kind order
  double created_time = 0;              // Unix seconds
};

struct StoredCheckpointInfo {
  std::string name;
  int64_t size_bytes = 0;
  std::string sha256_hex;
  double modified_time = 0;  // Unix seconds
};

// What a session is made of.
struct SessionModels {
  onnx::ModelProto training_model;
  std::optional<onnx::ModelProto> eval_model;
  std::optional<onnx::ModelProto> optimizer_model;
  engine::CheckpointState checkpoint;
  // `checkpoint` is the origin's own (an artifact set's or uploaded one), not a later state: a session that starts
  // from it needs no checkpoint of its own until it changes (a restart reloads it from the origin).
  bool checkpoint_from_origin = false;
};

class ArtifactStore {
 public:
  // Creates the directories if needed and removes leftovers of interrupted writes. `max_file_bytes` bounds what
  // Load and ReadCheckpoint read.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(const std::string& state_dir, int64_t max_file_bytes);

  // Stores a new artifact set under a fresh id. `nominal_checkpoint` writes the checkpoint without parameter
  // values. The checkpoint is streamed to its file (the parameters are never copied whole).
  absl::StatusOr<StoredArtifacts> Save(const engine::Artifacts& artifacts, const std::string& prefix,
                                       bool nominal_checkpoint);
  // NOT_FOUND for an unknown id (or one that is not an id); DATA_LOSS when a file no longer matches the digest
  // recorded when it was stored.
  // Without `load_checkpoint` the checkpoint is left empty (the caller starts from another one).
  absl::StatusOr<SessionModels> Load(const std::string& artifact_id, bool load_checkpoint = true) const;
  // The set's files (without content); NOT_FOUND for an unknown id.
  absl::StatusOr<StoredArtifacts> Get(const std::string& artifact_id) const;
  std::vector<StoredArtifacts> List() const;
  // One file's bytes, checked against its digest.
  absl::StatusOr<ArtifactFileInfo> ReadFile(const std::string& artifact_id, const std::string& kind) const;
  // One file's manifest entry and path, without reading it (downloads stream it).
  absl::StatusOr<ArtifactFileInfo> FileOf(const std::string& artifact_id, const std::string& kind) const;
  absl::Status Delete(const std::string& artifact_id);

  // Named checkpoints ([A-Za-z0-9._-], see state_names.h): SaveCheckpoint replaces an older one atomically.
  absl::Status SaveCheckpoint(const std::string& name, const std::string& bytes);
  // Where a checkpoint of that name is (to be) stored: write it with engine::SaveCheckpoint, which publishes it
  // atomically. InvalidArgument for a bad name.
  absl::StatusOr<std::string> CheckpointPath(const std::string& name) const;
  // The same, NotFound unless it exists.
  absl::StatusOr<std::string> ExistingCheckpointPath(const std::string& name) const;
  // Its size and SHA-256 (read in pieces).
  absl::StatusOr<StoredCheckpointInfo> CheckpointInfo(const std::string& name) const;
  std::vector<StoredCheckpointInfo> ListCheckpoints() const;
  absl::Status DeleteCheckpoint(const std::string& name);

 private:
  ArtifactStore(std::string artifacts_dir, std::string checkpoints_dir, int64_t max_file_bytes)
      : artifacts_dir_(std::move(artifacts_dir)),
        checkpoints_dir_(std::move(checkpoints_dir)),
        max_file_bytes_(max_file_bytes) {}
  // Reads one file of a set and checks it against the manifest.
  absl::StatusOr<std::string> ReadVerified(const std::string& directory, const ArtifactFileInfo& file) const;
  // The set's directory, NOT_FOUND unless `artifact_id` names a stored set.
  absl::StatusOr<std::string> Directory(const std::string& artifact_id) const;

  std::string artifacts_dir_;
  std::string checkpoints_dir_;
  int64_t max_file_bytes_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_ARTIFACT_STORE_H_
