// The training API: ONNX Runtime's onnxruntime.training.api (orttraining/training_api/module.h, optimizer.h)
// over traind's engine. Module runs the training and eval models of GenerateArtifacts, Optimizer the optimizer
// model, both on one CheckpointState that the caller owns and that they hold by (non-owning) pointer:
//
//   TRAIND_ASSIGN_OR_RETURN(CheckpointState state, LoadCheckpoint(dir + "/checkpoint"));
//   TRAIND_ASSIGN_OR_RETURN(auto module, Module::CreateFromFiles(dir + "/training_model.onnx",
//                                                                dir + "/eval_model.onnx", &state));
//   TRAIND_ASSIGN_OR_RETURN(auto optimizer, Optimizer::CreateFromFile(dir + "/optimizer_model.onnx", module.get()));
//   for (batch : data) {
//     TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, module->TrainStep(batch));  // loss, then additional outputs
//     TRAIND_ASSIGN_OR_RETURN(OptimizerStepResult result, optimizer->Step());   // then the scheduler, if any
//     module->LazyResetGrad();
//   }
//   TRAIND_RETURN_IF_ERROR(SaveCheckpoint(dir + "/checkpoint", state));
//
// The models follow the artifact contract of engine/training/artifacts.h. State lives only in the
// CheckpointState: parameters (Parameter::data), accumulated gradients (Parameter::grad), optimizer moments, step
// and learning rate (CheckpointState::optimizer), scheduler (CheckpointState::scheduler). So SaveCheckpoint at any
// point, and LoadCheckpoint into the same CheckpointState object (same parameters, checkpoint order) followed by
// more steps, resumes exactly. A Module or Optimizer resolves everything by name once, at creation; each run checks
// that the state still has the parameters it was created for (FailedPrecondition otherwise).
//
// Parameter tensors are fed to the sessions as they are (no copies): anything that writes a parameter in place
// (CopyBufferToParameters, the optimizer, running-statistic updates) is seen by the next run.
//
// Not thread-safe: one thread drives a Module and its Optimizer (as in ONNX Runtime).
#ifndef TRAIND_ENGINE_TRAINING_MODULE_H_
#define TRAIND_ENGINE_TRAINING_MODULE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/session.h"
#include "engine/training/artifacts.h"
#include "engine/training/checkpoint.h"
#include "engine/training/lr_scheduler.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Where a Module's models run.
enum class ExecutorKind { kCpu, kGpu };

struct ModuleOptions {
  // Intra-op threads of this Module's (and its Optimizer's) kernels; 0: every CPU the process may use.
  int num_threads = 0;
  // Non-zero: Dropout masks (without a seed attribute) repeat exactly for every Module made with this seed and
  // driven through the same calls; 0: fresh random masks.
  uint64_t random_seed = 0;
  // kGpu: the training, eval and optimizer models run on the OpenCL GPU executor (engine/gpu/gpu_executor.h) on
  // device `gpu_device_index` of gpu::ListDevices(), nodes without a GPU kernel on the CPU. The parameters are
  // uploaded when the Module is made and stay on the device with the gradients and optimizer state; the
  // CheckpointState still holds them (its tensors' buffers have device copies, read back when host code reads them).
  // Errors at creation: FailedPrecondition without an OpenCL device, InvalidArgument for an index out of range,
  // ResourceExhausted when the parameters do not fit.
  ExecutorKind executor = ExecutorKind::kCpu;
  int gpu_device_index = 0;
  // Device memory this Module may hold at once; 0: only the device's limit (gpu::RuntimeOptions).
  int64_t gpu_memory_limit_bytes = 0;
  // Op types the GPU executor keeps on the CPU (mixed placement in tests; a workaround for a driver).
  std::vector<std::string> gpu_cpu_ops;
};

namespace gpu {
class Stream;
}  // namespace gpu

