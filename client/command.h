// A trainctl command: its declaration (CommandSpec: words, flags, help, default deadline, what it runs) and what
// it runs with (CommandContext: parsed flags, the channel, per-call deadlines and the bearer token, output).
#ifndef TRAIND_CLIENT_COMMAND_H_
#define TRAIND_CLIENT_COMMAND_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/connection.h"
#include "client/errors.h"
#include "client/flags.h"
#include "client/progress.h"
#include "grpcpp/grpcpp.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind::cli {

// Flags every command takes (connection, deadline, output, token); see GlobalFlagSpecs().
struct GlobalOptions {
  ConnectionOptions connection;
  std::optional<double> timeout_seconds;  // --timeout; unset: the command's default
  bool json = false;
  std::string token;  // from --token-file or $TRAIND_TOKEN; empty: no authorization metadata
};

class CommandContext;

struct CommandSpec {
  std::string path;       // the command words: "health", "session create"
  std::string arguments;  // positional arguments in the synopsis, e.g. "ID"
  std::string summary;    // one line for the command list
  std::string details;    // further --help text (behaviour, JSON output, examples); may be empty
  std::vector<FlagSpec> flags;
  size_t min_positional = 0;
  size_t max_positional = 0;
  // Deadline of each call unless --timeout is given; 0: none (job watch waits as long as the job runs).
  double default_timeout_seconds = 60;
  std::function<absl::Status(CommandContext&)> run;
};

std::vector<FlagSpec> GlobalFlagSpecs();

class CommandContext {
 public:
  using Stub = v1::TrainingService::Stub;
  template <typename Request, typename Response>
  using UnaryMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&, Response*);

  CommandContext(const CommandSpec& spec, FlagValues flags, GlobalOptions options,
                 std::shared_ptr<grpc::Channel> channel);

  const CommandSpec& spec() const { return spec_; }
  const FlagValues& flags() const { return flags_; }
  const std::vector<std::string>& positional() const { return flags_.positional(); }
  bool json() const { return options_.json; }
  const std::string& address() const { return options_.connection.address; }
  int64_t max_message_bytes() const { return options_.connection.max_message_bytes; }
  // Where results go (stdout); progress goes there too, in the style ProgressStyleForStdout chose.
  std::ostream& out() const;
  ProgressStyle progress_style() const { return progress_style_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  Stub& stub() { return *stub_; }

  // A usage error when a flag read so far was malformed or missing (FlagValues records them).
  absl::Status FlagErrors() const;

  // A context for one call: the deadline (--timeout, else the command's default) and, with a token, the
  // metadata "authorization: Bearer <token>".
  std::unique_ptr<grpc::ClientContext> NewCallContext() const;
  // The same with another default deadline (0: none), e.g. for a watch that follows a submit.
  std::unique_ptr<grpc::ClientContext> NewCallContext(double default_timeout_seconds) const;

  // One unary call; a failure becomes CallError with the daemon's ErrorDetail.
  template <typename Request, typename Response>
  absl::Status Call(UnaryMethod<Request, Response> method, const Request& request, Response* response) {
    std::unique_ptr<grpc::ClientContext> context = NewCallContext();
    const grpc::Status status = (stub_.get()->*method)(context.get(), request, response);
    return Finished(status, *context);
  }
  // The outcome of a finished call (unary or stream) as an absl::Status.
  static absl::Status Finished(const grpc::Status& status, const grpc::ClientContext& context);

  // Whether the daemon serves `rpc` (ServerInfo.implemented_rpcs, asked once per command).
  absl::StatusOr<bool> Serves(const std::string& rpc);

  void PrintJson(const google::protobuf::Message& message) const;
  // The command's result: `message` as JSON with --json, else what `human` writes.
  void Print(const google::protobuf::Message& message, const std::function<void(std::ostream&)>& human) const;

  // One call whose response is the command's result (printed as by Print).
  template <typename Request, typename Response>
  absl::Status CallAndPrint(UnaryMethod<Request, Response> method, const Request& request,
                            const std::function<void(std::ostream&, const Response&)>& human) {
    Response response;
    if (absl::Status status = Call(method, request, &response); !status.ok()) return status;
    Print(response, [&](std::ostream& out) { human(out, response); });
    return absl::OkStatus();
  }

  // The exit code when the command returns OK (health: 1 when not serving; job watch: 5 when the job failed).
  void set_success_exit_code(int code) { success_exit_code_ = code; }
  int success_exit_code() const { return success_exit_code_; }

 private:
  const CommandSpec& spec_;
  FlagValues flags_;
  GlobalOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  ProgressStyle progress_style_;
  std::optional<std::map<std::string, bool>> implemented_rpcs_;
  int success_exit_code_ = kExitOk;
};

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_COMMAND_H_
