#include "server/job_manager.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "engine/io/npz.h"
#include "server/logging.h"
#include "server/state_names.h"
#include "server/tenants.h"
#include "server/wire_convert.h"
#include "traind/internal/state.pb.h"

namespace traind {

using engine::NamedTensors;
using engine::Tensor;

namespace {

constexpr const char* kJobIdPrefix = "j-";
// The job's position in its data, kept in its session's checkpoint properties.
constexpr const char* kJobIdProperty = "traind.job.id";
constexpr const char* kEpochProperty = "traind.job.epoch";
constexpr const char* kBatchProperty = "traind.job.batch";
constexpr int32_t kMaxEpochs = 1'000'000;
constexpr int32_t kDefaultBatchSize = 32;
constexpr int64_t kMaxRecordBytes = 16 << 20;

double UnixNow() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

std::string JobsDirectory(const TenantSpace& space) { return space.directory + "/jobs"; }

// ---- Datasets ----

using Arrays = std::map<std::string, Tensor>;

absl::Status AddBytes(int64_t bytes, int64_t* total, const JobLimits& limits) {
  *total += bytes;
  if (*total > limits.max_dataset_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the dataset is larger than the limit of ", limits.max_dataset_bytes, " bytes"));
  }
  return absl::OkStatus();
}

// A path under one of the data directories, resolved (symlinks included) and checked to stay inside it.
absl::StatusOr<std::string> ResolveLocalPath(const std::string& relative, const JobLimits& limits) {
  if (limits.data_dirs.empty()) {
    return absl::FailedPreconditionError("this daemon has no --data_dir: local_path datasets are off");
  }
  if (relative.empty() || relative[0] == '/' || relative.size() > 4096 || absl::StrContains(relative, std::string(1, '\0'))) {
    return absl::InvalidArgumentError("local_path must be a non-empty path relative to a data directory");
  }
  for (const std::filesystem::path& part : std::filesystem::path(relative)) {
    if (part == "..") return absl::InvalidArgumentError("local_path must not contain '..'");
  }
  for (const std::string& dir : limits.data_dirs) {
    std::error_code error;
    const std::filesystem::path root = std::filesystem::canonical(dir, error);
    if (error) continue;
    const std::filesystem::path resolved = std::filesystem::weakly_canonical(root / relative, error);
    if (error || !std::filesystem::exists(resolved, error)) continue;
    const std::string root_text = root.string() + "/";
    if (!absl::StartsWith(resolved.string() + (std::filesystem::is_directory(resolved, error) ? "/" : ""),
                          root_text)) {
      return absl::InvalidArgumentError(absl::StrCat("local_path '", relative, "' leaves its data directory"));
    }
    return resolved.string();
  }
  return absl::NotFoundError(absl::StrCat("no data directory holds '", relative, "'"));
}

// Regular files only: a FIFO or a device would block or never end.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  return engine::ReadFileLimited(path, max_bytes);
}

absl::StatusOr<Arrays> LoadDataset(const TenantSpace& space, const v1::Dataset& dataset, const JobLimits& limits,
                                   const std::string& what) {
  engine::NpzLimits npz_limits;
  npz_limits.max_total_bytes = limits.max_dataset_bytes;
  Arrays arrays;
  int64_t total = 0;
  switch (dataset.source_case()) {
    case v1::Dataset::kNpzBlobId: {
      TRAIND_ASSIGN_OR_RETURN(const std::string bytes, space.blobs->Read(dataset.npz_blob_id()));
      return engine::ParseNpz(bytes, npz_limits, what);
    }
    case v1::Dataset::kNpyBlobs: {
      for (const auto& [name, blob] : dataset.npy_blobs().blob_ids()) {
        TRAIND_ASSIGN_OR_RETURN(const std::string bytes, space.blobs->Read(blob));
        TRAIND_RETURN_IF_ERROR(AddBytes(static_cast<int64_t>(bytes.size()), &total, limits));
        TRAIND_ASSIGN_OR_RETURN(arrays[name], engine::ParseNpy(bytes, absl::StrCat(what, " array '", name, "'")));
      }
      return arrays;
    }
    case v1::Dataset::kLocalPath: {
      TRAIND_ASSIGN_OR_RETURN(const std::string path, ResolveLocalPath(dataset.local_path(), limits));
      std::error_code error;
      if (!std::filesystem::is_directory(path, error)) {
        TRAIND_ASSIGN_OR_RETURN(const std::string bytes, ReadRegularFile(path, limits.max_dataset_bytes));
        return engine::ParseNpz(bytes, npz_limits, what);
      }
      for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
        const std::string file = entry.path().filename().string();
        if (!absl::EndsWith(file, ".npy")) continue;
        TRAIND_ASSIGN_OR_RETURN(const std::string bytes, ReadRegularFile(entry.path().string(), limits.max_dataset_bytes));
        TRAIND_RETURN_IF_ERROR(AddBytes(static_cast<int64_t>(bytes.size()), &total, limits));
        TRAIND_ASSIGN_OR_RETURN(arrays[file.substr(0, file.size() - 4)], engine::ParseNpy(bytes, file));
      }
      return arrays;
    }
    case v1::Dataset::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " names no data: give npz_blob_id, npy_blobs or local_path"));
}

