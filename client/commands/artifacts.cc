// artifacts generate|list|get|delete: training artifacts made by the daemon from a forward model.
#include <sys/stat.h>

#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"
#include "client/output.h"
#include "client/progress.h"
#include "client/tensor_files.h"
#include "client/transfer.h"
#include "engine/io/file_util.h"
#include "onnx/onnx_pb.h"

namespace traind::cli {
namespace {

using Stub = CommandContext::Stub;

// Models up to this size travel inline in the request; larger ones are uploaded as blobs first (by digest, so a
// model the daemon has already is not sent again).
constexpr int64_t kInlineModelBytes = int64_t{4} << 20;

// Every ONNX external data location `graph` (and its subgraphs) references.
void CollectExternalLocations(const onnx::GraphProto& graph, std::set<std::string>& locations) {
  auto visit = [&locations](const onnx::TensorProto& tensor) {
    if (tensor.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& entry : tensor.external_data()) {
      if (entry.key() == "location") locations.insert(entry.value());
    }
  };
  for (const auto& tensor : graph.initializer()) visit(tensor);
  for (const auto& node : graph.node()) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.has_t()) visit(attribute.t());
      for (const auto& tensor : attribute.tensors()) visit(tensor);
      if (attribute.has_g()) CollectExternalLocations(attribute.g(), locations);
      for (const auto& subgraph : attribute.graphs()) CollectExternalLocations(subgraph, locations);
    }
  }
}

absl::StatusOr<v1::ModelSource> ModelSourceFor(CommandContext& context, const std::string& path) {
  v1::ModelSource source;
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return LocalFileError(absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", error.message())));
  absl::StatusOr<std::string> bytes = ReadWholeFile(path, std::numeric_limits<int32_t>::max());
  if (!bytes.ok()) return bytes.status();
  // Weights kept in external data files (models beyond protobuf's 2 GiB) are uploaded as blobs of their own, by
  // digest; the daemon reads them in place.
  onnx::ModelProto model;
  std::set<std::string> locations;
  if (model.ParseFromString(*bytes)) CollectExternalLocations(model.graph(), locations);
  const std::string directory = std::filesystem::path(path).parent_path().string();
  for (const std::string& location : locations) {
    const std::string file = directory.empty() ? location : directory + "/" + location;
    absl::StatusOr<UploadResult> uploaded = UploadFile(context, file, location);
    if (!uploaded.ok()) return uploaded.status();
    (*source.mutable_external_data())[location] = uploaded->blob_id;
  }
  if (size <= static_cast<uintmax_t>(kInlineModelBytes)) {
    source.set_onnx_bytes(*std::move(bytes));
    return source;
  }
  std::string().swap(*bytes);
  absl::StatusOr<UploadResult> uploaded = UploadFile(context, path, path);
  if (!uploaded.ok()) return uploaded.status();
  source.set_blob_id(uploaded->blob_id);
  return source;
}

absl::StatusOr<v1::LossType> LossTypeFromName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "mse") return v1::MSE;
  if (lower == "cross_entropy" || lower == "crossentropy") return v1::CROSS_ENTROPY;
  if (lower == "bce_with_logits" || lower == "bcewithlogits") return v1::BCE_WITH_LOGITS;
  if (lower == "l1") return v1::L1;
  return absl::InvalidArgumentError(
      absl::StrCat("loss '", name, "' is not one of mse, cross_entropy, bce_with_logits, l1"));
}

// "" leaves the reduction unset (mean).
absl::Status SetReduction(const std::string& name, v1::BuiltinLoss* loss) {
  const std::string reduction = absl::AsciiStrToLower(name);
  if (reduction.empty()) return absl::OkStatus();
  if (reduction == "mean") {
    loss->set_reduction(v1::MEAN);
  } else if (reduction == "sum") {
    loss->set_reduction(v1::SUM);
  } else if (reduction == "none") {
    loss->set_reduction(v1::NONE);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("reduction '", name, "' is not one of mean, sum, none"));
  }
  return absl::OkStatus();
}

