#include "server/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/text_serializer.h"

namespace traind {
namespace {

// Latency buckets from 0.5 ms to ~2 min: a health check and a large training step both fall inside.
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

prometheus::MetricFamily GaugeFamily(const std::string& name, const std::string& help, double value,
                                     prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

// Fields of /proc/self/stat after the parenthesised command name (which may itself contain spaces).
std::vector<std::string> ReadProcSelfStatFields() {
  std::ifstream in("/proc/self/stat");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close_paren = content.rfind(')');
  if (close_paren == std::string::npos) return {};
  return absl::StrSplit(content.substr(close_paren + 2), ' ', absl::SkipEmpty());
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) {
      double value = 0;
      if (absl::SimpleAtod(line.substr(6), &value)) return value;
    }
  }
  return 0;
}

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the descriptor opendir itself holds
}

// A number from a cgroup limit file ("max" or anything unreadable: no limit, 0).
double ReadCgroupLimit(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  double value = 0;
  if (!(file >> text) || !absl::SimpleAtod(text, &value) || value <= 0) return 0;
  return value;
}

}  // namespace

double MemoryLimitBytes() {
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  double limit = physical > 0 ? physical : 0;
  auto lower = [&limit](double candidate) {
    if (candidate > 0 && (limit <= 0 || candidate < limit)) limit = candidate;
  };
  // The process's own cgroup (v2: "0::/path"; v1: "N:memory:/path"), as systemd's MemoryMax= and Kubernetes'
  // resources.limits.memory set it.
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) {
      lower(ReadCgroupLimit("/sys/fs/cgroup" + parts[2] + "/memory.max"));
    } else if (absl::StrContains(parts[1], "memory")) {
      lower(ReadCgroupLimit("/sys/fs/cgroup/memory" + parts[2] + "/memory.limit_in_bytes"));
    }
  }
  rlimit address_space{};
  if (getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY) {
    lower(static_cast<double>(address_space.rlim_cur));
  }
  return limit;
}

absl::string_view StatusCodeName(int code) {
  // gRPC status codes and absl::StatusCode share numbers and names ("OK", "NOT_FOUND", ...).
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) return "UNKNOWN";
  static const auto* const kNames = [] {
    auto* names = new std::vector<std::string>();
    for (int c = 0; c <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++c) {
      names->push_back(absl::StatusCodeToString(static_cast<absl::StatusCode>(c)));
    }
    return names;
  }();
  return (*kNames)[code];
}

ServerMetrics::ServerMetrics(absl::string_view version, std::vector<std::string> known_methods)
    : registry_(std::make_shared<prometheus::Registry>()),
      known_methods_(known_methods.begin(), known_methods.end()),
      rpc_requests_total_(prometheus::BuildCounter()
                              .Name("traind_rpc_requests_total")
                              .Help("gRPC requests finished, by full method name and status code.")
                              .Register(*registry_)),
      rpc_duration_seconds_(prometheus::BuildHistogram()
                                .Name("traind_rpc_duration_seconds")
                                .Help("Server-side gRPC request latency, from arrival to status sent.")
                                .Register(*registry_)),
      build_info_(prometheus::BuildGauge()
                      .Name("traind_build_info")
                      .Help("Constant 1, labelled with traind's version and the gRPC library version.")
                      .Register(*registry_)),
      train_steps_total_(prometheus::BuildCounter()
                             .Name("traind_train_steps_total")
                             .Help("Training steps served, by tenant and result (ok, or skipped: not finite).")
                             .Register(*registry_)),
      examples_total_(prometheus::BuildCounter()
                          .Name("traind_examples_total")
                          .Help("Examples trained on (the first dimension of each step's first input), by tenant.")
                          .Register(*registry_)),
      step_duration_seconds_(prometheus::BuildHistogram()
                                 .Name("traind_step_duration_seconds")
                                 .Help("Wall time of a training step, waiting for a compute thread included.")
                                 .Register(*registry_)),
      nonfinite_steps_total_(prometheus::BuildCounter()
                                 .Name("traind_nonfinite_steps_total")
                                 .Help("Training steps skipped because a loss or gradient was not finite.")
                                 .Register(*registry_)),
      checkpoint_save_duration_seconds_(prometheus::BuildHistogram()
                                            .Name("traind_checkpoint_save_duration_seconds")
                                            .Help("Time to write a checkpoint durably (serialize, write, fsync).")
                                            .Register(*registry_)),
      checkpoint_saves_total_(prometheus::BuildCounter()
                                  .Name("traind_checkpoint_saves_total")
                                  .Help("Checkpoints written, by result (ok, error).")
                                  .Register(*registry_)) {
  build_info_.Add({{"version", std::string(version)}, {"grpc_version", grpc::Version()}}).Set(1);
}

