#include "server/session_manager.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"
#include "engine/training/module.h"
#include "server/logging.h"
#include "server/state_names.h"

namespace traind {

using engine::NamedTensors;
using engine::Tensor;

namespace {

constexpr const char* kSessionIdPrefix = "s-";
constexpr const char* kForwardHandlePrefix = "f-";
// Ended forward handles remembered per session, so that reusing one is FAILED_PRECONDITION rather than NOT_FOUND.
constexpr size_t kRememberedEndedForwards = 1024;
// Properties are client data kept in memory and in every checkpoint: bounded like everything else.
constexpr size_t kMaxProperties = 1024;
constexpr size_t kMaxPropertyNameLength = 256;
constexpr size_t kMaxPropertyStringBytes = 64 * 1024;

absl::StatusOr<Tensor> DeepCopy(const Tensor& tensor) {
  TRAIND_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(tensor.dtype(), tensor.shape()));
  if (tensor.byte_size() > 0) std::memcpy(copy.mutable_raw_data(), tensor.raw_data(), tensor.byte_size());
  return copy;
}

absl::StatusOr<float> ScalarLoss(const Tensor& loss) {
  if (loss.num_elements() != 1) return absl::InternalError(absl::StrCat("the loss is ", loss.DebugString()));
  if (loss.dtype() == engine::DataType::kFloat32) return *loss.data<float>();
  if (loss.dtype() == engine::DataType::kFloat64) return static_cast<float>(*loss.data<double>());
  return absl::InternalError(absl::StrCat("the loss is ", loss.DebugString()));
}

// The requested outputs, in request order, copied: the run's tensors may share buffers with the session's state,
// which the next call changes while the caller is still encoding the response.
absl::StatusOr<NamedTensors> SelectOutputs(const NamedTensors& outputs, const std::vector<std::string>& fetch) {
  NamedTensors selected;
  selected.reserve(fetch.size());
  for (const std::string& name : fetch) {
    for (const auto& [output_name, tensor] : outputs) {
      if (output_name != name) continue;
      TRAIND_ASSIGN_OR_RETURN(Tensor copy, DeepCopy(tensor));
      selected.emplace_back(name, std::move(copy));
      break;
    }
  }
  return selected;
}

// Unknown or repeated names in `fetch` are the caller's error, named.
absl::Status CheckFetch(const std::vector<std::string>& fetch, const std::vector<std::string>& available,
                        const char* model) {
  std::set<std::string> seen;
  for (const std::string& name : fetch) {
    if (std::find(available.begin(), available.end(), name) == available.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown output '", name, "'; the ", model, " model has: ",
                                                     absl::StrJoin(available, ", ")));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "' requested twice"));
    }
  }
  return absl::OkStatus();
}

// Rows [begin, begin + count) of a tensor's first dimension, copied.
absl::StatusOr<Tensor> Rows(const Tensor& tensor, int64_t begin, int64_t count) {
  engine::Shape shape = tensor.shape();
  const size_t row_bytes = tensor.byte_size() / static_cast<size_t>(shape[0]);
  shape[0] = count;
  TRAIND_ASSIGN_OR_RETURN(Tensor rows, Tensor::Allocate(tensor.dtype(), shape));
  if (rows.byte_size() > 0) {
    std::memcpy(rows.mutable_raw_data(), static_cast<const char*>(tensor.raw_data()) + begin * row_bytes,
                rows.byte_size());
  }
  return rows;
}

absl::StatusOr<NamedTensors> Slice(const NamedTensors& inputs, int64_t begin, int64_t count) {
  NamedTensors slice;
  slice.reserve(inputs.size());
  for (const auto& [name, tensor] : inputs) {
    TRAIND_ASSIGN_OR_RETURN(Tensor rows, Rows(tensor, begin, count));
    slice.emplace_back(name, std::move(rows));
  }
  return slice;
}

absl::StatusOr<NamedTensors> DeepCopies(const NamedTensors& tensors) {
  NamedTensors copies;
  copies.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    TRAIND_ASSIGN_OR_RETURN(Tensor copy, DeepCopy(tensor));
    copies.emplace_back(name, std::move(copy));
  }
  return copies;
}

uint64_t RandomSeed() {
  std::random_device device;
  const uint64_t seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  return seed == 0 ? 1 : seed;
}

}  // namespace

class SessionManager::Session {
  // First, so that they are initialized before `record` takes the constructor's argument.
  const std::string id_;
  const std::string tenant_;

 public:
  explicit Session(SessionRecordData data)
      : id_(data.session_id), tenant_(data.tenant), record(std::move(data)) {}

  const std::string& id() const { return id_; }
  const std::string& tenant() const { return tenant_; }

  // Serializes the calls on this session; `busy` shows while one runs; `waiting` counts calls queued for `mu`.
  absl::Mutex mu;
  std::atomic<bool> busy{false};
  std::atomic<int> waiting{0};
  bool closed ABSL_GUARDED_BY(mu) = false;
  engine::CheckpointState state ABSL_GUARDED_BY(mu);  // stable address: the Module points at it
  std::unique_ptr<engine::Module> module ABSL_GUARDED_BY(mu);
  std::unique_ptr<engine::Optimizer> optimizer ABSL_GUARDED_BY(mu);
  std::optional<engine::LearningRateScheduler> manual_scheduler ABSL_GUARDED_BY(mu);
  float last_loss ABSL_GUARDED_BY(mu) = std::numeric_limits<float>::quiet_NaN();
  int64_t train_steps ABSL_GUARDED_BY(mu) = 0;
  // What a restart needs besides the state (session_store.h); rewritten when it changes (a manual scheduler).
  SessionRecordData record ABSL_GUARDED_BY(mu);
  // The last automatic checkpoint, and whether anything changed since.
  int64_t checkpoint_step ABSL_GUARDED_BY(mu) = -1;
  absl::Time checkpoint_time ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  bool changed_since_checkpoint ABSL_GUARDED_BY(mu) = false;

  // Forward handles (artifacts without a loss): the pass awaiting Backward, when it expires, and the version of the
  // parameters it ran with (bumped whenever trainable parameters change: a Backward must see the same ones).
  struct PendingForward {
    engine::ForwardPass pass;
    int64_t bytes = 0;
    int64_t parameters_version = 0;
    absl::Time expires;
  };
  std::map<std::string, PendingForward> forwards ABSL_GUARDED_BY(mu);
  std::deque<std::pair<std::string, std::string>> ended_forwards ABSL_GUARDED_BY(mu);  // handle, how it ended
  int64_t parameters_version ABSL_GUARDED_BY(mu) = 0;
  // For Get/List and the gauges, without the lock.
  std::atomic<int64_t> forward_count{0};
  std::atomic<int64_t> forward_bytes{0};

  void EndForward(std::map<std::string, PendingForward>::iterator it, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    forward_count -= 1;
    forward_bytes -= it->second.bytes;
    ended_forwards.emplace_back(it->first, how);
    if (ended_forwards.size() > kRememberedEndedForwards) ended_forwards.pop_front();
    forwards.erase(it);
  }