// The examples `rows` of every array, in that order.
absl::StatusOr<NamedTensors> Gather(const Arrays& arrays, const std::vector<std::string>& names,
                                    const std::vector<int64_t>& rows) {
  NamedTensors batch;
  batch.reserve(names.size());
  for (const std::string& name : names) {
    const Tensor& source = arrays.at(name);
    engine::Shape shape = source.shape();
    const int64_t row_bytes = source.dim(0) == 0 ? 0 : static_cast<int64_t>(source.byte_size()) / source.dim(0);
    shape[0] = static_cast<int64_t>(rows.size());
    TRAIND_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Allocate(source.dtype(), shape));
    char* out = static_cast<char*>(gathered.mutable_raw_data());
    const char* in = static_cast<const char*>(source.raw_data());
    for (size_t r = 0; r < rows.size(); ++r) std::memcpy(out + r * row_bytes, in + rows[r] * row_bytes, row_bytes);
    batch.emplace_back(name, std::move(gathered));
  }
  return batch;
}

// The order of epoch `epoch`: a pure function of the seed and the epoch (so a resumed job sees the same batches).
std::vector<int64_t> EpochOrder(int64_t examples, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(examples);
  std::iota(order.begin(), order.end(), 0);
  if (seed == 0) return order;
  std::mt19937_64 random(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch));
  for (int64_t i = examples - 1; i > 0; --i) {
    std::swap(order[i], order[std::uniform_int_distribution<int64_t>(0, i)(random)]);
  }
  return order;
}

int64_t PropertyInt(const engine::PropertyBag& properties, const char* name, int64_t fallback) {
  auto it = properties.find(name);
  if (it == properties.end()) return fallback;
  const int64_t* value = std::get_if<int64_t>(&it->second);
  return value ? *value : fallback;
}

}  // namespace

struct JobManager::Job {
  std::string id;
  std::string tenant;
  std::string record_path;
  Caller caller;  // the job's own calls on its session
  std::atomic<bool> cancel{false};
  std::atomic<bool> stop{false};
  std::thread thread;

  // The data, split and validated against the session's inputs.
  Arrays train, eval;
  int64_t train_examples = 0, eval_examples = 0;
  std::vector<std::string> input_names;  // the session's training inputs, in order
  int64_t batch_size = 0;
  bool drop_last = false;
  std::string logits_output, label_input;  // for accuracy

  mutable absl::Mutex mu;
  v1::Job state ABSL_GUARDED_BY(mu);
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  // For Mutex::Await: the job's version is past `after`.
  struct VersionWait {
    const Job* job;
    int64_t after;
  };
  static bool VersionPast(VersionWait* wait) ABSL_NO_THREAD_SAFETY_ANALYSIS { return wait->job->version > wait->after; }
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return IsTerminal(state.state()); }
};

bool JobManager::IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED || state == v1::STOPPED_EARLY;
}

JobManager::JobManager(SessionManager* sessions, TenantSpaces* spaces, JobLimits limits)
    : sessions_(sessions), spaces_(spaces), limits_(std::move(limits)) {}

JobManager::~JobManager() { Stop(); }

void JobManager::Stop() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const auto& job : jobs) job->stop = true;
  for (const auto& job : jobs) {
    if (job->thread.joinable()) job->thread.join();
    // Wake watchers: they see the daemon stopping.
    Publish(*job, [](v1::Job&) {});
  }
}

absl::Status JobManager::Persist(const Job& job) const {
  internal::JobRecord record;
  {
    absl::MutexLock lock(&job.mu);
    *record.mutable_job() = job.state;
  }
  const std::string proto = record.SerializeAsString();
  return engine::WriteFileAtomically(job.record_path, absl::StrCat(engine::Sha256Hex(proto), "\n", proto));
}

void JobManager::Publish(Job& job, const std::function<void(v1::Job&)>& update) {
  absl::MutexLock lock(&job.mu);
  update(job.state);
  job.state.set_updated_time(UnixNow());
  ++job.version;
}

absl::StatusOr<std::shared_ptr<JobManager::Job>> JobManager::Find(const Caller& caller,
                                                                  const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second->tenant != caller.tenant) {
    return absl::NotFoundError(absl::StrCat("no job '", absl::CHexEscape(job_id.substr(0, kMaxNameLength)), "'"));
  }
  return it->second;
}

