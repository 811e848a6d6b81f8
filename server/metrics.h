// Every Prometheus metric family the daemon exports, declared in one place (units in names, `_total` counters,
// label values only from bounded sets — never a session id).
#ifndef TRAIND_SERVER_METRICS_H_
#define TRAIND_SERVER_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace traind {

// The label used for a method name outside the known set (e.g. a client probing an unknown method), so that a
// client can never create unbounded label values.
inline constexpr absl::string_view kOtherMethodLabel = "other";

class ServerMetrics {
 public:
  // `known_methods` are the full gRPC method names ("/pkg.Service/Method") the server serves; they are the only
  // values the `method` label takes besides kOtherMethodLabel.
  ServerMetrics(absl::string_view version, std::vector<std::string> known_methods);

  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Records one finished RPC: traind_rpc_requests_total{method,code} and traind_rpc_duration_seconds{method}.
  // `code` is a gRPC status code number (grpc::StatusCode). Thread-safe.
  void RecordRpc(absl::string_view method, int code, double duration_seconds);

  // One training step of a session (a TrainStep, a job's step): traind_train_steps_total{tenant,result},
  // traind_examples_total{tenant}, traind_step_duration_seconds, traind_nonfinite_steps_total{tenant}. `tenant`
  // comes from the tenants file (a bounded set; "" is reported as "default"). Thread-safe.
  void RecordTrainStep(absl::string_view tenant, int64_t examples, double seconds, bool skipped);
  // One checkpoint written (automatic, on drain, or SaveCheckpoint): traind_checkpoint_save_duration_seconds and
  // traind_checkpoint_saves_total{result}.
  void RecordCheckpointSave(double seconds, bool ok);

  // The registry to expose; also holds the process collector's families via Exposer registration.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // The registry's families in Prometheus text exposition format (what /metrics serves for it).
  std::string SerializeForTest() const;

 private:
  std::string MethodLabel(absl::string_view method) const;

  std::shared_ptr<prometheus::Registry> registry_;
  absl::flat_hash_set<std::string> known_methods_;
  // Requests finished, by full method name and gRPC status code name.
  prometheus::Family<prometheus::Counter>& rpc_requests_total_;
  // Server-side latency from the call's arrival to its status being sent, by method.
  prometheus::Family<prometheus::Histogram>& rpc_duration_seconds_;
  // Constant 1, labelled with the version and the gRPC version.
  prometheus::Family<prometheus::Gauge>& build_info_;
  // Training steps served, by tenant and result ("ok", "skipped": a non-finite loss or gradient).
  prometheus::Family<prometheus::Counter>& train_steps_total_;
  // Examples (first dimension of a step's first input) trained on, by tenant.
  prometheus::Family<prometheus::Counter>& examples_total_;
  // Wall time of a training step in the core (queueing for a compute thread included).
  prometheus::Family<prometheus::Histogram>& step_duration_seconds_;
  // Steps skipped because a loss or gradient was not finite, by tenant.
  prometheus::Family<prometheus::Counter>& nonfinite_steps_total_;
  // Checkpoints written (serialize, write, fsync, rename), and how long each took.
  prometheus::Family<prometheus::Histogram>& checkpoint_save_duration_seconds_;
  prometheus::Family<prometheus::Counter>& checkpoint_saves_total_;
};

// The tenant label value: the tenant's name, "default" for the anonymous tenant.
std::string TenantLabel(absl::string_view tenant);

// The canonical upper-case name of a gRPC status code ("OK", "NOT_FOUND", ...); "UNKNOWN" for out-of-range values.
absl::string_view StatusCodeName(int code);

// The memory the daemon may use: the lowest of its cgroup's memory limit (v2 memory.max or v1
// memory.limit_in_bytes), RLIMIT_AS and the machine's physical memory; 0 when none is known.
double MemoryLimitBytes();

// Exposes the standard process_* metrics of the Prometheus client guidelines from /proc/self:
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds; and traind_memory_limit_bytes (MemoryLimitBytes).
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace traind

#endif  // TRAIND_SERVER_METRICS_H_
