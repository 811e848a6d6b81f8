// job submit|watch|list|show|cancel: training the daemon does on its own over a dataset.
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"
#include "client/output.h"
#include "client/progress.h"
#include "client/tensor_files.h"
#include "client/transfer.h"

namespace traind::cli {
namespace {

using Stub = CommandContext::Stub;

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED || state == v1::STOPPED_EARLY;
}

// The flags that name one dataset: an uploaded .npz, uploaded .npy per input, or a path on the daemon.
struct DatasetFlagNames {
  std::string npz, npy, path;
};
const DatasetFlagNames kTrainData = {"data", "data-input", "data-path"};
const DatasetFlagNames kEvalData = {"eval-data", "eval-input", "eval-path"};

// A dataset from one of --data FILE.npz, --data-input NAME=FILE.npy (repeated) and --data-path PATH (or their
// eval- forms). Uploads go by digest. Returns false when none of them was given.
absl::StatusOr<bool> DatasetFromFlags(CommandContext& context, const DatasetFlagNames& names, v1::Dataset* dataset) {
  const FlagValues& flags = context.flags();
  const std::string& data = names.npz;
  const std::string& input = names.npy;
  const std::string& path = names.path;
  const int given = flags.Has(data) + flags.Has(input) + flags.Has(path);
  if (given == 0) return false;
  if (given > 1) return UsageError(absl::StrCat("give one of --", data, ", --", input, " and --", path));
  if (flags.Has(path)) {
    dataset->set_local_path(flags.String(path));
    return true;
  }
  if (flags.Has(data)) {
    absl::StatusOr<UploadResult> uploaded = UploadFile(context, flags.String(data), "dataset");
    if (!uploaded.ok()) return uploaded.status();
    dataset->set_npz_blob_id(uploaded->blob_id);
    return true;
  }
  auto& blob_ids = *dataset->mutable_npy_blobs()->mutable_blob_ids();
  for (const std::string& argument : flags.Values(input)) {
    absl::StatusOr<std::pair<std::string, std::string>> named = SplitNameAndFile(argument, input);
    if (!named.ok()) return UsageError(named.status().message());
    if (blob_ids.count(named->first) > 0) {
      return UsageError(absl::StrCat("--", input, " names '", named->first, "' twice"));
    }
    absl::StatusOr<UploadResult> uploaded = UploadFile(context, named->second, named->first);
    if (!uploaded.ok()) return uploaded.status();
    blob_ids[named->first] = uploaded->blob_id;
  }
  return true;
}

void PrintJob(std::ostream& out, const v1::Job& job) {
  out << "job " << job.job_id() << "  " << v1::JobState_Name(job.state());
  if (!job.display_name().empty()) out << "  \"" << job.display_name() << "\"";
  out << "\n  session:  " << OrDash(job.session_id()) << "\n";
  out << "  progress: " << DescribeJobProgress(job) << "\n";
  out << "  created:  " << FormatUnixTime(job.created_time()) << "   updated: " << FormatUnixTime(job.updated_time())
      << (job.resumed() > 0 ? absl::StrCat("   resumed ", job.resumed(), "x") : "") << "\n";
  if (!job.tenant().empty()) out << "  tenant:   " << job.tenant() << "\n";
  if (!job.message().empty()) out << "  message:  " << job.message() << "\n";
  for (const v1::EvalMetrics& eval : job.evals()) out << "  " << DescribeEval(eval) << "\n";
}

// Follows the job until it ends. Prints progress (bar or lines), then the job (text or JSON). A job that ended
// FAILED or CANCELLED makes the command exit with kExitJobFailed.
absl::Status Watch(CommandContext& context, const std::string& job_id) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientContext> call = context.NewCallContext(0);
  std::unique_ptr<grpc::ClientReader<v1::Job>> stream = context.stub().WatchJob(call.get(), request);
  StatusLine line(context.out(), context.progress_style());
  v1::Job job;
  bool seen = false;
  int evals_printed = 0;
  while (stream->Read(&job)) {
    seen = true;
    for (; evals_printed < job.evals_size(); ++evals_printed) line.Print(DescribeEval(job.evals(evals_printed)));
    std::string text = DescribeJobProgress(job);
    if (context.progress_style() == ProgressStyle::kBar) {
      const double fraction = job.total_steps() > 0 ? static_cast<double>(job.step()) / job.total_steps() : 0;
      text = absl::StrCat(RenderBar(fraction, 30), " ", text);
    } else {
      text = absl::StrCat("job ", job.job_id(), " ", text);
    }
    line.Show(text, IsTerminal(job.state()));
  }
  line.Finish();
  const absl::Status status = CommandContext::Finished(stream->Finish(), *call);
  if (!status.ok()) return status;
  if (!seen || !IsTerminal(job.state())) {
    return CallError(absl::StatusCode::kUnavailable,
                     absl::StrCat("the watch of job ", job_id, " ended before the job did",
                                  seen ? absl::StrCat(" (last state ", v1::JobState_Name(job.state()), ")") : ""));
  }
  context.Print(job, [&](std::ostream& out) { PrintJob(out, job); });
  if (job.state() == v1::FAILED || job.state() == v1::CANCELLED) {
    if (!context.json()) {
      std::cerr << "trainctl: job " << job.job_id() << " " << v1::JobState_Name(job.state())
                << (job.message().empty() ? "" : ": " + job.message()) << "\n";
    }
    context.set_success_exit_code(kExitJobFailed);
  }
  return absl::OkStatus();
}

