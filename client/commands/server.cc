// health, info, upload: the daemon itself and its blob store.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"
#include "client/output.h"
#include "client/progress.h"
#include "client/transfer.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace traind::cli {
namespace {

using Stub = CommandContext::Stub;

absl::Status RunHealth(CommandContext& context) {
  auto health = grpc::health::v1::Health::NewStub(context.channel());
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(context.flags().String("service"));
  grpc::health::v1::HealthCheckResponse response;
  std::unique_ptr<grpc::ClientContext> call = context.NewCallContext();
  const absl::Status status = CommandContext::Finished(health->Check(call.get(), request, &response), *call);
  if (!status.ok()) return status;
  const std::string serving = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  context.Print(Document({{"address", StringValue(context.address())},
                          {"service", StringValue(request.service())},
                          {"status", StringValue(serving)}}),
                [&](std::ostream& out) { out << context.address() << ": " << serving << "\n"; });
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    context.set_success_exit_code(kExitNotServing);
  }
  return absl::OkStatus();
}

void PrintServerInfo(std::ostream& out, const v1::ServerInfo& info) {
  out << "traind " << info.version() << " (gRPC " << info.grpc_version() << ")\n";
  out << "opsets: ai.onnx " << info.min_opset() << ".." << info.max_opset() << "\n";
  out << "executors: " << absl::StrJoin(info.executors(), " ") << "\n";
  for (const v1::GpuDevice& gpu : info.gpu_devices()) {
    out << "  gpu:" << gpu.index() << " " << gpu.name() << " (" << gpu.platform() << ", "
        << FormatBytes(gpu.global_memory_bytes()) << ")\n";
  }
  out << "losses: " << absl::StrJoin(info.losses(), " ") << "; optimizers: " << absl::StrJoin(info.optimizers(), " ")
      << "\n";
  out << "limits: max_message_bytes=" << info.max_message_bytes() << " max_sessions=" << info.max_sessions()
      << " default_num_threads=" << info.default_num_threads()
      << " max_concurrent_steps=" << info.max_concurrent_steps() << "\n";
  std::vector<std::string> implemented, pending;
  for (const auto& [rpc, is_implemented] : info.implemented_rpcs()) {
    (is_implemented ? implemented : pending).push_back(rpc);
  }
  std::sort(implemented.begin(), implemented.end());
  std::sort(pending.begin(), pending.end());
  out << "implemented: " << absl::StrJoin(implemented, " ") << "\n";
  if (!pending.empty()) out << "not yet implemented: " << absl::StrJoin(pending, " ") << "\n";
}

absl::Status RunInfo(CommandContext& context) {
  return context.CallAndPrint<v1::GetServerInfoRequest, v1::ServerInfo>(&Stub::GetServerInfo,
                                                                         v1::GetServerInfoRequest(), PrintServerInfo);
}

absl::Status RunUpload(CommandContext& context) {
  const FlagValues& flags = context.flags();
  const int64_t chunk_bytes = flags.Int("chunk-bytes", 1024, int64_t{64} << 20).value_or(kDefaultChunkBytes);
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  const std::string& path = context.positional()[0];
  absl::StatusOr<UploadResult> uploaded =
      UploadFile(context, path, flags.String("description", path), chunk_bytes, flags.Has("force"));
  if (!uploaded.ok()) return uploaded.status();
  context.Print(Document({{"file", StringValue(path)},
                          {"blob_id", StringValue(uploaded->blob_id)},
                          {"size_bytes", NumberValue(static_cast<double>(uploaded->size_bytes))},
                          {"uploaded", BoolValue(uploaded->uploaded)}}),
                [&](std::ostream& out) {
                  out << (uploaded->uploaded ? "uploaded " : "already on the daemon: ") << path << " ("
                      << FormatBytes(uploaded->size_bytes) << ")\nblob " << uploaded->blob_id << "\n";
                });
  return absl::OkStatus();
}

}  // namespace

std::vector<CommandSpec> ServerCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "health", "", "check the daemon's health (grpc.health.v1); exit 0 SERVING, 1 not serving",
      "JSON: {\"address\", \"service\", \"status\"}.\n",
      {{"service", "NAME", "check this service instead of the whole server (e.g. traind.v1.TrainingService)"}},
      0, 0, 5, RunHealth});
  commands.push_back(CommandSpec{
      "info", "", "the daemon's version, executors, limits and which RPCs it serves",
      "JSON: the traind.v1.ServerInfo message.\n", {}, 0, 0, 5, RunInfo});
  commands.push_back(CommandSpec{
      "upload", "FILE", "upload a file as a blob (skipped when the daemon has its SHA-256 already)",
      "Prints the blob id (the file's SHA-256), which GenerateArtifacts, CreateSession, LoadCheckpoint and jobs\n"
      "accept. Progress: a bar on a terminal, a line per 10 % otherwise.\n"
      "JSON: {\"file\", \"blob_id\", \"size_bytes\", \"uploaded\"} (uploaded false: the daemon had it).\n"
      "example: trainctl upload model.onnx\n",
      {{"description", "TEXT", "free text stored with the blob (default: the file name)"},
       ChunkBytesFlag(),
       {"force", "", "upload even when the daemon already has the blob"}},
      1, 1, 600, RunUpload});
  return commands;
}

std::vector<CommandSpec> AllCommands() {
  std::vector<CommandSpec> all;
  for (auto family : {ServerCommands, ArtifactCommands, SessionCommands, TrainCommands, CheckpointCommands,
                      JobCommands, FleetCommands}) {
    std::vector<CommandSpec> commands = family();
    all.insert(all.end(), commands.begin(), commands.end());
  }
  return all;
}

}  // namespace traind::cli
