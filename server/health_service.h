// grpc.health.v1.Health for traind. gRPC's built-in DefaultHealthCheckService keeps Watch streams open through
// Server::Shutdown, so a drain would wait its whole timeout for them; this implementation ends every Watch
// stream (after sending NOT_SERVING) as soon as the drain begins, so only real work is waited for.
#ifndef TRAIND_SERVER_HEALTH_SERVICE_H_
#define TRAIND_SERVER_HEALTH_SERVICE_H_

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace traind {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Registers `service` ("" is the whole server) with `serving` status.
  void SetServingStatus(const std::string& service, bool serving);

  // Every registered service becomes NOT_SERVING; Watch streams receive that update and then end with OK.
  // Later SetServingStatus calls are ignored.
  void Shutdown();

  grpc::Status Check(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;

  grpc::Status Watch(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  // The status reported for `service`; SERVICE_UNKNOWN when not registered.
  ServingStatus StatusOf(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mutex_);
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;
  // Bumped on every change, so that watchers can tell whether to send an update.
  uint64_t version_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace traind

#endif  // TRAIND_SERVER_HEALTH_SERVICE_H_