  void ExpireForwards(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (auto it = forwards.begin(); it != forwards.end();) {
      auto next = std::next(it);
      if (it->second.expires <= now) EndForward(it, "expired");
      it = next;
    }
  }

  // What Get/List report. Kept apart from `mu` so that looking at a session never waits for its step.
  SessionInfo Snapshot() const {
    absl::MutexLock lock(&info_mu_);
    SessionInfo info = info_;
    info.busy = busy.load();
    return info;
  }

  // The parts that never change, once the models are compiled.
  void InitializeSnapshot(int num_threads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::MutexLock lock(&info_mu_);
    info_.session_id = id_;
    info_.tenant = tenant_;
    info_.display_name = record.display_name;
    info_.artifact_id = record.origin.artifact_id;
    info_.num_threads = num_threads;
    info_.gpu = record.gpu;
    info_.device_index = record.device_index;
    info_.checkpoint_policy = record.checkpoint_policy;
    info_.training_inputs = module->TrainingInputs();
    info_.output_names = module->TrainingOutputNames();
    info_.has_eval_model = module->has_eval_model();
    if (info_.has_eval_model) {
      info_.eval_inputs = module->EvalInputs();
      info_.eval_output_names = module->EvalOutputNames();
    }
    info_.has_optimizer = optimizer != nullptr;
    info_.trainable_parameter_count = module->GetParametersSize(/*trainable_only=*/true);
    info_.has_loss = module->has_loss();
    info_.forward_inputs = module->ForwardInputNames();
    info_.forward_outputs = module->ForwardOutputNames();
    info_.differentiated_outputs = module->DifferentiatedOutputNames();
    info_.input_gradients = module->InputGradientNames();
  }

  // The parts calls change; called at the end of every call that may change them.
  void RefreshSnapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::MutexLock lock(&info_mu_);
    info_.optimizer_step = optimizer ? optimizer->GetStep() : 0;
    info_.learning_rate = optimizer ? optimizer->GetLearningRate() : 0.0f;
    info_.properties = state.properties;
    info_.scheduler = manual_scheduler ? manual_scheduler->kind() : state.scheduler.kind;
    info_.last_loss = last_loss;
    info_.train_steps = train_steps;
    info_.checkpoint_step = checkpoint_step;
    info_.checkpoint_time = checkpoint_time == absl::InfinitePast() ? 0 : absl::ToDoubleSeconds(checkpoint_time - absl::UnixEpoch());
    info_.forward_handles = forward_count.load();
    info_.forward_handle_bytes = forward_bytes.load();
  }

  LearningRateInfo LearningRate() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return {optimizer ? optimizer->GetLearningRate() : 0.0f, optimizer ? optimizer->GetStep() : 0};
  }

  absl::Status RequireOptimizer(const char* what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (optimizer != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": session '", id_, "' has no optimizer model (create it with one)"));
  }

 private:
  mutable absl::Mutex info_mu_;
  SessionInfo info_ ABSL_GUARDED_BY(info_mu_);
};

// One call on one session: holds the session's lock for the call and shows the session busy meanwhile. A call
// that waited for the lock while CloseSession ran finds the session closed: NOT_FOUND, as if it had come later.
class SessionManager::Call {
 public:
  // Admission first (bounded, refused at once), then the session's lock.
  static absl::StatusOr<std::unique_ptr<Call>> Enter(std::shared_ptr<Session> session, const Caller& caller,
                                                     const SessionLimits& limits, std::atomic<int64_t>* admitted) {
    if (!caller.bypass_admission && limits.max_admitted_calls > 0 &&
        admitted->fetch_add(1) >= limits.max_admitted_calls) {
      --*admitted;
      return absl::ResourceExhaustedError(absl::StrCat("the daemon is busy: ", limits.max_admitted_calls,
                                                       " calls are in progress or waiting; retry later"));
    }
    std::atomic<int64_t>* counted = caller.bypass_admission || limits.max_admitted_calls <= 0 ? nullptr : admitted;
    if (session->waiting.fetch_add(1) >= limits.max_waiting_calls_per_session) {
      --session->waiting;
      if (counted != nullptr) --*counted;
      return absl::ResourceExhaustedError(absl::StrCat("too many calls are waiting for session '", session->id(),
                                                       "' (its calls run one at a time); retry later"));
    }
    return std::unique_ptr<Call>(new Call(std::move(session), counted));
  }

  ~Call() {
    session_->busy = false;
    session_->mu.Unlock();
    if (admitted_ != nullptr) --*admitted_;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  absl::Status status() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!session_->closed) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat("no session '", session_->id(), "' (it was closed)"));
  }
  Session* operator->() const { return session_.get(); }
  Session& operator*() const { return *session_; }

 private:
  Call(std::shared_ptr<Session> session, std::atomic<int64_t>* admitted)
      : session_(std::move(session)), admitted_(admitted) {
    session_->mu.Lock();
    --session_->waiting;
    session_->busy = true;
  }

  std::shared_ptr<Session> session_;
  std::atomic<int64_t>* admitted_;
};

SessionManager::SessionManager(ComputePool* compute, SessionLimits limits, const SessionStore* store,
                               ServerMetrics* metrics)
    : compute_(compute), limits_(limits), store_(store), metrics_(metrics) {}

std::map<std::string, int64_t> SessionManager::CountByTenant() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> counts;
  for (const auto& [id, session] : sessions_) ++counts[session->tenant()];
  return counts;
}
SessionManager::~SessionManager() = default;

int64_t SessionManager::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(sessions_.size());
}

bool SessionManager::UsesArtifacts(const std::string& tenant, const std::string& artifact_id) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) {
    if (session->tenant() == tenant && session->Snapshot().artifact_id == artifact_id) return true;
  }
  return false;
}

int64_t SessionManager::size(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  for (const auto& [id, session] : sessions_) count += session->tenant() == tenant;
  return count;
}

absl::StatusOr<std::shared_ptr<SessionManager::Session>> SessionManager::Find(const Caller& caller,
                                                                            const std::string& session_id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  // Another tenant's session is not found, exactly as a session that does not exist.
  if (it == sessions_.end() || it->second->tenant() != caller.tenant) {
    return absl::NotFoundError(absl::StrCat("no session '", absl::CHexEscape(session_id.substr(0, kMaxNameLength)), "'"));
  }
  return it->second;
}

// Every call on one session: find it, hold its call lock, refuse it if it was closed meanwhile.
absl::StatusOr<std::unique_ptr<SessionManager::Call>> SessionManager::Enter(const Caller& caller,
                                                                            const std::string& session_id) {
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find(caller, session_id));
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Call> call, Call::Enter(std::move(session), caller, limits_, &admitted_));
  TRAIND_RETURN_IF_ERROR(call->status());
  return call;
}

#define TRAIND_SESSION_CALL(call, session_id)                                                \
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Call> call##_entered, Enter(caller, session_id)); \
  Call& call = *call##_entered

