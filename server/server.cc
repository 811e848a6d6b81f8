#include "server/server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "prometheus/exposer.h"
#include "engine/core/memory_budget.h"
#include "engine/core/thread_pool.h"
#include "engine/gpu/device.h"
#include "engine/io/file_util.h"
#include "engine/training/checkpoint.h"
#include "server/artifact_store.h"
#include "server/blob_store.h"
#include "server/compute_pool.h"
#include "server/job_manager.h"
#include "server/session_manager.h"
#include "server/tenant_spaces.h"
#include "server/tenants.h"
#include "server/health_service.h"
#include "server/logging.h"
#include "server/metrics.h"
#include "server/metrics_interceptor.h"
#include "server/training_service.h"
#include "server/version.h"

namespace traind {
namespace {

using engine::ReadFileLimited;
using engine::Sha256Hex;
using engine::WriteFileAtomically;

// Splits "host:port" (host may be "[::1]"); false when there is no numeric port.
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  return absl::SimpleAtoi(address.substr(colon + 1), port) && *port >= 0 && *port <= 65535;
}

// Holds an exclusive flock on <state_dir>/LOCK for the daemon's lifetime, so two daemons never share one
// state directory (they would overwrite each other's checkpoints).
absl::StatusOr<int> LockStateDir(const std::string& state_dir) {
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create state directory '", state_dir, "': ", error.message()));
  }
  const std::string lock_path = state_dir + "/LOCK";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open '", lock_path, "': ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("state directory '", state_dir, "' is in use by another traind (lock ", lock_path, ")"));
  }
  return fd;
}

// Gauges read from the core when Prometheus scrapes: sessions and stored bytes per tenant, jobs by tenant and state.
// Tenant label values come from the tenants file (a bounded set), never from clients.
class StateCollector : public prometheus::Collectable {
 public:
  StateCollector(const SessionManager* sessions, const JobManager* jobs, const TenantSpaces* spaces,
                 const Tenants* tenants)
      : sessions_(sessions), jobs_(jobs), spaces_(spaces), tenants_(tenants) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    auto family = [](const char* name, const char* help) {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = prometheus::MetricType::Gauge;
      return f;
    };
    auto sample = [](std::vector<prometheus::ClientMetric::Label> labels, double value) {
      prometheus::ClientMetric metric;
      metric.label = std::move(labels);
      metric.gauge.value = value;
      return metric;
    };
    std::vector<prometheus::MetricFamily> families;
    const std::vector<TenantConfig> tenants = tenants_->List();
    prometheus::MetricFamily sessions = family("traind_sessions", "Open training sessions, by tenant.");
    const std::map<std::string, int64_t> by_tenant = sessions_->CountByTenant();
    for (const TenantConfig& tenant : tenants) {
      auto it = by_tenant.find(tenant.name);
      sessions.metric.push_back(sample({{"tenant", TenantLabel(tenant.name)}}, it == by_tenant.end() ? 0 : it->second));
    }
    families.push_back(std::move(sessions));
    prometheus::MetricFamily jobs = family("traind_jobs", "Training jobs known to the daemon, by tenant and state.");
    const auto job_counts = jobs_->CountByState();
    for (const TenantConfig& tenant : tenants) {
      for (int state = v1::QUEUED; state <= v1::STOPPED_EARLY; ++state) {
        auto it = job_counts.find({tenant.name, static_cast<v1::JobState>(state)});
        std::string name = v1::JobState_Name(static_cast<v1::JobState>(state));
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        jobs.metric.push_back(sample({{"tenant", TenantLabel(tenant.name)}, {"state", name}},
                                     it == job_counts.end() ? 0 : it->second));
      }
    }
    families.push_back(std::move(jobs));
    prometheus::MetricFamily stored = family("traind_bytes_stored", "Bytes in the state directory, by tenant.");
    for (const TenantConfig& tenant : tenants) {
      stored.metric.push_back(sample({{"tenant", TenantLabel(tenant.name)}},
                                     static_cast<double>(spaces_->StoredBytes(tenant.name))));
    }
    families.push_back(std::move(stored));
    prometheus::MetricFamily handles =
        family("traind_forward_handles", "Forward handles awaiting Backward, by tenant.");
    prometheus::MetricFamily handle_bytes =
        family("traind_forward_handle_bytes", "Bytes kept by forward handles for their backward passes, by tenant.");
    const auto forwards = sessions_->ForwardHandlesByTenant();
    for (const TenantConfig& tenant : tenants) {
      auto it = forwards.find(tenant.name);
      const bool any = it != forwards.end();
      handles.metric.push_back(
          sample({{"tenant", TenantLabel(tenant.name)}}, any ? static_cast<double>(it->second.first) : 0));
      handle_bytes.metric.push_back(
          sample({{"tenant", TenantLabel(tenant.name)}}, any ? static_cast<double>(it->second.second) : 0));
    }
    families.push_back(std::move(handles));
    families.push_back(std::move(handle_bytes));
    return families;
  }

 private:
  const SessionManager* sessions_;
  const JobManager* jobs_;
  const TenantSpaces* spaces_;
  const Tenants* tenants_;
};

