#include "client/commands/common.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/errors.h"
#include "client/output.h"
#include "client/progress.h"
#include "client/tensor_files.h"
#include "engine/io/file_util.h"

namespace traind::cli {

std::vector<FlagSpec> Flags(std::initializer_list<std::vector<FlagSpec>> groups) {
  std::vector<FlagSpec> all;
  for (const std::vector<FlagSpec>& group : groups) all.insert(all.end(), group.begin(), group.end());
  return all;
}

FlagSpec SessionFlag() { return {"session", "ID", "the session (see 'trainctl session list')"}; }

FlagSpec ChunkBytesFlag() { return {"chunk-bytes", "N", "bytes per streamed message (default 1 MiB)"}; }

int64_t ChunkBytesFromFlags(const FlagValues& flags) {
  return flags.Int("chunk-bytes", 1, int64_t{64} << 20).value_or(0);
}

std::vector<FlagSpec> SchedulerFlags() {
  return {
      {"scheduler", "KIND",
       "learning-rate schedule: linear (warm-up then linear decay to 0), constant (warm-up then constant), "
       "cosine, step"},
      {"warmup-steps", "N", "linear, constant, cosine: warm-up steps"},
      {"total-steps", "N", "linear, cosine: the step where the schedule ends"},
      {"min-lr-rate", "F", "cosine: the floor, as a fraction of the learning rate (default 0)"},
      {"num-cycles", "F", "cosine: cycles over total steps (default 0.5: one decay)"},
      {"step-size", "N", "step: multiply by --gamma every N steps"},
      {"gamma", "F", "step: the factor"},
  };
}

void SchedulerFromFlags(const FlagValues& flags, v1::SchedulerSpec* spec) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::string> parameters = {"warmup-steps", "total-steps", "min-lr-rate", "num-cycles",
                                               "step-size",    "gamma"};
  if (!flags.Has("scheduler")) {
    for (const std::string& parameter : parameters) {
      if (flags.Has(parameter)) flags.AddError(absl::StrCat("--", parameter, " needs --scheduler"));
    }
    return;
  }
  const std::string kind = flags.String("scheduler");
  std::set<std::string> allowed;
  if (kind == "linear" || kind == "linear_warmup_decay") {
    auto* linear = spec->mutable_linear_warmup_decay();
    linear->set_warmup_steps(flags.Int("warmup-steps", 0, kMax).value_or(0));
    linear->set_total_steps(flags.Int("total-steps", 0, kMax).value_or(0));
    if (!flags.Has("total-steps")) flags.AddError("--scheduler linear needs --total-steps");
    allowed = {"warmup-steps", "total-steps"};
  } else if (kind == "constant" || kind == "constant_with_warmup") {
    spec->mutable_constant_with_warmup()->set_warmup_steps(flags.Int("warmup-steps", 0, kMax).value_or(0));
    allowed = {"warmup-steps"};
  } else if (kind == "cosine") {
    auto* cosine = spec->mutable_cosine();
    cosine->set_warmup_steps(flags.Int("warmup-steps", 0, kMax).value_or(0));
    cosine->set_total_steps(flags.Int("total-steps", 0, kMax).value_or(0));
    cosine->set_min_lr_rate(flags.Float("min-lr-rate", true).value_or(0));
    cosine->set_num_cycles(flags.Float("num-cycles", true).value_or(0));
    if (!flags.Has("total-steps")) flags.AddError("--scheduler cosine needs --total-steps");
    allowed = {"warmup-steps", "total-steps", "min-lr-rate", "num-cycles"};
  } else if (kind == "step") {
    auto* step = spec->mutable_step();
    step->set_step_size(flags.Int("step-size", 1, kMax).value_or(0));
    step->set_gamma(flags.Float("gamma", true).value_or(0));
    if (!flags.Has("step-size") || !flags.Has("gamma")) flags.AddError("--scheduler step needs --step-size and --gamma");
    allowed = {"step-size", "gamma"};
  } else {
    flags.AddError(absl::StrCat("--scheduler '", kind, "' is not one of linear, constant, cosine, step"));
    return;
  }
  for (const std::string& parameter : parameters) {
    if (flags.Has(parameter) && allowed.count(parameter) == 0) {
      flags.AddError(absl::StrCat("--", parameter, " does not apply to --scheduler ", kind));
    }
  }
}