absl::StatusOr<SessionInfo> SessionManager::Create(const Caller& caller, SessionModels models,
                                                   const SessionSettings& settings) {
  if (settings.num_threads < 0 || settings.num_threads > limits_.max_num_threads) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be in [0, ", limits_.max_num_threads, "], got ", settings.num_threads));
  }
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(sessions_.size()) + creating_ >= limits_.max_sessions) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the daemon already has its maximum of ", limits_.max_sessions, " sessions; close one first"));
    }
    if (caller.tenant_max_sessions > 0) {
      int64_t owned = creating_tenant_[caller.tenant];
      for (const auto& [id, session] : sessions_) owned += session->tenant() == caller.tenant;
      if (owned >= caller.tenant_max_sessions) {
        return absl::ResourceExhaustedError(absl::StrCat("tenant '", caller.tenant, "' already has its quota of ",
                                                         caller.tenant_max_sessions, " sessions; close one first"));
      }
    }
    ++creating_;
    ++creating_tenant_[caller.tenant];
  }
  struct CreatingDone {
    SessionManager* manager;
    const std::string tenant;
    ~CreatingDone() {
      absl::MutexLock lock(&manager->mu_);
      --manager->creating_;
      if (--manager->creating_tenant_[tenant] == 0) manager->creating_tenant_.erase(tenant);
    }
  } creating_done{this, caller.tenant};

  SessionRecordData record;
  record.session_id = NewRandomId(kSessionIdPrefix);
  record.tenant = caller.tenant;
  record.display_name = settings.display_name;
  record.origin = settings.origin;
  // What the session runs with is fixed now and recorded, so that a restart brings back the same session.
  record.num_threads = settings.num_threads > 0 ? settings.num_threads : limits_.default_num_threads;
  record.seed = settings.seed != 0 ? settings.seed : RandomSeed();
  record.checkpoint_policy = settings.checkpoint_policy.value_or(limits_.default_checkpoint_policy);
  record.created_time = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  record.gpu = settings.gpu;
  record.device_index = settings.device_index;
  auto session = std::make_shared<Session>(std::move(record));
  return Open(std::move(session), std::move(models), caller.cancelled, /*persist=*/true);
}

absl::StatusOr<SessionInfo> SessionManager::Restore(const SessionStore::Stored& stored, SessionModels models) {
  {
    absl::MutexLock lock(&mu_);
    if (sessions_.count(stored.record.session_id) > 0) {
      return absl::AlreadyExistsError(absl::StrCat("session '", stored.record.session_id, "' is already open"));
    }
  }
  if (!stored.checkpoint_path.empty()) {
    absl::StatusOr<engine::CheckpointState> checkpoint = engine::LoadCheckpoint(stored.checkpoint_path);
    if (!checkpoint.ok()) {
      return absl::Status(checkpoint.status().code(), absl::StrCat("session ", stored.record.session_id,
                                                                   "'s checkpoint: ", checkpoint.status().message()));
    }
    models.checkpoint = *std::move(checkpoint);
  }
  auto session = std::make_shared<Session>(stored.record);
  return Open(std::move(session), std::move(models), nullptr, /*persist=*/stored.checkpoint_path.empty());
}

absl::StatusOr<SessionInfo> SessionManager::Open(std::shared_ptr<Session> session, SessionModels models,
                                                 const CancelledFn& cancelled, bool persist) {
  absl::MutexLock lock(&session->mu);
  engine::ModuleOptions module_options;
  module_options.num_threads = session->record.num_threads;
  module_options.random_seed = session->record.seed;
  if (session->record.gpu) {
    module_options.executor = engine::ExecutorKind::kGpu;
    module_options.gpu_device_index = session->record.device_index;
  }
  module_options.memory_budget_bytes = limits_.memory_budget_bytes;
  session->state = std::move(models.checkpoint);
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(
            session->module,
            engine::Module::Create(models.training_model, models.eval_model ? &*models.eval_model : nullptr,
                                   &session->state, module_options));
        if (models.optimizer_model) {
          TRAIND_ASSIGN_OR_RETURN(session->optimizer,
                                  engine::Optimizer::Create(*models.optimizer_model, session->module.get()));
        }
        return absl::OkStatus();
      },
      cancelled));
  if (!session->record.manual_scheduler.kind.empty()) {
    TRAIND_ASSIGN_OR_RETURN(session->manual_scheduler,
                            engine::LearningRateScheduler::FromState(session->record.manual_scheduler));
  }
  if (store_ != nullptr && persist && models.checkpoint_from_origin) {
    // The state is its origin's checkpoint (plus a fresh optimizer, which a restore makes again): the record alone
    // brings it back, and a model of gigabytes is not written again before its first step.
    TRAIND_RETURN_IF_ERROR(store_->WriteRecord(session->record));
    session->checkpoint_step = 0;
    session->checkpoint_time = absl::Now();
  } else if (store_ != nullptr && persist) {
    TRAIND_RETURN_IF_ERROR(store_->WriteRecord(session->record));
    TRAIND_RETURN_IF_ERROR(WriteCheckpoint(*session));
  } else if (store_ != nullptr) {
    // Restored from its checkpoint: that is its last checkpoint.
    session->checkpoint_step = session->optimizer ? session->optimizer->GetStep() : 0;
    session->checkpoint_time = absl::Now();
  }
  session->InitializeSnapshot(session->record.num_threads);
  session->RefreshSnapshot();
  SessionInfo info = session->Snapshot();
  absl::MutexLock registry_lock(&mu_);
  sessions_.emplace(session->id(), std::move(session));
  return info;
}

absl::Status SessionManager::WriteCheckpoint(Session& session) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (store_ == nullptr) return absl::OkStatus();
  engine::CheckpointSaveOptions options;
  options.include_optimizer_state = true;
  for (const engine::Parameter& parameter : session.state.parameters) {
    if (!parameter.data.defined()) options.nominal = true;
  }
  const absl::Time start = absl::Now();
  const absl::Status written = store_->WriteCheckpoint(session.tenant(), session.id(), session.state, options);
  if (metrics_ != nullptr) metrics_->RecordCheckpointSave(absl::ToDoubleSeconds(absl::Now() - start), written.ok());
  if (!written.ok()) {
    LogError("session checkpoint failed", {{"session", session.id()}, {"error", std::string(written.message())}});
    return written;
  }
  session.checkpoint_step = session.optimizer ? session.optimizer->GetStep() : 0;
  session.checkpoint_time = absl::Now();
  session.changed_since_checkpoint = false;
  return absl::OkStatus();
}

void SessionManager::MaybeCheckpoint(Session& session) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  session.changed_since_checkpoint = true;
  if (store_ == nullptr || session.optimizer == nullptr) return;
  const CheckpointPolicy& policy = session.record.checkpoint_policy;
  const int64_t step = session.optimizer->GetStep();
  const bool steps_due = policy.every_steps > 0 && step - session.checkpoint_step >= policy.every_steps;
  const bool time_due =
      policy.every_seconds > 0 && absl::Now() - session.checkpoint_time >= absl::Seconds(policy.every_seconds);
  if (steps_due || time_due) WriteCheckpoint(session).IgnoreError();  // logged; training goes on
}

