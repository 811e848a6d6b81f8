// A gRPC server interceptor that records every RPC — TrainingService, health and reflection alike — in
// ServerMetrics, so that handlers stay free of metric bookkeeping for the request counter and latency.
#ifndef TRAIND_SERVER_METRICS_INTERCEPTOR_H_
#define TRAIND_SERVER_METRICS_INTERCEPTOR_H_

#include "grpcpp/support/server_interceptor.h"
#include "server/metrics.h"

namespace traind {

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `metrics` must outlive the server.
  explicit MetricsInterceptorFactory(ServerMetrics* metrics) : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  ServerMetrics* metrics_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_METRICS_INTERCEPTOR_H_