// Checks the data against the session's inputs and splits off the eval part; fills the job's data fields.
static absl::Status PrepareData(const v1::JobSpec& spec, const SessionInfo& session,
                                Arrays train, std::optional<Arrays> eval_data, uint64_t split_seed,
                                std::vector<std::string>* input_names, Arrays* train_out, Arrays* eval_out,
                                int64_t* batch_size, bool* drop_last, std::string* logits, std::string* label) {
  int64_t static_batch = -1;
  auto check = [&](const Arrays& arrays, const char* which, int64_t* examples) -> absl::Status {
    *examples = -1;
    for (const engine::GraphValue& input : session.training_inputs) {
      auto it = arrays.find(input.name);
      if (it == arrays.end()) {
        return absl::InvalidArgumentError(absl::StrCat("the ", which, " data has no array '", input.name,
                                                       "' (the session's training inputs are its arrays)"));
      }
      const Tensor& array = it->second;
      if (array.dtype() != input.dtype) {
        return absl::InvalidArgumentError(absl::StrCat("the ", which, " array '", input.name, "' is ",
                                                       engine::DataTypeName(array.dtype()), ", the input ",
                                                       engine::DataTypeName(input.dtype)));
      }
      if (array.rank() < 1 || (input.has_shape && array.rank() != static_cast<int64_t>(input.dims.size()))) {
        return absl::InvalidArgumentError(absl::StrCat("the ", which, " array '", input.name, "' has shape ",
                                                       engine::ShapeToString(array.shape()), ", the input ",
                                                       engine::ShapeToString(input.dims)));
      }
      for (size_t d = 1; input.has_shape && d < input.dims.size(); ++d) {
        if (input.dims[d] >= 0 && input.dims[d] != array.dim(d)) {
          return absl::InvalidArgumentError(absl::StrCat("the ", which, " array '", input.name, "' has shape ",
                                                         engine::ShapeToString(array.shape()), ", the input ",
                                                         engine::ShapeToString(input.dims)));
        }
      }
      if (input.has_shape && !input.dims.empty() && input.dims[0] >= 0) static_batch = input.dims[0];
      if (*examples >= 0 && array.dim(0) != *examples) {
        return absl::InvalidArgumentError(absl::StrCat("the ", which, " arrays disagree on the number of examples (",
                                                       *examples, " and ", array.dim(0), ")"));
      }
      *examples = array.dim(0);
    }
    return absl::OkStatus();
  };
  int64_t examples = 0;
  TRAIND_RETURN_IF_ERROR(check(train, "training", &examples));
  for (const engine::GraphValue& input : session.training_inputs) input_names->push_back(input.name);
  // A model with a fixed batch dimension takes batches of exactly that size.
  *batch_size = spec.batch_size() > 0 ? spec.batch_size() : (static_batch > 0 ? static_batch : kDefaultBatchSize);
  if (static_batch > 0 && *batch_size != static_batch) {
    return absl::InvalidArgumentError(absl::StrCat("the model takes batches of exactly ", static_batch,
                                                   " examples; batch_size is ", *batch_size));
  }
  *drop_last = spec.drop_last() || static_batch > 0;
  if (eval_data) {
    int64_t eval_examples = 0;
    TRAIND_RETURN_IF_ERROR(check(*eval_data, "eval", &eval_examples));
    *eval_out = std::move(*eval_data);
    *train_out = std::move(train);
  } else if (spec.eval_fraction() > 0) {
    const int64_t held = static_cast<int64_t>(std::floor(spec.eval_fraction() * static_cast<double>(examples)));
    if (held < 1 || held >= examples) {
      return absl::InvalidArgumentError(absl::StrCat("eval_fraction ", spec.eval_fraction(), " of ", examples,
                                                     " examples leaves no eval or no training example"));
    }
    // The held-back examples: the last ones after a seeded shuffle (the same on every resume).
    const std::vector<int64_t> order = EpochOrder(examples, split_seed == 0 ? 1 : split_seed, -1);
    const std::vector<int64_t> kept(order.begin(), order.end() - held), held_back(order.end() - held, order.end());
    TRAIND_ASSIGN_OR_RETURN(NamedTensors train_part, Gather(train, *input_names, kept));
    TRAIND_ASSIGN_OR_RETURN(NamedTensors eval_part, Gather(train, *input_names, held_back));
    for (auto& [name, tensor] : train_part) (*train_out)[name] = std::move(tensor);
    for (auto& [name, tensor] : eval_part) (*eval_out)[name] = std::move(tensor);
  } else {
    *train_out = std::move(train);
  }
  const int64_t train_examples = train_out->begin()->second.dim(0);
  if (train_examples < (*drop_last ? *batch_size : 1)) {
    return absl::InvalidArgumentError(absl::StrCat("the training data has ", train_examples,
                                                   " examples, fewer than one batch of ", *batch_size));
  }
  if (spec.accuracy()) {
    *logits = spec.logits_output().empty() && session.eval_output_names.size() > 1 ? session.eval_output_names[1]
                                                                                   : spec.logits_output();
    if (std::find(session.eval_output_names.begin(), session.eval_output_names.end(), *logits) ==
            session.eval_output_names.end() ||
        *logits == "loss") {
      return absl::InvalidArgumentError(
          "accuracy needs the logits: name an additional output of the eval model in logits_output");
    }
    *label = spec.label_input();
    if (label->empty()) {
      for (const engine::GraphValue& input : session.training_inputs) {
        if (input.dtype == engine::DataType::kInt64) {
          if (!label->empty()) return absl::InvalidArgumentError("accuracy: name the label input in label_input");
          *label = input.name;
        }
      }
    }
    if (std::find(input_names->begin(), input_names->end(), *label) == input_names->end()) {
      return absl::InvalidArgumentError("accuracy needs integer class labels: name them in label_input");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobManager::Submit(const Caller& caller, int64_t tenant_max_jobs, const v1::JobSpec& spec) {
  if (spec.epochs() < 1 || spec.epochs() > kMaxEpochs) {
    return absl::InvalidArgumentError(absl::StrCat("epochs must be in [1, ", kMaxEpochs, "]"));
  }
  if (spec.batch_size() < 0) return absl::InvalidArgumentError("batch_size must be >= 0 (0: the model's or 32)");
  if (spec.has_eval_fraction() && !(spec.eval_fraction() > 0 && spec.eval_fraction() < 1)) {
    return absl::InvalidArgumentError("eval_fraction must be in (0, 1)");
  }
  if (spec.early_stopping().patience() < 0) return absl::InvalidArgumentError("early_stopping.patience must be >= 0");
  if (spec.early_stopping().patience() > 0 && !spec.has_eval_data() && !spec.has_eval_fraction()) {
    return absl::InvalidArgumentError("early stopping needs eval data (eval_data or eval_fraction)");
  }
  if (spec.display_name().size() > 256) return absl::InvalidArgumentError("display_name is longer than 256 bytes");
  if (spec.target_case() == v1::JobSpec::TARGET_NOT_SET) {
    return absl::InvalidArgumentError("give the job an artifact_id or a session_id");
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the daemon is shutting down");
    int64_t active = 0, tenant_active = 0;
    for (const auto& [id, job] : jobs_) {
      absl::MutexLock job_lock(&job->mu);
      if (IsTerminal(job->state.state())) continue;
      ++active;
      tenant_active += job->tenant == caller.tenant;
    }
    if (active >= limits_.max_concurrent_jobs) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the daemon already runs its maximum of ", limits_.max_concurrent_jobs, " jobs"));
    }
    if (tenant_max_jobs > 0 && tenant_active >= tenant_max_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat("tenant '", caller.tenant, "' already runs its quota of ",
                                                       tenant_max_jobs, " jobs"));
    }
  }
  TRAIND_ASSIGN_OR_RETURN(TenantSpace * space, spaces_->Get(caller.tenant));
  TRAIND_ASSIGN_OR_RETURN(Arrays train, LoadDataset(*space, spec.train_data(), limits_, "the training data"));
  std::optional<Arrays> eval_data;
  if (spec.has_eval_data()) {
    TRAIND_ASSIGN_OR_RETURN(eval_data, LoadDataset(*space, spec.eval_data(), limits_, "the eval data"));
  }

  auto job = std::make_shared<Job>();
  job->id = NewRandomId(kJobIdPrefix);
  job->tenant = caller.tenant;
  job->record_path = absl::StrCat(JobsDirectory(*space), "/", job->id);
  std::string session_id = spec.session_id();
  if (spec.target_case() == v1::JobSpec::kArtifactId) {
    SessionSettings settings;
    settings.display_name = spec.display_name().empty() ? "job " + job->id : spec.display_name();
    settings.origin.artifact_id = spec.artifact_id();
    settings.num_threads = spec.num_threads();
    settings.seed = spec.seed();
    settings.gpu = spec.executor() == v1::GPU;
    settings.device_index = spec.device_index();
    if (spec.has_checkpoint_policy()) {
      settings.checkpoint_policy =
          CheckpointPolicy{spec.checkpoint_policy().every_steps(), spec.checkpoint_policy().every_seconds()};
    }
    TRAIND_ASSIGN_OR_RETURN(SessionModels models, space->artifacts->Load(spec.artifact_id()));
    TRAIND_ASSIGN_OR_RETURN(SessionInfo created, sessions_->Create(caller, std::move(models), settings));
    session_id = created.session_id;
  }
  TRAIND_ASSIGN_OR_RETURN(const SessionInfo session, sessions_->Get(caller, session_id));
  if (spec.target_case() == v1::JobSpec::kSessionId && spec.executor() != v1::EXECUTOR_UNSPECIFIED) {
    const bool gpu = spec.executor() == v1::GPU;
    if (gpu != session.gpu || (gpu && spec.device_index() != session.device_index)) {
      auto device = [](bool on_gpu, int index) { return on_gpu ? absl::StrCat("gpu:", index) : std::string("cpu"); };
      return absl::FailedPreconditionError(absl::StrCat(
          "session '", session_id, "' runs on ", device(session.gpu, session.device_index), ", not ",
          device(gpu, spec.device_index()), ": a job trains a session where it is (leave executor unset)"));
    }
  }
  absl::Status prepared = [&]() -> absl::Status {
    if (!session.has_optimizer) {
      return absl::FailedPreconditionError(absl::StrCat("session '", session_id, "' has no optimizer model"));
    }
    if ((spec.has_eval_data() || spec.has_eval_fraction()) && !session.has_eval_model) {
      return absl::FailedPreconditionError(absl::StrCat("session '", session_id, "' has no eval model to evaluate"));
    }
    return PrepareData(spec, session, std::move(train), std::move(eval_data), spec.shuffle_seed(),
                       &job->input_names, &job->train, &job->eval, &job->batch_size, &job->drop_last,
                       &job->logits_output, &job->label_input);
  }();
  job->train_examples = prepared.ok() ? job->train.begin()->second.dim(0) : 0;
  job->eval_examples = job->eval.empty() ? 0 : job->eval.begin()->second.dim(0);
  const int64_t per_epoch =
      job->drop_last ? job->train_examples / std::max<int64_t>(1, job->batch_size)
                     : (job->train_examples + job->batch_size - 1) / std::max<int64_t>(1, job->batch_size);
  const int64_t total_steps = per_epoch * spec.epochs();
  // The schedule covers the whole job (a total of 0 steps means "the job's"); it is set once, now, and lives in
  // the session's checkpoints after that.
  std::optional<engine::LearningRateScheduler> schedule;
  if (prepared.ok() && spec.has_scheduler()) {
    v1::SchedulerSpec scheduler = spec.scheduler();
    if (scheduler.has_linear_warmup_decay() && scheduler.linear_warmup_decay().total_steps() == 0) {
      scheduler.mutable_linear_warmup_decay()->set_total_steps(total_steps);
    }
    if (scheduler.has_cosine() && scheduler.cosine().total_steps() == 0) {
      scheduler.mutable_cosine()->set_total_steps(total_steps);
    }
    absl::StatusOr<std::optional<engine::LearningRateScheduler>> made = SchedulerFromWire(scheduler);
    if (made.ok()) {
      schedule = *std::move(made);
    } else {
      prepared = made.status();
    }
  }
  if (!prepared.ok()) {
    // A session made for this job goes with it.
    if (spec.target_case() == v1::JobSpec::kArtifactId) sessions_->Close(caller, session_id).IgnoreError();
    return prepared;
  }
  {
    absl::MutexLock lock(&job->mu);
    v1::Job& state = job->state;
    state.set_job_id(job->id);
    state.set_session_id(session_id);
    state.set_display_name(spec.display_name());
    state.set_state(v1::QUEUED);
    state.set_epochs(spec.epochs());
    state.set_total_steps(total_steps);
    state.set_eta_seconds(-1);
    state.set_created_time(UnixNow());
    state.set_updated_time(state.created_time());
    *state.mutable_spec() = spec;
    state.set_tenant(caller.tenant);
  }
  if (schedule) {
    SchedulerRequest request;
    request.scheduler = std::move(schedule);
    TRAIND_RETURN_IF_ERROR(sessions_->SetScheduler(caller, session_id, request).status());
  }
  std::error_code error;
  std::filesystem::create_directories(JobsDirectory(*space), error);
  TRAIND_RETURN_IF_ERROR(Persist(*job));
  v1::Job snapshot;
  {
    absl::MutexLock lock(&job->mu);
    snapshot = job->state;
  }
  Start(std::move(job));
  return snapshot;
}

void JobManager::Start(std::shared_ptr<Job> job) {
  job->caller.tenant = job->tenant;
  job->caller.bypass_admission = true;  // bounded by max_concurrent_jobs; a job's step is never turned away
  Job* raw = job.get();
  job->caller.cancelled = [raw] { return raw->cancel.load() || raw->stop.load(); };
  {
    absl::MutexLock lock(&mu_);
    jobs_[job->id] = job;
  }
  job->thread = std::thread([this, raw] { Run(*raw); });
}

void JobManager::Run(Job& job) {
  Publish(job, [](v1::Job& state) { state.set_state(v1::RUNNING); });
  const absl::Status trained = Train(job);
  if (job.stop && !job.cancel) return;  // the daemon stops: the job resumes at the next start
  Publish(job, [&](v1::Job& state) {
    if (job.cancel) {
      state.set_state(v1::CANCELLED);
      state.set_message("cancelled");
    } else if (!trained.ok()) {
      state.set_state(v1::FAILED);
      state.set_message(std::string(trained.message()));
    } else if (state.state() == v1::RUNNING) {
      state.set_state(v1::SUCCEEDED);
    }
    state.set_eta_seconds(0);
  });
  // Whatever the end, the session keeps (and saves) what the job taught it.
  std::string session_id;
  {
    absl::MutexLock lock(&job.mu);
    session_id = job.state.session_id();
  }
  sessions_->Checkpoint(job.caller, session_id).IgnoreError();
  if (absl::Status persisted = Persist(job); !persisted.ok()) {
    LogError("job record not written", {{"job", job.id}, {"error", std::string(persisted.message())}});
  }
}

absl::Status JobManager::Train(Job& job) {
  v1::JobSpec spec;
  std::string session_id;
  int64_t already_evaluated = 0;
  {
    absl::MutexLock lock(&job.mu);
    spec = job.state.spec();
    session_id = job.state.session_id();
    already_evaluated = job.state.evals_size();
  }
  // Where the job is: its position as the session's last checkpoint recorded it (a resumed job), else the start.
  TRAIND_ASSIGN_OR_RETURN(const SessionInfo session, sessions_->Get(job.caller, session_id));
  int64_t epoch = 0, next_batch = 0;
  if (auto it = session.properties.find(kJobIdProperty);
      it != session.properties.end() && std::get_if<std::string>(&it->second) &&
      std::get<std::string>(it->second) == job.id) {
    epoch = PropertyInt(session.properties, kEpochProperty, 0);
    next_batch = PropertyInt(session.properties, kBatchProperty, 0);
  }
  // The eval history is in the record; an eval the session's last checkpoint does not know of (a restart between
  // the record and the checkpoint) is dropped, and that epoch evaluated again.
  if (already_evaluated > epoch) {
    absl::MutexLock lock(&job.mu);
    while (job.state.evals_size() > epoch) job.state.mutable_evals()->RemoveLast();
  }
  const int64_t batch = job.batch_size;
  const int64_t per_epoch =
      job.drop_last ? job.train_examples / batch : (job.train_examples + batch - 1) / batch;
  std::deque<std::pair<absl::Time, int64_t>> recent;  // (when, examples) of the last steps, for examples/s
  for (; epoch < spec.epochs(); ++epoch, next_batch = 0) {
    const std::vector<int64_t> order = EpochOrder(job.train_examples, spec.shuffle_seed(), epoch);
    Publish(job, [&](v1::Job& state) { state.set_epoch(static_cast<int32_t>(epoch)); });
    for (int64_t b = next_batch; b < per_epoch; ++b) {
      if (job.cancel || job.stop) return absl::CancelledError("stopped");
      const int64_t begin = b * batch, end = std::min(job.train_examples, begin + batch);
      TRAIND_ASSIGN_OR_RETURN(
          NamedTensors inputs,
          Gather(job.train, job.input_names, std::vector<int64_t>(order.begin() + begin, order.begin() + end)));
      // The position after this step travels with the state the step produces. After the last batch it is
      // (epoch, per_epoch): trained but not yet evaluated, so a job resumed there evaluates the epoch first.
      const engine::PropertyBag position = {
          {kJobIdProperty, job.id}, {kEpochProperty, epoch}, {kBatchProperty, b + 1}};
      absl::StatusOr<TrainStepResult> step =
          sessions_->TrainStep(job.caller, session_id, inputs, /*accumulate_only=*/false, {}, &position);
      if (!step.ok()) {
        if (job.cancel || job.stop) return absl::CancelledError("stopped");
        return step.status();
      }
      const absl::Time now = absl::Now();
      recent.emplace_back(now, end - begin);
      if (recent.size() > 20) recent.pop_front();
      double rate = 0;
      if (recent.size() > 1) {
        int64_t examples = 0;
        for (size_t i = 1; i < recent.size(); ++i) examples += recent[i].second;
        rate = examples / std::max(1e-9, absl::ToDoubleSeconds(now - recent.front().first));
      }
      Publish(job, [&](v1::Job& state) {
        state.set_step(state.step() + 1);
        state.set_loss(step->loss);
        state.set_learning_rate(step->learning_rate);
        state.set_examples_per_second(rate);
        const int64_t remaining = state.total_steps() - (epoch * per_epoch + b + 1);
        state.set_eta_seconds(rate > 0 ? remaining * static_cast<double>(batch) / rate : -1);
      });
    }
    if (job.eval_examples == 0) continue;
    // Evaluate the epoch: loss weighted by batch size, accuracy over every example.
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    const int64_t eval_batches = job.drop_last ? job.eval_examples / batch : (job.eval_examples + batch - 1) / batch;
    std::vector<std::string> fetch;
    if (!job.logits_output.empty()) fetch.push_back(job.logits_output);
    for (int64_t b = 0; b < eval_batches; ++b) {
      if (job.cancel || job.stop) return absl::CancelledError("stopped");
      std::vector<int64_t> rows;
      for (int64_t r = b * batch; r < std::min(job.eval_examples, (b + 1) * batch); ++r) rows.push_back(r);
      TRAIND_ASSIGN_OR_RETURN(NamedTensors inputs, Gather(job.eval, job.input_names, rows));
      TRAIND_ASSIGN_OR_RETURN(EvalResult result, sessions_->Eval(job.caller, session_id, inputs, fetch));
      loss_sum += static_cast<double>(result.loss) * static_cast<double>(rows.size());
      seen += static_cast<int64_t>(rows.size());
      if (!fetch.empty()) {
        const Tensor& logits = result.outputs[0].second;
        const Tensor* labels = nullptr;
        for (const auto& [name, tensor] : inputs) {
          if (name == job.label_input) labels = &tensor;
        }
        if (logits.dtype() != engine::DataType::kFloat32 || logits.rank() != 2 || labels == nullptr ||
            logits.dim(0) != static_cast<int64_t>(rows.size())) {
          return absl::FailedPreconditionError(absl::StrCat("accuracy needs float logits [N, C] in '",
                                                            job.logits_output, "', got ", logits.DebugString()));
        }
        const int64_t classes = logits.dim(1);
        for (int64_t r = 0; r < logits.dim(0); ++r) {
          const float* row = logits.data<float>() + r * classes;
          correct += (std::max_element(row, row + classes) - row) == labels->data<int64_t>()[r];
        }
      }
    }
    v1::EvalMetrics metrics;
    metrics.set_epoch(static_cast<int32_t>(epoch));
    metrics.set_loss(static_cast<float>(loss_sum / std::max<int64_t>(1, seen)));
    metrics.set_accuracy(fetch.empty() ? std::numeric_limits<float>::quiet_NaN()
                                       : static_cast<float>(correct) / static_cast<float>(std::max<int64_t>(1, seen)));
    metrics.set_examples(seen);
    bool stop_early = false;
    Publish(job, [&](v1::Job& state) {
      *state.add_evals() = metrics;
      const int patience = spec.early_stopping().patience();
      if (patience <= 0 || state.evals_size() <= patience) return;
      // Stop when none of the last `patience` evals improved on the best before them by min_delta.
      float best_before = std::numeric_limits<float>::infinity();
      for (int i = 0; i < state.evals_size() - patience; ++i) best_before = std::min(best_before, state.evals(i).loss());
      bool improved = false;
      for (int i = state.evals_size() - patience; i < state.evals_size(); ++i) {
        improved |= state.evals(i).loss() < best_before - spec.early_stopping().min_delta();
      }
      if (!improved) {
        state.set_state(v1::STOPPED_EARLY);
        state.set_message(absl::StrCat("the eval loss did not improve for ", patience, " evaluations"));
        stop_early = true;
      }
    });
    // The record (with this eval) first, then the session's move to the next epoch: a restart between the two
    // finds the eval history one epoch ahead of the session, drops that eval and evaluates the same state again.
    if (absl::Status persisted = Persist(job); !persisted.ok()) return persisted;
    const engine::PropertyBag next = {{kJobIdProperty, job.id}, {kEpochProperty, epoch + 1}, {kBatchProperty, int64_t{0}}};
    TRAIND_RETURN_IF_ERROR(sessions_->UpdateProperties(job.caller, session_id, next, {}).status());
    TRAIND_RETURN_IF_ERROR(sessions_->Checkpoint(job.caller, session_id));
    if (stop_early) return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::map<std::pair<std::string, v1::JobState>, int64_t> JobManager::CountByState() const {
  std::map<std::pair<std::string, v1::JobState>, int64_t> counts;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, job] : jobs_) {
    absl::MutexLock job_lock(&job->mu);
    ++counts[{job->tenant, job->state.state()}];
  }
  return counts;
}

absl::StatusOr<v1::Job> JobManager::Get(const Caller& caller, const std::string& job_id) const {
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(caller, job_id));
  absl::MutexLock lock(&job->mu);
  return job->state;
}

