// checkpoint save|load|list|download|delete, params get|set, export: a session's state in and out.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"
#include "client/output.h"
#include "client/progress.h"
#include "client/tensor_files.h"
#include "client/transfer.h"
#include "engine/io/file_util.h"

namespace traind::cli {
namespace {

using Stub = CommandContext::Stub;

// Bytes the daemon returned, checked against the digest it gave, written atomically.
absl::Status WriteCheckedBytes(const std::string& path, const std::string& content, const std::string& sha256_hex) {
  if (engine::Sha256Hex(content) != sha256_hex) {
    return CallError(absl::StatusCode::kDataLoss, "the returned bytes do not match their SHA-256; nothing written");
  }
  if (absl::Status written = engine::WriteFileAtomically(path, content); !written.ok()) {
    return LocalFileError(written);
  }
  return absl::OkStatus();
}

absl::Status RunSave(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::SaveCheckpointRequest request;
  request.set_session_id(flags.Required("session"));
  request.set_name(flags.String("name"));
  request.set_include_optimizer_state(flags.Has("include-optimizer-state"));
  request.set_return_bytes(flags.Has("out"));
  if (!flags.Has("name") && !flags.Has("out")) flags.AddError("give --name (stored on the daemon), --out, or both");
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  v1::SaveCheckpointResponse response;
  if (absl::Status status = context.Call(&Stub::SaveCheckpoint, request, &response); !status.ok()) return status;
  if (flags.Has("out")) {
    if (absl::Status status = WriteCheckedBytes(flags.String("out"), response.content(), response.sha256_hex());
        !status.ok()) {
      return status;
    }
  }
  response.clear_content();
  if (context.json()) {
    context.PrintJson(response);
    return absl::OkStatus();
  }
  if (!response.name().empty()) context.out() << "saved checkpoint " << response.name();
  if (flags.Has("out")) context.out() << (response.name().empty() ? "wrote " : ", wrote ") << flags.String("out");
  context.out() << " (" << FormatBytes(response.size_bytes()) << ", sha256 " << response.sha256_hex() << ")\n";
  return absl::OkStatus();
}

absl::Status RunLoad(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::LoadCheckpointRequest request;
  request.set_session_id(flags.Required("session"));
  if (flags.Has("name") == flags.Has("file")) flags.AddError("give one of --name and --file");
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  if (flags.Has("name")) {
    request.set_name(flags.String("name"));
  } else {
    absl::StatusOr<UploadResult> uploaded = UploadFile(context, flags.String("file"), "checkpoint");
    if (!uploaded.ok()) return uploaded.status();
    request.set_blob_id(uploaded->blob_id);
  }
  return context.CallAndPrint<v1::LoadCheckpointRequest, v1::LoadCheckpointResponse>(
      &Stub::LoadCheckpoint, request, [&](std::ostream& out, const v1::LoadCheckpointResponse& response) {
        out << "loaded " << (flags.Has("name") ? flags.String("name") : flags.String("file")) << "\n";
        PrintSession(out, response.session());
      });
}

void PrintCheckpoints(std::ostream& out, const v1::ListCheckpointsResponse& response) {
  std::vector<std::vector<std::string>> rows = {{"CHECKPOINT", "SIZE", "MODIFIED", "SHA256"}};
  for (const v1::StoredCheckpoint& checkpoint : response.checkpoints()) {
    rows.push_back({checkpoint.name(), FormatBytes(checkpoint.size_bytes()), FormatUnixTime(checkpoint.modified_time()),
                    ShortDigest(checkpoint.sha256_hex())});
  }
  PrintTable(out, rows);
}

absl::Status RunList(CommandContext& context) {
  return context.CallAndPrint<v1::ListCheckpointsRequest, v1::ListCheckpointsResponse>(
      &Stub::ListCheckpoints, v1::ListCheckpointsRequest(), PrintCheckpoints);
}

// The first file's path, size and digest; the others (an export's external data file) under "external_data".
absl::Status PrintDownloads(CommandContext& context, const std::vector<DownloadResult>& files) {
  google::protobuf::Struct document = Document({{"path", StringValue(files.front().path)},
                                                {"size_bytes", NumberValue(static_cast<double>(files.front().size_bytes))},
                                                {"sha256_hex", StringValue(files.front().sha256_hex)}});
  if (files.size() > 1) {
    google::protobuf::ListValue* others = (*document.mutable_fields())["external_data"].mutable_list_value();
    for (size_t f = 1; f < files.size(); ++f) {
      *others->add_values()->mutable_struct_value() =
          Document({{"path", StringValue(files[f].path)},
                    {"size_bytes", NumberValue(static_cast<double>(files[f].size_bytes))},
                    {"sha256_hex", StringValue(files[f].sha256_hex)}});
    }
  }
  context.Print(document, [&](std::ostream& out) {
    for (const DownloadResult& file : files) {
      out << "wrote " << file.path << " (" << FormatBytes(file.size_bytes) << ", sha256 " << file.sha256_hex << ")\n";
    }
  });
  return absl::OkStatus();
}

absl::Status PrintDownload(CommandContext& context, const absl::StatusOr<DownloadResult>& downloaded) {
  if (!downloaded.ok()) return downloaded.status();
  return PrintDownloads(context, {*downloaded});
}

absl::Status RunDownload(CommandContext& context) {
  const std::string out = context.flags().Required("out");
  v1::DownloadRequest request;
  request.set_chunk_bytes(ChunkBytesFromFlags(context.flags()));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  request.set_checkpoint_name(context.positional()[0]);
  return PrintDownload(context, DownloadToFile(context, request, out));
}

absl::Status RunDelete(CommandContext& context) {
  v1::DeleteCheckpointRequest request;
  request.set_name(context.positional()[0]);
  v1::DeleteCheckpointResponse response;
  if (absl::Status status = context.Call(&Stub::DeleteCheckpoint, request, &response); !status.ok()) return status;
  context.Print(Document({{"name", StringValue(request.name())}, {"deleted", BoolValue(true)}}),
                [&](std::ostream& out) { out << "deleted checkpoint " << request.name() << "\n"; });
  return absl::OkStatus();
}

// Writes `tensor` to `path`; a tensor the daemon sent malformed is DATA_LOSS (a call failure), a file that
// cannot be written a local failure.
absl::Status WriteReceivedTensor(const std::string& path, const v1::Tensor& tensor) {
  absl::Status written = WriteNpyTensor(path, tensor);
  if (written.ok()) return written;
  if (written.code() == absl::StatusCode::kInvalidArgument) {
    return CallError(absl::StatusCode::kDataLoss, absl::StrCat("the daemon's tensor: ", written.message()));
  }
  return LocalFileError(written);
}

// The slice of a contiguous float32 buffer that `slice` describes, checked against the buffer's size.
absl::StatusOr<v1::Tensor> SliceOfBuffer(const v1::Tensor& buffer, const v1::ParameterSlice& slice) {
  int64_t count = 1;
  for (int64_t dim : slice.shape()) {
    if (dim < 0 || (dim > 0 && count > (int64_t{1} << 40) / dim)) count = -1;
    if (count < 0) break;
    count *= dim;
  }
  const int64_t total = static_cast<int64_t>(buffer.data().size() / sizeof(float));
  if (buffer.dtype() != v1::FLOAT32 || count < 0 || slice.offset() < 0 || slice.offset() > total ||
      count > total - slice.offset()) {
    return CallError(absl::StatusCode::kDataLoss,
                     absl::StrCat("the parameter layout entry '", slice.name(), "' does not fit the buffer"));
  }
  v1::Tensor tensor;
  tensor.set_name(slice.name());
  tensor.set_dtype(v1::FLOAT32);
  *tensor.mutable_shape() = slice.shape();
  tensor.set_data(buffer.data().substr(static_cast<size_t>(slice.offset()) * sizeof(float),
                                       static_cast<size_t>(count) * sizeof(float)));
  return tensor;
}

absl::Status RunParamsGet(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::GetParametersRequest request;
  request.set_session_id(flags.Required("session"));
  request.set_trainable_only(flags.Has("trainable-only"));
  for (const std::string& name : flags.List("name")) request.add_names(name);
  request.set_include_gradients(flags.Has("gradients"));
  const bool by_name = request.names_size() > 0;
  if (flags.Has("out") && flags.Has("out-dir")) flags.AddError("give at most one of --out and --out-dir");
  if (by_name && flags.Has("out")) flags.AddError("--name writes one file per parameter: use --out-dir");
  if (flags.Has("gradients") && !flags.Has("out") && !flags.Has("out-dir")) {
    flags.AddError("--gradients needs --out or --out-dir");
  }
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  v1::GetParametersResponse response;
  if (absl::Status status = context.Call(&Stub::GetParameters, request, &response); !status.ok()) return status;

  std::vector<std::string> written;
  auto write = [&](const std::string& path, const v1::Tensor& tensor) {
    absl::Status status = WriteReceivedTensor(path, tensor);
    if (status.ok()) written.push_back(path);
    return status;
  };
  // Per-parameter files: the named tensors, or the contiguous buffer cut along its layout.
  auto write_directory = [&](const std::string& directory, const google::protobuf::RepeatedPtrField<v1::Tensor>& named,
                             const v1::Tensor& buffer) -> absl::Status {
    if (absl::Status made = MakeDirectory(directory); !made.ok()) return made;
    if (by_name) {
      for (const v1::Tensor& tensor : named) {
        if (absl::Status status = write(directory + "/" + ParameterFileName(tensor.name()), tensor); !status.ok()) {
          return status;
        }
      }
      return absl::OkStatus();
    }
    for (const v1::ParameterSlice& slice : response.layout()) {
      absl::StatusOr<v1::Tensor> tensor = SliceOfBuffer(buffer, slice);
      if (!tensor.ok()) return tensor.status();
      if (absl::Status status = write(directory + "/" + ParameterFileName(slice.name()), *tensor); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  };
  absl::Status status = absl::OkStatus();
  if (flags.Has("out")) {
    status = write(flags.String("out"), response.buffer());
    if (status.ok() && flags.Has("gradients")) status = write(flags.String("gradients"), response.gradient_buffer());
  } else if (flags.Has("out-dir")) {
    status = write_directory(flags.String("out-dir"), response.parameters(), response.buffer());
    if (status.ok() && flags.Has("gradients")) {
      status = write_directory(flags.String("gradients"), response.gradients(), response.gradient_buffer());
    }
  }
  if (!status.ok()) return status;

  if (context.json()) {
    response.mutable_buffer()->clear_data();
    response.mutable_gradient_buffer()->clear_data();
    for (v1::Tensor& tensor : *response.mutable_parameters()) tensor.clear_data();
    for (v1::Tensor& tensor : *response.mutable_gradients()) tensor.clear_data();
    context.PrintJson(response);
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {{"PARAMETER", "TENSOR", "OFFSET", "TRAINABLE", "GRADIENT"}};
  for (const v1::ParameterSlice& slice : response.layout()) {
    rows.push_back({slice.name(), DescribeTensor(slice.dtype(), slice.shape()),
                    by_name ? "-" : absl::StrCat(slice.offset()), slice.trainable() ? "yes" : "no",
                    slice.has_gradient() ? "yes" : "no"});
  }
  PrintTable(context.out(), rows);
  if (!by_name) {
    context.out() << "buffer: " << DescribeTensor(response.buffer().dtype(), response.buffer().shape()) << "\n";
  }
  for (const std::string& path : written) context.out() << "wrote " << path << "\n";
  return absl::OkStatus();
}

absl::Status RunParamsSet(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::SetParametersRequest request;
  request.set_session_id(flags.Required("session"));
  request.set_trainable_only(flags.Has("trainable-only"));
  if (flags.Has("in") + flags.Has("in-dir") + flags.Has("param") != 1) {
    flags.AddError("give one of --in FILE.npy, --in-dir DIR and --param NAME=FILE.npy (repeated)");
  }
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  if (flags.Has("in")) {
    absl::StatusOr<v1::Tensor> buffer = ReadNpyTensor(flags.String("in"), "");
    if (!buffer.ok()) return LocalFileError(buffer.status());
    *request.mutable_buffer() = std::move(*buffer);
  } else if (flags.Has("param")) {
    absl::StatusOr<std::vector<v1::Tensor>> named = ReadNamedNpyFiles(flags, "param");
    if (!named.ok()) return named.status();
    for (v1::Tensor& tensor : *named) *request.add_parameters() = std::move(tensor);
  } else {
    const std::string directory = flags.String("in-dir");
    std::vector<std::string> files;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && absl::EndsWith(name, ".npy")) files.push_back(name);
    }
    if (error) {
      return LocalFileError(absl::NotFoundError(absl::StrCat("cannot list '", directory, "': ", error.message())));
    }
    if (files.empty()) return LocalFileError(absl::NotFoundError(absl::StrCat("'", directory, "' holds no .npy")));
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
      absl::StatusOr<v1::Tensor> tensor = ReadNpyTensor(directory + "/" + file, ParameterFromFileName(file));
      if (!tensor.ok()) return LocalFileError(tensor.status());
      *request.add_parameters() = std::move(*tensor);
    }
  }
  v1::SetParametersResponse response;
  if (absl::Status status = context.Call(&Stub::SetParameters, request, &response); !status.ok()) return status;
  std::vector<std::string> names;
  for (const v1::Tensor& tensor : request.parameters()) names.push_back(tensor.name());
  if (context.json()) {
    google::protobuf::Struct document;
    auto& fields = *document.mutable_fields();
    fields["session_id"] = StringValue(request.session_id());
    if (request.has_buffer()) {
      fields["buffer_elements"] = NumberValue(static_cast<double>(request.buffer().data().size() / sizeof(float)));
    } else {
      google::protobuf::ListValue& list = *fields["parameters"].mutable_list_value();
      for (const std::string& name : names) *list.add_values() = StringValue(name);
    }
    context.PrintJson(document);
  } else if (request.has_buffer()) {
    context.out() << "set the " << (request.trainable_only() ? "trainable " : "") << "parameters of session "
                  << request.session_id() << " from " << flags.String("in") << " ("
                  << DescribeTensor(request.buffer().dtype(), request.buffer().shape()) << ")\n";
  } else {
    context.out() << "set " << names.size() << " parameters of session " << request.session_id() << ": "
                  << absl::StrJoin(names, ", ") << "\n";
  }
  return absl::OkStatus();
}

absl::Status RunExport(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::ExportForInferenceRequest request;
  request.set_session_id(flags.Required("session"));
  for (const std::string& name : flags.List("output")) request.add_output_names(name);
  const std::string out = flags.Required("out");
  const int64_t chunk_bytes = ChunkBytesFromFlags(flags);
  if (flags.Has("external-data")) {
    // The data file goes beside the model, named after it: the model references it by that name.
    const size_t slash = out.rfind('/');
    request.set_external_data_file((slash == std::string::npos ? out : out.substr(slash + 1)) + ".data");
  }
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  absl::StatusOr<bool> streamed = context.Serves("Download");
  if (!streamed.ok()) return streamed.status();
  if (*streamed) {
    // Streamed: no message-size limit on the exported model (nor on its external data file).
    v1::DownloadRequest download;
    *download.mutable_export_() = request;
    download.set_chunk_bytes(chunk_bytes);
    absl::StatusOr<std::vector<DownloadResult>> files = DownloadFiles(context, download, out);
    if (!files.ok()) return files.status();
    return PrintDownloads(context, *files);
  }
  if (!request.external_data_file().empty()) {
    return UsageError("--external-data needs a daemon that serves Download");
  }
  v1::ExportForInferenceResponse response;
  if (absl::Status status = context.Call(&Stub::ExportForInference, request, &response); !status.ok()) return status;
  if (absl::Status status = WriteCheckedBytes(out, response.onnx_model(), response.sha256_hex()); !status.ok()) {
    return status;
  }
  DownloadResult result;
  result.path = out;
  result.size_bytes = static_cast<int64_t>(response.onnx_model().size());
  result.sha256_hex = response.sha256_hex();
  return PrintDownload(context, result);
}

}  // namespace

std::vector<CommandSpec> CheckpointCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "checkpoint save", "", "save the session's state (SaveCheckpoint): on the daemon by name and/or to a file",
      "JSON: the traind.v1.SaveCheckpointResponse message (without the content).\n"
      "example: trainctl checkpoint save --session s1 --name epoch3 --include-optimizer-state\n",
      {SessionFlag(),
       {"name", "NAME", "store it on the daemon under NAME ([A-Za-z0-9._-], replaces an older one)"},
       {"out", "FILE", "also write it to FILE (checked against its SHA-256)"},
       {"include-optimizer-state", "", "with the optimizer's moments and step (to resume training exactly)"}},
      0, 0, 120, RunSave});
  commands.push_back(CommandSpec{
      "checkpoint load", "", "load a checkpoint into the session (LoadCheckpoint)",
      "--file is uploaded by digest first. JSON: the traind.v1.LoadCheckpointResponse message.\n",
      {SessionFlag(),
       {"name", "NAME", "a checkpoint saved on the daemon"},
       {"file", "FILE", "a local checkpoint file"}},
      0, 0, 120, RunLoad});
  commands.push_back(CommandSpec{"checkpoint list", "", "the checkpoints stored on the daemon (ListCheckpoints)",
                                 "JSON: the traind.v1.ListCheckpointsResponse message.\n", {}, 0, 0, 60, RunList});
  commands.push_back(CommandSpec{
      "checkpoint download", "NAME", "download a stored checkpoint (Download, streamed, SHA-256 checked)",
      "JSON: {\"path\", \"size_bytes\", \"sha256_hex\"}.\n",
      {{"out", "FILE|DIR", "where to write it (a directory: under the daemon's file name)"}, ChunkBytesFlag()}, 1, 1,
      600,
      RunDownload});
  commands.push_back(CommandSpec{"checkpoint delete", "NAME", "delete a stored checkpoint (DeleteCheckpoint)",
                                 "JSON: {\"name\", \"deleted\": true}.\n", {}, 1, 1, 60, RunDelete});
  commands.push_back(CommandSpec{
      "params get", "", "the session's parameters to .npy files (GetParameters)",
      "Contiguous (default): all parameters (or --trainable-only) as one float32 buffer, in checkpoint order, to\n"
      "--out FILE.npy, or cut along the layout into --out-dir DIR/<parameter>.npy. --name NAMES: those parameters\n"
      "by name, any dtype, into --out-dir. Without --out/--out-dir only the layout is printed. File names encode\n"
      "'/' and '%' of parameter names as %2F and %25.\n"
      "JSON: the traind.v1.GetParametersResponse message without tensor data.\n"
      "example: trainctl params get --session s1 --trainable-only --out weights.npy\n",
      {SessionFlag(),
       {"trainable-only", "", "contiguous mode: trainable parameters only"},
       {"name", "NAMES", "these parameters by name", true},
       {"out", "FILE.npy", "the contiguous buffer"},
       {"out-dir", "DIR", "one .npy per parameter"},
       {"gradients", "FILE.npy|DIR", "also the gradients (a file with --out, a directory with --out-dir)"}},
      0, 0, 60, RunParamsGet});
  commands.push_back(CommandSpec{
      "params set", "", "set the session's parameters from .npy files (SetParameters)",
      "--in FILE.npy: one contiguous float32 buffer of exactly the size 'params get' gives for the same\n"
      "--trainable-only. --in-dir DIR: every DIR/<parameter>.npy by name. --param NAME=FILE.npy: named.\n"
      "The daemon checks everything before it writes anything. JSON: {\"session_id\", \"buffer_elements\"} or\n"
      "{\"session_id\", \"parameters\": [names]}.\n",
      {SessionFlag(),
       {"trainable-only", "", "--in: the buffer holds the trainable parameters only"},
       {"in", "FILE.npy", "a contiguous buffer"},
       {"in-dir", "DIR", "per-parameter files"},
       {"param", "NAME=FILE.npy", "one parameter", true}},
      0, 0, 60, RunParamsSet});
  commands.push_back(CommandSpec{
      "export", "", "write an inference-only ONNX model with the current parameters (ExportForInference)",
      "Streamed with Download (no size limit) where the daemon serves it; checked against its SHA-256.\n"
      "JSON: {\"path\", \"size_bytes\", \"sha256_hex\"} (with --external-data also \"external_data\": [the same of the\n"
      "data file]).\n"
      "--external-data writes the parameters to FILE.data beside FILE (ONNX external data): needed for models\n"
      "beyond protobuf's 2 GiB.\n"
      "example: trainctl export --session s1 --out model.onnx\n",
      {SessionFlag(),
       {"out", "FILE", "the ONNX file to write"},
       {"output", "NAMES", "outputs to keep (default: the forward model's)", true},
       {"external-data", "", "parameters in FILE.data beside FILE (models beyond 2 GiB)"},
       ChunkBytesFlag()},
      0, 0, 600, RunExport});
  return commands;
}

}  // namespace traind::cli
