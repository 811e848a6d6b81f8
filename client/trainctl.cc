// trainctl: the command-line client of traind. See kTrainctlUsage for commands, flags and exit codes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/connection.h"
#include "client/trainctl_args.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitNotServing = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCallFailed = 3;

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

// gRPC status codes and absl::StatusCode share numbers and names ("OK", "UNAVAILABLE", ...).
std::string StatusCodeName(grpc::StatusCode code) {
  const std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

int ReportCallFailure(const TrainctlArgs& args, const grpc::Status& status) {
  if (args.json) {
    std::cout << "{\"address\": " << JsonString(args.connection.address) << ", \"error\": {\"code\": \""
              << StatusCodeName(status.error_code()) << "\", \"message\": " << JsonString(status.error_message())
              << "}}\n";
  } else {
    std::cerr << "trainctl: " << args.command << " " << args.connection.address << " failed: "
              << StatusCodeName(status.error_code()) << ": " << status.error_message() << "\n";
  }
  return kExitCallFailed;
}

void SetDeadline(const TrainctlArgs& args, grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(args.timeout_seconds * 1e6)));
}

int RunHealth(const TrainctlArgs& args, const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(args.service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  SetDeadline(args, &context);
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return ReportCallFailure(args, status);
  const std::string serving = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  if (args.json) {
    std::cout << "{\"address\": " << JsonString(args.connection.address)
              << ", \"service\": " << JsonString(args.service) << ", \"status\": " << JsonString(serving) << "}\n";
  } else {
    std::cout << args.connection.address << ": " << serving << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitNotServing;
}

int RunInfo(const TrainctlArgs& args, const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = traind::v1::TrainingService::NewStub(channel);
  traind::v1::ServerInfo info;
  grpc::ClientContext context;
  SetDeadline(args, &context);
  const grpc::Status status = stub->GetServerInfo(&context, traind::v1::GetServerInfoRequest(), &info);
  if (!status.ok()) return ReportCallFailure(args, status);
  if (args.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(info, &json, options);
    std::cout << json << "\n";
    return kExitOk;
  }
  std::cout << "traind " << info.version() << " (gRPC " << info.grpc_version() << ") at " << args.connection.address
            << "\n";
  std::cout << "opsets: ai.onnx " << info.min_opset() << ".." << info.max_opset() << "\n";
  std::cout << "limits: max_message_bytes=" << info.max_message_bytes() << " max_sessions=" << info.max_sessions()
            << "\n";
  std::vector<std::string> implemented, pending;
  for (const auto& [rpc, is_implemented] : info.implemented_rpcs()) {
    (is_implemented ? implemented : pending).push_back(rpc);
  }
  std::sort(implemented.begin(), implemented.end());
  std::sort(pending.begin(), pending.end());
  std::cout << "implemented: " << absl::StrJoin(implemented, " ") << "\n";
  if (!pending.empty()) std::cout << "not yet implemented: " << absl::StrJoin(pending, " ") << "\n";
  return kExitOk;
}

int Run(int argc, char** argv) {
  absl::StatusOr<TrainctlArgs> args = ParseTrainctlArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    std::cerr << "trainctl: " << args.status().message() << "\n\n" << kTrainctlUsage;
    return kExitUsage;
  }
  if (args->command == "help") {
    std::cout << kTrainctlUsage;
    return kExitOk;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect(args->connection);
  if (!channel.ok()) {
    std::cerr << "trainctl: " << channel.status().message() << "\n";
    return kExitUsage;
  }
  if (args->command == "health") return RunHealth(*args, *channel);
  return RunInfo(*args, *channel);
}

}  // namespace
}  // namespace traind

int main(int argc, char** argv) { return traind::Run(argc, argv); }