std::vector<FlagSpec> CheckpointPolicyFlags() {
  return {
      {"checkpoint-every-steps", "N", "checkpoint into the daemon's state every N optimizer steps"},
      {"checkpoint-every-seconds", "S", "checkpoint when S seconds have passed since the last one"},
  };
}

FlagSpec DeviceFlag() {
  return {"device", "cpu|gpu[:N]", "executor: cpu (default) or the GPU executor on OpenCL device N"};
}

Device DeviceFromFlags(const FlagValues& flags) {
  const std::string value = flags.String("device", "cpu");
  Device device;
  if (value == "cpu") return device;
  absl::string_view rest = value;
  if (absl::ConsumePrefix(&rest, "gpu") &&
      (rest.empty() ||
       (absl::ConsumePrefix(&rest, ":") && absl::SimpleAtoi(rest, &device.index) && device.index >= 0))) {
    device.executor = v1::GPU;
    return device;
  }
  flags.AddError(absl::StrCat("--device '", value, "' is not cpu, gpu or gpu:N"));
  return Device{};
}

bool CheckpointPolicyFromFlags(const FlagValues& flags, v1::CheckpointPolicy* policy) {
  if (std::optional<int64_t> steps =
          flags.Int("checkpoint-every-steps", 0, std::numeric_limits<int64_t>::max())) {
    policy->set_every_steps(*steps);
  }
  if (std::optional<double> seconds = flags.Double("checkpoint-every-seconds")) {
    if (*seconds < 0) flags.AddError("--checkpoint-every-seconds must not be negative");
    policy->set_every_seconds(*seconds);
  }
  return flags.Has("checkpoint-every-steps") || flags.Has("checkpoint-every-seconds");
}

absl::StatusOr<std::vector<v1::Tensor>> ReadNamedNpyFiles(const FlagValues& flags, const std::string& flag) {
  std::vector<v1::Tensor> tensors;
  std::set<std::string> names;
  for (const std::string& argument : flags.Values(flag)) {
    absl::StatusOr<std::pair<std::string, std::string>> named = SplitNameAndFile(argument, flag);
    if (!named.ok()) return UsageError(named.status().message());
    if (!names.insert(named->first).second) {
      return UsageError(absl::StrCat("--", flag, " names '", named->first, "' twice"));
    }
    absl::StatusOr<v1::Tensor> tensor = ReadNpyTensor(named->second, named->first);
    if (!tensor.ok()) return LocalFileError(tensor.status());
    tensors.push_back(std::move(*tensor));
  }
  return tensors;
}

