#include "server/training_service.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/gpu/device.h"
#include "engine/io/file_util.h"
#include "engine/model/model_loader.h"
#include "engine/training/artifacts.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "server/state_names.h"
#include "server/version.h"
#include "server/wire_convert.h"

namespace traind {
namespace {

// The trailing-metadata key of ErrorDetail (see the proto's conventions).
constexpr const char* kErrorDetailKey = "traind-error-detail-bin";
// Free text a client gives (display names) is bounded like names.
constexpr size_t kMaxDisplayNameLength = 256;

// engine kUnimplemented means "a valid model this build does not support" (an opset, an op, a dtype): for the
// client that is a precondition of its request, not a method the server lacks (gRPC's UNIMPLEMENTED).
grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  if (code == absl::StatusCode::kUnimplemented) return grpc::StatusCode::FAILED_PRECONDITION;
  return static_cast<grpc::StatusCode>(code);
}

// A failed call: the status, and where a machine-readable reason helps, an ErrorDetail in the trailing metadata.
grpc::Status Fail(grpc::ServerContext* context, const absl::Status& status, v1::ErrorDetail detail = {}) {
  if (detail.reason().empty()) {
    switch (status.code()) {
      case absl::StatusCode::kDataLoss:
        detail.set_reason("DATA_DAMAGED");
        break;
      case absl::StatusCode::kResourceExhausted:
        detail.set_reason("LIMIT_EXCEEDED");
        break;
      case absl::StatusCode::kUnimplemented:
        detail.set_reason("UNSUPPORTED_MODEL");
        break;
      default:
        break;
    }
  }
  if (!detail.reason().empty()) context->AddTrailingMetadata(kErrorDetailKey, detail.SerializeAsString());
  return grpc::Status(ToGrpcCode(status.code()), std::string(status.message()));
}

grpc::Status Fail(grpc::ServerContext* context, const absl::Status& status, const std::string& reason) {
  v1::ErrorDetail detail;
  detail.set_reason(reason);
  return Fail(context, status, std::move(detail));
}

// Every call but GetServerInfo: who calls (the tenant its token names), its space, and how to tell it is gone.
#define TRAIND_AUTHORIZE(call)                                                  \
  absl::StatusOr<Call> call##_authorized = Authorize(context);                   \
  if (!call##_authorized.ok()) return Fail(context, call##_authorized.status()); \
  const Call& call = *call##_authorized

const google::protobuf::ServiceDescriptor* ServiceDescriptor() {
  return google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::TrainingService::service_full_name());
}

// The caller-facing inputs of an artifact model (not parameters, gradient buffers or the reset flag).
void UserInputsToWire(const onnx::ModelProto& model, const engine::CheckpointState& checkpoint,
                      google::protobuf::RepeatedPtrField<v1::TensorInfo>* wire) {
  std::set<std::string> internal = {engine::kLazyResetGradName};
  for (const engine::Parameter& parameter : checkpoint.parameters) {
    internal.insert(parameter.name);
    internal.insert(engine::GradientAccumulationBufferName(parameter.name));
  }
  for (const auto& input : model.graph().input()) {
    if (internal.count(input.name()) > 0) continue;
    v1::TensorInfo* info = wire->Add();
    info->set_name(input.name());
    absl::StatusOr<engine::DataType> dtype = engine::DataTypeFromOnnx(input.type().tensor_type().elem_type());
    absl::StatusOr<v1::DataType> wire_dtype =
        dtype.ok() ? DataTypeToWire(*dtype) : absl::StatusOr<v1::DataType>(dtype.status());
    info->set_dtype(wire_dtype.ok() ? *wire_dtype : v1::DATA_TYPE_UNSPECIFIED);
    for (const auto& dim : input.type().tensor_type().shape().dim()) {
      info->add_shape(dim.has_dim_value() ? dim.dim_value() : -1);
      info->add_dim_names(dim.has_dim_param() ? dim.dim_param() : "");
    }
  }
}

// The loss, then the additional outputs: the training model's outputs before its gradient outputs.
void UserOutputsToWire(const onnx::ModelProto& model, size_t count, google::protobuf::RepeatedPtrField<std::string>* wire) {
  for (int o = 0; o < model.graph().output_size() && static_cast<size_t>(o) < count; ++o) {
    wire->Add(std::string(model.graph().output(o).name()));
  }
}

v1::LearningRate LearningRateToWire(const LearningRateInfo& info) {
  v1::LearningRate wire;
  wire.set_learning_rate(info.learning_rate);
  wire.set_optimizer_step(info.optimizer_step);
  wire.set_evaluations_without_improvement(info.evaluations_without_improvement);
  wire.set_stalled(info.stalled);
  return wire;
}

absl::Status NamedTensorsToWire(const engine::NamedTensors& tensors,
                                google::protobuf::RepeatedPtrField<v1::Tensor>* wire) {
  for (const auto& [name, tensor] : tensors) TRAIND_RETURN_IF_ERROR(TensorToWire(name, tensor, wire->Add()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainingServiceImpl::Call> TrainingServiceImpl::Authorize(grpc::ServerContext* context) const {
  std::string authorization, common_name;
  auto header = context->client_metadata().find("authorization");
  if (header != context->client_metadata().end()) authorization.assign(header->second.data(), header->second.size());
  if (std::shared_ptr<const grpc::AuthContext> auth = context->auth_context(); auth != nullptr) {
    const std::vector<grpc::string_ref> names = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
    if (!names.empty()) common_name.assign(names.front().data(), names.front().size());
  }
  TRAIND_ASSIGN_OR_RETURN(TenantConfig tenant, tenants_->Authenticate(authorization, common_name));
  Call call;
  TRAIND_ASSIGN_OR_RETURN(call.space, spaces_->Get(tenant.name));
  call.caller.tenant = tenant.name;
  call.caller.tenant_max_sessions = tenant.quotas.max_sessions;
  call.caller.cancelled = [context] { return context->IsCancelled(); };
  call.tenant = std::move(tenant);
  return call;
}

absl::Status TrainingServiceImpl::CheckStorage(const Call& call, int64_t new_bytes) const {
  const int64_t quota = call.tenant.quotas.max_stored_bytes;
  if (quota <= 0) return absl::OkStatus();
  const int64_t stored = spaces_->StoredBytes(call.tenant.name);
  if (new_bytes > quota - stored) {
    return absl::ResourceExhaustedError(absl::StrCat("tenant '", call.tenant.name, "' stores ", stored,
                                                     " bytes; ", new_bytes, " more would exceed its quota of ", quota));
  }
  return absl::OkStatus();
}

std::vector<std::string> TrainingServiceImpl::FullMethodNames() {
  const google::protobuf::ServiceDescriptor* service = ServiceDescriptor();
  std::vector<std::string> names;
  for (int i = 0; i < service->method_count(); ++i) {
    names.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  return names;
}

absl::StatusOr<onnx::ModelProto> TrainingServiceImpl::ResolveModel(const TenantSpace& space,
                                                                   const v1::ModelSource& source,
                                                                   const std::string& what) const {
  // External data stays in its blobs: the loader checks every reference against them and leaves the weights in
  // place (mapped when a tensor is made of them), so a model of any size is never copied into the proto.
  engine::LoadOptions options;
  if (source.external_data_size() > kMaxExternalDataFiles) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " names ", source.external_data_size(), " external data files; at most ",
                     kMaxExternalDataFiles, " are accepted"));
  }
  for (const auto& [location, blob_id] : source.external_data()) {
    if (location.empty() || location.size() > kMaxExternalDataLocationBytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": an external data location is empty or longer than ",
                                                     kMaxExternalDataLocationBytes, " bytes"));
    }
    absl::StatusOr<std::string> path = space.blobs->Path(blob_id);
    if (!path.ok()) {
      return absl::Status(path.status().code(), absl::StrCat(what, ": external data '",
                                                             absl::CHexEscape(location), "': ", path.status().message()));
    }
    options.external_data_files[location] = *std::move(path);
  }
  options.map_external_data = !options.external_data_files.empty();
  std::string blob;
  absl::string_view bytes;
  switch (source.source_case()) {
    case v1::ModelSource::kOnnxBytes:
      bytes = source.onnx_bytes();
      break;
    case v1::ModelSource::kBlobId: {
      TRAIND_ASSIGN_OR_RETURN(blob, space.blobs->Read(source.blob_id()));
      bytes = blob;
      break;
    }
    case v1::ModelSource::SOURCE_NOT_SET:
      return absl::InvalidArgumentError(absl::StrCat(what, " is missing: give onnx_bytes or a blob_id"));
  }
  options.limits.max_decoded_bytes = limits_.memory_budget_bytes;
  absl::StatusOr<onnx::ModelProto> model = engine::LoadModelFromBytes(bytes, options);
  if (!model.ok()) return absl::Status(model.status().code(), absl::StrCat(what, ": ", model.status().message()));
  return model;
}

