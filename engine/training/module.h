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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/external_tensor.h"
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
  // > 0: everything this Module and its Optimizer hold or allocate counts against one budget of this many bytes
  // (engine/core/memory_budget.h): the parameters, the gradients, the optimizer state, the plans' constants and every
  // run's intermediates. Creation refuses (kResourceExhausted, naming the limit) when the parameters and a plan's
  // peak (PlanMemory, from shape inference) cannot fit; a run refuses an allocation that does not fit before making
  // it. 0: unlimited.
  int64_t memory_budget_bytes = 0;
  // SessionOptions::channels_last for this Module's plans (off only to measure what it brings).
  bool channels_last = true;
};

namespace gpu {
class Stream;
}  // namespace gpu

// What Module::Forward keeps for the backward pass of artifacts without a loss (artifacts.h).
struct ForwardPass {
  NamedTensors outputs;                   // every output of the forward model, in its order
  std::vector<Tensor> saved;              // what the backward part reads (ForwardBackwardSplit::saved order)
  std::vector<Tensor> running_statistics;  // the BatchNormalization statistics PyTorch's train-mode forward leaves
  bool finite = true;                     // every output and statistic is finite
  // Bytes held by `saved` (caller inputs included: the pass keeps them alive).
  int64_t SavedBytes() const;
};

// What Module::Backward returns.
struct BackwardResult {
  NamedTensors input_gradients;      // the requested ones, in request order
  NamedTensors parameter_gradients;  // this pass's gradients of the trainable parameters (checkpoint order), when asked
};

// Where ExportModelForInferencing puts the parameters.
struct InferenceExportOptions {
  // Empty: every parameter inline in the model (which must then stay under protobuf's 2 GiB). Else a plain file
  // name beside the model: parameters of at least `external_threshold_bytes` go there as ONNX external data
  // (page-aligned, so that readers can map them), written straight from the parameters, never copied whole.
  std::string external_data_file;
  int64_t external_threshold_bytes = 1024;
  // false: no fsync (an export that lives only while it is streamed to a client).
  bool durable = true;
};

// What an export wrote: the model file and, with external data, the data file; sizes and SHA-256s.
struct ExportedFiles {
  std::string model_path;
  int64_t model_bytes = 0;
  std::string model_sha256_hex;
  std::string external_data_path;  // empty without external data
  int64_t external_data_bytes = 0;
  std::string external_data_sha256_hex;
};

// An inference model in memory: its bytes and, with external data, the layout of its data file (the parameters
// themselves, shared, not copied: they must not change while the layout is read).
struct InferenceExport {
  std::string model_bytes;
  ExternalDataLayout external_data;  // empty without external data
};