absl::Status RunSubmit(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::JobSpec spec;
  if (flags.Has("artifact") == flags.Has("session")) return UsageError("give one of --artifact and --session");
  if (flags.Has("artifact")) spec.set_artifact_id(flags.String("artifact"));
  if (flags.Has("session")) spec.set_session_id(flags.String("session"));
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  spec.set_epochs(static_cast<int32_t>(flags.Int("epochs", 1, kMaxInt32).value_or(1)));
  spec.set_batch_size(static_cast<int32_t>(flags.Int("batch-size", 1, kMaxInt32).value_or(0)));
  if (!flags.Has("batch-size")) flags.AddError("--batch-size is required");
  if (auto seed = flags.Uint64("shuffle-seed")) spec.set_shuffle_seed(*seed);
  spec.set_drop_last(flags.Has("drop-last"));
  SchedulerFromFlags(flags, spec.mutable_scheduler());
  if (!spec.scheduler().has_linear_warmup_decay() && !spec.scheduler().has_constant_with_warmup() &&
      !spec.scheduler().has_cosine() && !spec.scheduler().has_step()) {
    spec.clear_scheduler();
  }
  spec.set_accuracy(flags.Has("accuracy"));
  spec.set_logits_output(flags.String("logits-output"));
  spec.set_label_input(flags.String("label-input"));
  if (!CheckpointPolicyFromFlags(flags, spec.mutable_checkpoint_policy())) spec.clear_checkpoint_policy();
  if (auto patience = flags.Int("early-stop-patience", 1, kMaxInt32)) {
    spec.mutable_early_stopping()->set_patience(static_cast<int32_t>(*patience));
  }
  if (auto delta = flags.Float("early-stop-min-delta", true)) {
    if (!flags.Has("early-stop-patience")) flags.AddError("--early-stop-min-delta needs --early-stop-patience");
    spec.mutable_early_stopping()->set_min_delta(*delta);
  }
  spec.set_display_name(flags.String("name"));
  if (auto threads = flags.Int("threads", 0, 4096)) spec.set_num_threads(static_cast<int32_t>(*threads));
  if (auto seed = flags.Uint64("seed")) spec.set_seed(*seed);
  if (flags.Has("device")) {
    const Device device = DeviceFromFlags(flags);
    spec.set_executor(device.executor);
    spec.set_device_index(device.index);
  }
  if (flags.Has("session") && (flags.Has("threads") || flags.Has("seed") || flags.Has("device"))) {
    flags.AddError("--threads, --seed and --device apply to a job on a new session (--artifact)");
  }
  const bool eval_split = flags.Has("eval-fraction");
  if (eval_split) {
    const std::optional<double> fraction = flags.Double("eval-fraction");
    if (fraction.has_value() && !(*fraction > 0 && *fraction < 1)) flags.AddError("--eval-fraction must be in (0, 1)");
    spec.set_eval_fraction(static_cast<float>(fraction.value_or(0)));
  }
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;

  absl::StatusOr<bool> train_data = DatasetFromFlags(context, kTrainData, spec.mutable_train_data());
  if (!train_data.ok()) return train_data.status();
  if (!*train_data) return UsageError("give the training data: --data FILE.npz, --data-input NAME=FILE.npy or --data-path PATH");
  v1::Dataset eval_data;
  absl::StatusOr<bool> has_eval_data = DatasetFromFlags(context, kEvalData, &eval_data);
  if (!has_eval_data.ok()) return has_eval_data.status();
  if (*has_eval_data && eval_split) return UsageError("give either eval data or --eval-fraction, not both");
  if (*has_eval_data) *spec.mutable_eval_data() = std::move(eval_data);

  v1::Job job;
  if (absl::Status status = context.Call(&Stub::SubmitJob, spec, &job); !status.ok()) return status;
  if (flags.Has("watch")) {
    if (!context.json()) context.out() << "job " << job.job_id() << " submitted\n";
    return Watch(context, job.job_id());
  }
  context.Print(job, [&](std::ostream& out) { PrintJob(out, job); });
  return absl::OkStatus();
}

absl::Status RunWatch(CommandContext& context) { return Watch(context, context.positional()[0]); }

void PrintJobs(std::ostream& out, const v1::ListJobsResponse& response) {
  std::vector<std::vector<std::string>> rows = {{"JOB", "STATE", "EPOCH", "STEP", "LOSS", "SESSION", "NAME"}};
  for (const v1::Job& job : response.jobs()) {
    rows.push_back({job.job_id(), v1::JobState_Name(job.state()),
                    absl::StrCat(std::min(job.epoch() + 1, job.epochs()), "/", job.epochs()),
                    absl::StrCat(job.step(), "/", job.total_steps()), job.step() > 0 ? FormatNumber(job.loss()) : "-",
                    OrDash(job.session_id()), OrDash(job.display_name())});
  }
  PrintTable(out, rows);
}

