#include "server/session_store.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/io/file_util.h"
#include "engine/model/model_loader.h"
#include "server/state_names.h"
#include "server/tenants.h"
#include "traind/internal/state.pb.h"

namespace traind {
namespace {

constexpr const char* kRecordName = "record";
constexpr const char* kCheckpointName = "checkpoint";
constexpr int64_t kMaxRecordBytes = 1 << 20;

absl::StatusOr<onnx::ModelProto> ModelFromBlob(const TenantSpace& space, const std::string& blob_id,
                                               const std::string& what) {
  TRAIND_ASSIGN_OR_RETURN(const std::string bytes, space.blobs->Read(blob_id));
  absl::StatusOr<onnx::ModelProto> model = engine::LoadModelFromBytes(bytes);
  if (!model.ok()) return absl::Status(model.status().code(), absl::StrCat(what, ": ", model.status().message()));
  return model;
}

internal::SessionRecord ToProto(const SessionRecordData& record) {
  internal::SessionRecord proto;
  proto.set_session_id(record.session_id);
  proto.set_tenant(record.tenant);
  proto.set_display_name(record.display_name);
  if (!record.origin.artifact_id.empty()) {
    proto.set_artifact_id(record.origin.artifact_id);
  } else {
    v1::UploadedArtifacts* uploaded = proto.mutable_uploaded();
    uploaded->set_training_model_blob_id(record.origin.training_model_blob);
    uploaded->set_eval_model_blob_id(record.origin.eval_model_blob);
    uploaded->set_optimizer_model_blob_id(record.origin.optimizer_model_blob);
    uploaded->set_checkpoint_blob_id(record.origin.checkpoint_blob);
  }
  proto.set_num_threads(record.num_threads);
  proto.set_seed(record.seed);
  proto.mutable_checkpoint_policy()->set_every_steps(record.checkpoint_policy.every_steps);
  proto.mutable_checkpoint_policy()->set_every_seconds(record.checkpoint_policy.every_seconds);
  if (!record.manual_scheduler.kind.empty()) {
    internal::SchedulerRecord* scheduler = proto.mutable_manual_scheduler();
    scheduler->set_kind(record.manual_scheduler.kind);
    for (const auto& [name, value] : record.manual_scheduler.values) {
      double number = 0;
      if (const int64_t* integer = std::get_if<int64_t>(&value)) number = static_cast<double>(*integer);
      if (const float* real = std::get_if<float>(&value)) number = *real;
      (*scheduler->mutable_values())[name] = number;
    }
  }
  proto.set_created_time(record.created_time);
  proto.set_executor(record.gpu ? v1::GPU : v1::CPU);
  proto.set_device_index(record.device_index);
  return proto;
}

// The scheduler settings' types, as lr_scheduler.h declares them: step counts are int64, rates float.
engine::PropertyValue SchedulerValue(const std::string& name, double number) {
  if (name == "warmup_steps" || name == "total_steps" || name == "step_size") {
    return engine::PropertyValue(static_cast<int64_t>(number));
  }
  return engine::PropertyValue(static_cast<float>(number));
}

SessionRecordData FromProto(const internal::SessionRecord& proto) {
  SessionRecordData record;
  record.session_id = proto.session_id();
  record.tenant = proto.tenant();
  record.display_name = proto.display_name();
  if (proto.has_uploaded()) {
    record.origin.training_model_blob = proto.uploaded().training_model_blob_id();
    record.origin.eval_model_blob = proto.uploaded().eval_model_blob_id();
    record.origin.optimizer_model_blob = proto.uploaded().optimizer_model_blob_id();
    record.origin.checkpoint_blob = proto.uploaded().checkpoint_blob_id();
  } else {
    record.origin.artifact_id = proto.artifact_id();
  }
  record.num_threads = proto.num_threads();
  record.seed = proto.seed();
  record.checkpoint_policy.every_steps = proto.checkpoint_policy().every_steps();
  record.checkpoint_policy.every_seconds = proto.checkpoint_policy().every_seconds();
  if (proto.has_manual_scheduler()) {
    record.manual_scheduler.kind = proto.manual_scheduler().kind();
    for (const auto& [name, number] : proto.manual_scheduler().values()) {
      record.manual_scheduler.values[name] = SchedulerValue(name, number);
    }
  }
  record.created_time = proto.created_time();
  record.gpu = proto.executor() == v1::GPU;
  record.device_index = proto.device_index();
  return record;
}

}  // namespace

absl::StatusOr<SessionModels> LoadSessionModels(const TenantSpace& space, const SessionOrigin& origin,
                                                bool load_checkpoint) {
  if (!origin.artifact_id.empty()) return space.artifacts->Load(origin.artifact_id, load_checkpoint);
  if (origin.training_model_blob.empty() || origin.checkpoint_blob.empty()) {
    return absl::InvalidArgumentError("uploaded artifacts need a training model and a checkpoint");
  }
  SessionModels models;
  TRAIND_ASSIGN_OR_RETURN(models.training_model, ModelFromBlob(space, origin.training_model_blob, "the training model"));
  if (!origin.eval_model_blob.empty()) {
    TRAIND_ASSIGN_OR_RETURN(models.eval_model, ModelFromBlob(space, origin.eval_model_blob, "the eval model"));
  }
  if (!origin.optimizer_model_blob.empty()) {
    TRAIND_ASSIGN_OR_RETURN(models.optimizer_model,
                            ModelFromBlob(space, origin.optimizer_model_blob, "the optimizer model"));
  }
  TRAIND_ASSIGN_OR_RETURN(const std::string checkpoint, space.blobs->Path(origin.checkpoint_blob));
  if (load_checkpoint) {
    TRAIND_ASSIGN_OR_RETURN(models.checkpoint, engine::LoadCheckpoint(checkpoint, engine::kDefaultMaxCheckpointBytes));
    models.checkpoint_from_origin = true;
  }
  return models;
}

std::string SessionStore::SessionDirectory(const std::string& tenant, const std::string& session_id) const {
  return absl::StrCat(TenantDirectory(state_dir_, tenant), "/sessions/", session_id);
}

absl::Status SessionStore::WriteRecord(const SessionRecordData& record) const {
  TRAIND_RETURN_IF_ERROR(CheckStateName(record.session_id, "session id"));
  const std::string directory = SessionDirectory(record.tenant, record.session_id);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create '", directory, "': ", error.message()));
  const std::string proto = ToProto(record).SerializeAsString();
  return engine::WriteFileAtomically(absl::StrCat(directory, "/", kRecordName),
                                     absl::StrCat(engine::Sha256Hex(proto), "\n", proto));
}

absl::Status SessionStore::WriteCheckpoint(const std::string& tenant, const std::string& session_id,
                                           const engine::CheckpointState& state,
                                           const engine::CheckpointSaveOptions& options) const {
  return engine::SaveCheckpoint(absl::StrCat(SessionDirectory(tenant, session_id), "/", kCheckpointName), state,
                                options);
}

void SessionStore::Remove(const std::string& tenant, const std::string& session_id) const {
  if (!CheckStateName(session_id, "session id").ok()) return;
  std::error_code error;
  std::filesystem::remove_all(SessionDirectory(tenant, session_id), error);
}

std::vector<SessionStore::Stored> SessionStore::LoadAll(std::vector<std::string>* problems) const {
  std::vector<Stored> stored;
  std::vector<std::string> tenant_names = {""};
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir_ + "/tenants", error)) {
    if (entry.is_directory() && CheckStateName(entry.path().filename().string(), "tenant").ok()) {
      tenant_names.push_back(entry.path().filename().string());
    }
  }
  for (const std::string& tenant : tenant_names) {
    const std::string sessions = TenantDirectory(state_dir_, tenant) + "/sessions";
    for (const auto& entry : std::filesystem::directory_iterator(sessions, error)) {
      const std::string directory = entry.path().string();
      // Temporary files of writes a crash interrupted.
      for (const auto& file : std::filesystem::directory_iterator(directory, error)) {
        if (absl::StrContains(file.path().filename().string(), ".tmp.")) std::filesystem::remove(file.path(), error);
      }
      absl::StatusOr<std::string> bytes = engine::ReadFileLimited(directory + "/" + kRecordName, kMaxRecordBytes);
      if (!bytes.ok()) {
        problems->push_back(absl::StrCat(directory, ": no session record (", bytes.status().message(), ")"));
        continue;
      }
      const size_t newline = bytes->find('\n');
      internal::SessionRecord proto;
      if (newline == std::string::npos ||
          engine::Sha256Hex(absl::string_view(*bytes).substr(newline + 1)) != bytes->substr(0, newline) ||
          !proto.ParseFromArray(bytes->data() + newline + 1, static_cast<int>(bytes->size() - newline - 1)) ||
          proto.session_id() != entry.path().filename().string() || proto.tenant() != tenant) {
        problems->push_back(absl::StrCat(directory, "/", kRecordName, " is damaged"));
        continue;
      }
      Stored session;
      session.record = FromProto(proto);
      // Read when the session is restored (one at a time), not now: checkpoints may be gigabytes each.
      if (std::filesystem::is_regular_file(directory + "/" + kCheckpointName, error)) {
        session.checkpoint_path = directory + "/" + kCheckpointName;
      }
      stored.push_back(std::move(session));
    }
  }
  return stored;
}

}  // namespace traind