std::string ServerMetrics::MethodLabel(absl::string_view method) const {
  if (known_methods_.contains(method)) return std::string(method);
  return std::string(kOtherMethodLabel);
}

void ServerMetrics::RecordRpc(absl::string_view method, int code, double duration_seconds) {
  const std::string method_label = MethodLabel(method);
  rpc_requests_total_.Add({{"method", method_label}, {"code", std::string(StatusCodeName(code))}}).Increment();
  rpc_duration_seconds_.Add({{"method", method_label}}, DurationBuckets()).Observe(duration_seconds);
}

std::string TenantLabel(absl::string_view tenant) { return tenant.empty() ? "default" : std::string(tenant); }

void ServerMetrics::RecordTrainStep(absl::string_view tenant, int64_t examples, double seconds, bool skipped) {
  const std::string label = TenantLabel(tenant);
  train_steps_total_.Add({{"tenant", label}, {"result", skipped ? "skipped" : "ok"}}).Increment();
  examples_total_.Add({{"tenant", label}}).Increment(static_cast<double>(examples));
  step_duration_seconds_.Add({}, DurationBuckets()).Observe(seconds);
  if (skipped) nonfinite_steps_total_.Add({{"tenant", label}}).Increment();
}

void ServerMetrics::RecordCheckpointSave(double seconds, bool ok) {
  checkpoint_saves_total_.Add({{"result", ok ? "ok" : "error"}}).Increment();
  if (ok) checkpoint_save_duration_seconds_.Add({}, DurationBuckets()).Observe(seconds);
}

std::string ServerMetrics::SerializeForTest() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  const std::vector<std::string> stat = ReadProcSelfStatFields();
  // Field numbers of proc(5) minus 3 (pid and comm are gone, numbering starts at 0).
  constexpr size_t kUtime = 11, kStime = 12, kStartTime = 19, kVsize = 20, kRss = 21;
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  auto field = [&stat](size_t index) {
    double value = 0;
    if (index < stat.size() && !absl::SimpleAtod(stat[index], &value)) value = 0;
    return value;
  };
  if (stat.size() > kRss) {
    families.push_back(GaugeFamily("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                                   (field(kUtime) + field(kStime)) / ticks_per_second,
                                   prometheus::MetricType::Counter));
    families.push_back(GaugeFamily("process_start_time_seconds",
                                   "Start time of the process since unix epoch in seconds.",
                                   BootTimeSeconds() + field(kStartTime) / ticks_per_second));
    families.push_back(GaugeFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", field(kVsize)));
    families.push_back(GaugeFamily("process_resident_memory_bytes", "Resident memory size in bytes.",
                                   field(kRss) * static_cast<double>(sysconf(_SC_PAGESIZE))));
  }
  const int open_fds = CountOpenFds();
  if (open_fds >= 0) {
    families.push_back(GaugeFamily("process_open_fds", "Number of open file descriptors.", open_fds));
  }
  const double memory_limit = MemoryLimitBytes();
  if (memory_limit > 0) {
    families.push_back(GaugeFamily("traind_memory_limit_bytes",
                                   "Memory the daemon may use: the lowest of its cgroup's limit, RLIMIT_AS and the "
                                   "machine's physical memory (for alerts on process_resident_memory_bytes).",
                                   memory_limit));
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    families.push_back(GaugeFamily("process_max_fds", "Maximum number of open file descriptors.",
                                   static_cast<double>(limit.rlim_cur)));
  }
  return families;
}

}  // namespace traind
