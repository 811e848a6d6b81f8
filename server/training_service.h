// The traind.v1.TrainingService handlers. Each handler is thin: decode and validate the request (wire_convert.h),
// call the core (SessionManager, ArtifactStore, BlobStore, the engine's GenerateArtifacts), map the status, encode
// the response. MetricsInterceptor records every RPC's count and latency.
#ifndef TRAIND_SERVER_TRAINING_SERVICE_H_
#define TRAIND_SERVER_TRAINING_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/buffer_pool.h"
#include "server/artifact_store.h"
#include "server/blob_store.h"
#include "server/job_manager.h"
#include "server/message_pool.h"
#include "server/session_manager.h"
#include "server/tenant_spaces.h"
#include "server/tenants.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {

// Bounds on a ModelSource's external data map (each entry names an uploaded blob).
inline constexpr int kMaxExternalDataFiles = 4096;
inline constexpr size_t kMaxExternalDataLocationBytes = 4096;

struct ServiceLimits {
  int64_t max_message_bytes = 0;
  int64_t max_sessions = 0;
  int default_num_threads = 1;
  int max_concurrent_steps = 1;
  // What decoding one model may take (engine::ModelLimits::max_decoded_bytes); 0: the engine's default.
  int64_t memory_budget_bytes = 0;
};

