// TraindServer owns everything the daemon runs: the gRPC server (TrainingService, health, optional
// reflection), the Prometheus endpoint and the state directory. main.cc only turns flags into ServerOptions.
#ifndef TRAIND_SERVER_SERVER_H_
#define TRAIND_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/tls.h"

namespace traind {

struct ServerOptions {
  // host:port for gRPC; port 0 picks a free one (see TraindServer::grpc_address()).
  std::string grpc_address = "127.0.0.1:50051";
  // host:port for Prometheus' /metrics; port 0 picks a free one; empty disables the endpoint.
  std::string metrics_address = "127.0.0.1:9464";
  // Where artifacts, checkpoints and blobs live; created if missing; locked against a second daemon.
  std::string state_dir;
  TlsFiles tls;
  bool enable_reflection = false;
  // After SIGTERM: health reports NOT_SERVING for `drain_grace` while RPCs are still accepted (so load
  // balancers can notice), then new RPCs are refused and in-flight ones get up to `drain_timeout` to finish.
  absl::Duration drain_grace = absl::ZeroDuration();
  absl::Duration drain_timeout = absl::Seconds(10);
  int64_t max_message_bytes = int64_t{64} << 20;
  int64_t max_sessions = 64;
  int64_t max_blob_bytes = int64_t{1} << 30;
  // Steps (and other model runs) that run at once; more wait in a queue of `max_queued_steps`, past which calls
  // are refused with RESOURCE_EXHAUSTED. One at a time with every core is the fastest way through a queue of small
  // steps on few cores.
  int max_concurrent_steps = 1;
  int max_queued_steps = 256;
  // Intra-op threads of a session that does not choose; 0: the CPUs available divided by max_concurrent_steps.
  int default_num_threads = 0;
  // Tenants and their token hashes (tenants.h); empty: one anonymous tenant, no token asked.
  std::string tenants_file;
  // The automatic checkpoint policy of sessions that do not choose one (0: off). Every session is also
  // checkpointed on drain, and comes back from its last checkpoint after a restart.
  int64_t checkpoint_every_steps = 0;
  double checkpoint_every_seconds = 60;
  // Training jobs: how many run at once, how large a dataset may be, and the directories whose files a job may
  // name (Dataset.local_path).
  int64_t max_concurrent_jobs = 4;
  // Threads serving RPCs (each in-flight call holds one, streams included); past that, calls are refused with
  // RESOURCE_EXHAUSTED instead of piling up.
  int max_rpc_threads = 256;
  // Calls that may wait for one session (its calls run one at a time); past that, RESOURCE_EXHAUSTED at once.
  int max_waiting_calls_per_session = 8;
  int64_t max_dataset_bytes = int64_t{4} << 30;
  // Bytes one session may hold and allocate (engine::ModuleOptions::memory_budget_bytes); also what decoding one
  // model may take. 0: half of this machine's memory (engine::PhysicalMemoryBytes).
  int64_t session_memory_budget = 0;
  std::vector<std::string> data_dirs;
  // Forward handles per session (Forward / Backward): how many, how many bytes, and how long one waits.
  int max_forward_handles_per_session = 64;
  int64_t max_forward_bytes_per_session = int64_t{1} << 30;
  absl::Duration forward_handle_ttl = absl::Minutes(10);
  // Written atomically, as JSON with the bound addresses and the pid, once the daemon serves.
  std::string ready_file;
  // The GPU executor (OpenCL): where compiled kernels are kept between starts (empty: <state_dir>/opencl-cache),
  // and the device memory the daemon may use on each device (0: the device's global memory).
  std::string gpu_program_cache_dir;
  int64_t gpu_memory_limit_bytes = 0;
};

// The default state directory: $XDG_STATE_HOME/traind, else $HOME/.local/state/traind, else ./traind-state.
std::string DefaultStateDir();

class TraindServer {
 public:
  // Binds both listeners and starts serving; errors name what failed (bad TLS file, port in use, ...).
  static absl::StatusOr<std::unique_ptr<TraindServer>> Start(const ServerOptions& options);

  ~TraindServer();
  TraindServer(const TraindServer&) = delete;
  TraindServer& operator=(const TraindServer&) = delete;

  // The bound addresses, with the real port when the option asked for port 0. metrics_address() is empty
  // when metrics are disabled.
  const std::string& grpc_address() const;
  const std::string& metrics_address() const;

  // Graceful shutdown: health NOT_SERVING, wait drain_grace, end health watches, refuse new RPCs, wait for
  // in-flight RPCs up to drain_timeout (then cancel them). Returns once no RPC is in flight; closing idle client
  // connections may go on in the background until the destructor. Idempotent.
  void Drain();

  // Re-reads the tenants file (SIGHUP); on error the previous configuration stays (and the error is logged).
  absl::Status ReloadTenants();

 private:
  struct State;
  explicit TraindServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace traind

#endif  // TRAIND_SERVER_SERVER_H_
