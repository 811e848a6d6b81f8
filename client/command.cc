#include "client/command.h"

#include <chrono>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/output.h"

namespace traind::cli {

std::vector<FlagSpec> GlobalFlagSpecs() {
  return {
      {"address", "HOST:PORT", "daemon address (default $TRAIND_ADDRESS, else 127.0.0.1:50051)"},
      {"tls-ca", "FILE", "PEM CA that signed the daemon's certificate; enables TLS"},
      {"tls-cert", "FILE", "PEM client certificate (mutual TLS), with --tls-key"},
      {"tls-key", "FILE", "PEM client private key"},
      {"tls-server-name", "NAME", "expected name in the daemon's certificate (default: the address's host)"},
      {"token-file", "FILE",
       "file holding the bearer token (default $TRAIND_TOKEN); sent as 'authorization: Bearer <token>'"},
      {"timeout", "SECONDS", "deadline of each call (default: the command's, see its --help)"},
      {"json", "", "print one JSON document instead of text (progress is not shown)"},
      {"help", "", "print the command's help"},
  };
}

CommandContext::CommandContext(const CommandSpec& spec, FlagValues flags, GlobalOptions options,
                               std::shared_ptr<grpc::Channel> channel)
    : spec_(spec),
      flags_(std::move(flags)),
      options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::TrainingService::NewStub(channel_)),
      progress_style_(ProgressStyleForStdout(options_.json)) {}

std::ostream& CommandContext::out() const { return std::cout; }

absl::Status CommandContext::FlagErrors() const {
  if (flags_.status().ok()) return absl::OkStatus();
  return UsageError(flags_.status().message());
}

std::unique_ptr<grpc::ClientContext> CommandContext::NewCallContext() const {
  return NewCallContext(spec_.default_timeout_seconds);
}

std::unique_ptr<grpc::ClientContext> CommandContext::NewCallContext(double default_timeout_seconds) const {
  auto context = std::make_unique<grpc::ClientContext>();
  const double seconds = options_.timeout_seconds.value_or(default_timeout_seconds);
  if (seconds > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
  }
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
  return context;
}

absl::Status CommandContext::Finished(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && status.error_message().empty()) {
    // What the generated base class answers for an RPC the daemon's build does not serve.
    return CallError(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                  "the daemon does not serve this RPC (its 'implemented' list: trainctl info)"));
  }
  return CallError(status, ErrorDetailFromTrailers(context.GetServerTrailingMetadata()));
}

absl::StatusOr<bool> CommandContext::Serves(const std::string& rpc) {
  if (!implemented_rpcs_.has_value()) {
    v1::ServerInfo info;
    absl::Status status = Call(&Stub::GetServerInfo, v1::GetServerInfoRequest(), &info);
    if (!status.ok()) return status;
    implemented_rpcs_.emplace(info.implemented_rpcs().begin(), info.implemented_rpcs().end());
  }
  const auto found = implemented_rpcs_->find(rpc);
  return found != implemented_rpcs_->end() && found->second;
}

void CommandContext::PrintJson(const google::protobuf::Message& message) const {
  out() << MessageToJson(message) << "\n";
}

void CommandContext::Print(const google::protobuf::Message& message,
                           const std::function<void(std::ostream&)>& human) const {
  if (json()) {
    PrintJson(message);
  } else {
    human(out());
  }
}

}  // namespace traind::cli