class Module {
 public:
  // `eval_model` may be null: EvalStep and ExportModelForInferencing then fail with FailedPrecondition.
  // In-memory models are validated as LoadModelFromBytes does. `state` must outlive the Module; its parameters
  // must be those the models take (names, dtypes, shapes; requires_grad exactly for the parameters with a
  // gradient input), but may be nominal (shape-only) until CopyBufferToParameters gives them data.
  static absl::StatusOr<std::unique_ptr<Module>> Create(const onnx::ModelProto& training_model,
                                                        const onnx::ModelProto* eval_model, CheckpointState* state,
                                                        const ModuleOptions& options = {});
  static absl::StatusOr<std::unique_ptr<Module>> Create(const Artifacts& artifacts, CheckpointState* state,
                                                        const ModuleOptions& options = {});
  // `eval_model_path` may be empty (no eval model).
  static absl::StatusOr<std::unique_ptr<Module>> CreateFromFiles(const std::string& training_model_path,
                                                                 const std::string& eval_model_path,
                                                                 CheckpointState* state,
                                                                 const ModuleOptions& options = {});
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // One forward + backward pass on a batch: `inputs` names every entry of TrainingInputNames() exactly once.
  // Returns the outputs of TrainingOutputNames() (the loss, then the additional outputs), in that order.
  // Adds the batch's gradients to the trainable parameters' Parameter::grad (or replaces them after
  // LazyResetGrad()), and writes the BatchNormalization running statistics back into their parameters, as
  // PyTorch's train-mode forward does (unless the loss or a new statistic is not finite: a poisoned batch must
  // not poison the model; the next Optimizer::Step is then skipped). Errors: InvalidArgument naming an unknown,
  // missing, repeated or mistyped/misshapen input; FailedPrecondition for parameters without data. On error nothing has
  // changed.
  absl::StatusOr<NamedTensors> TrainStep(const NamedTensors& inputs);
  // Forward only, BatchNormalization with running statistics and no Dropout; changes nothing.
  absl::StatusOr<NamedTensors> EvalStep(const NamedTensors& inputs) const;
  // The next TrainStep overwrites the gradients instead of adding to them (ONNX Runtime's lazy reset: nothing is
  // zeroed now).
  void LazyResetGrad();

  // Mode switch as in PyTorch / ORT's Python Module: Run() is TrainStep in training mode (the default) and
  // EvalStep in eval mode.
  void SetTrainingMode(bool training) { training_mode_ = training; }
  bool is_training() const { return training_mode_; }
  absl::StatusOr<NamedTensors> Run(const NamedTensors& inputs);

  // What the caller feeds and gets: the models' own inputs and outputs, without parameters, gradient buffers and
  // other internal values.
  const std::vector<std::string>& TrainingInputNames() const { return train_.user_inputs; }
  const std::vector<std::string>& TrainingOutputNames() const { return train_.user_outputs; }
  const std::vector<std::string>& EvalInputNames() const { return eval_.user_inputs; }
  const std::vector<std::string>& EvalOutputNames() const { return eval_.user_outputs; }
  // The declarations (dtype, shape with -1 for dynamic dimensions) of TrainingInputNames() / EvalInputNames().
  std::vector<GraphValue> TrainingInputs() const { return UserInputs(train_); }
  std::vector<GraphValue> EvalInputs() const { return UserInputs(eval_); }
  bool has_eval_model() const { return eval_.session != nullptr; }
  // The compiled training model's session, for benchmarks and diagnostics (profiles, pool statistics).
  const Session& training_session() const { return *train_.session; }
  const Session* eval_session() const { return eval_.session.get(); }
  // The GPU stream of this Module and its Optimizer (transfers, device memory); null on the CPU executor.
  gpu::Stream* gpu_stream() const { return gpu_stream_.get(); }

  // Trainable parameters, checkpoint order.
  const std::vector<std::string>& TrainableParameterNames() const { return trainable_names_; }

  // ONNX Runtime's Module::GetParametersSize / CopyParametersToBuffer / CopyBufferToParameters (see
  // checkpoint.h for the semantics: checkpoint order, float32 only, in-place writes, nothing changed on error).
  int64_t GetParametersSize(bool trainable_only = true) const;
  absl::StatusOr<Tensor> GetContiguousParameters(bool trainable_only = true) const;
  absl::Status CopyBufferToParameters(absl::Span<const float> buffer, bool trainable_only = true);

