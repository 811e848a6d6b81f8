#include "server/artifact_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "engine/io/file_util.h"
#include "server/state_names.h"

namespace traind {
namespace {

constexpr const char* kManifestName = "MANIFEST";
constexpr const char* kTemporaryPrefix = ".tmp-";
constexpr const char* kArtifactIdPrefix = "a-";
constexpr const char* kTemporaryInfix = ".tmp.";

absl::Status CheckCheckpointName(const std::string& name) {
  TRAIND_RETURN_IF_ERROR(CheckStateName(name, "checkpoint name"));
  if (absl::StrContains(name, kTemporaryInfix)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint name '", name, "' must not contain '",
                                                   kTemporaryInfix, "' (reserved for temporary files)"));
  }
  return absl::OkStatus();
}

absl::Status FsyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open directory '", path, "'"));
  const int synced = ::fsync(fd);
  ::close(fd);
  return synced == 0 ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot fsync '", path, "'"));
}

// Unix seconds of the file's last modification; 0 when it cannot be read.
double ModifiedTime(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return static_cast<double>(info.st_mtim.tv_sec) + 1e-9 * static_cast<double>(info.st_mtim.tv_nsec);
}

absl::Status CreateDirectory(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create '", path, "': ", error.message()));
  return absl::OkStatus();
}

// MANIFEST: one line per file, "kind file_name size sha256".
std::string FormatManifest(const std::vector<ArtifactFileInfo>& files) {
  std::string manifest;
  for (const ArtifactFileInfo& file : files) {
    absl::StrAppend(&manifest, file.kind, " ", file.file_name, " ", file.size_bytes, " ", file.sha256_hex, "\n");
  }
  return manifest;
}

absl::StatusOr<std::vector<ArtifactFileInfo>> ParseManifest(const std::string& text, const std::string& path) {
  std::vector<ArtifactFileInfo> files;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    ArtifactFileInfo file;
    if (fields.size() != 4 || !absl::SimpleAtoi(fields[2], &file.size_bytes) ||
        !CheckStateName(fields[1], "file name").ok()) {
      return absl::DataLossError(absl::StrCat("'", path, "' is damaged"));
    }
    file.kind = fields[0];
    file.file_name = fields[1];
    file.sha256_hex = fields[3];
    files.push_back(std::move(file));
  }
  return files;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(const std::string& state_dir,
                                                                   int64_t max_file_bytes) {
  const std::string artifacts_dir = state_dir + "/artifacts";
  const std::string checkpoints_dir = state_dir + "/checkpoints";
  TRAIND_RETURN_IF_ERROR(CreateDirectory(artifacts_dir));
  TRAIND_RETURN_IF_ERROR(CreateDirectory(checkpoints_dir));
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(artifacts_dir, error)) {
    if (absl::StartsWith(entry.path().filename().string(), kTemporaryPrefix)) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints_dir, error)) {
    // WriteFileAtomically's temporary files ("<name>.tmp.<pid>.<n>"); CheckCheckpointName keeps names clear of it.
    if (absl::StrContains(entry.path().filename().string(), kTemporaryInfix)) {
      std::filesystem::remove(entry.path(), error);
    }
  }
  return std::unique_ptr<ArtifactStore>(new ArtifactStore(artifacts_dir, checkpoints_dir, max_file_bytes));
}