std::vector<v1::Job> JobManager::List(const Caller& caller) const {
  std::vector<v1::Job> jobs;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, job] : jobs_) {
    if (job->tenant != caller.tenant) continue;
    absl::MutexLock job_lock(&job->mu);
    jobs.push_back(job->state);
  }
  return jobs;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const Caller& caller, const std::string& job_id) {
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(caller, job_id));
  job->cancel = true;
  // The runner stops between two steps and records the end; wait for it (a finished job answers at once).
  absl::MutexLock lock(&job->mu);
  job->mu.AwaitWithTimeout(absl::Condition(job.get(), &Job::Ended), absl::Seconds(60));
  return job->state;
}

absl::StatusOr<std::pair<v1::Job, int64_t>> JobManager::Wait(const Caller& caller, const std::string& job_id,
                                                             int64_t after_version, absl::Time deadline) const {
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(caller, job_id));
  {
    absl::MutexLock lock(&job->mu);
    Job::VersionWait wait{job.get(), after_version};
    job->mu.AwaitWithDeadline(absl::Condition(&Job::VersionPast, &wait), deadline);
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the daemon is shutting down; the job resumes when it restarts");
  }
  absl::MutexLock lock(&job->mu);
  return std::make_pair(job->state, job->version);
}

void JobManager::RestoreAll() {
  std::vector<std::string> tenants = {""};
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(spaces_->state_dir() + "/tenants", error)) {
    if (entry.is_directory()) tenants.push_back(entry.path().filename().string());
  }
  int resumed = 0;
  for (const std::string& tenant : tenants) {
    absl::StatusOr<TenantSpace*> space = spaces_->Get(tenant);
    if (!space.ok()) continue;
    for (const auto& entry : std::filesystem::directory_iterator(JobsDirectory(**space), error)) {
      const std::string path = entry.path().string();
      if (absl::StrContains(path, ".tmp.")) {
        std::filesystem::remove(entry.path(), error);
        continue;
      }
      absl::StatusOr<std::string> bytes = engine::ReadFileLimited(path, kMaxRecordBytes);
      internal::JobRecord record;
      const size_t newline = bytes.ok() ? bytes->find('\n') : std::string::npos;
      if (newline == std::string::npos ||
          engine::Sha256Hex(absl::string_view(*bytes).substr(newline + 1)) != bytes->substr(0, newline) ||
          !record.ParseFromArray(bytes->data() + newline + 1, static_cast<int>(bytes->size() - newline - 1)) ||
          record.job().job_id() != entry.path().filename().string()) {
        LogError("job record damaged", {{"path", path}});
        continue;
      }
      auto job = std::make_shared<Job>();
      job->id = record.job().job_id();
      job->tenant = tenant;
      job->record_path = path;
      {
        absl::MutexLock lock(&job->mu);
        job->state = record.job();
      }
      if (IsTerminal(record.job().state())) {
        absl::MutexLock lock(&mu_);
        jobs_[job->id] = job;  // history, for GetJob and ListJobs
        continue;
      }
      // Reload and re-check its data against its session, which the session store has brought back.
      const v1::JobSpec& spec = record.job().spec();
      Caller caller{tenant, nullptr, 0};
      absl::Status ready = [&]() -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(Arrays train, LoadDataset(**space, spec.train_data(), limits_, "the training data"));
        std::optional<Arrays> eval_data;
        if (spec.has_eval_data()) {
          TRAIND_ASSIGN_OR_RETURN(eval_data, LoadDataset(**space, spec.eval_data(), limits_, "the eval data"));
        }
        TRAIND_ASSIGN_OR_RETURN(const SessionInfo session, sessions_->Get(caller, record.job().session_id()));
        TRAIND_RETURN_IF_ERROR(PrepareData(spec, session, std::move(train), std::move(eval_data),
                                           spec.shuffle_seed(), &job->input_names, &job->train, &job->eval,
                                           &job->batch_size, &job->drop_last, &job->logits_output,
                                           &job->label_input));
        job->train_examples = job->train.begin()->second.dim(0);
        job->eval_examples = job->eval.empty() ? 0 : job->eval.begin()->second.dim(0);
        return absl::OkStatus();
      }();
      {
        absl::MutexLock lock(&job->mu);
        job->state.set_resumed(job->state.resumed() + 1);
        if (!ready.ok()) {
          job->state.set_state(v1::FAILED);
          job->state.set_message(absl::StrCat("could not resume: ", ready.message()));
        }
      }
      if (!ready.ok()) {
        Persist(*job).IgnoreError();
        absl::MutexLock lock(&mu_);
        jobs_[job->id] = job;
        continue;
      }
      ++resumed;
      Start(std::move(job));
    }
  }
  if (resumed > 0) LogInfo("jobs resumed", {{"jobs", std::to_string(resumed)}});
}

}  // namespace traind