absl::Status SessionManager::Checkpoint(const Caller& caller, const std::string& session_id) {
  TRAIND_SESSION_CALL(session, session_id);
  return WriteCheckpoint(*session);
}

int SessionManager::CheckpointAll() {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, session] : sessions_) sessions.push_back(session);
  }
  int written = 0;
  for (const auto& session : sessions) {
    absl::MutexLock lock(&session->mu);
    if (session->closed || !session->changed_since_checkpoint) continue;
    written += WriteCheckpoint(*session).ok();
  }
  return written;
}

absl::StatusOr<SessionInfo> SessionManager::Get(const Caller& caller, const std::string& session_id) {
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, Find(caller, session_id));
  return session->Snapshot();
}

std::vector<SessionInfo> SessionManager::List(const Caller& caller) {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, session] : sessions_) {
      if (session->tenant() == caller.tenant) sessions.push_back(session);
    }
  }
  std::vector<SessionInfo> infos;
  infos.reserve(sessions.size());
  for (const auto& session : sessions) infos.push_back(session->Snapshot());
  return infos;
}

absl::Status SessionManager::Close(const Caller& caller, const std::string& session_id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || it->second->tenant() != caller.tenant) {
      return absl::NotFoundError(absl::StrCat("no session '", absl::CHexEscape(session_id), "'"));
    }
    session = std::move(it->second);
    sessions_.erase(it);
  }
  // Waits for the call in progress; calls queued behind it then see `closed`.
  absl::MutexLock lock(&session->mu);
  session->closed = true;
  if (store_ != nullptr) store_->Remove(session->tenant(), session->id());
  session->optimizer.reset();
  session->module.reset();
  session->state = engine::CheckpointState();
  return absl::OkStatus();
}

absl::StatusOr<TrainStepResult> SessionManager::TrainStep(const Caller& caller, const std::string& session_id,
                                                          const NamedTensors& inputs, bool accumulate_only,
                                                          const std::vector<std::string>& fetch,
                                                          const engine::PropertyBag* set_properties,
                                                          const std::vector<DeferredCall>& before_step) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(CheckFetch(fetch, session->module->TrainingOutputNames(), "training"));
  if (!accumulate_only) TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("TrainStep without accumulate_only"));
  // What the deferred calls need, before anything is applied.
  std::optional<engine::LearningRateScheduler> schedule;
  bool deferred_optimizer_step = false;
  for (DeferredCall call : before_step) {
    if (call == DeferredCall::kOptimizerStep) {
      TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("a deferred OptimizerStep"));
      deferred_optimizer_step = true;
    } else if (call == DeferredCall::kSchedulerStep && !schedule) {
      TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("a deferred SchedulerStep"));
      TRAIND_ASSIGN_OR_RETURN(schedule, ScheduleOf(*session, session_id));
    }
  }
  if (set_properties != nullptr) {
    for (const auto& [name, value] : *set_properties) session->state.properties[name] = value;
  }
  const absl::Time start = absl::Now();
  TrainStepResult result;
  bool applied_deferred = false;
  const absl::Status ran = compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        if (!before_step.empty()) {
          // A request the step would refuse applies none of them: its inputs are checked first.
          TRAIND_RETURN_IF_ERROR(session->module->CheckTrainingInputs(inputs, /*check_shapes=*/true));
          applied_deferred = true;
          for (DeferredCall call : before_step) {
            switch (call) {
              case DeferredCall::kOptimizerStep: {
                TRAIND_ASSIGN_OR_RETURN(OptimizerStepInfo info, ApplyOptimizerStep(*session));
                result.deferred_optimizer_steps.push_back(std::move(info));
                break;
              }
              case DeferredCall::kSchedulerStep:
                TRAIND_RETURN_IF_ERROR(ApplySchedule(*session->optimizer, *schedule));
                break;
              case DeferredCall::kLazyResetGrad:
                session->module->LazyResetGrad();
                break;
            }
          }
        }
        result.learning_rate = session->optimizer ? session->optimizer->GetLearningRate() : 0.0f;
        TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, session->module->TrainStep(inputs));
        TRAIND_ASSIGN_OR_RETURN(result.loss, ScalarLoss(outputs[0].second));
        TRAIND_ASSIGN_OR_RETURN(result.outputs, SelectOutputs(outputs, fetch));
        session->last_loss = result.loss;
        ++session->train_steps;
        if (accumulate_only) {
          if (!std::isfinite(result.loss)) {
            result.skipped = true;
            result.skip_reason = "the loss is not finite: the next OptimizerStep will skip these gradients";
          }
          return absl::OkStatus();
        }
        absl::StatusOr<engine::OptimizerStepResult> step = session->optimizer->Step();
        // Applied or not, these gradients are spent: the next step starts afresh.
        session->module->LazyResetGrad();
        if (!step.ok()) return step.status();
        ++session->parameters_version;
        result.skipped = step->skipped;
        if (step->skipped) {
          result.skip_reason = std::isfinite(result.loss) ? "a gradient is not finite" : "the loss is not finite";
        }
        return absl::OkStatus();
      },
      caller.cancelled);
  if (!ran.ok()) {
    if (applied_deferred) {  // the step failed at run time after the deferred calls changed the session
      session->changed_since_checkpoint = true;
      session->RefreshSnapshot();
    }
    return ran;
  }
  result.optimizer_step = session->optimizer ? session->optimizer->GetStep() : 0;
  if (metrics_ != nullptr) {
    const Tensor& first = inputs.empty() ? Tensor() : inputs.front().second;
    metrics_->RecordTrainStep(caller.tenant, first.rank() > 0 ? first.dim(0) : 1,
                              absl::ToDoubleSeconds(absl::Now() - start), result.skipped);
  }
  if (accumulate_only && !deferred_optimizer_step) {
    session->changed_since_checkpoint = true;
  } else {
    MaybeCheckpoint(*session);
  }
  session->RefreshSnapshot();
  return result;
}

absl::StatusOr<OptimizerStepInfo> SessionManager::OptimizerStep(const Caller& caller,
                                                                const std::string& session_id) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("OptimizerStep"));
  OptimizerStepInfo info;
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(info, ApplyOptimizerStep(*session));
        return absl::OkStatus();
      },
      caller.cancelled));
  MaybeCheckpoint(*session);
  session->RefreshSnapshot();
  return info;
}

absl::Status SessionManager::LazyResetGrad(const Caller& caller, const std::string& session_id) {
  TRAIND_SESSION_CALL(session, session_id);
  session->module->LazyResetGrad();
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> SessionManager::Eval(const Caller& caller, const std::string& session_id,
                                                const NamedTensors& inputs, const std::vector<std::string>& fetch) {
  TRAIND_SESSION_CALL(session, session_id);
  if (!session->module->has_eval_model()) {
    return absl::FailedPreconditionError(absl::StrCat("session '", session_id, "' has no eval model"));
  }
  TRAIND_RETURN_IF_ERROR(CheckFetch(fetch, session->module->EvalOutputNames(), "eval"));
  EvalResult result;
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, session->module->EvalStep(inputs));
        TRAIND_ASSIGN_OR_RETURN(result.loss, ScalarLoss(outputs[0].second));
        TRAIND_ASSIGN_OR_RETURN(result.outputs, SelectOutputs(outputs, fetch));
        return absl::OkStatus();
      },
      caller.cancelled));
  return result;
}