// ---- Server information and blobs ----

grpc::Status TrainingServiceImpl::GetServerInfo(Context* /*context*/, const v1::GetServerInfoRequest* /*request*/,
                                                v1::ServerInfo* response) {
  response->set_version(kTraindVersion);
  response->set_grpc_version(grpc::Version());
  response->add_executors("cpu");
  // The GPU executor is always built; it is offered where OpenCL finds a device (pocl counts: OpenCL on the CPU).
  absl::StatusOr<std::vector<engine::gpu::DeviceInfo>> devices = engine::gpu::ListDevices();
  if (devices.ok()) {
    response->add_executors("gpu");
    for (const engine::gpu::DeviceInfo& device : *devices) {
      v1::GpuDevice* wire = response->add_gpu_devices();
      wire->set_index(device.index);
      wire->set_platform(device.platform);
      wire->set_name(device.name);
      wire->set_vendor(device.vendor);
      wire->set_version(device.version);
      wire->set_global_memory_bytes(device.global_memory_bytes);
      if (auto stats = engine::gpu::Device::ProgramCacheStatsIfOpen(device.index)) {
        wire->set_programs_compiled(stats->compiled);
        wire->set_programs_loaded_from_cache(stats->loaded_binaries);
      }
    }
  }
  response->set_min_opset(engine::kMinOnnxOpset);
  response->set_max_opset(engine::kMaxOnnxOpset);
  response->set_max_message_bytes(limits_.max_message_bytes);
  response->set_max_sessions(limits_.max_sessions);
  for (const char* loss : {"MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"}) response->add_losses(loss);
  for (const char* optimizer : {"AdamW", "SGD"}) response->add_optimizers(optimizer);
  const google::protobuf::ServiceDescriptor* service = ServiceDescriptor();
  for (int i = 0; i < service->method_count(); ++i) {
    (*response->mutable_implemented_rpcs())[service->method(i)->name()] = true;
  }
  response->set_default_num_threads(limits_.default_num_threads);
  response->set_max_concurrent_steps(limits_.max_concurrent_steps);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::UploadBlob(Context* context, grpc::ServerReader<v1::UploadBlobRequest>* reader,
                                             v1::UploadBlobResponse* response) {
  TRAIND_AUTHORIZE(call);
  v1::UploadBlobRequest message;
  if (!reader->Read(&message) || !message.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first UploadBlob message must be a header");
  }
  if (absl::Status room = CheckStorage(call, message.header().total_bytes()); !room.ok()) return Fail(context, room);
  absl::StatusOr<std::unique_ptr<BlobUpload>> upload =
      call.space->blobs->BeginUpload(message.header().total_bytes(), message.header().sha256_hex());
  if (!upload.ok()) return Fail(context, upload.status());
  while (reader->Read(&message)) {
    if (!message.has_chunk() && message.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "only the first UploadBlob message may be a header");
    }
    if (absl::Status appended = (*upload)->Append(message.chunk()); !appended.ok()) return Fail(context, appended);
  }
  // Read() also ends when the call is cancelled (client gone, or the drain deadline passed): then the partial
  // upload is discarded with `upload`.
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled");
  absl::StatusOr<BlobInfo> info = (*upload)->Finish();
  if (!info.ok()) return Fail(context, info.status());
  response->set_blob_id(info->blob_id);
  response->set_total_bytes(info->size_bytes);
  response->set_sha256_hex(info->blob_id);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::GetBlobInfo(Context* context, const v1::GetBlobInfoRequest* request,
                                              v1::UploadBlobResponse* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<BlobInfo> info = call.space->blobs->Stat(request->blob_id());
  if (!info.ok()) return Fail(context, info.status(), "BLOB_NOT_FOUND");
  response->set_blob_id(info->blob_id);
  response->set_total_bytes(info->size_bytes);
  response->set_sha256_hex(info->blob_id);
  return grpc::Status::OK;
}

// ---- Artifacts ----

grpc::Status TrainingServiceImpl::GenerateArtifacts(Context* context, const v1::GenerateArtifactsRequest* request,
                                                    v1::GenerateArtifactsResponse* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<onnx::ModelProto> forward = ResolveModel(*call.space, request->model(), "the model");
  if (!forward.ok()) return Fail(context, forward.status());
  const ModelResolver resolve = [this, &call](const v1::ModelSource& source, const std::string& what) {
    return ResolveModel(*call.space, source, what);
  };
  absl::StatusOr<engine::ArtifactOptions> options = ArtifactOptionsFromWire(*request, *forward, resolve);
  if (!options.ok()) return Fail(context, options.status());
  absl::StatusOr<engine::Artifacts> artifacts = engine::GenerateArtifacts(*forward, *options);
  if (!artifacts.ok()) {
    // An op without a gradient rule on a trainable path: the whole coverage report travels with the error.
    absl::StatusOr<engine::GradientCoverageReport> coverage = engine::AnalyzeGradientCoverage(*forward, *options);
    if (artifacts.status().code() == absl::StatusCode::kUnimplemented && coverage.ok() && !coverage->complete()) {
      v1::ErrorDetail detail;
      detail.set_reason("NO_GRADIENT_RULE");
      CoverageToWire(*coverage, detail.mutable_coverage());
      for (const engine::OpCoverage& op : coverage->ops) {
        if (!op.blocked_parameters.empty() && detail.op_type().empty()) {
          detail.set_op_type(op.op_type);
          detail.set_parameter(op.blocked_parameters.front());
        }
      }
      return Fail(context, absl::FailedPreconditionError(artifacts.status().message()), std::move(detail));
    }
    return Fail(context, artifacts.status());
  }
  int64_t artifact_bytes = static_cast<int64_t>(artifacts->training_model.ByteSizeLong() +
                                                artifacts->eval_model.ByteSizeLong() +
                                                artifacts->optimizer_model.ByteSizeLong());
  for (const engine::Parameter& parameter : artifacts->checkpoint.parameters) {
    artifact_bytes += static_cast<int64_t>(parameter.data.byte_size());
  }
  if (absl::Status room = CheckStorage(call, artifact_bytes); !room.ok()) return Fail(context, room);
  absl::StatusOr<StoredArtifacts> stored =
      call.space->artifacts->Save(*artifacts, request->prefix(), request->nominal_checkpoint());
  if (!stored.ok()) return Fail(context, stored.status());
  response->set_artifact_id(stored->artifact_id);
  if (request->return_artifact_bytes()) {
    // Read back only what a message can carry (a large model's checkpoint is downloaded in pieces instead).
    int64_t total = 0;
    for (const ArtifactFileInfo& file : stored->files) total += file.size_bytes;
    if (total > limits_.max_message_bytes) {
      return Fail(context, absl::ResourceExhaustedError(absl::StrCat(
                               "the artifacts (stored as ", stored->artifact_id,
                               ") are larger than the message limit of ", limits_.max_message_bytes,
                               " bytes: ask without return_artifact_bytes")));
    }
    for (ArtifactFileInfo& file : stored->files) {
      absl::StatusOr<ArtifactFileInfo> read = call.space->artifacts->ReadFile(stored->artifact_id, file.kind);
      if (!read.ok()) return Fail(context, read.status());
      file.content = std::move(read->content);
    }
  }
  for (ArtifactFileInfo& file : stored->files) {
    v1::ArtifactFile* wire = response->add_files();
    wire->set_kind(file.kind);
    wire->set_file_name(file.file_name);
    wire->set_size_bytes(file.size_bytes);
    wire->set_sha256_hex(file.sha256_hex);
    wire->set_content(std::move(file.content));
  }
  CoverageToWire(artifacts->coverage, response->mutable_coverage());
  UserInputsToWire(artifacts->training_model, artifacts->checkpoint, response->mutable_training_inputs());
  UserInputsToWire(artifacts->eval_model, artifacts->checkpoint, response->mutable_eval_inputs());
  for (const engine::Parameter& parameter : artifacts->checkpoint.parameters) {
    (parameter.requires_grad ? response->add_trainable_parameters() : response->add_frozen_parameters())
        ->assign(parameter.name);
  }
  const size_t user_outputs = 1 + request->additional_output_names_size();
  UserOutputsToWire(artifacts->training_model, user_outputs, response->mutable_training_output_names());
  UserOutputsToWire(artifacts->eval_model, user_outputs, response->mutable_eval_output_names());
  if (static_cast<int64_t>(response->ByteSizeLong()) > limits_.max_message_bytes) {
    return Fail(context, absl::ResourceExhaustedError(absl::StrCat(
                             "the artifacts (stored as ", stored->artifact_id, ") are larger than the message limit of ",
                             limits_.max_message_bytes, " bytes: ask without return_artifact_bytes")));
  }
  return grpc::Status::OK;
}

// ---- Sessions ----

SessionOrigin TrainingServiceImpl::OriginOf(const v1::CreateSessionRequest& request) {
  SessionOrigin origin;
  origin.artifact_id = request.artifact_id();
  origin.training_model_blob = request.uploaded().training_model_blob_id();
  origin.eval_model_blob = request.uploaded().eval_model_blob_id();
  origin.optimizer_model_blob = request.uploaded().optimizer_model_blob_id();
  origin.checkpoint_blob = request.uploaded().checkpoint_blob_id();
  return origin;
}

absl::StatusOr<SessionModels> TrainingServiceImpl::ModelsOf(const TenantSpace& space,
                                                            const v1::CreateSessionRequest& request) const {
  if (request.artifacts_case() == v1::CreateSessionRequest::ARTIFACTS_NOT_SET) {
    return absl::InvalidArgumentError("give an artifact_id or uploaded artifacts");
  }
  // A starting checkpoint replaces the artifacts' one, which is then not read at all.
  const bool from_artifacts = request.start_case() == v1::CreateSessionRequest::START_NOT_SET;
  TRAIND_ASSIGN_OR_RETURN(SessionModels models, LoadSessionModels(space, OriginOf(request), from_artifacts));
  std::string start;
  switch (request.start_case()) {
    case v1::CreateSessionRequest::kCheckpointName: {
      TRAIND_ASSIGN_OR_RETURN(start, space.artifacts->ExistingCheckpointPath(request.checkpoint_name()));
      break;
    }
    case v1::CreateSessionRequest::kCheckpointBlobId: {
      TRAIND_ASSIGN_OR_RETURN(start, space.blobs->Path(request.checkpoint_blob_id()));
      break;
    }
    case v1::CreateSessionRequest::START_NOT_SET:
      return models;
  }
  absl::StatusOr<engine::CheckpointState> checkpoint = engine::LoadCheckpoint(start);
  if (!checkpoint.ok()) {
    return absl::Status(checkpoint.status().code(),
                        absl::StrCat("the starting checkpoint: ", checkpoint.status().message()));
  }
  models.checkpoint = *std::move(checkpoint);
  return models;
}

namespace {

// The executor a new session asks for (CreateSession, SubmitJob on an artifact set). Never a silent CPU fallback: a
// GPU session gets an OpenCL device or NO_GPU.
grpc::Status CheckExecutor(grpc::ServerContext* context, v1::Executor executor, int32_t device_index) {
  if (executor != v1::CPU && executor != v1::EXECUTOR_UNSPECIFIED && executor != v1::GPU) {
    return Fail(context, absl::InvalidArgumentError(absl::StrCat("unknown executor ", executor)));
  }
  if (executor != v1::GPU) {
    if (device_index == 0) return grpc::Status::OK;
    return Fail(context, absl::InvalidArgumentError("device_index is for the GPU executor only"));
  }
  absl::StatusOr<std::vector<engine::gpu::DeviceInfo>> devices = engine::gpu::ListDevices();
  if (!devices.ok()) {
    return Fail(context,
                absl::FailedPreconditionError(absl::StrCat("this daemon has no OpenCL device for the GPU executor: ",
                                                           devices.status().message())),
                "NO_GPU");
  }
  if (device_index < 0 || device_index >= static_cast<int>(devices->size())) {
    return Fail(context, absl::InvalidArgumentError(absl::StrCat("device_index ", device_index,
                                                                 " is not a GPU device of this daemon (it has ",
                                                                 devices->size(), "; GetServerInfo lists them)")));
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status TrainingServiceImpl::CreateSession(Context* context, const v1::CreateSessionRequest* request,
                                                v1::Session* response) {
  TRAIND_AUTHORIZE(call);
  if (grpc::Status executor = CheckExecutor(context, request->executor(), request->device_index()); !executor.ok()) {
    return executor;
  }
  if (request->display_name().size() > kMaxDisplayNameLength) {
    return Fail(context, absl::InvalidArgumentError(
                             absl::StrCat("display_name is longer than ", kMaxDisplayNameLength, " bytes")));
  }
  absl::StatusOr<std::optional<engine::LearningRateScheduler>> scheduler = SchedulerFromWire(request->scheduler());
  if (!scheduler.ok()) return Fail(context, scheduler.status());
  absl::StatusOr<SessionModels> models = ModelsOf(*call.space, *request);
  if (!models.ok()) return Fail(context, models.status());
  if (scheduler->has_value() && !models->optimizer_model) {
    return Fail(context, absl::InvalidArgumentError("a scheduler needs an optimizer model"));
  }
  SessionSettings settings;
  settings.display_name = request->display_name();
  settings.origin = OriginOf(*request);
  settings.num_threads = request->num_threads();
  settings.gpu = request->executor() == v1::GPU;
  settings.device_index = request->device_index();
  settings.seed = request->seed();
  if (request->has_checkpoint_policy()) {
    const v1::CheckpointPolicy& policy = request->checkpoint_policy();
    if (policy.every_steps() < 0 || !(policy.every_seconds() >= 0)) {
      return Fail(context, absl::InvalidArgumentError("checkpoint_policy fields must be >= 0"));
    }
    settings.checkpoint_policy = CheckpointPolicy{policy.every_steps(), policy.every_seconds()};
  }
  absl::StatusOr<SessionInfo> info = sessions_->Create(call.caller, *std::move(models), settings);
  if (!info.ok()) return Fail(context, info.status());
  if (scheduler->has_value()) {
    SchedulerRequest scheduling;
    scheduling.scheduler = **scheduler;
    absl::StatusOr<LearningRateInfo> set = sessions_->SetScheduler(call.caller, info->session_id, scheduling);
    absl::StatusOr<SessionInfo> updated = set.ok() ? sessions_->Get(call.caller, info->session_id) : set.status();
    if (!updated.ok()) {
      sessions_->Close(call.caller, info->session_id).IgnoreError();  // nothing half-made stays behind
      return Fail(context, updated.status());
    }
    info = std::move(updated);
  }
  SessionInfoToWire(*info, response);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::GetSession(Context* context, const v1::GetSessionRequest* request,
                                             v1::Session* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<SessionInfo> info = sessions_->Get(call.caller, request->session_id());
  if (!info.ok()) return Fail(context, info.status(), "SESSION_NOT_FOUND");
  SessionInfoToWire(*info, response);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::ListSessions(Context* context, const v1::ListSessionsRequest* /*request*/,
                                               v1::ListSessionsResponse* response) {
  TRAIND_AUTHORIZE(call);
  for (const SessionInfo& info : sessions_->List(call.caller)) SessionInfoToWire(info, response->add_sessions());
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::CloseSession(Context* context, const v1::CloseSessionRequest* request,
                                               v1::CloseSessionResponse* /*response*/) {
  TRAIND_AUTHORIZE(call);
  absl::Status closed = sessions_->Close(call.caller, request->session_id());
  if (!closed.ok()) return Fail(context, closed, "SESSION_NOT_FOUND");
  return grpc::Status::OK;
}

// ---- Training and evaluation ----

namespace {

constexpr int kMaxDeferredCalls = 16;

absl::StatusOr<std::vector<DeferredCall>> DeferredCallsFromWire(const v1::TrainStepRequest& request) {
  if (request.before_step_size() == 0) return std::vector<DeferredCall>();
  if (request.before_step_size() > kMaxDeferredCalls) {
    return absl::InvalidArgumentError(absl::StrCat("before_step holds ", request.before_step_size(),
                                                   " deferred calls; at most ", kMaxDeferredCalls));
  }
  if (request.examples_per_step() > 0) {
    return absl::InvalidArgumentError("before_step cannot be combined with examples_per_step");
  }
  std::vector<DeferredCall> calls;
  for (int i = 0; i < request.before_step_size(); ++i) {
    switch (request.before_step(i)) {
      case v1::DEFERRED_OPTIMIZER_STEP: calls.push_back(DeferredCall::kOptimizerStep); break;
      case v1::DEFERRED_SCHEDULER_STEP: calls.push_back(DeferredCall::kSchedulerStep); break;
      case v1::DEFERRED_LAZY_RESET_GRAD: calls.push_back(DeferredCall::kLazyResetGrad); break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("before_step[", i, "] is ", request.before_step(i), ", not a deferred call traind knows"));
    }
  }
  return calls;
}

void OptimizerStepInfoToWire(const OptimizerStepInfo& step, v1::OptimizerStepResponse* wire) {
  wire->set_optimizer_step(step.optimizer_step);
  wire->set_learning_rate(step.learning_rate);
  wire->set_skipped(step.skipped);
  wire->set_skip_reason(step.skip_reason);
}

}  // namespace

absl::Status TrainingServiceImpl::Step(const Call& call, const v1::TrainStepRequest& request,
                                       v1::TrainStepResponse* response) {
  TRAIND_ASSIGN_OR_RETURN(engine::NamedTensors inputs,
                          NamedTensorsFromWire(request.inputs(), limits_.max_message_bytes, "inputs", "input",
                                               batch_buffers_.get()));
  const std::vector<std::string> fetch(request.fetch_outputs().begin(), request.fetch_outputs().end());
  if (request.examples_per_step() < 0) return absl::InvalidArgumentError("examples_per_step must be >= 0");
  if (request.examples_per_step() > 0 && !fetch.empty()) {
    return absl::InvalidArgumentError("fetch_outputs cannot be combined with examples_per_step");
  }
  TRAIND_ASSIGN_OR_RETURN(const std::vector<DeferredCall> before_step, DeferredCallsFromWire(request));
  TRAIND_ASSIGN_OR_RETURN(TrainStepResult result,
                          request.examples_per_step() > 0
                              ? sessions_->TrainSteps(call.caller, request.session_id(), inputs,
                                                      request.examples_per_step(), request.accumulate_only())
                              : sessions_->TrainStep(call.caller, request.session_id(), inputs,
                                                     request.accumulate_only(), fetch, /*set_properties=*/nullptr,
                                                     before_step));
  response->set_loss(result.loss);
  for (const auto& [name, tensor] : result.outputs) {
    TRAIND_RETURN_IF_ERROR(TensorToWire(name, tensor, response->add_outputs()));
  }
  response->set_optimizer_step(result.optimizer_step);
  response->set_learning_rate(result.learning_rate);
  response->set_skipped(result.skipped);
  response->set_skip_reason(result.skip_reason);
  response->mutable_step_losses()->Assign(result.step_losses.begin(), result.step_losses.end());
  response->set_skipped_steps(result.skipped_steps);
  for (const OptimizerStepInfo& step : result.deferred_optimizer_steps) {
    OptimizerStepInfoToWire(step, response->add_deferred_optimizer_steps());
  }
  return absl::OkStatus();
}

grpc::Status TrainingServiceImpl::StreamedTrainStep(
    Context* context, grpc::ServerUnaryStreamer<v1::TrainStepRequest, v1::TrainStepResponse>* streamer) {
  TRAIND_AUTHORIZE(call);
  MessagePool<v1::TrainStepRequest>::Handle request = train_step_requests_.Acquire();
  // A unary call carries exactly one message; gRPC has already refused one over the size limit.
  if (!streamer->Read(request.get())) {
    return Fail(context, absl::InvalidArgumentError("the TrainStep request could not be read or parsed"));
  }
  v1::TrainStepResponse response;
  if (absl::Status stepped = Step(call, *request, &response); !stepped.ok()) return Fail(context, stepped);
  request.reset();  // back to the pool before the answer goes out, ready for this client's next step
  // The answer's last message: gRPC sends it with the status in one write (HTTP/2 DATA and trailers together),
  // where a plain Write would be one write and the client's wake-up, then the trailers and another.
  streamer->Write(response, grpc::WriteOptions().set_last_message());
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::TrainStream(
    Context* context, grpc::ServerReaderWriter<v1::TrainStreamResponse, v1::TrainStepRequest>* stream) {
  TRAIND_AUTHORIZE(call);
  // One step in flight per stream: the next request is read only once the previous answer is written, so a fast
  // client is held back by gRPC's flow control instead of being buffered here.
  v1::TrainStepRequest request;
  std::string session_id;
  for (int64_t sequence = 0; stream->Read(&request); ++sequence) {
    if (sequence == 0) {
      if (request.session_id().empty()) {
        return Fail(context, absl::InvalidArgumentError("the first TrainStream message must name the session"));
      }
      session_id = request.session_id();
    } else if (request.session_id().empty()) {
      request.set_session_id(session_id);
    } else if (request.session_id() != session_id) {
      return Fail(context, absl::InvalidArgumentError("one TrainStream trains one session"));
    }
    v1::TrainStreamResponse response;
    response.set_sequence(sequence);
    if (absl::Status stepped = Step(call, request, response.mutable_step()); !stepped.ok()) {
      return Fail(context, absl::Status(stepped.code(), absl::StrCat("request ", sequence, ": ", stepped.message())));
    }
    if (!stream->Write(response)) break;
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled");
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::OptimizerStep(Context* context, const v1::OptimizerStepRequest* request,
                                                v1::OptimizerStepResponse* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<OptimizerStepInfo> step = sessions_->OptimizerStep(call.caller, request->session_id());
  if (!step.ok()) return Fail(context, step.status());
  OptimizerStepInfoToWire(*step, response);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::LazyResetGrad(Context* context, const v1::LazyResetGradRequest* request,
                                                v1::LazyResetGradResponse* /*response*/) {
  TRAIND_AUTHORIZE(call);
  absl::Status reset = sessions_->LazyResetGrad(call.caller, request->session_id());
  if (!reset.ok()) return Fail(context, reset);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::Eval(Context* context, const v1::EvalRequest* request, v1::EvalResponse* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<engine::NamedTensors> inputs =
      NamedTensorsFromWire(request->inputs(), limits_.max_message_bytes, "inputs", "input", batch_buffers_.get());
  if (!inputs.ok()) return Fail(context, inputs.status());
  const std::vector<std::string> fetch(request->fetch_outputs().begin(), request->fetch_outputs().end());
  absl::StatusOr<EvalResult> result = sessions_->Eval(call.caller, request->session_id(), *inputs, fetch);
  if (!result.ok()) return Fail(context, result.status());
  response->set_loss(result->loss);
  for (const auto& [name, tensor] : result->outputs) {
    if (absl::Status encoded = TensorToWire(name, tensor, response->add_outputs()); !encoded.ok()) {
      return Fail(context, encoded);
    }
  }
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::SetLearningRate(Context* context, const v1::SetLearningRateRequest* request,
                                                  v1::LearningRate* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<LearningRateInfo> rate = sessions_->SetLearningRate(call.caller, request->session_id(), request->learning_rate());
  if (!rate.ok()) return Fail(context, rate.status());
  *response = LearningRateToWire(*rate);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::GetLearningRate(Context* context, const v1::GetLearningRateRequest* request,
                                                  v1::LearningRate* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<LearningRateInfo> rate = sessions_->GetLearningRate(call.caller, request->session_id());
  if (!rate.ok()) return Fail(context, rate.status());
  *response = LearningRateToWire(*rate);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::SetScheduler(Context* context, const v1::SetSchedulerRequest* request,
                                               v1::SetSchedulerResponse* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<std::optional<engine::LearningRateScheduler>> scheduler = SchedulerFromWire(request->scheduler());
  if (!scheduler.ok()) return Fail(context, scheduler.status());
  SchedulerRequest scheduling;
  scheduling.scheduler = *std::move(scheduler);
  if (request->has_initial_learning_rate()) scheduling.initial_learning_rate = request->initial_learning_rate();
  scheduling.manual_step = request->manual_step();
  absl::StatusOr<LearningRateInfo> rate = sessions_->SetScheduler(call.caller, request->session_id(), scheduling);
  if (!rate.ok()) return Fail(context, rate.status());
  *response->mutable_learning_rate() = LearningRateToWire(*rate);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::SchedulerStep(Context* context, const v1::SchedulerStepRequest* request,
                                                v1::LearningRate* response) {
  TRAIND_AUTHORIZE(call);
  std::optional<double> metric;
  if (request->has_metric()) metric = request->metric();
  absl::StatusOr<LearningRateInfo> rate = sessions_->SchedulerStep(call.caller, request->session_id(), metric);
  if (!rate.ok()) return Fail(context, rate.status());
  *response = LearningRateToWire(*rate);
  return grpc::Status::OK;
}

// ---- Forward / backward ----

grpc::Status TrainingServiceImpl::Forward(Context* context, const v1::ForwardRequest* request,
                                          v1::ForwardResponse* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<engine::NamedTensors> inputs =
      NamedTensorsFromWire(request->inputs(), limits_.max_message_bytes, "inputs", "input", batch_buffers_.get());
  if (!inputs.ok()) return Fail(context, inputs.status());
  const std::vector<std::string> fetch(request->fetch_outputs().begin(), request->fetch_outputs().end());
  absl::StatusOr<ForwardResult> result =
      sessions_->Forward(call.caller, request->session_id(), *inputs, request->training(), fetch);
  if (!result.ok()) return Fail(context, result.status());
  if (absl::Status encoded = NamedTensorsToWire(result->outputs, response->mutable_outputs()); !encoded.ok()) {
    return Fail(context, encoded);
  }
  response->set_handle(result->handle);
  response->set_saved_bytes(result->saved_bytes);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::Backward(Context* context, const v1::BackwardRequest* request,
                                           v1::BackwardResponse* response) {
  TRAIND_AUTHORIZE(call);
  if (request->handle().empty()) return Fail(context, absl::InvalidArgumentError("no forward handle given"));
  absl::StatusOr<engine::NamedTensors> gradients =
      NamedTensorsFromWire(request->output_gradients(), limits_.max_message_bytes, "output_gradients", "gradient",
                           batch_buffers_.get());
  if (!gradients.ok()) return Fail(context, gradients.status());
  const std::vector<std::string> inputs(request->input_gradients().begin(), request->input_gradients().end());
  absl::StatusOr<BackwardOutcome> outcome =
      sessions_->Backward(call.caller, request->session_id(), request->handle(), *gradients, inputs,
                          request->return_parameter_gradients());
  if (!outcome.ok()) return Fail(context, outcome.status());
  absl::Status encoded = NamedTensorsToWire(outcome->input_gradients, response->mutable_input_gradients());
  if (encoded.ok()) encoded = NamedTensorsToWire(outcome->parameter_gradients, response->mutable_parameter_gradients());
  if (!encoded.ok()) return Fail(context, encoded);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::ReleaseForward(Context* context, const v1::ReleaseForwardRequest* request,
                                                 v1::ReleaseForwardResponse* response) {
  TRAIND_AUTHORIZE(call);
  const std::vector<std::string> handles(request->handles().begin(), request->handles().end());
  absl::StatusOr<int> released = sessions_->ReleaseForward(call.caller, request->session_id(), handles);
  if (!released.ok()) return Fail(context, released.status());
  response->set_released(*released);
  return grpc::Status::OK;
}

// ---- Checkpoints and properties ----

grpc::Status TrainingServiceImpl::SaveCheckpoint(Context* context, const v1::SaveCheckpointRequest* request,
                                                 v1::SaveCheckpointResponse* response) {
  TRAIND_AUTHORIZE(call);
  if (request->name().empty() && !request->return_bytes()) {
    return Fail(context, absl::InvalidArgumentError("give the checkpoint a name, or ask for its bytes"));
  }
  if (!request->name().empty()) {
    if (absl::Status valid = CheckStateName(request->name(), "checkpoint name"); !valid.ok()) {
      return Fail(context, valid);
    }
  }
  if (!request->return_bytes()) {
    // Stored only: streamed from the session's state to the file, never held in memory (models of any size).
    absl::StatusOr<std::string> path = call.space->artifacts->CheckpointPath(request->name());
    if (!path.ok()) return Fail(context, path.status());
    absl::StatusOr<int64_t> size =
        sessions_->CheckpointSize(call.caller, request->session_id(), request->include_optimizer_state());
    if (!size.ok()) return Fail(context, size.status());
    if (absl::Status room = CheckStorage(call, *size); !room.ok()) return Fail(context, room);
    if (absl::Status saved = sessions_->SaveCheckpointFile(call.caller, request->session_id(),
                                                           request->include_optimizer_state(), *path);
        !saved.ok()) {
      return Fail(context, saved);
    }
    absl::StatusOr<StoredCheckpointInfo> info = call.space->artifacts->CheckpointInfo(request->name());
    if (!info.ok()) return Fail(context, info.status());
    response->set_name(request->name());
    response->set_size_bytes(info->size_bytes);
    response->set_sha256_hex(info->sha256_hex);
    return grpc::Status::OK;
  }
  // The bytes (refused before they are made when a message cannot carry them), stored too when named.
  absl::StatusOr<std::string> bytes = sessions_->SerializeCheckpoint(
      call.caller, request->session_id(), request->include_optimizer_state(), limits_.max_message_bytes - 4096);
  if (!bytes.ok()) return Fail(context, bytes.status());
  if (!request->name().empty()) {
    if (absl::Status room = CheckStorage(call, static_cast<int64_t>(bytes->size())); !room.ok()) {
      return Fail(context, room);
    }
    if (absl::Status saved = call.space->artifacts->SaveCheckpoint(request->name(), *bytes); !saved.ok()) {
      return Fail(context, saved);
    }
  }
  response->set_name(request->name());
  response->set_size_bytes(static_cast<int64_t>(bytes->size()));
  response->set_sha256_hex(engine::Sha256Hex(*bytes));
  response->set_content(*std::move(bytes));
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::LoadCheckpoint(Context* context, const v1::LoadCheckpointRequest* request,
                                                 v1::LoadCheckpointResponse* response) {
  TRAIND_AUTHORIZE(call);
  // Stored checkpoints and blobs are read from their files in pieces (one copy of the state in memory).
  absl::StatusOr<std::string> path;
  switch (request->source_case()) {
    case v1::LoadCheckpointRequest::kName:
      path = call.space->artifacts->ExistingCheckpointPath(request->name());
      break;
    case v1::LoadCheckpointRequest::kContent:
      path = "";
      break;
    case v1::LoadCheckpointRequest::kBlobId:
      path = call.space->blobs->Path(request->blob_id());
      break;
    case v1::LoadCheckpointRequest::SOURCE_NOT_SET:
      path = absl::InvalidArgumentError("give the checkpoint's name, content or blob_id");
      break;
  }
  if (!path.ok()) return Fail(context, path.status());
  absl::StatusOr<SessionInfo> info =
      request->source_case() == v1::LoadCheckpointRequest::kContent
          ? sessions_->LoadCheckpoint(call.caller, request->session_id(), request->content())
          : sessions_->LoadCheckpointFile(call.caller, request->session_id(), *path);
  if (!info.ok()) {
    return Fail(context, info.status(),
                info.status().code() == absl::StatusCode::kDataLoss ? "CHECKPOINT_DIGEST_MISMATCH" : "");
  }
  SessionInfoToWire(*info, response->mutable_session());
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::UpdateProperties(Context* context, const v1::UpdatePropertiesRequest* request,
                                                   v1::UpdatePropertiesResponse* response) {
  TRAIND_AUTHORIZE(call);
  engine::PropertyBag set;
  for (const auto& [name, property] : request->set()) {
    absl::StatusOr<engine::PropertyValue> value = PropertyFromWire(name, property);
    if (!value.ok()) return Fail(context, value.status());
    set[name] = *std::move(value);
  }
  const std::vector<std::string> remove(request->remove().begin(), request->remove().end());
  absl::StatusOr<engine::PropertyBag> properties = sessions_->UpdateProperties(call.caller, request->session_id(), set, remove);
  if (!properties.ok()) return Fail(context, properties.status());
  for (const auto& [name, value] : *properties) PropertyToWire(value, &(*response->mutable_properties())[name]);
  return grpc::Status::OK;
}

// ---- Parameters and export ----

grpc::Status TrainingServiceImpl::GetParameters(Context* context, const v1::GetParametersRequest* request,
                                                v1::GetParametersResponse* response) {
  TRAIND_AUTHORIZE(call);
  ParameterRequest wanted;
  wanted.trainable_only = request->trainable_only();
  wanted.names.assign(request->names().begin(), request->names().end());
  wanted.include_gradients = request->include_gradients();
  absl::StatusOr<ParameterValues> values = sessions_->GetParameters(call.caller, request->session_id(), wanted);
  if (!values.ok()) return Fail(context, values.status());
  for (const ParameterLayout& layout : values->layout) {
    v1::ParameterSlice* slice = response->add_layout();
    slice->set_name(layout.name);
    slice->mutable_shape()->Assign(layout.shape.begin(), layout.shape.end());
    slice->set_offset(layout.offset);
    slice->set_trainable(layout.trainable);
    slice->set_has_gradient(layout.has_gradient);
    absl::StatusOr<v1::DataType> dtype = DataTypeToWire(layout.dtype);
    slice->set_dtype(dtype.ok() ? *dtype : v1::DATA_TYPE_UNSPECIFIED);
  }
  absl::Status encoded = absl::OkStatus();
  if (values->buffer.defined()) encoded = TensorToWire("", values->buffer, response->mutable_buffer());
  if (encoded.ok() && values->gradient_buffer.defined()) {
    encoded = TensorToWire("", values->gradient_buffer, response->mutable_gradient_buffer());
  }
  for (size_t i = 0; encoded.ok() && i < values->parameters.size(); ++i) {
    encoded = TensorToWire(values->layout[i].name, values->parameters[i], response->add_parameters());
  }
  for (size_t i = 0; encoded.ok() && i < values->gradients.size(); ++i) {
    v1::Tensor* gradient = response->add_gradients();
    // A frozen parameter has no gradient: an empty tensor carrying only the name.
    if (values->gradients[i].defined()) {
      encoded = TensorToWire(values->layout[i].name, values->gradients[i], gradient);
    } else {
      gradient->set_name(values->layout[i].name);
    }
  }
  if (!encoded.ok()) return Fail(context, encoded);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::SetParameters(Context* context, const v1::SetParametersRequest* request,
                                                v1::SetParametersResponse* /*response*/) {
  TRAIND_AUTHORIZE(call);
  if (request->has_buffer() == (request->parameters_size() > 0)) {
    return Fail(context, absl::InvalidArgumentError("give either buffer or parameters"));
  }
  absl::Status set;
  if (request->has_buffer()) {
    absl::StatusOr<engine::Tensor> buffer = TensorFromWire(request->buffer(), limits_.max_message_bytes, "buffer");
    if (!buffer.ok()) return Fail(context, buffer.status());
    set = sessions_->SetParameters(call.caller, request->session_id(), request->trainable_only(), &*buffer, {});
  } else {
    absl::StatusOr<engine::NamedTensors> named =
        NamedTensorsFromWire(request->parameters(), limits_.max_message_bytes, "parameters", "parameter");
    if (!named.ok()) return Fail(context, named.status());
    set = sessions_->SetParameters(call.caller, request->session_id(), request->trainable_only(), nullptr, *named);
  }
  if (!set.ok()) return Fail(context, set);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::ExportForInference(Context* context, const v1::ExportForInferenceRequest* request,
                                                     v1::ExportForInferenceResponse* response) {
  TRAIND_AUTHORIZE(call);
  if (!request->external_data_file().empty()) {
    return Fail(context, absl::InvalidArgumentError(
                             "an export with an external data file is two files: download it (Download.export)"));
  }
  const std::vector<std::string> outputs(request->output_names().begin(), request->output_names().end());
  absl::StatusOr<std::string> model = sessions_->ExportForInference(call.caller, request->session_id(), outputs);
  if (!model.ok()) return Fail(context, model.status());
  response->set_sha256_hex(engine::Sha256Hex(*model));
  response->set_onnx_model(*std::move(model));
  return grpc::Status::OK;
}

// ---- Training jobs ----

grpc::Status TrainingServiceImpl::SubmitJob(Context* context, const v1::JobSpec* request, v1::Job* response) {
  TRAIND_AUTHORIZE(call);
  if (request->target_case() == v1::JobSpec::kArtifactId) {
    if (grpc::Status executor = CheckExecutor(context, request->executor(), request->device_index()); !executor.ok()) {
      return executor;
    }
  }
  absl::StatusOr<v1::Job> job = jobs_->Submit(call.caller, call.tenant.quotas.max_concurrent_jobs, *request);
  if (!job.ok()) return Fail(context, job.status());
  *response = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::GetJob(Context* context, const v1::GetJobRequest* request, v1::Job* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<v1::Job> job = jobs_->Get(call.caller, request->job_id());
  if (!job.ok()) return Fail(context, job.status(), "JOB_NOT_FOUND");
  *response = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::ListJobs(Context* context, const v1::ListJobsRequest* /*request*/,
                                           v1::ListJobsResponse* response) {
  TRAIND_AUTHORIZE(call);
  for (v1::Job& job : jobs_->List(call.caller)) *response->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::CancelJob(Context* context, const v1::CancelJobRequest* request, v1::Job* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<v1::Job> job = jobs_->Cancel(call.caller, request->job_id());
  if (!job.ok()) return Fail(context, job.status(), "JOB_NOT_FOUND");
  *response = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::WatchJob(Context* context, const v1::WatchJobRequest* request,
                                           grpc::ServerWriter<v1::Job>* writer) {
  TRAIND_AUTHORIZE(call);
  constexpr absl::Duration kMinInterval = absl::Milliseconds(200);  // at most 5 updates a second
  int64_t version = -1;
  absl::Time last_sent = absl::InfinitePast();
  while (!context->IsCancelled()) {
    const absl::Duration wait = last_sent + kMinInterval - absl::Now();
    if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    // Wake at least every second to notice a client that went away.
    absl::StatusOr<std::pair<v1::Job, int64_t>> next =
        jobs_->Wait(call.caller, request->job_id(), version, absl::Now() + absl::Seconds(1));
    if (!next.ok()) return Fail(context, next.status());
    if (next->second == version) continue;
    version = next->second;
    if (!writer->Write(next->first)) break;
    last_sent = absl::Now();
    if (JobManager::IsTerminal(next->first.state())) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
}

// ---- Stored artifacts, checkpoints and downloads ----

namespace {

void ArtifactSetToWire(const StoredArtifacts& stored, const std::string& tenant, v1::ArtifactSet* wire) {
  wire->set_artifact_id(stored.artifact_id);
  wire->set_created_time(stored.created_time);
  wire->set_tenant(tenant);
  for (const ArtifactFileInfo& file : stored.files) {
    v1::ArtifactFile* out = wire->add_files();
    out->set_kind(file.kind);
    out->set_file_name(file.file_name);
    out->set_size_bytes(file.size_bytes);
    out->set_sha256_hex(file.sha256_hex);
  }
}

}  // namespace

grpc::Status TrainingServiceImpl::ListArtifacts(Context* context, const v1::ListArtifactsRequest* /*request*/,
                                                v1::ListArtifactsResponse* response) {
  TRAIND_AUTHORIZE(call);
  for (const StoredArtifacts& stored : call.space->artifacts->List()) {
    ArtifactSetToWire(stored, call.tenant.name, response->add_artifacts());
  }
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::GetArtifact(Context* context, const v1::GetArtifactRequest* request,
                                              v1::ArtifactSet* response) {
  TRAIND_AUTHORIZE(call);
  absl::StatusOr<StoredArtifacts> stored = call.space->artifacts->Get(request->artifact_id());
  if (!stored.ok()) return Fail(context, stored.status(), "ARTIFACTS_NOT_FOUND");
  ArtifactSetToWire(*stored, call.tenant.name, response);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::DeleteArtifact(Context* context, const v1::DeleteArtifactRequest* request,
                                                 v1::DeleteArtifactResponse* /*response*/) {
  TRAIND_AUTHORIZE(call);
  if (sessions_->UsesArtifacts(call.tenant.name, request->artifact_id())) {
    return Fail(context, absl::FailedPreconditionError(absl::StrCat(
                             "artifacts '", request->artifact_id(), "' are used by an open session: close it first")));
  }
  if (absl::Status deleted = call.space->artifacts->Delete(request->artifact_id()); !deleted.ok()) {
    return Fail(context, deleted, "ARTIFACTS_NOT_FOUND");
  }
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::ListCheckpoints(Context* context, const v1::ListCheckpointsRequest* /*request*/,
                                                  v1::ListCheckpointsResponse* response) {
  TRAIND_AUTHORIZE(call);
  for (const StoredCheckpointInfo& info : call.space->artifacts->ListCheckpoints()) {
    v1::StoredCheckpoint* out = response->add_checkpoints();
    out->set_name(info.name);
    out->set_size_bytes(info.size_bytes);
    out->set_sha256_hex(info.sha256_hex);
    out->set_modified_time(info.modified_time);
  }
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::DeleteCheckpoint(Context* context, const v1::DeleteCheckpointRequest* request,
                                                   v1::DeleteCheckpointResponse* /*response*/) {
  TRAIND_AUTHORIZE(call);
  if (absl::Status deleted = call.space->artifacts->DeleteCheckpoint(request->name()); !deleted.ok()) {
    return Fail(context, deleted);
  }
  return grpc::Status::OK;
}

namespace {

// One file of a download: bytes in memory, a file read in pieces, or an export's external data file read from the
// session's parameters.
struct DownloadPart {
  std::string file_name;
  std::string content;  // when neither `path` nor `layout` is set
  std::string path;
  const engine::ExternalDataLayout* layout = nullptr;
  int64_t size_bytes = 0;
  std::string sha256_hex;  // what the header announces; a file's pieces are checked against it as they go
};

absl::StatusOr<DownloadPart> FilePart(const std::string& file_name, const std::string& path, std::string sha256_hex) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) return absl::NotFoundError(absl::StrCat("'", file_name, "' is gone"));
  DownloadPart part;
  part.file_name = file_name;
  part.path = path;
  part.size_bytes = static_cast<int64_t>(size);
  part.sha256_hex = std::move(sha256_hex);
  return part;
}

DownloadPart ContentPart(std::string file_name, std::string content) {
  DownloadPart part;
  part.file_name = std::move(file_name);
  part.size_bytes = static_cast<int64_t>(content.size());
  part.sha256_hex = engine::Sha256Hex(content);
  part.content = std::move(content);
  return part;
}

// Streams the parts, each after its header, in chunks of at most `chunk` bytes. CANCELLED when the client went
// away; DATA_LOSS when a stored file no longer matches its recorded digest (the client checks too).
absl::Status StreamParts(grpc::ServerContext* context, grpc::ServerWriter<v1::DownloadResponse>* writer, int64_t chunk,
                         const std::vector<DownloadPart>& parts) {
  for (const DownloadPart& part : parts) {
    v1::DownloadResponse header;
    header.mutable_header()->set_total_bytes(part.size_bytes);
    header.mutable_header()->set_sha256_hex(part.sha256_hex);
    header.mutable_header()->set_file_name(part.file_name);
    header.mutable_header()->set_file_count(static_cast<int32_t>(parts.size()));
    if (!writer->Write(header)) return absl::CancelledError("the client went away");
    std::unique_ptr<engine::FileReader> file;
    if (!part.path.empty()) {
      TRAIND_ASSIGN_OR_RETURN(file, engine::FileReader::Open(part.path));
      if (file->size() != part.size_bytes) {
        return absl::DataLossError(absl::StrCat("'", part.file_name, "' changed during the download"));
      }
    }
    engine::Sha256 digest;
    v1::DownloadResponse piece;
    for (int64_t offset = 0; offset < part.size_bytes; offset += chunk) {
      if (context->IsCancelled()) return absl::CancelledError("the download was cancelled");
      const size_t length = static_cast<size_t>(std::min(chunk, part.size_bytes - offset));
      if (file != nullptr) {
        std::string* bytes = piece.mutable_chunk();
        bytes->resize(length);
        TRAIND_RETURN_IF_ERROR(file->Read(bytes->data(), length));
        digest.Update(*bytes);
      } else if (part.layout != nullptr) {
        std::string* bytes = piece.mutable_chunk();
        bytes->resize(length);
        part.layout->Read(offset, length, bytes->data());
      } else {
        piece.set_chunk(part.content.substr(static_cast<size_t>(offset), length));
      }
      if (!writer->Write(piece)) return absl::CancelledError("the client went away");
    }
    if (file != nullptr && digest.FinishHex() != part.sha256_hex) {
      return absl::DataLossError(absl::StrCat("'", part.file_name, "' no longer matches its recorded digest"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status TrainingServiceImpl::Download(Context* context, const v1::DownloadRequest* request,
                                           grpc::ServerWriter<v1::DownloadResponse>* writer) {
  TRAIND_AUTHORIZE(call);
  // Leave room for the message's own framing under the message limit.
  const int64_t most = std::max<int64_t>(1, limits_.max_message_bytes - 1024);
  if (request->chunk_bytes() < 0) return Fail(context, absl::InvalidArgumentError("chunk_bytes must be >= 0"));
  const int64_t chunk = std::min(most, request->chunk_bytes() == 0 ? int64_t{1} << 20 : request->chunk_bytes());
  absl::Status done = absl::OkStatus();
  switch (request->source_case()) {
    case v1::DownloadRequest::kBlobId: {
      absl::StatusOr<std::string> path = call.space->blobs->Path(request->blob_id());
      absl::StatusOr<DownloadPart> part =
          path.ok() ? FilePart(request->blob_id(), *path, request->blob_id()) : path.status();
      done = part.ok() ? StreamParts(context, writer, chunk, {*std::move(part)}) : part.status();
      break;
    }
    case v1::DownloadRequest::kArtifactFile: {
      absl::StatusOr<ArtifactFileInfo> file =
          call.space->artifacts->FileOf(request->artifact_file().artifact_id(), request->artifact_file().kind());
      absl::StatusOr<DownloadPart> part =
          file.ok() ? FilePart(file->file_name, file->path, file->sha256_hex) : file.status();
      if (part.ok() && part->size_bytes != file->size_bytes) {
        part = absl::DataLossError(absl::StrCat("artifact file '", file->file_name, "' no longer matches its digest"));
      }
      done = part.ok() ? StreamParts(context, writer, chunk, {*std::move(part)}) : part.status();
      break;
    }
    case v1::DownloadRequest::kCheckpointName: {
      absl::StatusOr<StoredCheckpointInfo> info = call.space->artifacts->CheckpointInfo(request->checkpoint_name());
      absl::StatusOr<std::string> path =
          info.ok() ? call.space->artifacts->ExistingCheckpointPath(request->checkpoint_name()) : info.status();
      absl::StatusOr<DownloadPart> part =
          path.ok() ? FilePart(request->checkpoint_name(), *path, info->sha256_hex) : path.status();
      done = part.ok() ? StreamParts(context, writer, chunk, {*std::move(part)}) : part.status();
      break;
    }
    case v1::DownloadRequest::kExport: {
      const v1::ExportForInferenceRequest& export_request = request->export_();
      const std::vector<std::string> outputs(export_request.output_names().begin(),
                                             export_request.output_names().end());
      if (export_request.external_data_file().empty()) {
        absl::StatusOr<std::string> content =
            sessions_->ExportForInference(call.caller, export_request.session_id(), outputs);
        done = content.ok() ? StreamParts(context, writer, chunk, {ContentPart("model.onnx", *std::move(content))})
                            : content.status();
        break;
      }
      // The model, then its external data file, streamed from the session's parameters under its lock: the data
      // file is never written anywhere on the daemon.
      engine::InferenceExportOptions options;
      options.external_data_file = export_request.external_data_file();
      if (export_request.external_data_threshold_bytes() > 0) {
        options.external_threshold_bytes = export_request.external_data_threshold_bytes();
      }
      done = CheckStateName(options.external_data_file, "external_data_file");
      if (done.ok() && options.external_data_file == "model.onnx") {
        done = absl::InvalidArgumentError("external_data_file must not be 'model.onnx', the model's own name");
      }
      if (!done.ok()) break;
      done = sessions_->ExportForInferenceStream(
          call.caller, export_request.session_id(), outputs, options,
          [&](const engine::InferenceExport& exported) -> absl::Status {
            std::vector<DownloadPart> parts = {ContentPart("model.onnx", exported.model_bytes)};
            if (!exported.external_data.empty()) {
              DownloadPart data;
              data.file_name = exported.external_data.file_name();
              data.layout = &exported.external_data;
              data.size_bytes = exported.external_data.size_bytes();
              data.sha256_hex = exported.external_data.Sha256Hex();
              parts.push_back(std::move(data));
            }
            return StreamParts(context, writer, chunk, parts);
          });
      break;
    }
    case v1::DownloadRequest::SOURCE_NOT_SET:
      done = absl::InvalidArgumentError("name what to download: a blob, an artifact file, a checkpoint or an export");
      break;
  }
  if (done.code() == absl::StatusCode::kCancelled) {
    return grpc::Status(grpc::StatusCode::CANCELLED, std::string(done.message()));
  }
  if (!done.ok()) return Fail(context, done);
  return grpc::Status::OK;
}

}  // namespace traind