// Brings back every session the state directory holds (a restart after a drain or a crash). A session that cannot
// come back (its artifacts were deleted, a file is damaged) is reported and its files are left for an operator.
void RestoreSessions(const SessionStore& store, TenantSpaces& spaces, SessionManager& sessions) {
  std::vector<std::string> problems;
  int restored = 0;
  for (const SessionStore::Stored& stored : store.LoadAll(&problems)) {
    absl::StatusOr<TenantSpace*> space = spaces.Get(stored.record.tenant);
    // The session's own checkpoint replaces the artifacts' one: only one of them is read.
    const bool from_artifacts = stored.checkpoint_path.empty();
    absl::StatusOr<SessionModels> models =
        space.ok() ? LoadSessionModels(**space, stored.record.origin, from_artifacts)
                   : absl::StatusOr<SessionModels>(space.status());
    absl::StatusOr<SessionInfo> info =
        models.ok() ? sessions.Restore(stored, *std::move(models)) : absl::StatusOr<SessionInfo>(models.status());
    if (info.ok()) {
      ++restored;
    } else {
      problems.push_back(absl::StrCat("session ", stored.record.session_id, ": ", info.status().message()));
    }
  }
  for (const std::string& problem : problems) LogError("session not restored", {{"problem", problem}});
  if (restored > 0 || !problems.empty()) {
    LogInfo("sessions restored", {{"restored", std::to_string(restored)}, {"failed", std::to_string(problems.size())}});
  }
}

std::vector<std::string> KnownMethods() {
  std::vector<std::string> methods = TrainingServiceImpl::FullMethodNames();
  methods.push_back("/grpc.health.v1.Health/Check");
  methods.push_back("/grpc.health.v1.Health/Watch");
  methods.push_back("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  return methods;
}

// Linking libgrpc++_reflection registers its plugin for every ServerBuilder (a static initializer), so
// "reflection off" has to take the plugin out again.
class DisableReflectionOption : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
                                    return plugin->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

}  // namespace

std::string DefaultStateDir() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return absl::StrCat(xdg, "/traind");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return absl::StrCat(home, "/.local/state/traind");
  }
  return "traind-state";
}

struct TraindServer::State {
  ServerOptions options;
  int lock_fd = -1;
  std::unique_ptr<ServerMetrics> metrics;
  std::shared_ptr<ProcessCollector> process_collector;
  std::shared_ptr<prometheus::Collectable> state_collector;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<Tenants> tenants;
  std::unique_ptr<TenantSpaces> spaces;
  std::unique_ptr<ComputePool> compute;
  std::unique_ptr<SessionStore> session_store;
  std::unique_ptr<SessionManager> sessions;  // uses `compute`, so declared (and destroyed) after it
  std::unique_ptr<JobManager> jobs;          // uses `sessions`
  std::unique_ptr<TrainingServiceImpl> service;
  HealthService health;
  std::unique_ptr<grpc::Server> server;
  InFlightCalls in_flight;
  std::string grpc_address;
  std::string metrics_address;
  bool drained = false;
  // Runs grpc::Server::Shutdown, which returns only once idle client connections have closed too.
  std::thread shutdown_thread;