// --loss TYPE with --output, --target, --reduction, --class-weight, --ignore-index, --bce-weight, --pos-weight.
absl::Status BuiltinLossFromFlags(const FlagValues& flags, v1::BuiltinLoss* loss) {
  absl::StatusOr<v1::LossType> type = LossTypeFromName(flags.String("loss"));
  if (!type.ok()) return UsageError(type.status().message());
  loss->set_type(*type);
  loss->set_output_name(flags.String("output"));
  loss->set_target_name(flags.String("target"));
  loss->set_per_element_output_name(flags.String("per-element-output"));
  if (absl::Status status = SetReduction(flags.String("reduction"), loss); !status.ok()) {
    return UsageError(absl::StrCat("--", status.message()));
  }
  for (const std::string& weight : flags.List("class-weight")) {
    float value = 0;
    if (!absl::SimpleAtof(weight, &value)) return UsageError(absl::StrCat("--class-weight '", weight, "' is not a number"));
    loss->add_class_weight(value);
  }
  if (std::optional<int64_t> ignore = flags.Int("ignore-index", std::numeric_limits<int64_t>::min(),
                                                 std::numeric_limits<int64_t>::max())) {
    loss->set_ignore_index(*ignore);
  }
  if ((flags.Has("class-weight") || flags.Has("ignore-index")) && *type != v1::CROSS_ENTROPY) {
    return UsageError("--class-weight and --ignore-index apply to --loss cross_entropy only");
  }
  if ((flags.Has("bce-weight") || flags.Has("pos-weight")) && *type != v1::BCE_WITH_LOGITS) {
    return UsageError("--bce-weight and --pos-weight apply to --loss bce_with_logits only");
  }
  for (const char* flag : {"bce-weight", "pos-weight"}) {
    if (!flags.Has(flag)) continue;  // an unset message field means "no weight": do not create it
    absl::StatusOr<v1::Tensor> tensor = ReadNpyTensor(flags.String(flag), "");
    if (!tensor.ok()) return LocalFileError(tensor.status());
    *(flag == std::string("bce-weight") ? loss->mutable_weight() : loss->mutable_pos_weight()) = std::move(*tensor);
  }
  return absl::OkStatus();
}