  // Writes (atomically) an inference model: the eval model with the current parameter values embedded as
  // initializers, only `output_names` (values of the eval model, not the loss) as its outputs, and only the nodes,
  // inputs and initializers they need: the loss, its targets and anything else left unused are dropped. The model
  // passes LoadModelFromFile. InvalidArgument for an empty, repeated or unknown output name or the loss;
  // FailedPrecondition without an eval model or parameter data.
  absl::Status ExportModelForInferencing(const std::string& path, const std::vector<std::string>& output_names) const;
  // The same model, serialized, instead of a file.
  absl::StatusOr<std::string> ExportInferenceModel(const std::vector<std::string>& output_names) const;
  // What an inference model exports when nobody names outputs: the forward model's outputs (recorded by
  // GenerateArtifacts), else the eval model's outputs but the loss. Empty without an eval model.
  std::vector<std::string> DefaultInferenceOutputs() const;

  // For Optimizer.
  CheckpointState* state() const { return state_; }
  // How this Module's sessions run (threads, seed); the Optimizer's session runs the same way.
  SessionOptions session_options() const;
  // FailedPrecondition unless the state still has the parameters the models were compiled for (same names,
  // checkpoint order), with data.
  absl::Status CheckState() const;
  // InvalidArgument unless `candidate` could replace the state: the same parameters (names, order, dtypes, shapes,
  // requires_grad), each with data.
  absl::Status CheckReplacement(const CheckpointState& candidate) const;
  // False when a TrainStep since the last reset produced a non-finite loss or BatchNormalization statistic: the
  // accumulated gradients must not be applied even if they happen to be finite.
  bool accumulated_steps_finite() const { return accumulated_steps_finite_; }

 private:
  // Where one input of a compiled model comes from.
  struct Feed {
    enum class Source { kUser, kParameter, kGradientBuffer, kLazyReset } source;
    int index = 0;  // user input or parameter index
  };
  // A user input holding class ids of a CrossEntropy loss (kClassTargetMetadataPrefix in loss.h).
  struct ClassTarget {
    int user_input = 0;
    int64_t classes = 0;
    int64_t ignore_index = 0;
  };
  struct CompiledModel {
    onnx::ModelProto model;  // validated
    std::unique_ptr<Session> session;
    std::vector<Feed> feeds;  // plan input order
    std::vector<ClassTarget> class_targets;
    std::vector<std::string> user_inputs;
    std::vector<std::string> user_outputs;
    std::vector<int> user_output_indices;  // plan output index per user output
  };

  Module(CheckpointState* state, const ModuleOptions& options);
  absl::Status Initialize(const onnx::ModelProto& training_model, const onnx::ModelProto* eval_model);
  absl::Status CompileModel(onnx::ModelProto model, bool training, CompiledModel& compiled);
  // The plan inputs of `compiled`, in order: the caller's (checked by name, dtype and shape), the parameters,
  // the gradient buffers and the reset flag.
  absl::StatusOr<std::vector<Tensor>> Feeds(const CompiledModel& compiled, const NamedTensors& inputs,
                                            bool reset) const;
  static NamedTensors UserOutputs(const CompiledModel& compiled, std::vector<Tensor>& outputs);
  static std::vector<GraphValue> UserInputs(const CompiledModel& compiled);

  CheckpointState* state_;
  ModuleOptions options_;
  std::unique_ptr<ThreadPool> threads_;  // null: ThreadPool::Default()
  std::shared_ptr<gpu::Stream> gpu_stream_;  // set for ExecutorKind::kGpu
  bool training_mode_ = true;
  bool pending_reset_ = true;
  bool accumulated_steps_finite_ = true;
  std::vector<std::string> parameter_names_;  // checkpoint order, as compiled
  std::vector<std::string> trainable_names_;
  CompiledModel train_;
  CompiledModel eval_;
  // Training-model output index -> parameter index, for the accumulated gradients and running statistics.
  std::vector<std::pair<int, int>> gradient_outputs_;
  std::vector<std::pair<int, int>> running_statistic_outputs_;
};