  ~State() {
    // The endpoint's collectors read the sessions and jobs: it goes first.
    exposer.reset();
    if (shutdown_thread.joinable()) shutdown_thread.join();
    if (lock_fd >= 0) ::close(lock_fd);
  }
};

TraindServer::TraindServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

TraindServer::~TraindServer() { Drain(); }

const std::string& TraindServer::grpc_address() const { return state_->grpc_address; }
const std::string& TraindServer::metrics_address() const { return state_->metrics_address; }

absl::StatusOr<std::unique_ptr<TraindServer>> TraindServer::Start(const ServerOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  if (state->options.state_dir.empty()) state->options.state_dir = DefaultStateDir();
  if (options.max_message_bytes <= 0 || options.max_message_bytes > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError("--max_message_bytes must be in [1, 2^31-1]");
  }

  std::string grpc_host;
  int requested_grpc_port = 0;
  if (!SplitHostPort(options.grpc_address, &grpc_host, &requested_grpc_port)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen '", options.grpc_address, "' is not host:port"));
  }

  absl::StatusOr<int> lock_fd = LockStateDir(state->options.state_dir);
  if (!lock_fd.ok()) return lock_fd.status();
  state->lock_fd = *lock_fd;
  if (options.gpu_memory_limit_bytes < 0) {
    return absl::InvalidArgumentError("--gpu_memory_limit_bytes must be >= 0");
  }
  // Before any session opens a device: compiled kernels persist in the state directory (a restart does not
  // recompile them), and the device memory limit applies from the first allocation.
  engine::gpu::SetRuntimeOptions({options.gpu_program_cache_dir.empty() ? state->options.state_dir + "/opencl-cache"
                                                                        : options.gpu_program_cache_dir,
                                  options.gpu_memory_limit_bytes});

  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();

  state->metrics = std::make_unique<ServerMetrics>(kTraindVersion, KnownMethods());
  if (!options.metrics_address.empty()) {
    std::string metrics_host;
    int metrics_port = 0;
    if (!SplitHostPort(options.metrics_address, &metrics_host, &metrics_port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics_listen '", options.metrics_address, "' is not host:port"));
    }
    try {
      state->exposer = std::make_unique<prometheus::Exposer>(options.metrics_address, /*num_threads=*/1);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on '", options.metrics_address, "': ", e.what()));
    }
    state->exposer->RegisterCollectable(state->metrics->registry());
    state->process_collector = std::make_shared<ProcessCollector>();
    state->exposer->RegisterCollectable(state->process_collector);
    const std::vector<int> ports = state->exposer->GetListeningPorts();
    state->metrics_address = absl::StrCat(metrics_host, ":", ports.empty() ? metrics_port : ports.front());
  }

  absl::StatusOr<std::unique_ptr<Tenants>> tenants = Tenants::Load(options.tenants_file);
  if (!tenants.ok()) return tenants.status();
  state->tenants = std::move(*tenants);
  state->spaces = std::make_unique<TenantSpaces>(state->options.state_dir, options.max_blob_bytes,
                                                 engine::kDefaultMaxCheckpointBytes);
  // The anonymous tenant's space (the state directory itself) opens now: its leftovers are cleaned at start-up.
  if (absl::StatusOr<TenantSpace*> space = state->spaces->Get(""); !space.ok()) return space.status();
  if (options.max_concurrent_steps < 1 || options.max_queued_steps < 0 || options.default_num_threads < 0) {
    return absl::InvalidArgumentError(
        "--max_concurrent_steps must be >= 1, --max_queued_steps and --default_num_threads >= 0");
  }
  const int default_threads =
      options.default_num_threads > 0
          ? options.default_num_threads
          : std::max(1, engine::ThreadPool::Default().num_threads() / options.max_concurrent_steps);
  // Session calls are admitted (and refused at once) by the SessionManager, which never admits more than
  // max_concurrent_steps + max_queued_steps; the pool's own bound leaves room beside them for session creations
  // and the training jobs' steps.
  state->compute = std::make_unique<ComputePool>(
      options.max_concurrent_steps,
      options.max_queued_steps * 2 + static_cast<int>(std::min<int64_t>(options.max_concurrent_jobs, 1 << 16)));
  if (options.session_memory_budget < 0) return absl::InvalidArgumentError("--session_memory_budget must be >= 0");
  const int64_t memory_budget =
      options.session_memory_budget > 0 ? options.session_memory_budget : engine::PhysicalMemoryBytes() / 2;
  SessionLimits session_limits;
  session_limits.max_sessions = options.max_sessions;
  session_limits.memory_budget_bytes = memory_budget;
  session_limits.default_num_threads = default_threads;
  if (options.checkpoint_every_steps < 0 || !(options.checkpoint_every_seconds >= 0)) {
    return absl::InvalidArgumentError("--checkpoint_every_steps and --checkpoint_every_seconds must be >= 0");
  }
  session_limits.default_checkpoint_policy = {options.checkpoint_every_steps, options.checkpoint_every_seconds};
  if (options.max_waiting_calls_per_session < 0) {
    return absl::InvalidArgumentError("--max_waiting_calls_per_session must be >= 0");
  }
  session_limits.max_waiting_calls_per_session = options.max_waiting_calls_per_session;
  session_limits.max_admitted_calls = options.max_concurrent_steps + options.max_queued_steps;
  if (options.max_forward_handles_per_session < 1 || options.max_forward_bytes_per_session < 1 ||
      options.forward_handle_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--max_forward_handles_per_session, --max_forward_bytes_per_session and --forward_handle_ttl must be > 0");
  }
  session_limits.max_forward_handles_per_session = options.max_forward_handles_per_session;
  session_limits.max_forward_bytes_per_session = options.max_forward_bytes_per_session;
  session_limits.forward_handle_ttl = options.forward_handle_ttl;
  state->session_store = std::make_unique<SessionStore>(state->options.state_dir);
  state->sessions = std::make_unique<SessionManager>(state->compute.get(), session_limits, state->session_store.get(),
                                                     state->metrics.get());
  RestoreSessions(*state->session_store, *state->spaces, *state->sessions);
  JobLimits job_limits;
  job_limits.max_concurrent_jobs = options.max_concurrent_jobs;
  job_limits.max_dataset_bytes = options.max_dataset_bytes;
  job_limits.data_dirs = options.data_dirs;
  state->jobs = std::make_unique<JobManager>(state->sessions.get(), state->spaces.get(), job_limits);
  state->jobs->RestoreAll();
  if (state->exposer != nullptr) {
    state->state_collector = std::make_shared<StateCollector>(state->sessions.get(), state->jobs.get(),
                                                              state->spaces.get(), state->tenants.get());
    state->exposer->RegisterCollectable(state->state_collector);
  }
  ServiceLimits service_limits;
  service_limits.max_message_bytes = options.max_message_bytes;
  service_limits.max_sessions = options.max_sessions;
  service_limits.default_num_threads = default_threads;
  service_limits.max_concurrent_steps = options.max_concurrent_steps;
  service_limits.memory_budget_bytes = memory_budget;
  state->service = std::make_unique<TrainingServiceImpl>(service_limits, state->tenants.get(), state->spaces.get(),
                                                         state->sessions.get(), state->jobs.get());

  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!options.enable_reflection) builder.SetOption(std::make_unique<DisableReflectionOption>());
  builder.RegisterService(&state->health);
  int bound_grpc_port = 0;
  builder.AddListeningPort(options.grpc_address, *credentials, &bound_grpc_port);
  builder.RegisterService(state->service.get());
  if (options.max_rpc_threads < 4) return absl::InvalidArgumentError("--max_rpc_threads must be >= 4");
  grpc::ResourceQuota quota("traind");
  quota.SetMaxThreads(options.max_rpc_threads);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<MetricsInterceptorFactory>(state->metrics.get(), &state->in_flight));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  state->server = builder.BuildAndStart();
  if (state->server == nullptr || bound_grpc_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on '", options.grpc_address, "' (address in use or invalid)"));
  }
  state->grpc_address = absl::StrCat(grpc_host, ":", bound_grpc_port);
  state->health.SetServingStatus("", true);
  state->health.SetServingStatus(traind::v1::TrainingService::service_full_name(), true);

  if (!options.ready_file.empty()) {
    const std::string ready = absl::StrFormat(
        "{\"pid\": %d, \"grpc_address\": \"%s\", \"metrics_address\": \"%s\", \"state_dir\": \"%s\"}\n", ::getpid(),
        state->grpc_address, state->metrics_address, state->options.state_dir);
    if (absl::Status written = WriteFileAtomically(options.ready_file, ready); !written.ok()) return written;
  }
  LogInfo("serving", {{"version", kTraindVersion},
                      {"grpc", state->grpc_address},
                      {"tls", options.tls.cert_path.empty() ? "off" : (options.tls.client_ca_path.empty() ? "tls" : "mtls")},
                      {"metrics", state->metrics_address.empty() ? "off" : state->metrics_address},
                      {"state_dir", state->options.state_dir},
                      {"reflection", options.enable_reflection ? "on" : "off"}});
  return std::unique_ptr<TraindServer>(new TraindServer(std::move(state)));
}