absl::StatusOr<LearningRateInfo> SessionManager::SetLearningRate(const Caller& caller, const std::string& session_id,
                                                                 float learning_rate) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("SetLearningRate"));
  TRAIND_RETURN_IF_ERROR(session->optimizer->SetLearningRate(learning_rate));
  session->changed_since_checkpoint = true;
  session->RefreshSnapshot();
  return session->LearningRate();
}

absl::StatusOr<LearningRateInfo> SessionManager::GetLearningRate(const Caller& caller,
                                                                 const std::string& session_id) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("GetLearningRate"));
  return session->LearningRate();
}

absl::StatusOr<LearningRateInfo> SessionManager::SetScheduler(const Caller& caller, const std::string& session_id,
                                                              const SchedulerRequest& request) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("SetScheduler"));
  engine::Optimizer& optimizer = *session->optimizer;
  if (request.initial_learning_rate) {
    const float rate = *request.initial_learning_rate;
    if (!std::isfinite(rate) || rate < 0) {
      return absl::InvalidArgumentError(absl::StrCat("initial_learning_rate must be finite and >= 0, got ", rate));
    }
  }
  // Both kinds start at once: the rate becomes the schedule's at the current step (ONNX Runtime's
  // LinearLRScheduler applies it in its constructor). Computed before anything changes.
  std::optional<float> manual_rate;
  if (request.scheduler && request.manual_step) {
    TRAIND_ASSIGN_OR_RETURN(manual_rate, request.scheduler->LearningRate(optimizer.GetStep(),
                                                                        request.initial_learning_rate.value_or(
                                                                            optimizer.GetInitialLearningRate())));
  }
  // Validated above; from here on nothing fails but an allocation of the optimizer state.
  if (request.initial_learning_rate) {
    TRAIND_RETURN_IF_ERROR(optimizer.SetInitialLearningRate(*request.initial_learning_rate));
  }
  session->manual_scheduler.reset();
  optimizer.ClearScheduler();
  if (request.scheduler && request.manual_step) {
    session->manual_scheduler = *request.scheduler;
    TRAIND_RETURN_IF_ERROR(optimizer.SetLearningRate(*manual_rate));
  } else if (request.scheduler) {
    TRAIND_RETURN_IF_ERROR(optimizer.SetScheduler(*request.scheduler));
  }
  session->changed_since_checkpoint = true;
  // A manual scheduler lives in the record (checkpoints hold the automatic one).
  session->record.manual_scheduler =
      session->manual_scheduler ? session->manual_scheduler->ToState() : engine::SchedulerState();
  if (store_ != nullptr) TRAIND_RETURN_IF_ERROR(store_->WriteRecord(session->record));
  session->RefreshSnapshot();
  return session->LearningRate();
}

absl::StatusOr<engine::LearningRateScheduler> SessionManager::ScheduleOf(const Session& session,
                                                                         const std::string& session_id)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (session.manual_scheduler) return *session.manual_scheduler;
  if (!session.state.scheduler.kind.empty()) return engine::LearningRateScheduler::FromState(session.state.scheduler);
  return absl::FailedPreconditionError(absl::StrCat("session '", session_id, "' has no scheduler: SetScheduler first"));
}

absl::StatusOr<OptimizerStepInfo> SessionManager::ApplyOptimizerStep(Session& session) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  TRAIND_ASSIGN_OR_RETURN(const engine::OptimizerStepResult step, session.optimizer->Step());
  ++session.parameters_version;
  OptimizerStepInfo info;
  info.optimizer_step = session.optimizer->GetStep();
  info.learning_rate = session.optimizer->GetLearningRate();
  info.skipped = step.skipped;
  if (step.skipped) info.skip_reason = "a loss or gradient accumulated since the last reset is not finite";
  return info;
}

absl::Status SessionManager::ApplySchedule(engine::Optimizer& optimizer,
                                           const engine::LearningRateScheduler& schedule) {
  TRAIND_ASSIGN_OR_RETURN(const float rate,
                          schedule.LearningRate(optimizer.GetStep(), optimizer.GetInitialLearningRate()));
  return optimizer.SetLearningRate(rate);
}

absl::StatusOr<LearningRateInfo> SessionManager::SchedulerStep(const Caller& caller, const std::string& session_id,
                                                               std::optional<double> metric) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("SchedulerStep"));
  engine::Optimizer& optimizer = *session->optimizer;
  TRAIND_ASSIGN_OR_RETURN(std::optional<engine::LearningRateScheduler> scheduler, ScheduleOf(*session, session_id));
  engine::PlateauOutcome outcome;
  if (metric) {
    TRAIND_ASSIGN_OR_RETURN(outcome, scheduler->ObserveMetric(*metric, optimizer.GetLearningRate()));
  }
  TRAIND_RETURN_IF_ERROR(ApplySchedule(optimizer, *scheduler));
  if (metric) {
    // The schedule's progress lives where the schedule does: the checkpoint, or (manual) the session's record.
    if (session->manual_scheduler) {
      session->manual_scheduler = *scheduler;
      session->record.manual_scheduler = scheduler->ToState();
      if (store_ != nullptr) TRAIND_RETURN_IF_ERROR(store_->WriteRecord(session->record));
    } else {
      session->state.scheduler = scheduler->ToState();
    }
  }
  session->changed_since_checkpoint = true;
  session->RefreshSnapshot();
  LearningRateInfo info = session->LearningRate();
  info.evaluations_without_improvement = outcome.bad_evaluations;
  info.stalled = outcome.stalled;
  return info;
}

namespace {

engine::CheckpointSaveOptions SaveOptionsFor(const engine::CheckpointState& state, bool include_optimizer_state) {
  engine::CheckpointSaveOptions options;
  options.include_optimizer_state = include_optimizer_state;
  // A nominal state (shapes only, before SetParameters) is saved as such.
  for (const engine::Parameter& parameter : state.parameters) {
    if (!parameter.data.defined()) options.nominal = true;
  }
  return options;
}

}  // namespace

absl::StatusOr<std::string> SessionManager::SerializeCheckpoint(const Caller& caller, const std::string& session_id,
                                                                bool include_optimizer_state, int64_t max_bytes) {
  TRAIND_SESSION_CALL(session, session_id);
  const engine::CheckpointSaveOptions options = SaveOptionsFor(session->state, include_optimizer_state);
  // Refused before a byte is copied: a large model's checkpoint is stored by name and downloaded in pieces.
  TRAIND_ASSIGN_OR_RETURN(const int64_t size, engine::SerializedCheckpointSize(session->state, options));
  if (size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the checkpoint has ", size, " bytes, more than the ", max_bytes,
                                                     " a message may carry: save it by name and download it"));
  }
  return engine::SerializeCheckpoint(session->state, options);
}

