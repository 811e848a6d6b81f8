#include "server/metrics_interceptor.h"

#include <chrono>
#include <string>

namespace traind {
namespace {

using grpc::experimental::InterceptionHookPoints;

// One instance per RPC, created when the call arrives and destroyed by gRPC when the call object goes away
// (also for cancelled calls, which may never send a status).
class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(ServerMetrics* metrics, InFlightCalls* in_flight, const char* method)
      : metrics_(metrics),
        in_flight_(in_flight),
        method_(method == nullptr ? "" : method),
        start_(std::chrono::steady_clock::now()) {
    in_flight_->Begin();
  }
  ~MetricsInterceptor() override { in_flight_->End(); }

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
  InFlightCalls* in_flight_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void InFlightCalls::Begin() {
  absl::MutexLock lock(&mutex_);
  ++count_;
}

void InFlightCalls::End() {
  absl::MutexLock lock(&mutex_);
  --count_;
}

int64_t InFlightCalls::count() const {
  absl::MutexLock lock(&mutex_);
  return count_;
}

bool InFlightCalls::WaitUntilIdle(absl::Time deadline) const {
  absl::MutexLock lock(&mutex_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return count_ == 0; };
  return mutex_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

grpc::experimental::Interceptor* MetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new MetricsInterceptor(metrics_, in_flight_, info->method());
}

}  // namespace traind