absl::StatusOr<StoredArtifacts> ArtifactStore::Save(const engine::Artifacts& artifacts, const std::string& prefix,
                                                    bool nominal_checkpoint) {
  if (!prefix.empty()) TRAIND_RETURN_IF_ERROR(CheckStateName(prefix, "the artifact prefix"));
  // Serialize the models first: nothing is written unless every part can be. The checkpoint (the parameters, which
  // may be gigabytes) is streamed to its file.
  std::vector<ArtifactFileInfo> files(4);
  files[0].kind = kTrainingModelKind;
  files[1].kind = kEvalModelKind;
  files[2].kind = kOptimizerModelKind;
  files[3].kind = kCheckpointKind;
  files[0].file_name = prefix + "training_model.onnx";
  files[1].file_name = prefix + "eval_model.onnx";
  files[2].file_name = prefix + "optimizer_model.onnx";
  files[3].file_name = prefix + "checkpoint";
  if (!artifacts.training_model.SerializeToString(&files[0].content) ||
      !artifacts.eval_model.SerializeToString(&files[1].content) ||
      !artifacts.optimizer_model.SerializeToString(&files[2].content)) {
    return absl::ResourceExhaustedError("an artifact model cannot be serialized (over 2 GiB?)");
  }
  engine::CheckpointSaveOptions checkpoint_options;
  checkpoint_options.nominal = nominal_checkpoint;
  TRAIND_RETURN_IF_ERROR(engine::ValidateCheckpointState(artifacts.checkpoint, /*allow_shape_only=*/false));

  StoredArtifacts stored;
  stored.artifact_id = NewRandomId(kArtifactIdPrefix);
  const std::string temporary = absl::StrCat(artifacts_dir_, "/", kTemporaryPrefix, stored.artifact_id);
  TRAIND_RETURN_IF_ERROR(CreateDirectory(temporary));
  absl::Status written = absl::OkStatus();
  for (ArtifactFileInfo& file : files) {
    if (!written.ok()) break;
    const std::string path = temporary + "/" + file.file_name;
    if (file.kind == kCheckpointKind) {
      written = engine::SaveCheckpoint(path, artifacts.checkpoint, checkpoint_options);
      absl::StatusOr<std::string> digest = written.ok() ? engine::Sha256HexOfFile(path) : written;
      if (digest.ok()) {
        file.sha256_hex = *digest;
        std::error_code error;
        file.size_bytes = static_cast<int64_t>(std::filesystem::file_size(path, error));
      } else {
        written = digest.status();
      }
    } else {
      file.size_bytes = static_cast<int64_t>(file.content.size());
      file.sha256_hex = engine::Sha256Hex(file.content);
      written = engine::WriteFileAtomically(path, file.content);
      std::string().swap(file.content);
    }
  }
  if (written.ok()) written = engine::WriteFileAtomically(temporary + "/" + kManifestName, FormatManifest(files));
  if (written.ok() && std::rename(temporary.c_str(), (artifacts_dir_ + "/" + stored.artifact_id).c_str()) != 0) {
    written = absl::InternalError(absl::StrCat("cannot publish artifact set ", stored.artifact_id));
  }
  if (!written.ok()) {
    std::error_code error;
    std::filesystem::remove_all(temporary, error);
    return written;
  }
  TRAIND_RETURN_IF_ERROR(FsyncDirectory(artifacts_dir_));
  stored.files = std::move(files);
  return stored;
}

absl::StatusOr<std::string> ArtifactStore::ReadVerified(const std::string& directory,
                                                        const ArtifactFileInfo& file) const {
  TRAIND_ASSIGN_OR_RETURN(std::string content,
                          engine::ReadFileLimited(directory + "/" + file.file_name, max_file_bytes_));
  if (static_cast<int64_t>(content.size()) != file.size_bytes || engine::Sha256Hex(content) != file.sha256_hex) {
    return absl::DataLossError(absl::StrCat("artifact file '", file.file_name, "' no longer matches its digest"));
  }
  return content;
}

absl::StatusOr<std::string> ArtifactStore::Directory(const std::string& artifact_id) const {
  const std::string directory = absl::StrCat(artifacts_dir_, "/", artifact_id);
  if (!absl::StartsWith(artifact_id, kArtifactIdPrefix) || !CheckStateName(artifact_id, "artifact id").ok() ||
      !std::filesystem::exists(absl::StrCat(directory, "/", kManifestName))) {
    return absl::NotFoundError(absl::StrCat("no artifacts '", absl::CHexEscape(artifact_id.substr(0, 128)), "'"));
  }
  return directory;
}

