// The training sessions the daemon owns: each a CheckpointState with the Module and (optional) Optimizer that train
// it, as in ONNX Runtime's training API. This is the core the RPC handlers call; it speaks engine types only
// (no protobuf wire types), so it could serve any front end.
//
// Concurrency: sessions train in parallel; the calls on one session are serialized by its mutex, in arrival order
// of the lock. Everything that runs a model (compilation, TrainStep, optimizer step, Eval, export) runs on the
// shared ComputePool (compute_pool.h), never on the caller's thread. Calls that only read or copy state (parameters,
// learning rate, checkpoint bytes) run on the caller's thread under the session's mutex.
//
// Every call checks everything it can before changing anything: on error the session is as it was.
#ifndef TRAIND_SERVER_SESSION_MANAGER_H_
#define TRAIND_SERVER_SESSION_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "engine/training/checkpoint.h"
#include "engine/training/lr_scheduler.h"
#include "engine/training/module.h"
#include "server/artifact_store.h"
#include "server/compute_pool.h"
#include "server/metrics.h"
#include "server/session_store.h"

namespace traind {

// Asked before queued work starts: true when the caller is gone (cancelled, deadline passed).
using CancelledFn = std::function<bool()>;

// Who calls, for every call: the tenant (tenants.h) owns what it creates and sees nothing else — another tenant's
// session ids are NOT_FOUND — and whether the caller is still there.
struct Caller {
  std::string tenant;
  CancelledFn cancelled;
  int64_t tenant_max_sessions = 0;  // the tenant's quota; 0: none
  // A training job's own calls: bounded by the job limit, they are never refused for want of room.
  bool bypass_admission = false;
};

struct SessionSettings {
  std::string display_name;
  SessionOrigin origin;  // where the models come from (what a restart reloads)
  int num_threads = 0;   // intra-op threads; 0: the daemon's default
  uint64_t seed = 0;     // Dropout masks; 0: a random seed
  std::optional<CheckpointPolicy> checkpoint_policy;  // unset: the daemon's default
  bool gpu = false;      // the GPU executor (engine/gpu) on OpenCL device `device_index`
  int device_index = 0;
};

// SetScheduler's request. No scheduler: the current one is removed and the learning rate stays where it is.
struct SchedulerRequest {
  std::optional<engine::LearningRateScheduler> scheduler;
  std::optional<float> initial_learning_rate;
  // false: every optimizer step moves the learning rate along the schedule (it lives in the checkpoint).
  // true: only SchedulerStep does, as ONNX Runtime's LinearLRScheduler.step() (not saved in checkpoints, as in
  // ONNX Runtime).
  bool manual_step = false;
};

struct SessionInfo {
  std::string session_id;
  std::string tenant;
  std::string display_name;
  std::string artifact_id;
  bool busy = false;
  std::vector<engine::GraphValue> training_inputs;
  std::vector<engine::GraphValue> eval_inputs;
  std::vector<std::string> output_names;       // training model: the loss, then additional outputs
  std::vector<std::string> eval_output_names;
  bool has_eval_model = false;
  bool has_optimizer = false;
  int64_t trainable_parameter_count = 0;
  int64_t optimizer_step = 0;
  float learning_rate = 0.0f;
  engine::PropertyBag properties;
  int num_threads = 0;
  bool gpu = false;
  int device_index = 0;
  std::string scheduler;  // kind, "" without one
  float last_loss = 0.0f;  // NaN before the first TrainStep
  int64_t train_steps = 0;
  CheckpointPolicy checkpoint_policy;
  int64_t checkpoint_step = -1;  // optimizer step of the last automatic checkpoint; -1: none
  double checkpoint_time = 0;    // Unix seconds
  // Forward / backward (artifacts without a loss; engine::Module's names).
  bool has_loss = true;
  std::vector<std::string> forward_inputs;
  std::vector<std::string> forward_outputs;
  std::vector<std::string> differentiated_outputs;
  std::vector<std::string> input_gradients;
  int64_t forward_handles = 0;
  int64_t forward_handle_bytes = 0;
};

struct OptimizerStepInfo {
  int64_t optimizer_step = 0;
  float learning_rate = 0.0f;  // for the next step
  bool skipped = false;
  std::string skip_reason;
};

// A call a client deferred and sends with its next TrainStep (ONNX Runtime's Optimizer.step(),
// LRScheduler.step() and Module.lazy_reset_grad() answer nothing, so its loop needs one round trip a step, not
// three or four).
enum class DeferredCall { kOptimizerStep, kSchedulerStep, kLazyResetGrad };

struct TrainStepResult {
  float loss = 0.0f;
  engine::NamedTensors outputs;  // the requested ones, in request order
  int64_t optimizer_step = 0;
  float learning_rate = 0.0f;   // the learning rate this step used (the last step's)
  bool skipped = false;
  std::string skip_reason;
  // Several steps in one call (examples_per_step): each step's loss, and how many were skipped.
  std::vector<float> step_losses;
  int skipped_steps = 0;
  // One per deferred optimizer step the call applied before its own, in order.
  std::vector<OptimizerStepInfo> deferred_optimizer_steps;
};

// Forward's answer: the outputs, and with training the handle Backward takes.
struct ForwardResult {
  engine::NamedTensors outputs;
  std::string handle;
  int64_t saved_bytes = 0;
};

struct BackwardOutcome {
  engine::NamedTensors input_gradients;
  engine::NamedTensors parameter_gradients;
};

struct EvalResult {
  float loss = 0.0f;
  engine::NamedTensors outputs;
};

struct LearningRateInfo {
  float learning_rate = 0.0f;
  int64_t optimizer_step = 0;
  // SchedulerStep with a metric ('adaptive').
  int64_t evaluations_without_improvement = 0;
  bool stalled = false;
};

// GetParameters: either one contiguous float32 buffer (names empty) or the named tensors.
struct ParameterRequest {
  bool trainable_only = false;
  std::vector<std::string> names;
  bool include_gradients = false;
};

struct ParameterLayout {
  std::string name;
  engine::Shape shape;
  engine::DataType dtype = engine::DataType::kUndefined;
  int64_t offset = 0;  // elements into the contiguous buffer (0 in by-name mode)
  bool trainable = false;
  bool has_gradient = false;
};

struct ParameterValues {
  std::vector<ParameterLayout> layout;
  engine::Tensor buffer;           // contiguous mode
  engine::Tensor gradient_buffer;  // contiguous mode, with include_gradients
  std::vector<engine::Tensor> parameters;  // by-name mode
  std::vector<engine::Tensor> gradients;   // by-name mode, with include_gradients
};

struct SessionLimits {
  int64_t max_sessions = 64;
  int default_num_threads = 1;
  int max_num_threads = 64;
  CheckpointPolicy default_checkpoint_policy;
  // Calls that may wait for one session's lock (its calls run one at a time); past that, RESOURCE_EXHAUSTED at once.
  int max_waiting_calls_per_session = 8;
  // Calls on sessions in the daemon at once (running, waiting for a compute thread or for their session), all
  // sessions together; past that, RESOURCE_EXHAUSTED at once. 0: no limit. A call admitted is never refused later
  // for want of room, so refusals are immediate.
  int64_t max_admitted_calls = 0;
  // Forward handles (training-mode passes awaiting Backward) a session may hold, in number and in bytes; past
  // either, Forward is RESOURCE_EXHAUSTED. A handle not used within forward_handle_ttl expires.
  int max_forward_handles_per_session = 64;
  int64_t max_forward_bytes_per_session = int64_t{1} << 30;
  absl::Duration forward_handle_ttl = absl::Minutes(10);

