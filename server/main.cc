// traind: the training daemon. This file only turns flags (and the optional config file) into ServerOptions,
// then serves until SIGTERM/SIGINT and drains.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "engine/core/tensor.h"
#include "server/config_file.h"
#include "server/logging.h"
#include "server/server.h"
#include "server/version.h"

ABSL_FLAG(std::string, config, "", "Optional config file of `flag_name = value` lines; command-line flags win.");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC listen address host:port (port 0 picks a free port).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address host:port; empty disables it.");
ABSL_FLAG(std::string, state_dir, "",
          "State directory for artifacts, checkpoints and blobs (created if missing); default "
          "$XDG_STATE_HOME/traind or ~/.local/state/traind.");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain; with --tls_key enables TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM server private key.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; enables mutual TLS: clients must present a certificate signed by it.");
ABSL_FLAG(bool, enable_reflection, false, "Serve gRPC server reflection (for grpcurl and similar tools).");
ABSL_FLAG(absl::Duration, drain_grace, absl::ZeroDuration(),
          "On SIGTERM, report NOT_SERVING for this long before refusing new RPCs.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "On SIGTERM, how long in-flight RPCs may run before they are cancelled.");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20, "Largest gRPC message accepted or sent, in bytes.");
ABSL_FLAG(int64_t, max_sessions, 64, "Most training sessions open at once.");
ABSL_FLAG(int64_t, max_blob_bytes, int64_t{1} << 30, "Largest blob UploadBlob accepts, in bytes.");
ABSL_FLAG(int, max_concurrent_steps, 1,
          "Training steps (and other model runs) that run at once; the others queue. Each uses its session's threads.");
ABSL_FLAG(int, max_queued_steps, 256, "Steps that may wait for a compute thread; past that, RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, default_num_threads, 0,
          "Intra-op threads of a session that does not choose; 0: the available CPUs / max_concurrent_steps.");
ABSL_FLAG(std::string, tenants_file, "",
          "Tenants with their bearer-token hashes and quotas; calls must then carry a token. Re-read on SIGHUP.");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Checkpoint a session after this many optimizer steps unless it chose its own policy (0: off).");
ABSL_FLAG(double, checkpoint_every_seconds, 60,
          "Checkpoint a session when this long has passed since its last checkpoint (0: off). Sessions are also "
          "checkpointed on drain and resume from their last checkpoint after a restart.");
ABSL_FLAG(int64_t, max_concurrent_jobs, 4, "Training jobs running at once (all tenants); more are refused.");
ABSL_FLAG(int, max_rpc_threads, 256,
          "Threads serving RPCs (every in-flight call holds one); past that, calls get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_waiting_calls_per_session, 8,
          "Calls that may wait for one session (its calls run one at a time); past that, RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_dataset_bytes, int64_t{4} << 30, "Largest dataset a training job loads, in bytes.");
ABSL_FLAG(int, max_forward_handles_per_session, 64,
          "Forward handles (training-mode passes awaiting Backward) a session may hold; past that, Forward gets "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_forward_bytes_per_session, int64_t{1} << 30,
          "Bytes the forward handles of one session may keep for their backward passes.");
ABSL_FLAG(absl::Duration, forward_handle_ttl, absl::Minutes(10),
          "How long a forward handle waits for its Backward before it expires.");

ABSL_FLAG(int64_t, session_memory_budget, 0,
          "Bytes one session may hold and allocate (parameters, gradients, optimizer state, every run's tensors); "
          "models and steps that need more are refused with RESOURCE_EXHAUSTED before they allocate. Also bounds "
          "decoding one model. 0: half of this machine's memory.");
ABSL_FLAG(std::vector<std::string>, data_dir, {},
          "Directories (comma-separated) whose files training jobs may read by a relative local_path.");
ABSL_FLAG(std::string, gpu_program_cache_dir, "",
          "Where the GPU executor keeps compiled OpenCL kernels between starts; empty: <state_dir>/opencl-cache.");
ABSL_FLAG(int64_t, gpu_memory_limit_bytes, 0,
          "Device memory the daemon may use on each OpenCL device, in bytes; 0: the device's global memory.");
ABSL_FLAG(std::string, ready_file, "",
          "Write a JSON file with the bound addresses and the pid here once serving (atomically).");
ABSL_FLAG(std::string, log_level, "info", "Least severe log level printed: debug, info, warn or error.");

namespace {

traind::ServerOptions OptionsFromFlags() {
  traind::ServerOptions options;
  options.grpc_address = absl::GetFlag(FLAGS_listen);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_listen);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.tls.cert_path = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_path = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_path = absl::GetFlag(FLAGS_tls_client_ca);
  options.enable_reflection = absl::GetFlag(FLAGS_enable_reflection);
  options.drain_grace = absl::GetFlag(FLAGS_drain_grace);
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.max_blob_bytes = absl::GetFlag(FLAGS_max_blob_bytes);
  options.max_concurrent_steps = absl::GetFlag(FLAGS_max_concurrent_steps);
  options.max_queued_steps = absl::GetFlag(FLAGS_max_queued_steps);
  options.default_num_threads = absl::GetFlag(FLAGS_default_num_threads);
  options.ready_file = absl::GetFlag(FLAGS_ready_file);
  options.tenants_file = absl::GetFlag(FLAGS_tenants_file);
  options.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  options.checkpoint_every_seconds = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  options.max_concurrent_jobs = absl::GetFlag(FLAGS_max_concurrent_jobs);
  options.max_rpc_threads = absl::GetFlag(FLAGS_max_rpc_threads);
  options.max_waiting_calls_per_session = absl::GetFlag(FLAGS_max_waiting_calls_per_session);
  options.max_dataset_bytes = absl::GetFlag(FLAGS_max_dataset_bytes);
  options.max_forward_handles_per_session = absl::GetFlag(FLAGS_max_forward_handles_per_session);
  options.max_forward_bytes_per_session = absl::GetFlag(FLAGS_max_forward_bytes_per_session);
  options.forward_handle_ttl = absl::GetFlag(FLAGS_forward_handle_ttl);
  options.data_dirs = absl::GetFlag(FLAGS_data_dir);
  options.gpu_program_cache_dir = absl::GetFlag(FLAGS_gpu_program_cache_dir);
  options.gpu_memory_limit_bytes = absl::GetFlag(FLAGS_gpu_memory_limit_bytes);
  options.session_memory_budget = absl::GetFlag(FLAGS_session_memory_budget);
  return options;
}

// Signals arrive through a self-pipe: the handler only writes the signal's number, which is async-signal-safe
// whichever thread the kernel picks. (Blocking the signals and sigwait()ing cannot work: libraries start threads
// before main() — OpenBLAS's pool, at load time — and a signal delivered to one of them would kill the process.)
int signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  (void)!::write(signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

bool InstallSignalHandlers() {
  if (::pipe2(signal_pipe, O_CLOEXEC) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP}) {
    if (sigaction(signal_number, &action, nullptr) != 0) return false;
  }
  return true;
}

// The next signal's number.
int WaitForSignal() {
  unsigned char byte = 0;
  while (::read(signal_pipe[0], &byte, 1) != 1) {
    if (errno != EINTR) return SIGTERM;  // the pipe broke: treat it as a request to stop
  }
  return byte;
}

}  // namespace

int main(int argc, char** argv) {
  traind::engine::ConfigureProcessAllocator();  // before any thread starts
  absl::SetProgramUsageMessage("traind: a gRPC daemon that trains ONNX models.\nUsage: traind [--flag=value...]");
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] { return std::string("traind ") + traind::kTraindVersion + "\n"; };
  // `traind --help` lists the daemon's own flags (absl's default matches files named after the binary, i.e. none);
  // --helpfull adds the libraries'.
  const auto own_flags = [](absl::string_view file) { return absl::EndsWith(file, "server/main.cc"); };
  usage_config.contains_help_flags = own_flags;
  usage_config.contains_helpshort_flags = own_flags;
  absl::SetFlagsUsageConfig(usage_config);
  const std::string config_path = traind::FindConfigFlag(argc, argv);
  if (!config_path.empty()) {
    if (absl::Status applied = traind::ApplyConfigFile(config_path); !applied.ok()) {
      traind::LogError("bad config file", {{"error", std::string(applied.message())}});
      return 2;
    }
  }
  absl::ParseCommandLine(argc, argv);
  traind::LogLevel level;
  if (!traind::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    traind::LogError("bad --log_level", {{"value", absl::GetFlag(FLAGS_log_level)}});
    return 2;
  }
  traind::SetMinLogLevel(level);

  if (!InstallSignalHandlers()) {
    traind::LogError("cannot install signal handlers", {{"error", std::strerror(errno)}});
    return 1;
  }
  absl::StatusOr<std::unique_ptr<traind::TraindServer>> server = traind::TraindServer::Start(OptionsFromFlags());
  if (!server.ok()) {
    traind::LogError("cannot start", {{"error", std::string(server.status().message())},
                                      {"code", absl::StatusCodeToString(server.status().code())}});
    return 1;
  }

  // SIGHUP re-reads the tenants file; SIGTERM or SIGINT drains and exits.
  int signal_number = 0;
  while ((signal_number = WaitForSignal()) == SIGHUP) {
    (*server)->ReloadTenants().IgnoreError();  // logged; the previous tenants stay
  }
  traind::LogInfo("shutdown signal", {{"signal", strsignal(signal_number)}});
  // A second signal during the drain means "stop now".
  std::thread([] {
    while (WaitForSignal() == SIGHUP) {
    }
    traind::LogWarn("second shutdown signal, exiting without drain");
    std::_Exit(1);
  }).detach();
  (*server)->Drain();
  // Everything that must outlive the process was finished by Drain(). Exit without running destructors: the
  // metrics endpoint's web server polls its listening socket every 2 s and would hold the exit up to that long.
  std::fflush(nullptr);
  std::_Exit(0);
}