absl::StatusOr<StoredArtifacts> ArtifactStore::Get(const std::string& artifact_id) const {
  TRAIND_ASSIGN_OR_RETURN(const std::string directory, Directory(artifact_id));
  const std::string manifest_path = absl::StrCat(directory, "/", kManifestName);
  TRAIND_ASSIGN_OR_RETURN(const std::string manifest, engine::ReadFileLimited(manifest_path, 1 << 16));
  StoredArtifacts stored;
  stored.artifact_id = artifact_id;
  TRAIND_ASSIGN_OR_RETURN(stored.files, ParseManifest(manifest, manifest_path));
  stored.created_time = ModifiedTime(manifest_path);
  return stored;
}

std::vector<StoredArtifacts> ArtifactStore::List() const {
  std::vector<StoredArtifacts> sets;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(artifacts_dir_, error)) {
    absl::StatusOr<StoredArtifacts> stored = Get(entry.path().filename().string());
    if (stored.ok()) sets.push_back(*std::move(stored));
  }
  std::sort(sets.begin(), sets.end(),
            [](const StoredArtifacts& a, const StoredArtifacts& b) { return a.created_time < b.created_time; });
  return sets;
}

absl::StatusOr<ArtifactFileInfo> ArtifactStore::FileOf(const std::string& artifact_id, const std::string& kind) const {
  TRAIND_ASSIGN_OR_RETURN(StoredArtifacts stored, Get(artifact_id));
  for (ArtifactFileInfo& file : stored.files) {
    if (file.kind != kind) continue;
    file.path = absl::StrCat(artifacts_dir_, "/", artifact_id, "/", file.file_name);
    return file;
  }
  return absl::NotFoundError(absl::StrCat("artifacts '", artifact_id, "' have no file of kind '",
                                          absl::CHexEscape(kind.substr(0, 64)), "'"));
}

absl::StatusOr<ArtifactFileInfo> ArtifactStore::ReadFile(const std::string& artifact_id, const std::string& kind) const {
  TRAIND_ASSIGN_OR_RETURN(ArtifactFileInfo file, FileOf(artifact_id, kind));
  TRAIND_ASSIGN_OR_RETURN(file.content, ReadVerified(absl::StrCat(artifacts_dir_, "/", artifact_id), file));
  return file;
}