// --term WEIGHT:TYPE[:OUTPUT[:TARGET[:REDUCTION]]], repeated: a weighted sum of built-in losses.
absl::Status WeightedLossFromFlags(const FlagValues& flags, v1::WeightedLoss* weighted) {
  for (const std::string& term_text : flags.Values("term")) {
    const std::vector<std::string> parts = absl::StrSplit(term_text, ':');
    float weight = 0;
    if (parts.size() < 2 || parts.size() > 5 || !absl::SimpleAtof(parts[0], &weight)) {
      return UsageError(absl::StrCat("--term '", term_text, "' is not WEIGHT:TYPE[:OUTPUT[:TARGET[:REDUCTION]]]"));
    }
    absl::StatusOr<v1::LossType> type = LossTypeFromName(parts[1]);
    if (!type.ok()) return UsageError(absl::StrCat("--term '", term_text, "': ", type.status().message()));
    v1::WeightedLoss::Term* term = weighted->add_terms();
    term->set_weight(weight);
    term->mutable_loss()->set_type(*type);
    if (parts.size() > 2) term->mutable_loss()->set_output_name(parts[2]);
    if (parts.size() > 3) term->mutable_loss()->set_target_name(parts[3]);
    const std::string reduction = parts.size() > 4 ? parts[4] : flags.String("reduction");
    if (absl::Status status = SetReduction(reduction, term->mutable_loss()); !status.ok()) {
      return UsageError(absl::StrCat("--term '", term_text, "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

void OptimizerFromFlags(const FlagValues& flags, v1::OptimizerSpec* optimizer) {
  const std::string kind = absl::AsciiStrToLower(flags.String("optimizer", "adamw"));
  const std::vector<std::string> adamw_only = {"beta1", "beta2", "eps", "no-bias-correction"};
  const std::vector<std::string> sgd_only = {"momentum", "dampening", "nesterov"};
  const std::vector<std::string>* foreign = nullptr;
  if (kind == "adamw") {
    v1::AdamWOptions* adamw = optimizer->mutable_adamw();
    if (auto lr = flags.Float("lr", true)) adamw->set_lr(*lr);
    if (auto beta1 = flags.Float("beta1", true)) adamw->set_beta1(*beta1);
    if (auto beta2 = flags.Float("beta2", true)) adamw->set_beta2(*beta2);
    if (auto eps = flags.Float("eps", true)) adamw->set_eps(*eps);
    if (auto decay = flags.Float("weight-decay", true)) adamw->set_weight_decay(*decay);
    if (flags.Has("no-bias-correction")) adamw->set_bias_correction(false);
    foreign = &sgd_only;
  } else if (kind == "sgd") {
    v1::SgdOptions* sgd = optimizer->mutable_sgd();
    if (auto lr = flags.Float("lr", true)) sgd->set_lr(*lr);
    if (auto momentum = flags.Float("momentum", true)) sgd->set_momentum(*momentum);
    if (auto dampening = flags.Float("dampening", true)) sgd->set_dampening(*dampening);
    if (auto decay = flags.Float("weight-decay", true)) sgd->set_weight_decay(*decay);
    sgd->set_nesterov(flags.Has("nesterov"));
    foreign = &adamw_only;
  } else {
    flags.AddError(absl::StrCat("--optimizer '", kind, "' is not one of adamw, sgd"));
    return;
  }
  for (const std::string& flag : *foreign) {
    if (flags.Has(flag)) flags.AddError(absl::StrCat("--", flag, " does not apply to --optimizer ", kind));
  }
  if (auto clip = flags.Float("max-grad-norm", true)) optimizer->set_max_grad_norm(*clip);
  optimizer->set_onnx_standard_op(flags.Has("onnx-standard-op"));
}

// Writes the artifact set's files into `directory`: streamed with Download where the daemon serves it, else from
// the bytes in `inline_files` (GenerateArtifacts' return_artifact_bytes). Every file is checked against its digest.
absl::StatusOr<std::vector<std::string>> WriteArtifactFiles(
    CommandContext& context, const std::string& artifact_id,
    const google::protobuf::RepeatedPtrField<v1::ArtifactFile>& files, const std::string& directory,
    int64_t chunk_bytes) {
  if (absl::Status made = MakeDirectory(directory); !made.ok()) return made;
  std::vector<std::string> written;
  for (const v1::ArtifactFile& file : files) {
    const std::string path = absl::StrCat(directory, "/", file.file_name());
    if (file.file_name().empty() || file.file_name().find('/') != std::string::npos || file.file_name() == "." ||
        file.file_name() == "..") {
      return CallError(absl::StatusCode::kDataLoss, absl::StrCat("the daemon names a file '", file.file_name(), "'"));
    }
    if (file.content().empty() && file.size_bytes() > 0) {
      v1::DownloadRequest request;
      request.mutable_artifact_file()->set_artifact_id(artifact_id);
      request.mutable_artifact_file()->set_kind(file.kind());
      request.set_chunk_bytes(chunk_bytes);
      absl::StatusOr<DownloadResult> downloaded = DownloadToFile(context, request, path);
      if (!downloaded.ok()) return downloaded.status();
      if (downloaded->sha256_hex != file.sha256_hex()) {
        return CallError(absl::StatusCode::kDataLoss,
                         absl::StrCat("'", file.file_name(), "' downloaded with a digest other than listed"));
      }
    } else {
      if (engine::Sha256Hex(file.content()) != file.sha256_hex()) {
        return CallError(absl::StatusCode::kDataLoss,
                         absl::StrCat("'", file.file_name(), "' does not match its SHA-256"));
      }
      if (absl::Status status = engine::WriteFileAtomically(path, file.content()); !status.ok()) {
        return LocalFileError(status);
      }
    }
    written.push_back(path);
  }
  return written;
}

void PrintFiles(std::ostream& out, const google::protobuf::RepeatedPtrField<v1::ArtifactFile>& files) {
  std::vector<std::vector<std::string>> rows = {{"  KIND", "FILE", "SIZE", "SHA256"}};
  for (const v1::ArtifactFile& file : files) {
    rows.push_back({"  " + file.kind(), file.file_name(), FormatBytes(file.size_bytes()), ShortDigest(file.sha256_hex())});
  }
  PrintTable(out, rows);
}

absl::Status RunGenerate(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::GenerateArtifactsRequest request;
  const int kinds = flags.Has("loss") + flags.Has("term") + flags.Has("loss-graph");
  if (kinds != 1) return UsageError("give exactly one of --loss, --term (repeated) and --loss-graph");
  if (flags.Has("loss")) {
    if (absl::Status status = BuiltinLossFromFlags(flags, request.mutable_loss()->mutable_builtin()); !status.ok()) {
      return status;
    }
  } else if (flags.Has("term")) {
    if (absl::Status status = WeightedLossFromFlags(flags, request.mutable_loss()->mutable_weighted());
        !status.ok()) {
      return status;
    }
  }
  for (const char* flag : {"output", "target", "class-weight", "ignore-index", "bce-weight", "pos-weight",
                           "per-element-output"}) {
    if (flags.Has(flag) && !flags.Has("loss")) return UsageError(absl::StrCat("--", flag, " needs --loss"));
  }
  if (flags.Has("loss-target") && !flags.Has("loss-graph")) return UsageError("--loss-target needs --loss-graph");
  OptimizerFromFlags(flags, request.mutable_optimizer());
  for (const std::string& name : flags.List("requires-grad")) request.add_requires_grad(name);
  for (const std::string& name : flags.List("frozen")) request.add_frozen_params(name);
  for (const std::string& name : flags.List("additional-output")) request.add_additional_output_names(name);
  request.set_prefix(flags.String("prefix"));
  request.set_nominal_checkpoint(flags.Has("nominal-checkpoint"));
  const std::string model_path = flags.Required("model");
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;

  if (flags.Has("loss-graph")) {
    v1::CustomLoss* custom = request.mutable_loss()->mutable_custom();
    absl::StatusOr<v1::ModelSource> graph = ModelSourceFor(context, flags.String("loss-graph"));
    if (!graph.ok()) return graph.status();
    *custom->mutable_graph() = std::move(*graph);
    for (const std::string& name : flags.List("loss-target")) custom->add_target_names(name);
  }
  absl::StatusOr<v1::ModelSource> model = ModelSourceFor(context, model_path);
  if (!model.ok()) return model.status();
  *request.mutable_model() = std::move(*model);

  const std::string out_dir = flags.String("out");
  bool streamed_download = false;
  if (!out_dir.empty()) {
    absl::StatusOr<bool> serves = context.Serves("Download");
    if (!serves.ok()) return serves.status();
    streamed_download = *serves;
    request.set_return_artifact_bytes(!streamed_download);
  }
  v1::GenerateArtifactsResponse response;
  if (absl::Status status = context.Call(&Stub::GenerateArtifacts, request, &response); !status.ok()) return status;
  std::vector<std::string> written;
  if (!out_dir.empty()) {
    absl::StatusOr<std::vector<std::string>> files =
        WriteArtifactFiles(context, response.artifact_id(), response.files(), out_dir, 0);
    if (!files.ok()) return files.status();
    written = std::move(*files);
  }
  for (v1::ArtifactFile& file : *response.mutable_files()) file.clear_content();
  if (context.json()) {
    context.PrintJson(response);
    return absl::OkStatus();
  }
  std::ostream& out = context.out();
  out << "artifact " << response.artifact_id() << "\n";
  PrintFiles(out, response.files());
  out << "training inputs:  " << DescribeSignature(response.training_inputs()) << "\n";
  out << "eval inputs:      " << DescribeSignature(response.eval_inputs()) << "\n";
  out << "trainable:        " << OrDash(absl::StrJoin(response.trainable_parameters(), ", ")) << "\n";
  out << "frozen:           " << OrDash(absl::StrJoin(response.frozen_parameters(), ", ")) << "\n";
  out << "training outputs: " << OrDash(absl::StrJoin(response.training_output_names(), ", "))
      << "   eval outputs: " << OrDash(absl::StrJoin(response.eval_output_names(), ", ")) << "\n";
  int64_t ops_without_rule = 0;
  for (const auto& op : response.coverage().ops()) ops_without_rule += op.on_gradient_path() && !op.has_gradient_rule();
  out << "gradient coverage: " << response.coverage().ops_size() << " op types, " << ops_without_rule
      << " on the gradient path without a gradient rule\n";
  for (const std::string& path : written) out << "wrote " << path << "\n";
  return absl::OkStatus();
}

void PrintArtifactSets(std::ostream& out, const v1::ListArtifactsResponse& response) {
  std::vector<std::vector<std::string>> rows = {{"ARTIFACT", "CREATED", "FILES", "SIZE", "TENANT"}};
  for (const v1::ArtifactSet& set : response.artifacts()) {
    int64_t bytes = 0;
    for (const v1::ArtifactFile& file : set.files()) bytes += file.size_bytes();
    rows.push_back({set.artifact_id(), FormatUnixTime(set.created_time()), absl::StrCat(set.files_size()),
                    FormatBytes(bytes), OrDash(set.tenant())});
  }
  PrintTable(out, rows);
}

absl::Status RunList(CommandContext& context) {
  return context.CallAndPrint<v1::ListArtifactsRequest, v1::ListArtifactsResponse>(
      &Stub::ListArtifacts, v1::ListArtifactsRequest(), PrintArtifactSets);
}

absl::Status RunGet(CommandContext& context) {
  v1::GetArtifactRequest request;
  request.set_artifact_id(context.positional()[0]);
  const int64_t chunk_bytes = ChunkBytesFromFlags(context.flags());
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  v1::ArtifactSet set;
  if (absl::Status status = context.Call(&Stub::GetArtifact, request, &set); !status.ok()) return status;
  std::vector<std::string> written;
  if (context.flags().Has("out")) {
    absl::StatusOr<std::vector<std::string>> files =
        WriteArtifactFiles(context, set.artifact_id(), set.files(), context.flags().String("out"), chunk_bytes);
    if (!files.ok()) return files.status();
    written = std::move(*files);
  }
  context.Print(set, [&](std::ostream& out) {
    out << "artifact " << set.artifact_id() << "  created " << FormatUnixTime(set.created_time())
        << (set.tenant().empty() ? "" : "  tenant " + set.tenant()) << "\n";
    PrintFiles(out, set.files());
    for (const std::string& path : written) out << "wrote " << path << "\n";
  });
  return absl::OkStatus();
}

absl::Status RunDelete(CommandContext& context) {
  v1::DeleteArtifactRequest request;
  request.set_artifact_id(context.positional()[0]);
  v1::DeleteArtifactResponse response;
  if (absl::Status status = context.Call(&Stub::DeleteArtifact, request, &response); !status.ok()) return status;
  context.Print(Document({{"artifact_id", StringValue(request.artifact_id())}, {"deleted", BoolValue(true)}}),
                [&](std::ostream& out) { out << "deleted artifact " << request.artifact_id() << "\n"; });
  return absl::OkStatus();
}

std::vector<FlagSpec> GenerateFlags() {
  return {
      {"model", "FILE",
       "the forward ONNX model (inline up to 4 MiB, else uploaded as a blob by digest); its external data files, "
       "if any, are uploaded beside it"},
      {"loss", "TYPE", "built-in loss: mse, cross_entropy, bce_with_logits, l1"},
      {"output", "NAME", "--loss: the model output it reads (default: the first)"},
      {"target", "NAME", "--loss: the name of the target input (default 'target')"},
      {"reduction", "R", "mean (default), sum or none (also for every --term)"},
      {"class-weight", "W,W,...", "cross_entropy: per-class weights"},
      {"ignore-index", "N", "cross_entropy: the class index to ignore"},
      {"bce-weight", "FILE.npy", "bce_with_logits: per-element weight"},
      {"pos-weight", "FILE.npy", "bce_with_logits: per-class positive weight"},
      {"per-element-output", "NAME", "reduction none: the output carrying the per-element loss"},
      {"term", "W:TYPE[:OUTPUT[:TARGET[:REDUCTION]]]",
       "a term of a weighted loss, e.g. 0.4:mse:out1:target1 (repeat; REDUCTION defaults to --reduction)", true},
      {"loss-graph", "FILE", "a custom loss: an ONNX graph with one scalar output (see the schema's CustomLoss)"},
      {"loss-target", "NAMES", "--loss-graph: which of its inputs are targets (default: those not named after "
                               "model outputs)", true},
      {"optimizer", "KIND", "adamw (default) or sgd"},
      {"lr", "F", "learning rate (adamw 1e-3, sgd 1e-2)"},
      {"beta1", "F", "adamw (0.9)"},
      {"beta2", "F", "adamw (0.999)"},
      {"eps", "F", "adamw (1e-8)"},
      {"weight-decay", "F", "adamw (1e-2, decoupled) or sgd (0)"},
      {"no-bias-correction", "", "adamw: without bias correction"},
      {"momentum", "F", "sgd (0)"},
      {"dampening", "F", "sgd (0)"},
      {"nesterov", "", "sgd: Nesterov momentum"},
      {"max-grad-norm", "F", "clip the global gradient L2 norm to F before each step"},
      {"onnx-standard-op", "", "emit ONNX's standard Adam / Momentum op instead of traind's fused one"},
      {"requires-grad", "NAMES", "initializers to train (default: every float initializer not --frozen)", true},
      {"frozen", "NAMES", "initializers kept constant", true},
      {"additional-output", "NAMES", "model outputs that train / eval return beside the loss", true},
      {"prefix", "P", "file-name prefix of the artifacts (P + training_model.onnx, ...)"},
      {"nominal-checkpoint", "", "a checkpoint with shapes only, no values"},
      {"out", "DIR", "also write the four files into DIR (checked against their SHA-256)"},
  };
}

}  // namespace

std::vector<CommandSpec> ArtifactCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "artifacts generate", "", "make training artifacts from a forward ONNX model (GenerateArtifacts)",
      "One of --loss (built-in), --term (weighted built-ins, repeated) or --loss-graph (custom ONNX loss).\n"
      "Prints the artifact id (for 'session create --artifact'), the files, the training and eval signatures and\n"
      "the gradient coverage. JSON: the traind.v1.GenerateArtifactsResponse message (without file contents).\n"
      "examples:\n"
      "  trainctl artifacts generate --model mlp.onnx --loss cross_entropy --output logits --optimizer adamw \\\n"
      "      --lr 0.01 --out ./artifacts\n"
      "  trainctl artifacts generate --model two_heads.onnx --term 0.4:mse:out1:t1 --term 0.6:mse:out2:t2\n",
      GenerateFlags(), 0, 0, 300, RunGenerate});
  commands.push_back(CommandSpec{"artifacts list", "", "the artifact sets stored on the daemon (ListArtifacts)",
                                 "JSON: the traind.v1.ListArtifactsResponse message.\n", {}, 0, 0, 60, RunList});
  commands.push_back(CommandSpec{
      "artifacts get", "ID", "one artifact set's files (GetArtifact); --out downloads them",
      "JSON: the traind.v1.ArtifactSet message.\nexample: trainctl artifacts get 3f2a... --out ./artifacts\n",
      {{"out", "DIR", "download the files into DIR (streamed, checked against their SHA-256)"}, ChunkBytesFlag()}, 1,
      1, 600,
      RunGet});
  commands.push_back(CommandSpec{"artifacts delete", "ID", "delete a stored artifact set (DeleteArtifact)",
                                 "JSON: {\"artifact_id\", \"deleted\": true}.\n", {}, 1, 1, 60, RunDelete});
  return commands;
}

}  // namespace traind::cli