std::string DescribeSignature(const google::protobuf::RepeatedPtrField<v1::TensorInfo>& infos) {
  std::vector<std::string> parts;
  for (const v1::TensorInfo& info : infos) {
    parts.push_back(absl::StrCat(info.name(), " ", DescribeTensor(info.dtype(), info.shape())));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

void PrintSession(std::ostream& out, const v1::Session& session) {
  std::string device = v1::Executor_Name(session.executor() == v1::EXECUTOR_UNSPECIFIED ? v1::CPU
                                                                                          : session.executor());
  if (session.executor() == v1::GPU) absl::StrAppend(&device, ":", session.device_index());
  out << "session " << session.session_id() << "  " << v1::SessionState_Name(session.state()) << "  "
      << absl::AsciiStrToLower(device);
  if (!session.display_name().empty()) out << "  \"" << session.display_name() << "\"";
  out << "\n";
  out << "  artifact:         " << OrDash(session.artifact_id()) << "\n";
  out << "  optimizer step:   " << session.optimizer_step() << "   learning rate: "
      << FormatNumber(session.learning_rate()) << "   scheduler: " << OrDash(session.scheduler()) << "\n";
  out << "  train steps:      " << session.train_steps() << "   last loss: " << (session.train_steps() > 0 ? FormatNumber(session.last_loss()) : "-")
      << "\n";
  out << "  training inputs:  " << DescribeSignature(session.training_inputs()) << "\n";
  out << "  eval inputs:      " << DescribeSignature(session.eval_inputs()) << "\n";
  out << "  outputs:          " << OrDash(absl::StrJoin(session.output_names(), ", ")) << "   eval outputs: "
      << OrDash(absl::StrJoin(session.eval_output_names(), ", ")) << "\n";
  out << "  trainable params: " << session.trainable_parameter_count() << " elements   eval model: "
      << (session.has_eval_model() ? "yes" : "no") << "   optimizer: " << (session.has_optimizer() ? "yes" : "no")
      << "   threads: " << session.num_threads() << "\n";
  if (session.checkpoint_policy().every_steps() > 0 || session.checkpoint_policy().every_seconds() > 0 ||
      session.checkpoint_step() > 0) {
    out << "  auto-checkpoint:  every " << session.checkpoint_policy().every_steps() << " steps / "
        << FormatNumber(session.checkpoint_policy().every_seconds()) << " s; last at step "
        << session.checkpoint_step() << " (" << FormatUnixTime(session.checkpoint_time()) << ")\n";
  }
  if (!session.tenant().empty()) out << "  tenant:           " << session.tenant() << "\n";
  for (const auto& [name, property] : session.properties()) {
    std::string value;
    switch (property.value_case()) {
      case v1::Property::kIntValue:
        value = absl::StrCat(property.int_value());
        break;
      case v1::Property::kFloatValue:
        value = FormatNumber(property.float_value());
        break;
      case v1::Property::kStringValue:
        value = absl::StrCat("\"", property.string_value(), "\"");
        break;
      case v1::Property::VALUE_NOT_SET:
        value = "-";
        break;
    }
    out << "  property " << name << " = " << value << "\n";
  }
}

std::string DescribeJobProgress(const v1::Job& job) {
  std::string text = absl::StrCat(v1::JobState_Name(job.state()), " epoch ", std::min(job.epoch() + 1, job.epochs()),
                                  "/", job.epochs(), " step ", job.step(), "/", job.total_steps());
  if (job.step() > 0) {
    absl::StrAppend(&text, " loss ", FormatNumber(job.loss()), " lr ", FormatNumber(job.learning_rate()));
  }
  if (job.examples_per_second() > 0) {
    absl::StrAppend(&text, " ", absl::StrFormat("%.0f", job.examples_per_second()), " ex/s");
  }
  if (job.state() == v1::RUNNING && job.eta_seconds() >= 0) {
    absl::StrAppend(&text, " ETA ", FormatDuration(job.eta_seconds()));
  }
  return text;
}

std::string DescribeEval(const v1::EvalMetrics& eval) {
  std::string text = absl::StrCat("epoch ", eval.epoch() + 1, " eval: loss ", FormatNumber(eval.loss()));
  if (!std::isnan(eval.accuracy())) absl::StrAppend(&text, " accuracy ", FormatNumber(eval.accuracy()));
  absl::StrAppend(&text, " (", eval.examples(), " examples)");
  return text;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes) {
  absl::StatusOr<std::string> content = engine::ReadFileLimited(path, max_bytes);
  if (!content.ok()) return LocalFileError(content.status());
  return content;
}

absl::Status MakeDirectory(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) {
    return LocalFileError(absl::PermissionDeniedError(absl::StrCat("cannot create '", path, "': ", error.message())));
  }
  return absl::OkStatus();
}

}  // namespace traind::cli