absl::StatusOr<int64_t> SessionManager::CheckpointSize(const Caller& caller, const std::string& session_id,
                                                       bool include_optimizer_state) {
  TRAIND_SESSION_CALL(session, session_id);
  return engine::SerializedCheckpointSize(session->state, SaveOptionsFor(session->state, include_optimizer_state));
}

absl::Status SessionManager::SaveCheckpointFile(const Caller& caller, const std::string& session_id,
                                                bool include_optimizer_state, const std::string& path) {
  TRAIND_SESSION_CALL(session, session_id);
  return engine::SaveCheckpoint(path, session->state, SaveOptionsFor(session->state, include_optimizer_state));
}

absl::StatusOr<SessionInfo> SessionManager::LoadCheckpoint(const Caller& caller, const std::string& session_id,
                                                           const std::string& checkpoint_bytes) {
  // Parsed (and its digest checked) before the session is locked: a damaged file costs the session nothing.
  TRAIND_ASSIGN_OR_RETURN(engine::CheckpointState candidate,
                          engine::ParseCheckpoint(checkpoint_bytes, "the checkpoint to load"));
  return ReplaceCheckpoint(caller, session_id, std::move(candidate));
}

absl::StatusOr<SessionInfo> SessionManager::LoadCheckpointFile(const Caller& caller, const std::string& session_id,
                                                               const std::string& path) {
  // Read in pieces (one copy) and its digest checked before the session is locked.
  absl::StatusOr<engine::CheckpointState> candidate = engine::LoadCheckpoint(path);
  if (!candidate.ok()) {
    return absl::Status(candidate.status().code(),
                        absl::StrCat("the checkpoint to load: ", candidate.status().message()));
  }
  return ReplaceCheckpoint(caller, session_id, *std::move(candidate));
}

absl::StatusOr<SessionInfo> SessionManager::ReplaceCheckpoint(const Caller& caller, const std::string& session_id,
                                                              engine::CheckpointState candidate) {
  TRAIND_SESSION_CALL(session, session_id);
  TRAIND_RETURN_IF_ERROR(
      engine::ReplaceCheckpointState(std::move(candidate), *session->module, session->optimizer.get()));
  ++session->parameters_version;
  session->changed_since_checkpoint = true;
  session->RefreshSnapshot();
  SessionInfo info = session->Snapshot();
  info.busy = false;  // taken while this very call holds the session; it is idle once the answer leaves
  return info;
}

absl::StatusOr<engine::PropertyBag> SessionManager::UpdateProperties(const Caller& caller,
                                                                     const std::string& session_id,
                                                                     const engine::PropertyBag& set,
                                                                     const std::vector<std::string>& remove) {
  for (const auto& [name, value] : set) {
    if (name.empty() || name.size() > kMaxPropertyNameLength) {
      return absl::InvalidArgumentError(
          absl::StrCat("property names must have 1 to ", kMaxPropertyNameLength, " characters"));
    }
    if (const std::string* text = std::get_if<std::string>(&value); text && text->size() > kMaxPropertyStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat("property '", name, "' has ", text->size(),
                                                     " bytes; at most ", kMaxPropertyStringBytes, " are allowed"));
    }
  }
  TRAIND_SESSION_CALL(session, session_id);
  engine::PropertyBag properties = session->state.properties;
  for (const auto& [name, value] : set) properties[name] = value;
  for (const std::string& name : remove) properties.erase(name);
  if (properties.size() > kMaxProperties) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a session holds at most ", kMaxProperties, " properties (", properties.size(), " requested)"));
  }
  session->state.properties = std::move(properties);
  session->changed_since_checkpoint = true;
  session->RefreshSnapshot();
  return session->state.properties;
}

absl::StatusOr<ParameterValues> SessionManager::GetParameters(const Caller& caller, const std::string& session_id,
                                                              const ParameterRequest& request) {
  TRAIND_SESSION_CALL(session, session_id);
  const std::vector<engine::Parameter>& parameters = session->state.parameters;
  ParameterValues values;
  auto layout_of = [](const engine::Parameter& parameter, int64_t offset) {
    return ParameterLayout{parameter.name,         parameter.data.shape(), parameter.data.dtype(), offset,
                           parameter.requires_grad, parameter.has_grad()};
  };
  // A gradient to report: the accumulated one, or zeros where none has been computed yet.
  auto gradient_of = [](const engine::Parameter& parameter) -> absl::StatusOr<Tensor> {
    if (parameter.has_grad()) return DeepCopy(parameter.grad);
    return Tensor::Allocate(parameter.data.dtype(), parameter.data.shape());
  };
  if (!request.names.empty()) {
    std::set<std::string> seen;
    for (const std::string& name : request.names) {
      auto it = std::find_if(parameters.begin(), parameters.end(),
                             [&](const engine::Parameter& parameter) { return parameter.name == name; });
      if (it == parameters.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown parameter '", name, "'"));
      }
      if (!seen.insert(name).second) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' requested twice"));
      }
      if (!it->data.defined()) {
        return absl::FailedPreconditionError(
            absl::StrCat("parameter '", name, "' has no value yet (a nominal checkpoint): SetParameters first"));
      }
      values.layout.push_back(layout_of(*it, 0));
      TRAIND_ASSIGN_OR_RETURN(values.parameters.emplace_back(), DeepCopy(it->data));
      if (request.include_gradients) {
        if (it->requires_grad) {
          TRAIND_ASSIGN_OR_RETURN(values.gradients.emplace_back(), gradient_of(*it));
        } else {
          values.gradients.emplace_back();  // frozen: no gradient
        }
      }
    }
    return values;
  }
  TRAIND_ASSIGN_OR_RETURN(values.buffer, session->module->GetContiguousParameters(request.trainable_only));
  int64_t offset = 0;
  for (const engine::Parameter& parameter : parameters) {
    if (request.trainable_only && !parameter.requires_grad) continue;
    values.layout.push_back(layout_of(parameter, offset));
    offset += parameter.data.num_elements();
  }
  if (request.include_gradients) {
    TRAIND_ASSIGN_OR_RETURN(values.gradient_buffer, Tensor::Allocate(engine::DataType::kFloat32, {offset}));
    float* out = values.gradient_buffer.mutable_data<float>();
    for (size_t p = 0; p < parameters.size(); ++p) {
      const engine::Parameter& parameter = parameters[p];
      if (request.trainable_only && !parameter.requires_grad) continue;
      if (parameter.has_grad()) std::memcpy(out, parameter.grad.raw_data(), parameter.grad.byte_size());
      out += parameter.data.num_elements();  // zeros (Allocate) where there is none
    }
  }
  return values;
}

