// A gRPC server interceptor that counts in-flight RPCs and records every RPC — TrainingService, health and reflection alike — in
// ServerMetrics, so that handlers stay free of metric bookkeeping for the request counter and latency.
#ifndef TRAIND_SERVER_METRICS_INTERCEPTOR_H_
#define TRAIND_SERVER_METRICS_INTERCEPTOR_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics.h"

namespace traind {

// Counts the RPCs the server is working on, so that a drain can wait for them (and only them: gRPC's own
// Server::Shutdown also waits for idle client connections to close, which a client that does not poll its
// channel delays arbitrarily).
class InFlightCalls {
 public:
  void Begin();
  void End();
  int64_t count() const;
  // True once no call is in flight; false if `deadline` passed first.
  bool WaitUntilIdle(absl::Time deadline) const;

 private:
  mutable absl::Mutex mutex_;
  int64_t count_ ABSL_GUARDED_BY(mutex_) = 0;
};

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `metrics` and `in_flight` must outlive the server.
  MetricsInterceptorFactory(ServerMetrics* metrics, InFlightCalls* in_flight)
      : metrics_(metrics), in_flight_(in_flight) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  ServerMetrics* metrics_;
  InFlightCalls* in_flight_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_METRICS_INTERCEPTOR_H_