  // Each session's memory budget (engine::ModuleOptions::memory_budget_bytes); 0: unlimited.
  int64_t memory_budget_bytes = 0;
};

class SessionManager {
 public:
  // `compute` (and `store`, which may be null: nothing is persisted, and `metrics`, which may be null) must
  // outlive the manager.
  SessionManager(ComputePool* compute, SessionLimits limits, const SessionStore* store = nullptr,
                 ServerMetrics* metrics = nullptr);
  // Sessions per tenant (for the traind_sessions gauge).
  std::map<std::string, int64_t> CountByTenant() const;
  ~SessionManager();
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  // RESOURCE_EXHAUSTED past max_sessions; INVALID_ARGUMENT for models and checkpoint that do not fit together.
  // With a store, the session's record and initial checkpoint are on disk before it is returned.
  absl::StatusOr<SessionInfo> Create(const Caller& caller, SessionModels models, const SessionSettings& settings);
  // Brings a stored session back (at start-up): same id, tenant and settings, the state of its last checkpoint
  // (`stored.checkpoint`, or the models' own when it has none).
  absl::StatusOr<SessionInfo> Restore(const SessionStore::Stored& stored, SessionModels models);
  // Checkpoints every session changed since its last checkpoint (on drain). Returns how many were written;
  // failures are logged.
  int CheckpointAll();
  // Checkpoints the session now (a training job at the end of an epoch).
  absl::Status Checkpoint(const Caller& caller, const std::string& session_id);
  // NOT_FOUND for unknown ids, here and in every call below.
  absl::StatusOr<SessionInfo> Get(const Caller& caller, const std::string& session_id);
  // The caller's tenant's sessions.
  std::vector<SessionInfo> List(const Caller& caller);
  // Waits for a call in progress on the session, then frees it.
  absl::Status Close(const Caller& caller, const std::string& session_id);
  int64_t size() const;
  int64_t size(const std::string& tenant) const;
  // Whether an open session of the tenant was made from the artifact set (which must then stay).
  bool UsesArtifacts(const std::string& tenant, const std::string& artifact_id) const;