absl::Status SessionManager::SetParameters(const Caller& caller, const std::string& session_id, bool trainable_only,
                                           const Tensor* buffer, const NamedTensors& named) {
  if ((buffer != nullptr) == !named.empty()) {
    return absl::InvalidArgumentError("give either a contiguous buffer or named parameters");
  }
  TRAIND_SESSION_CALL(session, session_id);
  std::vector<engine::Parameter>& parameters = session->state.parameters;
  if (buffer != nullptr) {
    if (buffer->dtype() != engine::DataType::kFloat32 || buffer->rank() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the parameter buffer must be a float32 vector, got ", buffer->DebugString()));
    }
    session->changed_since_checkpoint = true;
    ++session->parameters_version;
    return session->module->CopyBufferToParameters(
        absl::MakeConstSpan(buffer->data<float>(), buffer->num_elements()), trainable_only);
  }
  // Everything is checked before the first write.
  std::vector<std::pair<engine::Parameter*, const Tensor*>> writes;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : named) {
    const std::string& wanted = name;  // C++17 lambdas cannot capture structured bindings
    auto it = std::find_if(parameters.begin(), parameters.end(),
                           [&](const engine::Parameter& parameter) { return parameter.name == wanted; });
    if (it == parameters.end()) return absl::InvalidArgumentError(absl::StrCat("unknown parameter '", name, "'"));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' given twice"));
    }
    if (tensor.dtype() != it->data.dtype() || tensor.shape() != it->data.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is ", it->data.DebugString(), ", got ",
                                                     tensor.DebugString()));
    }
    writes.emplace_back(&*it, &tensor);
  }
  session->changed_since_checkpoint = true;
  ++session->parameters_version;
  for (auto& [parameter, tensor] : writes) {
    if (!parameter->data.defined()) {
      TRAIND_ASSIGN_OR_RETURN(parameter->data, DeepCopy(*tensor));
    } else if (tensor->byte_size() > 0) {
      // In place: every holder of the parameter's buffer (the Module's runs) sees the new value.
      std::memcpy(parameter->data.mutable_raw_data(), tensor->raw_data(), tensor->byte_size());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SessionManager::ExportForInference(const Caller& caller, const std::string& session_id,
                                                               const std::vector<std::string>& output_names) {
  TRAIND_SESSION_CALL(session, session_id);
  if (!session->module->has_eval_model()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", session_id, "' has no eval model, which the inference model is made from"));
  }
  std::vector<std::string> outputs = output_names;
  if (outputs.empty()) {
    outputs = session->module->DefaultInferenceOutputs();
    if (outputs.empty()) {
      return absl::InvalidArgumentError(
          "the eval model has no output but the loss: name the values to export in output_names");
    }
  }
  std::string bytes;
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(bytes, session->module->ExportInferenceModel(outputs));
        return absl::OkStatus();
      },
      caller.cancelled));
  return bytes;
}

// ---- Several steps in one call ----

absl::StatusOr<TrainStepResult> SessionManager::TrainSteps(const Caller& caller, const std::string& session_id,
                                                           const NamedTensors& inputs, int64_t examples_per_step,
                                                           bool accumulate_only) {
  if (examples_per_step <= 0) return absl::InvalidArgumentError("examples_per_step must be > 0");
  if (inputs.empty()) return absl::InvalidArgumentError("no inputs");
  const int64_t examples = inputs.front().second.rank() > 0 ? inputs.front().second.dim(0) : -1;
  for (const auto& [name, tensor] : inputs) {
    if (tensor.rank() == 0 || tensor.dim(0) != examples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "with examples_per_step every input's first dimension counts the examples; input '", name, "' is ",
          tensor.DebugString(), ", input '", inputs.front().first, "' ", inputs.front().second.DebugString()));
    }
  }
  if (examples == 0) return absl::InvalidArgumentError("the inputs hold no example");
  TRAIND_SESSION_CALL(session, session_id);
  if (!accumulate_only) TRAIND_RETURN_IF_ERROR(session->RequireOptimizer("TrainStep without accumulate_only"));
  const int64_t steps = (examples + examples_per_step - 1) / examples_per_step;
  const int64_t last_size = examples - (steps - 1) * examples_per_step;
  TrainStepResult result;
  result.step_losses.reserve(steps);
  int64_t steps_done = 0;
  bool stepped = false;
  const absl::Status ran = compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        engine::Module& module = *session->module;
        // Everything a step would refuse, before the first step: names and class ids over every example, the
        // declared shapes for both slice sizes.
        TRAIND_RETURN_IF_ERROR(module.CheckTrainingInputs(inputs, /*check_shapes=*/false));
        TRAIND_ASSIGN_OR_RETURN(NamedTensors first, Slice(inputs, 0, std::min(examples_per_step, examples)));
        TRAIND_RETURN_IF_ERROR(module.CheckTrainingInputs(first, /*check_shapes=*/true));
        if (steps > 1) {
          TRAIND_ASSIGN_OR_RETURN(NamedTensors last, Slice(inputs, (steps - 1) * examples_per_step, last_size));
          TRAIND_RETURN_IF_ERROR(module.CheckTrainingInputs(last, /*check_shapes=*/true));
        }
        double weighted_loss = 0;
        for (int64_t step = 0; step < steps; ++step) {
          const absl::Time start = absl::Now();
          const int64_t size = step + 1 < steps ? examples_per_step : last_size;
          absl::StatusOr<NamedTensors> slice = Slice(inputs, step * examples_per_step, size);
          absl::StatusOr<NamedTensors> outputs = slice.ok() ? module.TrainStep(*slice) : slice.status();
          if (!outputs.ok()) {
            return absl::Status(outputs.status().code(),
                                absl::StrCat("step ", step + 1, " of ", steps, " (the ", step,
                                             " before it were applied): ", outputs.status().message()));
          }
          TRAIND_ASSIGN_OR_RETURN(const float loss, ScalarLoss((*outputs)[0].second));
          ++steps_done;
          ++session->train_steps;
          session->last_loss = loss;
          result.step_losses.push_back(loss);
          weighted_loss += static_cast<double>(loss) * static_cast<double>(size);
          bool skipped = false;
          std::string reason;
          if (accumulate_only) {
            skipped = !std::isfinite(loss);
            if (skipped) reason = "the loss is not finite: the next OptimizerStep will skip these gradients";
          } else {
            result.learning_rate = session->optimizer->GetLearningRate();
            absl::StatusOr<engine::OptimizerStepResult> applied = session->optimizer->Step();
            module.LazyResetGrad();
            if (!applied.ok()) return applied.status();
            stepped = true;
            skipped = applied->skipped;
            if (skipped) reason = std::isfinite(loss) ? "a gradient is not finite" : "the loss is not finite";
          }
          if (skipped && result.skipped_steps++ == 0) {
            result.skipped = true;
            result.skip_reason = absl::StrCat("step ", step + 1, ": ", reason);
          }
          if (metrics_ != nullptr) {
            metrics_->RecordTrainStep(caller.tenant, size, absl::ToDoubleSeconds(absl::Now() - start), skipped);
          }
        }
        result.loss = static_cast<float>(weighted_loss / static_cast<double>(examples));
        return absl::OkStatus();
      },
      caller.cancelled);
  if (steps_done > 0) {
    if (stepped) ++session->parameters_version;
    if (accumulate_only) {
      session->changed_since_checkpoint = true;
    } else {
      MaybeCheckpoint(*session);
    }
    session->RefreshSnapshot();
  }
  TRAIND_RETURN_IF_ERROR(ran);
  result.optimizer_step = session->optimizer ? session->optimizer->GetStep() : 0;
  return result;
}

// ---- Forward / backward ----