absl::Status RunList(CommandContext& context) {
  return context.CallAndPrint<v1::ListJobsRequest, v1::ListJobsResponse>(&Stub::ListJobs, v1::ListJobsRequest(),
                                                                          PrintJobs);
}

absl::Status RunShow(CommandContext& context) {
  v1::GetJobRequest request;
  request.set_job_id(context.positional()[0]);
  return context.CallAndPrint<v1::GetJobRequest, v1::Job>(&Stub::GetJob, request, PrintJob);
}

absl::Status RunCancel(CommandContext& context) {
  v1::CancelJobRequest request;
  request.set_job_id(context.positional()[0]);
  return context.CallAndPrint<v1::CancelJobRequest, v1::Job>(&Stub::CancelJob, request, PrintJob);
}

std::vector<FlagSpec> DatasetFlags(const DatasetFlagNames& names, const std::string& what) {
  return {
      {names.npz, "FILE.npz", what + ": a .npz of arrays named after the training inputs (uploaded)"},
      {names.npy, "NAME=FILE.npy", what + ": one .npy per training input (uploaded)", true},
      {names.path, "PATH", what + ": a .npz or a directory of <input>.npy under the daemon's --data_dir"},
  };
}

}  // namespace

std::vector<CommandSpec> JobCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "job submit", "", "start a training job over a dataset (SubmitJob); --watch follows it",
      "Trains a new session made from --artifact, or an existing --session, for --epochs over the dataset in\n"
      "batches of --batch-size, evaluating after every epoch on the eval data or --eval-fraction of the training\n"
      "data. Local files are uploaded by digest. JSON: the traind.v1.Job message (with --watch: the final one).\n"
      "examples:\n"
      "  trainctl job submit --artifact 3f2a... --data digits.npz --epochs 5 --batch-size 32 --eval-fraction 0.1 \\\n"
      "      --accuracy --shuffle-seed 1 --watch\n"
      "  trainctl job submit --session s1 --data-input input=x.npy --data-input target=y.npy --batch-size 64\n"
      "  trainctl job submit --artifact 3f2a... --data-path sensors/today.npz --epochs 1 --batch-size 16\n"
      "  trainctl job submit --artifact 3f2a... --data digits.npz --batch-size 32 --device gpu:0\n",
      Flags({{{"artifact", "ID", "train a new session made from this artifact set"},
              {"session", "ID", "train this existing session (busy until the job ends)"}},
             DatasetFlags(kTrainData, "training data"),
             DatasetFlags(kEvalData, "eval data"),
             {{"eval-fraction", "F", "hold back this fraction of the training data for evaluation"},
              {"epochs", "N", "passes over the data (default 1)"},
              {"batch-size", "B", "examples per step"},
              {"shuffle-seed", "N", "shuffle the examples every epoch with this seed (0: in order)"},
              {"drop-last", "", "drop a last partial batch"},
              {"accuracy", "", "also report eval accuracy (classification)"},
              {"logits-output", "NAME", "--accuracy: the output holding the logits"},
              {"label-input", "NAME", "--accuracy: the integer target input"},
              {"early-stop-patience", "N", "stop after N evaluations without improvement of the eval loss"},
              {"early-stop-min-delta", "F", "what counts as an improvement (default 0)"},
              {"name", "TEXT", "display name"},
              {"threads", "N", "--artifact: intra-op threads of the new session"},
              {"seed", "N", "--artifact: seed of the new session"},
              DeviceFlag(),
              {"watch", "", "follow the job until it ends (as 'job watch')"}},
             SchedulerFlags(),
             CheckpointPolicyFlags()}),
      0, 0, 600, RunSubmit});
  commands.push_back(CommandSpec{
      "job watch", "ID", "follow a job until it ends (WatchJob); exit 5 when it FAILED or was CANCELLED",
      "Progress: a bar with epoch, step, loss, learning rate, examples/s and ETA on a terminal; one line per update\n"
      "otherwise; eval results as lines. JSON: the final traind.v1.Job message only.\n",
      {}, 1, 1, 0, RunWatch});
  commands.push_back(CommandSpec{"job list", "", "the daemon's jobs (ListJobs)",
                                 "JSON: the traind.v1.ListJobsResponse message.\n", {}, 0, 0, 60, RunList});
  commands.push_back(CommandSpec{"job show", "ID", "one job's state, progress and evaluations (GetJob)",
                                 "JSON: the traind.v1.Job message.\n", {}, 1, 1, 60, RunShow});
  commands.push_back(CommandSpec{"job cancel", "ID", "cancel a job (CancelJob)", "JSON: the traind.v1.Job message.\n",
                                 {}, 1, 1, 60, RunCancel});
  return commands;
}

}  // namespace traind::cli
