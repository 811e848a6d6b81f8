#include "server/health_service.h"

#include "absl/time/time.h"

namespace traind {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mutex_);
  if (shut_down_) return;
  serving_[service] = serving;
  ++version_;
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mutex_);
  for (auto& [service, serving] : serving_) serving = false;
  shut_down_ = true;
  ++version_;
}

HealthService::ServingStatus HealthService::StatusOf(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext* /*context*/, const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  absl::MutexLock lock(&mutex_);
  const ServingStatus status = StatusOf(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + request->service() + "'");
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* context, const HealthCheckRequest* request,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  uint64_t sent_version = 0;
  bool first = true;
  ServingStatus last_sent = HealthCheckResponse::UNKNOWN;
  while (true) {
    ServingStatus status;
    bool shut_down;
    {
      absl::MutexLock lock(&mutex_);
      // Wake on a change, or every 250 ms to notice a cancelled client (sync handlers get no callback).
      auto changed = [this, sent_version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return version_ != sent_version; };
      if (!first) mutex_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(250));
      sent_version = version_;
      status = StatusOf(request->service());
      shut_down = shut_down_;
    }
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
    // The protocol: send the current status first, then only changes.
    if (first || status != last_sent) {
      HealthCheckResponse response;
      response.set_status(status);
      if (!writer->Write(response)) return grpc::Status::CANCELLED;
      last_sent = status;
      first = false;
    }
    if (shut_down) return grpc::Status::OK;
  }
}

}  // namespace traind