  // Forward + backward (gradients accumulate), then unless `accumulate_only` the optimizer step and a lazy reset.
  // `fetch` names outputs of the training model to return (the loss always comes as TrainStepResult::loss).
  // `set_properties` (may be null) are set in the same call, before the step: a training job records its position
  // in the data this way, so that the checkpoint the step may trigger holds the position after it.
  // `before_step`: calls the client deferred, applied in order before the forward pass, on the same compute turn.
  // None is applied when the call is refused before computing: the inputs (names, dtypes, shapes, class ids), the
  // optimizer and scheduler they need are checked first. A step failing later (a kernel's error) leaves them applied.
  absl::StatusOr<TrainStepResult> TrainStep(const Caller& caller, const std::string& session_id,
                                            const engine::NamedTensors& inputs, bool accumulate_only,
                                            const std::vector<std::string>& fetch,
                                            const engine::PropertyBag* set_properties = nullptr,
                                            const std::vector<DeferredCall>& before_step = {});
  absl::StatusOr<OptimizerStepInfo> OptimizerStep(const Caller& caller, const std::string& session_id);
  absl::Status LazyResetGrad(const Caller& caller, const std::string& session_id);
  absl::StatusOr<EvalResult> Eval(const Caller& caller, const std::string& session_id,
                                  const engine::NamedTensors& inputs, const std::vector<std::string>& fetch);

  absl::StatusOr<LearningRateInfo> SetLearningRate(const Caller& caller, const std::string& session_id,
                                                   float learning_rate);
  absl::StatusOr<LearningRateInfo> GetLearningRate(const Caller& caller, const std::string& session_id);
  absl::StatusOr<LearningRateInfo> SetScheduler(const Caller& caller, const std::string& session_id,
                                                const SchedulerRequest& request);
  // Manual schedulers: the learning rate becomes the schedule's value at the current optimizer step. With a
  // metric, an 'adaptive' schedule records it first (FAILED_PRECONDITION for the other kinds).
  absl::StatusOr<LearningRateInfo> SchedulerStep(const Caller& caller, const std::string& session_id,
                                                 std::optional<double> metric = std::nullopt);

  // Several training steps in one call: `inputs`' first dimension cut into slices of `examples_per_step`
  // examples, each a TrainStep. Names, dtypes, the two slice shapes and class ids are checked before the first
  // step; a step failing at run time (a kernel's error) ends the call with the steps before it applied, and the
  // error says how many.
  absl::StatusOr<TrainStepResult> TrainSteps(const Caller& caller, const std::string& session_id,
                                             const engine::NamedTensors& inputs, int64_t examples_per_step,
                                             bool accumulate_only);

  // Forward / backward (engine::Module::Forward / Backward). `training` keeps the pass under a new handle
  // (bounded: SessionLimits); otherwise it is inference (Module::Infer), `fetch` choosing the outputs.
  absl::StatusOr<ForwardResult> Forward(const Caller& caller, const std::string& session_id,
                                        const engine::NamedTensors& inputs, bool training,
                                        const std::vector<std::string>& fetch);
  // Consumes the handle. NOT_FOUND for a handle the session never gave; FAILED_PRECONDITION for one already
  // used, released or expired, and when the parameters changed since its Forward (the handle then ends too).
  // INVALID_ARGUMENT for bad gradients or input names, which leave the handle usable.
  absl::StatusOr<BackwardOutcome> Backward(const Caller& caller, const std::string& session_id,
                                           const std::string& handle, const engine::NamedTensors& output_gradients,
                                           const std::vector<std::string>& input_gradients,
                                           bool return_parameter_gradients);
  // Releases the handles the session holds among `handles`; returns how many.
  absl::StatusOr<int> ReleaseForward(const Caller& caller, const std::string& session_id,
                                     const std::vector<std::string>& handles);
  // Forward handles held and their bytes, by tenant (for the traind_forward_handle* gauges).
  std::map<std::string, std::pair<int64_t, int64_t>> ForwardHandlesByTenant() const;

