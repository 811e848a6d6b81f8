#include "tests/testing/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace traind::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string TestTmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

int NextId() {
  static std::atomic<int> counter{0};
  return counter++;
}

// fork + exec with stdout going to `output_path` and stderr to `error_path` (empty: the same file), `env`
// ("NAME=VALUE") added to the environment; returns the child's pid.
pid_t Spawn(const std::string& binary, const std::vector<std::string>& args, const std::string& output_path,
            const std::string& error_path = "", const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    if (!error_path.empty()) {
      const int error_fd = ::open(error_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (error_fd >= 0) {
        dup2(error_fd, STDERR_FILENO);
        ::close(error_fd);
      }
    }
    for (const std::string& variable : env) putenv(const_cast<char*>(variable.c_str()));
    // Unblock everything the test runner may have blocked; the daemon sets up its own mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `timeout` for `pid`; returns false on timeout.
bool WaitWithTimeout(pid_t pid, absl::Duration timeout, int* exit_code) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// The string value of `field` in the daemon's flat ready-file JSON.
std::string JsonField(const std::string& json, const std::string& field) {
  const std::string key = "\"" + field + "\": \"";
  const size_t start = json.find(key);
  if (start == std::string::npos) return "";
  const size_t value_start = start + key.size();
  const size_t end = json.find('"', value_start);
  return end == std::string::npos ? "" : json.substr(value_start, end - value_start);
}

}  // namespace

std::string RunfilePath(const std::string& workspace_relative_path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return workspace_relative_path;
  return absl::StrCat(srcdir, "/", workspace, "/", workspace_relative_path);
}

std::string MakeTempDir(const std::string& name) {
  // mkdtemp: always a new, empty directory. Outside a test (the benchmarks) TestTmpDir() is the shared /tmp, where
  // a directory named after a reused pid may remain from an earlier run — with a stale ready file in it, which
  // DaemonProcess::Start then took for the new daemon's.
  const std::string root = TestTmpDir();
  std::filesystem::create_directories(root);
  std::string path = absl::StrCat(root, "/", name, "-", ::getpid(), "-", NextId(), "-XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    std::perror(("mkdtemp " + path).c_str());
    std::abort();
  }
  return path;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(std::vector<std::string> flags,
                                                                    const std::string& binary) {
  const std::string dir = MakeTempDir("traind");
  const std::string ready_file = dir + "/ready.json";
  auto has_flag = [&flags](const std::string& name) {
    for (const std::string& flag : flags) {
      if (flag.rfind("--" + name + "=", 0) == 0) return true;
    }
    return false;
  };
  if (!has_flag("listen")) flags.push_back("--listen=127.0.0.1:0");
  if (!has_flag("metrics_listen")) flags.push_back("--metrics_listen=127.0.0.1:0");
  if (!has_flag("state_dir")) flags.push_back("--state_dir=" + dir + "/state");
  flags.push_back("--ready_file=" + ready_file);

  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess());
  daemon->log_path_ = dir + "/traind.log";
  daemon->pid_ = Spawn(binary.empty() ? RunfilePath("server/traind") : binary, flags, daemon->log_path_);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!std::filesystem::exists(ready_file)) {
    int exit_code = 0;
    if (WaitWithTimeout(daemon->pid_, absl::ZeroDuration(), &exit_code)) {
      daemon->pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("traind exited with ", exit_code, " before serving; log:\n", daemon->Log()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("traind did not become ready; log:\n", daemon->Log()));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::string ready = ReadFile(ready_file);
  daemon->grpc_address_ = JsonField(ready, "grpc_address");
  daemon->metrics_address_ = JsonField(ready, "metrics_address");
  return daemon;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

std::string DaemonProcess::Log() const { return ReadFile(log_path_); }

absl::StatusOr<int> DaemonProcess::SignalAndWait(int signal, absl::Duration timeout, absl::Duration* elapsed) {
  if (pid_ <= 0) return absl::FailedPreconditionError("traind is not running");
  const absl::Time start = absl::Now();
  kill(pid_, signal);
  int exit_code = 0;
  if (!WaitWithTimeout(pid_, timeout, &exit_code)) {
    return absl::DeadlineExceededError(absl::StrCat("traind still running after ", absl::FormatDuration(timeout)));
  }
  *elapsed = absl::Now() - start;
  pid_ = -1;
  return exit_code;
}

std::unique_ptr<ChildProcess> ChildProcess::Start(const std::string& binary, const std::vector<std::string>& args) {
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->log_path_ = MakeTempDir("child") + "/output.txt";
  child->pid_ = Spawn(binary, args, child->log_path_);
  return child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

bool ChildProcess::running() const {
  int status = 0;
  return pid_ > 0 && waitpid(pid_, &status, WNOHANG) == 0;
}

std::string ChildProcess::Log() const { return ReadFile(log_path_); }

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

ExitResult RunToExit(const std::string& binary, const std::vector<std::string>& args, absl::Duration timeout) {
  const std::string output_path = MakeTempDir("run") + "/output.txt";
  const pid_t pid = Spawn(binary, args, output_path);
  ExitResult result;
  if (!WaitWithTimeout(pid, timeout, &result.exit_code)) {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = -1;
  }
  result.output = ReadFile(output_path);
  return result;
}

CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         const std::vector<std::string>& env, absl::Duration timeout) {
  const std::string dir = MakeTempDir("command");
  const pid_t pid = Spawn(binary, args, dir + "/stdout.txt", dir + "/stderr.txt", env);
  CommandResult result;
  if (!WaitWithTimeout(pid, timeout, &result.exit_code)) {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = -1;
  }
  result.stdout_text = ReadFile(dir + "/stdout.txt");
  result.stderr_text = ReadFile(dir + "/stderr.txt");
  return result;
}

absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError("bad address " + address);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &target.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", address, ": ", std::strerror(errno)));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string response;
  char buffer[65536];
  ssize_t received = 0;
  while ((received = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, received);
  ::close(fd);
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::DataLossError("no HTTP header in response");
  if (response.compare(0, 12, "HTTP/1.1 200") != 0 && response.compare(0, 12, "HTTP/1.0 200") != 0) {
    return absl::UnavailableError("HTTP status: " + response.substr(0, response.find("\r\n")));
  }
  return response.substr(header_end + 4);
}

}  // namespace traind::testing
