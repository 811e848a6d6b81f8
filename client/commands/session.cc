// session create|list|show|close|properties.
#include <filesystem>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"
#include "client/output.h"
#include "client/tensor_files.h"
#include "client/transfer.h"

namespace traind::cli {
namespace {

using Stub = CommandContext::Stub;

bool IsRegularFile(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

// The four artifact files of `directory` (ONNX Runtime's and traind's names: P + training_model.onnx,
// eval_model.onnx, optimizer_model.onnx, checkpoint), uploaded by digest. Without --prefix the prefix is found from
// the one "*training_model.onnx" in the directory.
absl::Status UploadArtifactDirectory(CommandContext& context, const std::string& directory,
                                     v1::UploadedArtifacts* uploaded) {
  std::string prefix = context.flags().String("prefix");
  if (!context.flags().Has("prefix")) {
    std::vector<std::string> candidates;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      const std::string name = entry.path().filename().string();
      if (absl::EndsWith(name, "training_model.onnx")) candidates.push_back(name);
    }
    if (error) {
      return LocalFileError(absl::NotFoundError(absl::StrCat("cannot list '", directory, "': ", error.message())));
    }
    if (candidates.size() != 1) {
      return UsageError(absl::StrCat("'", directory, "' holds ", candidates.size(),
                                     " files named *training_model.onnx; name the set with --prefix"));
    }
    prefix = std::string(absl::StripSuffix(candidates[0], "training_model.onnx"));
  }
  struct Part {
    const char* file;
    std::string* blob_id;
    bool required;
  };
  const Part parts[] = {
      {"training_model.onnx", uploaded->mutable_training_model_blob_id(), true},
      {"eval_model.onnx", uploaded->mutable_eval_model_blob_id(), false},
      {"optimizer_model.onnx", uploaded->mutable_optimizer_model_blob_id(), false},
      {"checkpoint", uploaded->mutable_checkpoint_blob_id(), true},
  };
  for (const Part& part : parts) {
    const std::string path = absl::StrCat(directory, "/", prefix, part.file);
    if (!IsRegularFile(path)) {
      if (!part.required) continue;
      return LocalFileError(absl::NotFoundError(absl::StrCat("'", path, "' is missing (the training model and the "
                                                             "checkpoint are required)")));
    }
    absl::StatusOr<UploadResult> result = UploadFile(context, path, prefix + part.file);
    if (!result.ok()) return result.status();
    *part.blob_id = result->blob_id;
  }
  return absl::OkStatus();
}

absl::Status RunCreate(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::CreateSessionRequest request;
  if (flags.Has("artifact") == flags.Has("artifact-dir")) return UsageError("give one of --artifact and --artifact-dir");
  if (flags.Has("checkpoint") && flags.Has("checkpoint-file")) {
    return UsageError("give at most one of --checkpoint and --checkpoint-file");
  }
  if (flags.Has("prefix") && !flags.Has("artifact-dir")) return UsageError("--prefix needs --artifact-dir");
  const Device device = DeviceFromFlags(flags);
  request.set_executor(device.executor);
  request.set_device_index(device.index);
  if (auto threads = flags.Int("threads", 0, 4096)) request.set_num_threads(static_cast<int32_t>(*threads));
  if (auto seed = flags.Uint64("seed")) request.set_seed(*seed);
  request.set_display_name(flags.String("name"));
  SchedulerFromFlags(flags, request.mutable_scheduler());
  if (!CheckpointPolicyFromFlags(flags, request.mutable_checkpoint_policy())) request.clear_checkpoint_policy();
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;

  if (flags.Has("artifact")) {
    request.set_artifact_id(flags.String("artifact"));
  } else if (absl::Status status = UploadArtifactDirectory(context, flags.String("artifact-dir"),
                                                           request.mutable_uploaded());
             !status.ok()) {
    return status;
  }
  if (flags.Has("checkpoint")) request.set_checkpoint_name(flags.String("checkpoint"));
  if (flags.Has("checkpoint-file")) {
    absl::StatusOr<UploadResult> checkpoint = UploadFile(context, flags.String("checkpoint-file"), "checkpoint");
    if (!checkpoint.ok()) return checkpoint.status();
    request.set_checkpoint_blob_id(checkpoint->blob_id);
  }
  return context.CallAndPrint<v1::CreateSessionRequest, v1::Session>(&Stub::CreateSession, request, PrintSession);
}

void PrintSessions(std::ostream& out, const v1::ListSessionsResponse& response) {
  std::vector<std::vector<std::string>> rows = {
      {"SESSION", "STATE", "STEP", "LAST LOSS", "LR", "ARTIFACT", "NAME"}};
  for (const v1::Session& session : response.sessions()) {
    rows.push_back({session.session_id(), v1::SessionState_Name(session.state()),
                    absl::StrCat(session.optimizer_step()),
                    session.train_steps() > 0 ? FormatNumber(session.last_loss()) : "-",
                    FormatNumber(session.learning_rate()), OrDash(session.artifact_id()),
                    OrDash(session.display_name())});
  }
  PrintTable(out, rows);
}

absl::Status RunList(CommandContext& context) {
  return context.CallAndPrint<v1::ListSessionsRequest, v1::ListSessionsResponse>(
      &Stub::ListSessions, v1::ListSessionsRequest(), PrintSessions);
}

absl::Status RunShow(CommandContext& context) {
  v1::GetSessionRequest request;
  request.set_session_id(context.positional()[0]);
  return context.CallAndPrint<v1::GetSessionRequest, v1::Session>(&Stub::GetSession, request, PrintSession);
}

absl::Status RunClose(CommandContext& context) {
  v1::CloseSessionRequest request;
  request.set_session_id(context.positional()[0]);
  v1::CloseSessionResponse response;
  if (absl::Status status = context.Call(&Stub::CloseSession, request, &response); !status.ok()) return status;
  context.Print(Document({{"session_id", StringValue(request.session_id())}, {"closed", BoolValue(true)}}),
                [&](std::ostream& out) { out << "closed session " << request.session_id() << "\n"; });
  return absl::OkStatus();
}

// NAME=VALUE: an integer, else a float, else a string (--set-string keeps VALUE a string).
absl::Status PropertyFromArgument(const std::string& argument, bool as_string, v1::UpdatePropertiesRequest* request) {
  const size_t equals = argument.find('=');
  if (equals == std::string::npos || equals == 0) {
    return UsageError(absl::StrCat("'", argument, "' is not NAME=VALUE"));
  }
  const std::string name = argument.substr(0, equals);
  const std::string value = argument.substr(equals + 1);
  v1::Property& property = (*request->mutable_set())[name];
  int64_t integer = 0;
  float real = 0;
  if (!as_string && absl::SimpleAtoi(value, &integer)) {
    property.set_int_value(integer);
  } else if (!as_string && absl::SimpleAtof(value, &real)) {
    property.set_float_value(real);
  } else {
    property.set_string_value(value);
  }
  return absl::OkStatus();
}

void PrintProperties(std::ostream& out, const v1::UpdatePropertiesResponse& response) {
  std::vector<std::vector<std::string>> rows = {{"PROPERTY", "TYPE", "VALUE"}};
  std::map<std::string, v1::Property> sorted(response.properties().begin(), response.properties().end());
  for (const auto& [name, property] : sorted) {
    switch (property.value_case()) {
      case v1::Property::kIntValue:
        rows.push_back({name, "int", absl::StrCat(property.int_value())});
        break;
      case v1::Property::kFloatValue:
        rows.push_back({name, "float", FormatNumber(property.float_value())});
        break;
      default:
        rows.push_back({name, "string", property.string_value()});
    }
  }
  PrintTable(out, rows);
}

absl::Status RunProperties(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::UpdatePropertiesRequest request;
  request.set_session_id(flags.Required("session"));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  for (const std::string& argument : flags.Values("set")) {
    if (absl::Status status = PropertyFromArgument(argument, false, &request); !status.ok()) return status;
  }
  for (const std::string& argument : flags.Values("set-string")) {
    if (absl::Status status = PropertyFromArgument(argument, true, &request); !status.ok()) return status;
  }
  for (const std::string& name : flags.List("remove")) request.add_remove(name);
  return context.CallAndPrint<v1::UpdatePropertiesRequest, v1::UpdatePropertiesResponse>(
      &Stub::UpdateProperties, request, PrintProperties);
}


}  // namespace

std::vector<CommandSpec> SessionCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "session create", "", "open a training session (CreateSession)",
      "From --artifact ID (made by 'artifacts generate') or --artifact-dir DIR holding the artifact files (P +\n"
      "training_model.onnx, eval_model.onnx, optimizer_model.onnx, checkpoint), uploaded by digest (GetBlobInfo\n"
      "first, UploadBlob only when the daemon lacks one). JSON: the traind.v1.Session message.\n"
      "examples:\n"
      "  trainctl session create --artifact 3f2a... --name mnist --threads 2 --scheduler linear \\\n"
      "      --warmup-steps 100 --total-steps 1000\n"
      "  trainctl session create --artifact-dir ./artifacts --checkpoint-file ./step500.ckpt\n",
      Flags({{{"artifact", "ID", "artifact set stored on the daemon"},
              {"artifact-dir", "DIR", "local artifact files to upload"},
              {"prefix", "P", "--artifact-dir: the files' name prefix (default: found from *training_model.onnx)"},
              {"checkpoint", "NAME", "start from this checkpoint saved on the daemon"},
              {"checkpoint-file", "FILE", "start from this local checkpoint file (uploaded by digest)"},
              DeviceFlag(),
              {"threads", "N", "intra-op threads (0: the daemon's default)"},
              {"seed", "N", "seed for dropout (0 picks one)"},
              {"name", "TEXT", "display name shown in listings"}},
             SchedulerFlags(), CheckpointPolicyFlags()}),
      0, 0, 120, RunCreate});
  commands.push_back(CommandSpec{"session list", "", "the open sessions (ListSessions)",
                                 "JSON: the traind.v1.ListSessionsResponse message.\n", {}, 0, 0, 60, RunList});
  commands.push_back(CommandSpec{"session show", "ID", "one session: state, step, learning rate, signatures",
                                 "JSON: the traind.v1.Session message.\n", {}, 1, 1, 60, RunShow});
  commands.push_back(CommandSpec{"session close", "ID", "close a session (CloseSession)",
                                 "JSON: {\"session_id\", \"closed\": true}.\n", {}, 1, 1, 60, RunClose});
  commands.push_back(CommandSpec{
      "session properties", "", "set or remove checkpoint properties of a session (UpdateProperties)",
      "Prints every property afterwards (with no --set/--remove: just lists them). JSON: the\n"
      "traind.v1.UpdatePropertiesResponse message.\n"
      "example: trainctl session properties --session s1 --set epoch=3 --set-string note=warm --remove old\n",
      {SessionFlag(),
       {"set", "NAME=VALUE", "an int64 when VALUE parses as one, else a float, else a string", true},
       {"set-string", "NAME=VALUE", "a string property", true},
       {"remove", "NAMES", "properties to remove", true}},
      0, 0, 60, RunProperties});
  return commands;
}

}  // namespace traind::cli