// Protobuf's limit: a serialized model (inline data) must stay below it.
inline constexpr int64_t kMaxInlineModelBytes = (int64_t{1} << 31) - 1;

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
  // What TrainStep would refuse about `inputs` (names, class ids; with `check_shapes` the declared dtypes and
  // shapes too), without running anything: for callers that cut one batch into several steps.
  absl::Status CheckTrainingInputs(const NamedTensors& inputs, bool check_shapes) const;

  // ---- Artifacts without a loss: the forward/backward style (artifacts.h, forward_backward.h) ----
  // Whether the training model has a loss (TrainStep and EvalStep need one; Forward(training) and Backward need
  // artifacts without one).
  bool has_loss() const { return !no_loss_; }
  // The forward model's inputs and outputs, the outputs Backward takes gradients of, and the inputs it can return
  // gradients of (artifacts without a loss; empty otherwise but ForwardOutputNames, the eval model's outputs).
  const std::vector<std::string>& ForwardInputNames() const { return forward_inputs_; }
  const std::vector<std::string>& ForwardOutputNames() const { return forward_outputs_; }
  const std::vector<std::string>& DifferentiatedOutputNames() const { return differentiated_outputs_; }
  const std::vector<std::string>& InputGradientNames() const { return input_gradient_names_; }
  // The training-mode forward pass (BatchNormalization with batch statistics, Dropout on), keeping what Backward
  // needs. Changes nothing: ApplyRunningStatistics makes its side effect on the running statistics. Errors as
  // TrainStep's; FailedPrecondition for artifacts with a loss.
  absl::StatusOr<ForwardPass> Forward(const NamedTensors& inputs) const;
  // Writes the pass's running statistics into their parameters, as PyTorch's train-mode forward does (unless a
  // value of the pass is not finite). Fails only on the GPU executor (a device copy that cannot be made).
  absl::Status ApplyRunningStatistics(const ForwardPass& pass);
  // The backward pass of `pass`, which must come from this Module with the parameters unchanged since (the caller
  // checks: Backward reads the parameters again). `output_gradients` holds the gradients of differentiated outputs
  // (each exactly of its output's shape and dtype in `pass`; a missing one is zero). Returns the gradients of
  // `input_gradients` (names from InputGradientNames()), and with `return_parameter_gradients` this pass's
  // parameter gradients; accumulates the parameters' gradients exactly as TrainStep does (so Optimizer::Step and
  // LazyResetGrad apply as usual). InvalidArgument for unknown, repeated or misshapen gradients and unknown input
  // names; nothing changes on error.
  absl::StatusOr<BackwardResult> Backward(const ForwardPass& pass, const NamedTensors& output_gradients,
                                          const std::vector<std::string>& input_gradients,
                                          bool return_parameter_gradients);
  // Inference (model.eval() semantics): the eval model restricted to `outputs` (empty: DefaultInferenceOutputs()),
  // so that only the inputs those outputs read are needed (no loss targets). Changes nothing but a cache of compiled
  // variants. InvalidArgument for unknown outputs or inputs; FailedPrecondition without an eval model.
  absl::StatusOr<NamedTensors> Infer(const NamedTensors& inputs, const std::vector<std::string>& outputs);
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
  // The same, with the parameters in an external data file beside the model when `options` say so (models whose
  // parameters exceed protobuf's 2 GiB). Both files are published atomically, the data file first; the model is
  // checked to load (references only; the data stays in its file) before this returns.
  absl::StatusOr<ExportedFiles> ExportModelForInferencing(const std::string& path,
                                                          const std::vector<std::string>& output_names,
                                                          const InferenceExportOptions& options) const;
  // The same model, serialized, instead of a file. ResourceExhausted when it would reach 2 GiB (decided before
  // any parameter is copied).
  absl::StatusOr<std::string> ExportInferenceModel(const std::vector<std::string>& output_names) const;
  // The same in memory, with its external data file as a layout over the parameters (to stream it without writing
  // it anywhere; the state must not change meanwhile).
  absl::StatusOr<InferenceExport> ExportInference(const std::vector<std::string>& output_names,
                                                  const InferenceExportOptions& options) const;
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
  // The budget of ModuleOptions::memory_budget_bytes (null when unlimited), shared with the Optimizer.
  const std::shared_ptr<MemoryBudget>& memory_budget() const { return budget_; }
  // Bytes of the trainable parameters' gradients (held between steps).
  int64_t GradientBytes() const;
  // False when a TrainStep since the last reset produced a non-finite loss or BatchNormalization statistic: the
  // accumulated gradients must not be applied even if they happen to be finite.
  bool accumulated_steps_finite() const { return accumulated_steps_finite_; }
  // Whether the gradients of `parameters` (indices into the state) are all finite, where the last TrainStep checked
  // these very buffers (on a GPU, in the download that brings the loss back); nullopt otherwise (the CPU executor,
  // gradients from Backward or a checkpoint). No one writes a gradient buffer between TrainStep and the Optimizer's
  // step, so the answer holds for it.
  std::optional<bool> GradientsCheckedFinite(absl::Span<const int> parameters) const;

 private:
  // Where one input of a compiled model comes from.
  struct Feed {
    enum class Source { kUser, kParameter, kGradientBuffer, kLazyReset } source;
    int index = 0;  // user input or parameter index
  };
  // What a compiled model is for: which inputs and outputs it has besides the caller's (see CompileModel).
  enum class Role { kTrain, kEval, kForwardPart, kBackwardPart, kInference };
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
    // Output index -> parameter index, for the accumulated gradients and running statistics.
    std::vector<std::pair<int, int>> gradient_outputs;
    std::vector<std::pair<int, int>> running_statistic_outputs;
  };

  Module(CheckpointState* state, const ModuleOptions& options);
  absl::Status Initialize(const onnx::ModelProto& training_model, const onnx::ModelProto* eval_model);
  absl::Status CompileModel(onnx::ModelProto model, Role role, CompiledModel& compiled);
  // Artifacts without a loss: reads the metadata, splits the training model and compiles its forward part.
  absl::Status InitializeForwardBackward(const onnx::ModelProto& training_model);
  // The backward part returning the input gradients flagged in `wanted` (InputGradientNames() order), compiled
  // on first use.
  absl::StatusOr<const CompiledModel*> BackwardPart(const std::vector<bool>& wanted);
  // The plan inputs of `compiled`, in order: the caller's (checked by name, dtype and shape), the parameters,
  // the gradient buffers and the reset flag.
  absl::StatusOr<std::vector<Tensor>> Feeds(const CompiledModel& compiled, const NamedTensors& inputs,
                                            bool reset, bool check_shapes = true) const;
  static NamedTensors UserOutputs(const CompiledModel& compiled, std::vector<Tensor>& outputs);
  // The inference model with the parameters it needs as its last initializers, without data (name, dtype, dims),
  // in `embedded`'s order: the exports fill them in, inline or as external data.
  absl::StatusOr<onnx::ModelProto> InferenceModel(const std::vector<std::string>& output_names,
                                                  std::vector<const Parameter*>* embedded) const;
  static std::vector<GraphValue> UserInputs(const CompiledModel& compiled);

  CheckpointState* state_;
  ModuleOptions options_;
  std::unique_ptr<ThreadPool> threads_;  // null: ThreadPool::Default()
  std::shared_ptr<gpu::Stream> gpu_stream_;  // set for ExecutorKind::kGpu
  std::shared_ptr<MemoryBudget> budget_;  // null: unlimited
  MemoryReservation parameters_memory_;
  bool training_mode_ = true;
  bool pending_reset_ = true;
  bool accumulated_steps_finite_ = true;
  // The gradient buffers the last TrainStep checked on the GPU (weak: a freed buffer is not mistaken for a new one
  // at its address), and whether all were finite.
  absl::flat_hash_map<const Buffer*, std::weak_ptr<Buffer>> checked_gradients_;
  bool checked_gradients_finite_ = false;
  std::vector<std::string> parameter_names_;  // checkpoint order, as compiled
  std::vector<std::string> trainable_names_;
  CompiledModel train_;
  CompiledModel eval_;
  // Artifacts without a loss.
  bool no_loss_ = false;
  std::vector<std::string> forward_inputs_;
  std::vector<std::string> forward_outputs_;
  std::vector<std::string> differentiated_outputs_;
  std::vector<std::string> input_gradient_names_;
  CompiledModel forward_part_;
  onnx::ModelProto backward_part_model_;
  std::vector<std::string> saved_names_;     // ForwardBackwardSplit::saved
  std::vector<int> saved_sources_;           // per saved value: forward-part output index, or -1 - caller input index
  std::map<std::vector<bool>, std::unique_ptr<CompiledModel>> backward_parts_;  // by wanted input gradients
  std::map<std::vector<std::string>, std::unique_ptr<CompiledModel>> inference_models_;  // by outputs
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
  // any) set the learning rate for the next step (ONNX Runtime: scheduler.Step() after optimizer.Step()). The
  // optimizer model's fused node writes parameters and moments where they are (donated inputs, executor.h): no
  // fresh buffers, no copies back.
  // FailedPrecondition when a trainable parameter has no gradient (no TrainStep since creation).
  absl::StatusOr<OptimizerStepResult> Step();

  // Sets the current learning rate (a scheduler overrides it at the next step). InvalidArgument unless finite
  // and >= 0.
  absl::Status SetLearningRate(float learning_rate);
  float GetLearningRate() const;
  // What schedulers scale (ONNX Runtime's initial_lr).
  float GetInitialLearningRate() const;
  int64_t GetStep() const;

  // The compiled optimizer model's session, for benchmarks and diagnostics (profiles, pool statistics).
  const Session& session() const { return *session_; }

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
  std::vector<int> donated_inputs_;           // plan inputs updated in place (parameters, states), see Initialize
  MemoryReservation state_memory_;            // the optimizer state tensors, in the module's budget
};

// Loads a checkpoint into a live Module (and its Optimizer, which may be null): `candidate` replaces
// `*module.state()` if it fits both (CheckReplacement), else InvalidArgument and nothing changes. Gradients
// accumulate afresh from the next TrainStep (LazyResetGrad). A candidate without an optimizer section restarts the
// optimizer (zero moments, step 0, the learning rate the Optimizer was created with), as a new Optimizer over it
// would.
absl::Status ReplaceCheckpointState(CheckpointState candidate, Module& module, Optimizer* optimizer);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_MODULE_H_