absl::Status ArtifactStore::Delete(const std::string& artifact_id) {
  TRAIND_ASSIGN_OR_RETURN(const std::string directory, Directory(artifact_id));
  // Renamed out of sight first (atomic), then removed: a crash in between leaves a temporary directory that the
  // next start removes, never half a set.
  const std::string doomed = absl::StrCat(artifacts_dir_, "/", kTemporaryPrefix, "deleted-", artifact_id);
  if (std::rename(directory.c_str(), doomed.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot delete artifacts '", artifact_id, "'"));
  }
  std::error_code error;
  std::filesystem::remove_all(doomed, error);
  return FsyncDirectory(artifacts_dir_);
}

absl::StatusOr<SessionModels> ArtifactStore::Load(const std::string& artifact_id, bool load_checkpoint) const {
  TRAIND_ASSIGN_OR_RETURN(const std::string directory, Directory(artifact_id));
  const std::string manifest_path = absl::StrCat(directory, "/", kManifestName);
  TRAIND_ASSIGN_OR_RETURN(const std::string manifest, engine::ReadFileLimited(manifest_path, 1 << 16));
  TRAIND_ASSIGN_OR_RETURN(std::vector<ArtifactFileInfo> files, ParseManifest(manifest, manifest_path));
  SessionModels models;
  bool have_training = false, have_checkpoint = false;
  for (const ArtifactFileInfo& file : files) {
    if (file.kind == kCheckpointKind && !load_checkpoint) {
      have_checkpoint = true;
      continue;
    }
    if (file.kind == kCheckpointKind) {
      // Read once, in pieces, straight into the parameters; its own digest and the manifest's both checked.
      std::string digest;
      TRAIND_ASSIGN_OR_RETURN(models.checkpoint,
                              engine::LoadCheckpoint(directory + "/" + file.file_name, max_file_bytes_, &digest));
      if (digest != file.sha256_hex) {
        return absl::DataLossError(absl::StrCat("artifact file '", file.file_name, "' no longer matches its digest"));
      }
      models.checkpoint_from_origin = true;
      have_checkpoint = true;
      continue;
    }
    TRAIND_ASSIGN_OR_RETURN(std::string content, ReadVerified(directory, file));
    onnx::ModelProto model;
    if (!model.ParseFromString(content)) {
      return absl::DataLossError(absl::StrCat("artifact file '", file.file_name, "' does not parse"));
    }
    if (file.kind == kTrainingModelKind) {
      models.training_model = std::move(model);
      have_training = true;
    } else if (file.kind == kEvalModelKind) {
      models.eval_model = std::move(model);
    } else if (file.kind == kOptimizerModelKind) {
      models.optimizer_model = std::move(model);
    }
  }
  if (!have_training || !have_checkpoint) return absl::DataLossError(absl::StrCat("'", manifest_path, "' is damaged"));
  return models;
}

absl::Status ArtifactStore::SaveCheckpoint(const std::string& name, const std::string& bytes) {
  TRAIND_RETURN_IF_ERROR(CheckCheckpointName(name));
  return engine::WriteFileAtomically(absl::StrCat(checkpoints_dir_, "/", name), bytes);
}

absl::StatusOr<std::string> ArtifactStore::CheckpointPath(const std::string& name) const {
  TRAIND_RETURN_IF_ERROR(CheckCheckpointName(name));
  return absl::StrCat(checkpoints_dir_, "/", name);
}

absl::StatusOr<std::string> ArtifactStore::ExistingCheckpointPath(const std::string& name) const {
  TRAIND_ASSIGN_OR_RETURN(std::string path, CheckpointPath(name));
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint named '", name, "'"));
  }
  return path;
}

absl::StatusOr<StoredCheckpointInfo> ArtifactStore::CheckpointInfo(const std::string& name) const {
  TRAIND_ASSIGN_OR_RETURN(const std::string path, ExistingCheckpointPath(name));
  StoredCheckpointInfo info;
  info.name = name;
  std::error_code error;
  info.size_bytes = static_cast<int64_t>(std::filesystem::file_size(path, error));
  TRAIND_ASSIGN_OR_RETURN(info.sha256_hex, engine::Sha256HexOfFile(path));
  info.modified_time = ModifiedTime(path);
  return info;
}


std::vector<StoredCheckpointInfo> ArtifactStore::ListCheckpoints() const {
  std::vector<StoredCheckpointInfo> checkpoints;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints_dir_, error)) {
    const std::string name = entry.path().filename().string();
    if (!CheckCheckpointName(name).ok()) continue;
    absl::StatusOr<StoredCheckpointInfo> info = CheckpointInfo(name);  // digested in pieces
    if (info.ok()) checkpoints.push_back(*std::move(info));
  }
  std::sort(checkpoints.begin(), checkpoints.end(),
            [](const StoredCheckpointInfo& a, const StoredCheckpointInfo& b) { return a.name < b.name; });
  return checkpoints;
}

absl::Status ArtifactStore::DeleteCheckpoint(const std::string& name) {
  TRAIND_RETURN_IF_ERROR(CheckCheckpointName(name));
  const std::string path = absl::StrCat(checkpoints_dir_, "/", name);
  if (::unlink(path.c_str()) != 0) return absl::NotFoundError(absl::StrCat("no checkpoint named '", name, "'"));
  return FsyncDirectory(checkpoints_dir_);
}

}  // namespace traind
