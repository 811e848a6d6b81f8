// The traind.v1.TrainingService handlers. Each handler is thin: validate the request, call the engine,
// map the status, return; metrics are recorded by MetricsInterceptor for every RPC.
#ifndef TRAIND_SERVER_TRAINING_SERVICE_H_
#define TRAIND_SERVER_TRAINING_SERVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/blob_store.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {

struct ServiceLimits {
  int64_t max_message_bytes = 0;
  int64_t max_sessions = 0;
};

class TrainingServiceImpl final : public traind::v1::TrainingService::Service {
 public:
  // `blobs` must outlive the service.
  TrainingServiceImpl(ServiceLimits limits, BlobStore* blobs) : limits_(limits), blobs_(blobs) {}

  grpc::Status GetServerInfo(grpc::ServerContext* context, const traind::v1::GetServerInfoRequest* request,
                             traind::v1::ServerInfo* response) override;

  grpc::Status UploadBlob(grpc::ServerContext* context, grpc::ServerReader<traind::v1::UploadBlobRequest>* reader,
                          traind::v1::UploadBlobResponse* response) override;

  // The RPCs this build implements; every other RPC of the service answers UNIMPLEMENTED (the generated
  // base class's behaviour) until the engine issues land.
  static const std::vector<std::string>& ImplementedRpcs();

  // Full method names ("/traind.v1.TrainingService/TrainStep") of every RPC in the service.
  static std::vector<std::string> FullMethodNames();

 private:
  ServiceLimits limits_;
  BlobStore* blobs_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_TRAINING_SERVICE_H_
