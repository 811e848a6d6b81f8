// Helpers for integration tests that drive real binaries: start the traind daemon on ephemeral ports and wait
// until it serves, run a command and capture its output, fetch an HTTP page over a real socket.
#ifndef TRAIND_TESTS_TESTING_PROCESS_H_
#define TRAIND_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace traind::testing {

// Path of a binary built by this workspace, from the test's runfiles ("server/traind").
std::string RunfilePath(const std::string& workspace_relative_path);

// A new, empty directory under $TEST_TMPDIR (/tmp outside a test), never one that existed before.
std::string MakeTempDir(const std::string& name);

// A running traind. Destroying it kills the process if it is still alive.
class DaemonProcess {
 public:
  // Starts traind with `flags` plus --listen/--metrics_listen on port 0 (unless given), --state_dir (unless
  // given) and --ready_file; waits until the ready file appears. Errors carry the daemon's log.
  // `binary` empty: this workspace's server/traind from the runfiles.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(std::vector<std::string> flags,
                                                              const std::string& binary = "");

  ~DaemonProcess();

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }
  std::string Log() const;

  // Sends `signal` and waits up to `timeout` for the exit; returns the exit status (WEXITSTATUS, or 128+signal
  // when killed by a signal) or DEADLINE_EXCEEDED. `*elapsed` gets the time from signal to exit.
  absl::StatusOr<int> SignalAndWait(int signal, absl::Duration timeout, absl::Duration* elapsed);

 private:
  DaemonProcess() = default;
  pid_t pid_ = -1;
  std::string log_path_;
  std::string grpc_address_;
  std::string metrics_address_;
};

// Starts traind with `flags` and waits for it to exit (for start-up failures); returns exit status and log.
struct ExitResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};
ExitResult RunToExit(const std::string& binary, const std::vector<std::string>& args, absl::Duration timeout);

// Runs a command to its end with stdout and stderr kept apart (for commands whose stdout is parsed, e.g. trainctl
// --json) and `env` ("NAME=VALUE") added to the environment. exit_code -1: killed after `timeout`.
struct CommandResult {
  int exit_code = -1;
  std::string stdout_text;
  std::string stderr_text;
};
CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {}, absl::Duration timeout = absl::Seconds(120));

// GET http://<address><path> with HTTP/1.0; returns the body when the status is 200.
absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path);

// Any other program the tests run beside the daemon (a Prometheus server). Destroying it kills the process.
class ChildProcess {
 public:
  static std::unique_ptr<ChildProcess> Start(const std::string& binary, const std::vector<std::string>& args);
  ~ChildProcess();
  pid_t pid() const { return pid_; }
  bool running() const;
  std::string Log() const;

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (for programs that cannot be given port 0).
int FreeLoopbackPort();

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_PROCESS_H_
