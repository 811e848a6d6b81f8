#include "server/metrics_interceptor.h"

#include <chrono>
#include <string>

namespace traind {
namespace {

using grpc::experimental::InterceptionHookPoints;

// One instance per RPC, created when the call arrives and destroyed by gRPC when it ends.
class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(ServerMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method == nullptr ? "" : method), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
      metrics_->RecordRpc(method_, static_cast<int>(status.error_code()), elapsed.count());
    }
    methods->Proceed();
  }

 private:
  ServerMetrics* metrics_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

grpc::experimental::Interceptor* MetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new MetricsInterceptor(metrics_, info->method());
}

}  // namespace traind