// What Optimizer::Step returns.
struct OptimizerStepResult {
  // True when the step was skipped because a loss or gradient was not finite: parameters, optimizer state, step
  // count and learning rate are unchanged. The caller decides what to do (lower the learning rate, drop the batch).
  bool skipped = false;
  int64_t step = 0;            // the optimizer's step count after this call
  float learning_rate = 0.0f;  // the learning rate the next step will use
};

struct OptimizerOptions {
  // Used when the checkpoint has no optimizer state yet (a fresh start); a resumed state keeps its own. Unset: the
  // optimizer model's kInitialLearningRateMetadata (GenerateArtifacts records it), else ONNX Runtime's 1e-3.
  std::optional<float> initial_learning_rate;
};

class Optimizer {
 public:
  // `module` (and its state) must outlive the Optimizer. The optimizer model takes the module's trainable
  // parameters (checkpoint order) with their gradients and the optimizer's state tensors (artifacts.h). Optimizer
  // state in the checkpoint (a resumed run) is kept and checked against the model; missing state tensors are
  // created zero-filled, and the group (step 0, learning rates) from `options`.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const onnx::ModelProto& optimizer_model, Module* module,
                                                           const OptimizerOptions& options = {});
  static absl::StatusOr<std::unique_ptr<Optimizer>> CreateFromFile(const std::string& optimizer_model_path,
                                                                   Module* module,
                                                                   const OptimizerOptions& options = {});
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies the accumulated gradients (Parameter::grad) to the parameters, in place, then lets the scheduler (if
  // any) set the learning rate for the next step (ONNX Runtime: scheduler.Step() after optimizer.Step()).
  // FailedPrecondition when a trainable parameter has no gradient (no TrainStep since creation).
  absl::StatusOr<OptimizerStepResult> Step();

  // Sets the current learning rate (a scheduler overrides it at the next step). InvalidArgument unless finite
  // and >= 0.
  absl::Status SetLearningRate(float learning_rate);
  float GetLearningRate() const;
  // What schedulers scale (ONNX Runtime's initial_lr).
  float GetInitialLearningRate() const;
  int64_t GetStep() const;

  // InvalidArgument unless `candidate`'s optimizer section (if any) holds exactly the state this optimizer keeps
  // for its parameters (names, dtypes, shapes). Parameters are Module::CheckReplacement's business.
  absl::Status CheckReplacement(const CheckpointState& candidate) const;

  // Attaches a scheduler (saved in CheckpointState::scheduler, so a resumed Optimizer picks it up again) and
  // sets the learning rate to its value at the current step. Scheduling scales the group's
  // initial_learning_rate. Replaces any previous scheduler.
  absl::Status SetScheduler(const LearningRateScheduler& scheduler);
  void ClearScheduler();
  // Also changes the learning rate: ONNX Runtime's SetInitialLearningRate (what schedulers scale).
  absl::Status SetInitialLearningRate(float learning_rate);

 private:
  explicit Optimizer(Module* module) : module_(module) {}
  absl::Status Initialize(const onnx::ModelProto& optimizer_model, const OptimizerOptions& options);
  // Creates what is missing of CheckpointState::optimizer (zero-filled moments, the group) and checks what is
  // there against the model.
  absl::Status EnsureState();

  // The checks of EnsureState on `state` (whose parameters are this optimizer's, in checkpoint order).
  absl::Status CheckOptimizerState(const CheckpointState& state) const;

  Module* module_;
  float initial_learning_rate_ = 1e-3f;  // resolved from OptimizerOptions
  std::unique_ptr<Session> session_;
  std::vector<std::string> state_names_;      // per parameter, e.g. momentum0, momentum1
  std::vector<std::string> parameter_names_;  // trainable parameters, model order
  std::vector<int> parameter_indices_;        // their checkpoint indices
};

// Loads a checkpoint into a live Module (and its Optimizer, which may be null): `candidate` replaces
// `*module.state()` if it fits both (CheckReplacement), else InvalidArgument and nothing changes. Gradients
// accumulate afresh from the next TrainStep (LazyResetGrad). A candidate without an optimizer section restarts the
// optimizer (zero moments, step 0, the learning rate the Optimizer was created with), as a new Optimizer over it
// would.
absl::Status ReplaceCheckpointState(CheckpointState candidate, Module& module, Optimizer* optimizer);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_MODULE_H_