  // The checkpoint file's bytes (checkpoint.h), with or without optimizer and scheduler state;
  // RESOURCE_EXHAUSTED, before anything is copied, when they would exceed `max_bytes`.
  absl::StatusOr<std::string> SerializeCheckpoint(const Caller& caller, const std::string& session_id,
                                                  bool include_optimizer_state, int64_t max_bytes);
  // The size of that file (nothing is copied).
  absl::StatusOr<int64_t> CheckpointSize(const Caller& caller, const std::string& session_id,
                                         bool include_optimizer_state);
  // The same file written (streamed, published atomically) at `path`.
  absl::Status SaveCheckpointFile(const Caller& caller, const std::string& session_id, bool include_optimizer_state,
                                  const std::string& path);
  // Replaces the session's state (engine::ReplaceCheckpointState); DATA_LOSS for damaged bytes.
  absl::StatusOr<SessionInfo> LoadCheckpoint(const Caller& caller, const std::string& session_id,
                                             const std::string& checkpoint_bytes);
  // The same from a checkpoint file, read in pieces (one copy in memory).
  absl::StatusOr<SessionInfo> LoadCheckpointFile(const Caller& caller, const std::string& session_id,
                                                 const std::string& path);
  absl::StatusOr<engine::PropertyBag> UpdateProperties(const Caller& caller, const std::string& session_id,
                                                       const engine::PropertyBag& set,
                                                       const std::vector<std::string>& remove);

  absl::StatusOr<ParameterValues> GetParameters(const Caller& caller, const std::string& session_id,
                                                const ParameterRequest& request);
  // Either `buffer` (contiguous, float32, GetParametersSize(trainable_only) elements) or `named` tensors.
  absl::Status SetParameters(const Caller& caller, const std::string& session_id, bool trainable_only,
                             const engine::Tensor* buffer, const engine::NamedTensors& named);

  // The inference model (serialized ONNX); `output_names` empty keeps the eval model's outputs but the loss.
  absl::StatusOr<std::string> ExportForInference(const Caller& caller, const std::string& session_id,
                                                 const std::vector<std::string>& output_names);
  // The inference model with its parameters in an external data file as `options` say (models beyond protobuf's
  // 2 GiB), handed to `consume` while the session stays locked: the data file is never written anywhere, `consume`
  // reads it from the parameters themselves (a download streams it). Other calls on the session wait meanwhile.
  absl::Status ExportForInferenceStream(const Caller& caller, const std::string& session_id,
                                        const std::vector<std::string>& output_names,
                                        const engine::InferenceExportOptions& options,
                                        const std::function<absl::Status(const engine::InferenceExport&)>& consume);

 private:
  class Session;
  class Call;
  absl::StatusOr<std::shared_ptr<Session>> Find(const Caller& caller, const std::string& session_id) const;
  // Admission (bounded, refused at once), then the session's lock: every call on a session starts here.
  absl::StatusOr<std::unique_ptr<Call>> Enter(const Caller& caller, const std::string& session_id);
  // Compiles the session's models over `session->state` and registers it; with `persist`, writes its record
  // and first checkpoint before registering it.
  absl::StatusOr<SessionInfo> Open(std::shared_ptr<Session> session, SessionModels models, const CancelledFn& cancelled,
                                   bool persist);
  // LoadCheckpoint's second half: the checked candidate replaces the session's state.
  absl::StatusOr<SessionInfo> ReplaceCheckpoint(const Caller& caller, const std::string& session_id,
                                                engine::CheckpointState candidate);
  // Writes the session's checkpoint now (caller holds the session's lock); logs failures.
  absl::Status WriteCheckpoint(Session& session);
  // The session's checkpoint policy says a checkpoint is due after an optimizer step.
  void MaybeCheckpoint(Session& session);
  // The schedule SchedulerStep follows: the session's manual one, else its checkpoint's; FAILED_PRECONDITION when
  // it has none (caller holds the session's lock).
  static absl::StatusOr<engine::LearningRateScheduler> ScheduleOf(const Session& session,
                                                                  const std::string& session_id);
  // OptimizerStep's work, for the RPC and for a TrainStep's deferred step (on the compute pool, the session's lock
  // held): applies the accumulated gradients, or skips them when one is not finite.
  static absl::StatusOr<OptimizerStepInfo> ApplyOptimizerStep(Session& session);
  // SchedulerStep's work: the learning rate becomes the schedule's at the optimizer's step count.
  static absl::Status ApplySchedule(engine::Optimizer& optimizer, const engine::LearningRateScheduler& schedule);
  // Drops expired forward handles: the session's (its lock held), and those of other sessions not busy now.
  void ExpireForwards(Session& session);

  ComputePool* compute_;
  const SessionLimits limits_;
  std::atomic<int64_t> admitted_{0};
  const SessionStore* store_;
  ServerMetrics* metrics_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t creating_ ABSL_GUARDED_BY(mu_) = 0;  // sessions being compiled, counted against max_sessions
  std::map<std::string, int64_t> creating_tenant_ ABSL_GUARDED_BY(mu_);  // the same, per tenant
};

}  // namespace traind

#endif  // TRAIND_SERVER_SESSION_MANAGER_H_