absl::Status TraindServer::ReloadTenants() {
  absl::Status reloaded = state_->tenants->Reload();
  if (reloaded.ok()) {
    LogInfo("tenants reloaded", {{"tenants", std::to_string(state_->tenants->List().size())}});
  } else {
    LogError("tenants file not reloaded; the previous configuration stays", {{"error", std::string(reloaded.message())}});
  }
  return reloaded;
}

void TraindServer::Drain() {
  if (state_ == nullptr || state_->drained) return;
  state_->drained = true;
  const ServerOptions& options = state_->options;
  LogInfo("draining", {{"grace", absl::FormatDuration(options.drain_grace)},
                       {"timeout", absl::FormatDuration(options.drain_timeout)}});
  state_->health.SetServingStatus("", false);
  state_->health.SetServingStatus(traind::v1::TrainingService::service_full_name(), false);
  if (options.drain_grace > absl::ZeroDuration()) absl::SleepFor(options.drain_grace);
  // Health watchers are told NOT_SERVING and their streams end, so the drain below waits for real work only.
  state_->health.Shutdown();
  // Training jobs stop between two steps (they resume at the next start); their watchers' streams end.
  state_->jobs->Stop();
  // Shutdown refuses new calls at once and cancels the calls still running at the deadline.
  const absl::Time deadline = absl::Now() + options.drain_timeout;
  grpc::Server* server = state_->server.get();
  state_->shutdown_thread = std::thread([server, deadline] { server->Shutdown(absl::ToChronoTime(deadline)); });
  if (!state_->in_flight.WaitUntilIdle(deadline + absl::Milliseconds(500))) {
    LogWarn("drain timed out", {{"in_flight", std::to_string(state_->in_flight.count())}});
  }
  // Every session's latest state, so that the next start resumes exactly here.
  const int checkpointed = state_->sessions->CheckpointAll();
  LogInfo("sessions checkpointed", {{"sessions", std::to_string(checkpointed)}});
  LogInfo("stopped");
}

}  // namespace traind