void SessionManager::ExpireForwards(Session& session) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const absl::Time now = absl::Now();
  if (session.forward_count.load() > 0) {
    session.ExpireForwards(now);
    session.RefreshSnapshot();
  }
  // Other sessions' expired handles too, when nobody is using them (never waiting for a session's lock).
  std::vector<std::shared_ptr<Session>> others;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, other] : sessions_) {
      if (other.get() != &session && other->forward_count.load() > 0) others.push_back(other);
    }
  }
  for (const auto& other : others) {
    if (!other->mu.TryLock()) continue;
    other->ExpireForwards(now);
    other->RefreshSnapshot();
    other->mu.Unlock();
  }
}

std::map<std::string, std::pair<int64_t, int64_t>> SessionManager::ForwardHandlesByTenant() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::pair<int64_t, int64_t>> totals;
  for (const auto& [id, session] : sessions_) {
    auto& [handles, bytes] = totals[session->tenant()];
    handles += session->forward_count.load();
    bytes += session->forward_bytes.load();
  }
  return totals;
}

absl::StatusOr<ForwardResult> SessionManager::Forward(const Caller& caller, const std::string& session_id,
                                                      const NamedTensors& inputs, bool training,
                                                      const std::vector<std::string>& fetch) {
  TRAIND_SESSION_CALL(session, session_id);
  ExpireForwards(*session);
  ForwardResult result;
  if (!training) {
    TRAIND_RETURN_IF_ERROR(compute_->Run(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
          TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, session->module->Infer(inputs, fetch));
          TRAIND_ASSIGN_OR_RETURN(result.outputs, DeepCopies(outputs));
          return absl::OkStatus();
        },
        caller.cancelled));
    return result;
  }
  if (!fetch.empty()) {
    return absl::InvalidArgumentError("fetch_outputs is for inference: a training Forward returns every output");
  }
  if (!session->module->has_loss() && static_cast<int64_t>(session->forwards.size()) >=
                                          limits_.max_forward_handles_per_session) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session '", session_id, "' holds ", session->forwards.size(), " forward handles, its limit: run Backward on ",
        "them or ReleaseForward them (unused ones expire after ", absl::FormatDuration(limits_.forward_handle_ttl),
        ")"));
  }
  engine::ForwardPass pass;
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(pass, session->module->Forward(inputs));
        TRAIND_ASSIGN_OR_RETURN(result.outputs, DeepCopies(pass.outputs));
        return absl::OkStatus();
      },
      caller.cancelled));
  const int64_t bytes = pass.SavedBytes();
  if (session->forward_bytes.load() + bytes > limits_.max_forward_bytes_per_session) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this forward pass keeps ", bytes, " bytes for its backward pass; session '", session_id, "' already holds ",
        session->forward_bytes.load(), " of its limit of ", limits_.max_forward_bytes_per_session,
        ": run Backward on (or ReleaseForward) earlier handles, or use smaller batches"));
  }
  // Committed: the running statistics move as in PyTorch's train-mode forward, and the pass is kept.
  TRAIND_RETURN_IF_ERROR(session->module->ApplyRunningStatistics(pass));
  session->changed_since_checkpoint = true;
  result.handle = NewRandomId(kForwardHandlePrefix);
  result.saved_bytes = bytes;
  Session::PendingForward& pending = session->forwards[result.handle];
  pending.pass = std::move(pass);
  pending.bytes = bytes;
  pending.parameters_version = session->parameters_version;
  pending.expires = absl::Now() + limits_.forward_handle_ttl;
  session->forward_count += 1;
  session->forward_bytes += bytes;
  session->RefreshSnapshot();
  return result;
}

absl::StatusOr<BackwardOutcome> SessionManager::Backward(const Caller& caller, const std::string& session_id,
                                                         const std::string& handle,
                                                         const NamedTensors& output_gradients,
                                                         const std::vector<std::string>& input_gradients,
                                                         bool return_parameter_gradients) {
  TRAIND_SESSION_CALL(session, session_id);
  ExpireForwards(*session);
  auto it = session->forwards.find(handle);
  if (it == session->forwards.end()) {
    for (const auto& [ended, how] : session->ended_forwards) {
      if (ended == handle) {
        return absl::FailedPreconditionError(absl::StrCat("forward handle '", handle, "' has already ended (", how,
                                                          "): run Forward again"));
      }
    }
    return absl::NotFoundError(absl::StrCat("session '", session_id, "' has no forward handle '",
                                            absl::CHexEscape(handle.substr(0, kMaxNameLength)), "'"));
  }
  if (it->second.parameters_version != session->parameters_version) {
    session->EndForward(it, "its parameters changed before Backward");
    session->RefreshSnapshot();
    return absl::FailedPreconditionError(absl::StrCat(
        "the parameters changed (an optimizer step, SetParameters or LoadCheckpoint) since the Forward of handle '",
        handle, "': its backward pass would mix two models; run Forward again"));
  }
  BackwardOutcome outcome;
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(engine::BackwardResult result,
                                session->module->Backward(it->second.pass, output_gradients, input_gradients,
                                                          return_parameter_gradients));
        TRAIND_ASSIGN_OR_RETURN(outcome.input_gradients, DeepCopies(result.input_gradients));
        outcome.parameter_gradients = std::move(result.parameter_gradients);  // the Module's own copies
        return absl::OkStatus();
      },
      caller.cancelled));
  session->EndForward(it, "used by Backward");
  session->changed_since_checkpoint = true;
  session->RefreshSnapshot();
  return outcome;
}

absl::StatusOr<int> SessionManager::ReleaseForward(const Caller& caller, const std::string& session_id,
                                                   const std::vector<std::string>& handles) {
  TRAIND_SESSION_CALL(session, session_id);
  ExpireForwards(*session);
  int released = 0;
  for (const std::string& handle : handles) {
    auto it = session->forwards.find(handle);
    if (it == session->forwards.end()) continue;
    session->EndForward(it, "released");
    ++released;
  }
  session->RefreshSnapshot();
  return released;
}

absl::Status SessionManager::ExportForInferenceStream(
    const Caller& caller, const std::string& session_id, const std::vector<std::string>& output_names,
    const engine::InferenceExportOptions& options, const std::function<absl::Status(const engine::InferenceExport&)>& consume) {
  TRAIND_SESSION_CALL(session, session_id);
  if (!session->module->has_eval_model()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", session_id, "' has no eval model, which the inference model is made from"));
  }
  std::vector<std::string> outputs = output_names;
  if (outputs.empty()) outputs = session->module->DefaultInferenceOutputs();
  if (outputs.empty()) {
    return absl::InvalidArgumentError(
        "the eval model has no output but the loss: name the values to export in output_names");
  }
  engine::InferenceExport exported;
  TRAIND_RETURN_IF_ERROR(compute_->Run(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
        TRAIND_ASSIGN_OR_RETURN(exported, session->module->ExportInference(outputs, options));
        return absl::OkStatus();
      },
      caller.cancelled));
  // Still under the session's lock: the layout reads the parameters themselves, which no other call changes now.
  return consume(exported);
}

}  // namespace traind