// TrainStep is a streamed-unary method (unary on the wire): its handler parses the request into a message of its
// own pool (message_pool.h) instead of one gRPC allocates per call.
class TrainingServiceImpl final
    : public traind::v1::TrainingService::WithStreamedUnaryMethod_TrainStep<traind::v1::TrainingService::Service> {
 public:
  // Everything passed in must outlive the service.
  TrainingServiceImpl(ServiceLimits limits, Tenants* tenants, TenantSpaces* spaces, SessionManager* sessions,
                      JobManager* jobs)
      : limits_(limits), tenants_(tenants), spaces_(spaces), sessions_(sessions), jobs_(jobs) {}

  using Context = grpc::ServerContext;
  grpc::Status GetServerInfo(Context*, const v1::GetServerInfoRequest*, v1::ServerInfo*) override;
  grpc::Status UploadBlob(Context*, grpc::ServerReader<v1::UploadBlobRequest>*, v1::UploadBlobResponse*) override;
  grpc::Status GetBlobInfo(Context*, const v1::GetBlobInfoRequest*, v1::UploadBlobResponse*) override;
  grpc::Status GenerateArtifacts(Context*, const v1::GenerateArtifactsRequest*,
                                 v1::GenerateArtifactsResponse*) override;

  grpc::Status CreateSession(Context*, const v1::CreateSessionRequest*, v1::Session*) override;
  grpc::Status GetSession(Context*, const v1::GetSessionRequest*, v1::Session*) override;
  grpc::Status ListSessions(Context*, const v1::ListSessionsRequest*, v1::ListSessionsResponse*) override;
  grpc::Status CloseSession(Context*, const v1::CloseSessionRequest*, v1::CloseSessionResponse*) override;

  grpc::Status StreamedTrainStep(Context*,
                                 grpc::ServerUnaryStreamer<v1::TrainStepRequest, v1::TrainStepResponse>*) override;
  grpc::Status OptimizerStep(Context*, const v1::OptimizerStepRequest*, v1::OptimizerStepResponse*) override;
  grpc::Status LazyResetGrad(Context*, const v1::LazyResetGradRequest*, v1::LazyResetGradResponse*) override;
  grpc::Status Eval(Context*, const v1::EvalRequest*, v1::EvalResponse*) override;
  grpc::Status SetLearningRate(Context*, const v1::SetLearningRateRequest*, v1::LearningRate*) override;
  grpc::Status GetLearningRate(Context*, const v1::GetLearningRateRequest*, v1::LearningRate*) override;
  grpc::Status SetScheduler(Context*, const v1::SetSchedulerRequest*, v1::SetSchedulerResponse*) override;
  grpc::Status SchedulerStep(Context*, const v1::SchedulerStepRequest*, v1::LearningRate*) override;
  grpc::Status Forward(Context*, const v1::ForwardRequest*, v1::ForwardResponse*) override;
  grpc::Status Backward(Context*, const v1::BackwardRequest*, v1::BackwardResponse*) override;
  grpc::Status ReleaseForward(Context*, const v1::ReleaseForwardRequest*, v1::ReleaseForwardResponse*) override;

  grpc::Status SaveCheckpoint(Context*, const v1::SaveCheckpointRequest*, v1::SaveCheckpointResponse*) override;
  grpc::Status LoadCheckpoint(Context*, const v1::LoadCheckpointRequest*, v1::LoadCheckpointResponse*) override;
  grpc::Status UpdateProperties(Context*, const v1::UpdatePropertiesRequest*, v1::UpdatePropertiesResponse*) override;

  grpc::Status GetParameters(Context*, const v1::GetParametersRequest*, v1::GetParametersResponse*) override;
  grpc::Status SetParameters(Context*, const v1::SetParametersRequest*, v1::SetParametersResponse*) override;
  grpc::Status ExportForInference(Context*, const v1::ExportForInferenceRequest*,
                                  v1::ExportForInferenceResponse*) override;

  grpc::Status ListArtifacts(Context*, const v1::ListArtifactsRequest*, v1::ListArtifactsResponse*) override;
  grpc::Status GetArtifact(Context*, const v1::GetArtifactRequest*, v1::ArtifactSet*) override;
  grpc::Status DeleteArtifact(Context*, const v1::DeleteArtifactRequest*, v1::DeleteArtifactResponse*) override;
  grpc::Status ListCheckpoints(Context*, const v1::ListCheckpointsRequest*, v1::ListCheckpointsResponse*) override;
  grpc::Status DeleteCheckpoint(Context*, const v1::DeleteCheckpointRequest*, v1::DeleteCheckpointResponse*) override;
  grpc::Status Download(Context*, const v1::DownloadRequest*, grpc::ServerWriter<v1::DownloadResponse>*) override;
  grpc::Status TrainStream(Context*, grpc::ServerReaderWriter<v1::TrainStreamResponse, v1::TrainStepRequest>*) override;

  grpc::Status SubmitJob(Context*, const v1::JobSpec*, v1::Job*) override;
  grpc::Status GetJob(Context*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(Context*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(Context*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status WatchJob(Context*, const v1::WatchJobRequest*, grpc::ServerWriter<v1::Job>*) override;

  // Full method names ("/traind.v1.TrainingService/TrainStep") of every RPC in the service.
  static std::vector<std::string> FullMethodNames();

 private:
  // An authenticated call: its tenant, the tenant's stores, and what the core needs to know of the caller.
  struct Call {
    TenantConfig tenant;
    TenantSpace* space = nullptr;
    Caller caller;
  };
  // UNAUTHENTICATED unless the call carries a token of a tenant (when the daemon has tenants).
  absl::StatusOr<Call> Authorize(grpc::ServerContext* context) const;
  // RESOURCE_EXHAUSTED when `new_bytes` more would exceed the tenant's max_stored_bytes.
  absl::Status CheckStorage(const Call& call, int64_t new_bytes) const;
  // A model from inline bytes or an uploaded blob, validated by the engine's loader.
  absl::StatusOr<onnx::ModelProto> ResolveModel(const TenantSpace& space, const v1::ModelSource& source,
                                                const std::string& what) const;
  absl::StatusOr<SessionModels> ModelsOf(const TenantSpace& space, const v1::CreateSessionRequest& request) const;
  static SessionOrigin OriginOf(const v1::CreateSessionRequest& request);
  // One TrainStep on the core (TrainStep and TrainStream).
  absl::Status Step(const Call& call, const v1::TrainStepRequest& request, v1::TrainStepResponse* response);

  ServiceLimits limits_;
  // Memory of the batches decoded from requests (TrainStep, TrainStream, Eval, Forward, Backward): a client sends
  // batches of one shape again and again, and a buffer reused from the last request costs no mapping, no page
  // faults and no unmap (for a 200 KB batch on a small VM, ~100 us of a unary step). Free buffers kept: at most
  // kCachedBatchBytes.
  static constexpr size_t kCachedBatchBytes = size_t{32} << 20;
  std::shared_ptr<engine::BufferPool> batch_buffers_ = engine::BufferPool::Create(kCachedBatchBytes);
  // TrainStep's request messages, so that their `bytes` fields keep their memory from one step to the next: up to
  // 8 of them (steps decoded at once), holding as much as the cached batches together.
  MessagePool<v1::TrainStepRequest> train_step_requests_{/*max_kept=*/8, /*max_kept_bytes=*/kCachedBatchBytes};
  Tenants* tenants_;
  TenantSpaces* spaces_;
  SessionManager* sessions_;
  JobManager* jobs_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_TRAINING_SERVICE_H_
