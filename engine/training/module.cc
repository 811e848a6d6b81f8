#include "engine/training/module.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/autodiff/gradient_builder.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/gpu/gpu_executor.h"
#include "engine/io/file_util.h"
#include "engine/model/external_tensor.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/executor.h"
#include "engine/training/forward_backward.h"
#include "onnx/shape_inference/implementation.h"

namespace traind::engine {
namespace {

absl::StatusOr<onnx::ModelProto> Validated(const onnx::ModelProto& model, const char* what) {
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " model cannot be serialized (over 2 GiB?)"));
  }
  absl::StatusOr<onnx::ModelProto> loaded = LoadModelFromBytes(bytes);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(), absl::StrCat("the ", what, " model: ", loaded.status().message()));
  }
  return loaded;
}

absl::StatusOr<onnx::ModelProto> LoadedFromFile(const std::string& path, const char* what) {
  absl::StatusOr<onnx::ModelProto> loaded = LoadModelFromFile(path);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("the ", what, " model '", path, "': ", loaded.status().message()));
  }
  return loaded;
}

// A declared graph value must have exactly this tensor's dtype and static shape (parameters, gradients and
// running statistics never have dynamic dimensions).
absl::Status CheckDeclaredLike(const GraphValue& declared, const Tensor& tensor, const std::string& what,
                               const char* model) {
  bool matches = declared.dtype == tensor.dtype();
  if (declared.has_shape) {
    matches = matches && declared.dims.size() == tensor.shape().size();
    for (size_t i = 0; matches && i < declared.dims.size(); ++i) {
      matches = declared.dims[i] < 0 || declared.dims[i] == tensor.shape()[i];
    }
  }
  if (!matches) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", model, " model's '", declared.name, "' is ", DataTypeName(declared.dtype), " ",
                     declared.has_shape ? ShapeToString(declared.dims) : "(any shape)", ", but ", what, " is ",
                     DataTypeName(tensor.dtype()), " ", ShapeToString(tensor.shape())));
  }
  return absl::OkStatus();
}

// Copies `from` into `to`'s existing buffer (same dtype and element count, checked by the caller), so that every
// holder of `to` sees the new values. A no-op when both share the buffer; on the device when `from` is there (the
// GPU optimizer's new parameters never cross to the host).
absl::Status CopyInPlace(const Tensor& from, Tensor& to) { return CopyTensorData(from, to); }

absl::StatusOr<Tensor> DeepCopy(const Tensor& tensor) {
  TRAIND_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(tensor.dtype(), tensor.shape()));
  TRAIND_RETURN_IF_ERROR(CopyTensorData(tensor, copy));
  return copy;
}

absl::StatusOr<double> ScalarValue(const Tensor& tensor, const std::string& name) {
  if (tensor.num_elements() != 1) {
    return absl::InternalError(absl::StrCat("'", name, "' is not a scalar: ", tensor.DebugString()));
  }
  switch (tensor.dtype()) {
    case DataType::kFloat32:
      return static_cast<double>(*tensor.data<float>());
    case DataType::kFloat64:
      return *tensor.data<double>();
    default:
      return absl::InternalError(absl::StrCat("'", name, "' is ", tensor.DebugString(), ", not float or double"));
  }
}

// Every value's declared or inferred type.
absl::StatusOr<absl::flat_hash_map<std::string, onnx::TypeProto>> ValueTypes(const onnx::ModelProto& model) {
  absl::flat_hash_map<std::string, onnx::TypeProto> types;
  onnx::ModelProto inferred = model;
  try {
    onnx::shape_inference::InferShapes(inferred);
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat("shape inference failed on the eval model: ", error.what()));
  }
  for (const auto* infos : {&inferred.graph().input(), &inferred.graph().value_info(), &inferred.graph().output()}) {
    for (const auto& info : *infos) {
      if (info.has_type()) types[info.name()] = info.type();
    }
  }
  return types;
}

absl::Status NoLossTrainingError() {
  return absl::FailedPreconditionError(
      "these artifacts have no loss: train with Forward and Backward (or generate artifacts with a loss)");
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------
// Module

Module::Module(CheckpointState* state, const ModuleOptions& options)
    : state_(state),
      options_(options),
      threads_(options.num_threads > 0 ? std::make_unique<ThreadPool>(options.num_threads) : nullptr) {}
Module::~Module() = default;

SessionOptions Module::session_options() const {
  SessionOptions session;
  session.threads = threads_.get();
  session.random_seed = options_.random_seed;
  session.memory_budget = budget_;
  session.channels_last = options_.channels_last;
  if (gpu_stream_ != nullptr) {
    gpu::GpuExecutorOptions gpu_options;
    gpu_options.stream = gpu_stream_;
    gpu_options.threads = threads_.get();
    gpu_options.random_seed = options_.random_seed;
    gpu_options.cpu_ops = options_.gpu_cpu_ops;
    session.make_executor = [gpu_options](std::shared_ptr<const Plan> plan, const onnx::ModelProto& model,
                                          std::shared_ptr<BufferPool> host_buffers)
        -> absl::StatusOr<std::unique_ptr<Executor>> {
      gpu::GpuExecutorOptions with_buffers = gpu_options;
      with_buffers.host_buffers = std::move(host_buffers);
      TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<gpu::GpuExecutor> executor,
                              gpu::GpuExecutor::Create(std::move(plan), model, std::move(with_buffers)));
      return std::unique_ptr<Executor>(std::move(executor));
    };
  }
  return session;
}

namespace {

// Bytes of a tensor's dtype and shape (a nominal parameter has no buffer yet); INT64_MAX when absurd.
int64_t DeclaredBytes(const Tensor& tensor) {
  absl::StatusOr<int64_t> count = ElementCount(tensor.shape());
  int64_t bytes = 0;
  if (!count.ok() || !CheckedMul(*count, static_cast<int64_t>(ElementSize(tensor.dtype())), &bytes)) {
    return std::numeric_limits<int64_t>::max();
  }
  return bytes;
}

int64_t SumOfBytes(const std::vector<Parameter>& parameters, bool trainable_only) {
  int64_t total = 0;
  for (const Parameter& parameter : parameters) {
    if (trainable_only && !parameter.requires_grad) continue;
    const int64_t bytes = DeclaredBytes(parameter.data);
    total = bytes > std::numeric_limits<int64_t>::max() - total ? std::numeric_limits<int64_t>::max() : total + bytes;
  }
  return total;
}

}  // namespace

int64_t Module::GradientBytes() const { return SumOfBytes(state_->parameters, /*trainable_only=*/true); }

absl::StatusOr<std::unique_ptr<Module>> Module::Create(const onnx::ModelProto& training_model,
                                                       const onnx::ModelProto* eval_model, CheckpointState* state,
                                                       const ModuleOptions& options) {
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto training, Validated(training_model, "training"));
  std::optional<onnx::ModelProto> eval;
  if (eval_model != nullptr) {
    TRAIND_ASSIGN_OR_RETURN(eval, Validated(*eval_model, "eval"));
  }
  if (state == nullptr) return absl::InvalidArgumentError("Module needs a checkpoint state");
  if (options.num_threads < 0) return absl::InvalidArgumentError("Module: num_threads must be >= 0");
  std::unique_ptr<Module> module(new Module(state, options));
  TRAIND_RETURN_IF_ERROR(module->Initialize(training, eval ? &*eval : nullptr));
  return module;
}

absl::StatusOr<std::unique_ptr<Module>> Module::Create(const Artifacts& artifacts, CheckpointState* state,
                                                       const ModuleOptions& options) {
  return Create(artifacts.training_model, &artifacts.eval_model, state, options);
}

absl::StatusOr<std::unique_ptr<Module>> Module::CreateFromFiles(const std::string& training_model_path,
                                                                const std::string& eval_model_path,
                                                                CheckpointState* state,
                                                                const ModuleOptions& options) {
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto training, LoadedFromFile(training_model_path, "training"));
  std::optional<onnx::ModelProto> eval;
  if (!eval_model_path.empty()) {
    TRAIND_ASSIGN_OR_RETURN(eval, LoadedFromFile(eval_model_path, "eval"));
  }
  if (state == nullptr) return absl::InvalidArgumentError("Module needs a checkpoint state");
  if (options.num_threads < 0) return absl::InvalidArgumentError("Module: num_threads must be >= 0");
  std::unique_ptr<Module> module(new Module(state, options));
  TRAIND_RETURN_IF_ERROR(module->Initialize(training, eval ? &*eval : nullptr));
  return module;
}

absl::Status Module::Initialize(const onnx::ModelProto& training_model, const onnx::ModelProto* eval_model) {
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(*state_, /*allow_shape_only=*/true));
  if (options_.executor == ExecutorKind::kGpu) {
    TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<gpu::Device> device, gpu::Device::Get(options_.gpu_device_index));
    TRAIND_ASSIGN_OR_RETURN(gpu_stream_, gpu::Stream::Create(std::move(device),
                                                             gpu::StreamOptions{options_.gpu_memory_limit_bytes}));
  }
  for (const Parameter& parameter : state_->parameters) {
    parameter_names_.push_back(parameter.name);
    if (parameter.requires_grad) trainable_names_.push_back(parameter.name);
  }
  if (options_.memory_budget_bytes > 0) {
    budget_ = MemoryBudget::Create(options_.memory_budget_bytes);
    TRAIND_ASSIGN_OR_RETURN(parameters_memory_,
                            MemoryReservation::Make(budget_, SumOfBytes(state_->parameters, /*trainable_only=*/false),
                                                    "the checkpoint's parameters"));
  }
  for (const auto& entry : training_model.metadata_props()) no_loss_ |= entry.key() == kDifferentiatedOutputsMetadata;
  TRAIND_RETURN_IF_ERROR(CompileModel(training_model, Role::kTrain, train_));
  if (eval_model != nullptr) TRAIND_RETURN_IF_ERROR(CompileModel(*eval_model, Role::kEval, eval_));
  forward_outputs_ = DefaultInferenceOutputs();
  if (no_loss_) TRAIND_RETURN_IF_ERROR(InitializeForwardBackward(training_model));
  if (gpu_stream_ != nullptr) {
    // The parameters go to the device now, once: a model that does not fit fails here, not at its first step.
    for (Parameter& parameter : state_->parameters) {
      if (parameter.data.defined()) TRAIND_RETURN_IF_ERROR(gpu_stream_->MakeDeviceCurrent(parameter.data).status());
    }
  }
  return absl::OkStatus();
}

absl::Status Module::CompileModel(onnx::ModelProto model, Role role, CompiledModel& compiled) {
  const char* const what = role == Role::kTrain          ? "training"
                           : role == Role::kEval         ? "eval"
                           : role == Role::kForwardPart  ? "training model's forward"
                           : role == Role::kBackwardPart ? "training model's backward"
                                                         : "inference";
  // Which of the training model's parts this model has: gradient buffers, the reset flag and gradient outputs;
  // running-statistic outputs; a loss first.
  const bool training = role == Role::kTrain || role == Role::kBackwardPart;
  const bool statistics = role == Role::kTrain || role == Role::kForwardPart;
  const bool loss_first = (role == Role::kTrain || role == Role::kEval) && !no_loss_;
  SessionOptions options = session_options();
  options.extra_resident_bytes = GradientBytes();  // the gradients held from the last TrainStep
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Create(model, options);
  if (!session.ok()) {
    return absl::Status(session.status().code(), absl::StrCat("the ", what, " model: ", session.status().message()));
  }
  compiled.session = *std::move(session);
  compiled.model = std::move(model);
  const Plan& plan = compiled.session->plan();

  absl::flat_hash_map<std::string, int> parameter_index;
  absl::flat_hash_map<std::string, int> buffer_index;  // gradient accumulation buffer name -> parameter
  for (size_t p = 0; p < state_->parameters.size(); ++p) {
    const Parameter& parameter = state_->parameters[p];
    parameter_index[parameter.name] = static_cast<int>(p);
    if (training && parameter.requires_grad) {
      buffer_index[GradientAccumulationBufferName(parameter.name)] = static_cast<int>(p);
    }
  }
  std::vector<bool> parameter_fed(state_->parameters.size(), false);
  std::vector<bool> buffer_fed(state_->parameters.size(), false);
  bool reset_fed = false;
  for (const GraphValue& input : plan.inputs) {
    Feed feed{Feed::Source::kUser, 0};
    if (auto it = parameter_index.find(input.name); it != parameter_index.end()) {
      feed = {Feed::Source::kParameter, it->second};
      parameter_fed[it->second] = true;
      TRAIND_RETURN_IF_ERROR(CheckDeclaredLike(input, state_->parameters[it->second].data,
                                               absl::StrCat("the checkpoint's parameter"), what));
    } else if (auto it = buffer_index.find(input.name); it != buffer_index.end()) {
      feed = {Feed::Source::kGradientBuffer, it->second};
      buffer_fed[it->second] = true;
      TRAIND_RETURN_IF_ERROR(CheckDeclaredLike(input, state_->parameters[it->second].data,
                                               "the parameter it accumulates the gradient of", what));
    } else if (training && input.name == kLazyResetGradName) {
      feed = {Feed::Source::kLazyReset, 0};
      reset_fed = true;
      if (input.dtype != DataType::kBool) {
        return absl::InvalidArgumentError(
            absl::StrCat("the training model's '", kLazyResetGradName, "' input is not bool"));
      }
    } else if (training && absl::EndsWith(input.name, GradientAccumulationBufferName(""))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the training model takes gradient buffer '", input.name,
          "', which belongs to no trainable parameter of the checkpoint (requires_grad does not match the model?)"));
    } else {
      feed.index = static_cast<int>(compiled.user_inputs.size());
      compiled.user_inputs.push_back(input.name);
    }
    compiled.feeds.push_back(feed);
  }
  for (size_t p = 0; p < state_->parameters.size(); ++p) {
    const Parameter& parameter = state_->parameters[p];
    if (!parameter_fed[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint parameter '", parameter.name, "' is not an input of the ", what, " model"));
    }
    if (training && parameter.requires_grad && !buffer_fed[p]) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint parameter '", parameter.name,
                                                     "' requires a gradient, but the training model has "
                                                     "no input '",
                                                     GradientAccumulationBufferName(parameter.name), "'"));
    }
  }
  if (training && !reset_fed) {
    return absl::InvalidArgumentError(absl::StrCat("the training model has no input '", kLazyResetGradName, "'"));
  }
  for (const auto& entry : compiled.model.metadata_props()) {
    if (!absl::StartsWith(entry.key(), kClassTargetMetadataPrefix)) continue;
    const std::string target = entry.key().substr(std::strlen(kClassTargetMetadataPrefix));
    const auto input = std::find(compiled.user_inputs.begin(), compiled.user_inputs.end(), target);
    ClassTarget class_target;
    std::vector<std::string> fields = absl::StrSplit(entry.value(), ' ');
    if (input == compiled.user_inputs.end() || fields.size() != 2 ||
        !absl::SimpleAtoi(fields[0], &class_target.classes) || class_target.classes <= 0 ||
        !absl::SimpleAtoi(fields[1], &class_target.ignore_index)) {
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " model's metadata '", entry.key(), "' = '",
                                                     entry.value(), "' names no class-id input of the model"));
    }
    class_target.user_input = static_cast<int>(input - compiled.user_inputs.begin());
    compiled.class_targets.push_back(class_target);
  }

  if (loss_first && (plan.outputs.empty() || plan.outputs[0].name != kLossName)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " model's first output must be '", kLossName, "'"));
  }
  absl::flat_hash_map<std::string, int> gradient_output_index, statistic_output_index;
  for (size_t p = 0; p < state_->parameters.size(); ++p) {
    const Parameter& parameter = state_->parameters[p];
    if (training && parameter.requires_grad) {
      gradient_output_index[GradientAccumulationOutputName(parameter.name)] = static_cast<int>(p);
    } else if (statistics && !parameter.requires_grad) {
      statistic_output_index[RunningStatisticOutputName(parameter.name)] = static_cast<int>(p);
    }
  }
  std::vector<bool> gradient_out(state_->parameters.size(), false);
  for (size_t o = 0; o < plan.outputs.size(); ++o) {
    const GraphValue& output = plan.outputs[o];
    if (auto it = gradient_output_index.find(output.name); it != gradient_output_index.end()) {
      TRAIND_RETURN_IF_ERROR(
          CheckDeclaredLike(output, state_->parameters[it->second].data, "the parameter it is the gradient of", what));
      compiled.gradient_outputs.emplace_back(static_cast<int>(o), it->second);
      gradient_out[it->second] = true;
    } else if (auto it = statistic_output_index.find(output.name); it != statistic_output_index.end()) {
      TRAIND_RETURN_IF_ERROR(
          CheckDeclaredLike(output, state_->parameters[it->second].data, "the running statistic", what));
      compiled.running_statistic_outputs.emplace_back(static_cast<int>(o), it->second);
    } else {
      compiled.user_outputs.push_back(output.name);
      compiled.user_output_indices.push_back(static_cast<int>(o));
    }
  }
  for (size_t p = 0; p < state_->parameters.size(); ++p) {
    if (training && state_->parameters[p].requires_grad && !gradient_out[p]) {
      return absl::InvalidArgumentError(absl::StrCat("the training model has no output '",
                                                     GradientAccumulationOutputName(state_->parameters[p].name), "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status Module::CheckState() const {
  bool same = state_->parameters.size() == parameter_names_.size();
  for (size_t p = 0; same && p < parameter_names_.size(); ++p) {
    same = state_->parameters[p].name == parameter_names_[p];
  }
  if (!same) {
    return absl::FailedPreconditionError(
        "the checkpoint state no longer has the parameters this Module was created with (load only checkpoints "
        "of the same model into it)");
  }
  for (const Parameter& parameter : state_->parameters) {
    if (!parameter.data.defined()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", parameter.name, "' has no data (a nominal checkpoint): CopyBufferToParameters first"));
    }
  }
  return absl::OkStatus();
}

absl::Status Module::CheckReplacement(const CheckpointState& candidate) const {
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(candidate, /*allow_shape_only=*/false));
  if (candidate.parameters.size() != state_->parameters.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint has ", candidate.parameters.size(),
                                                   " parameters, the model ", state_->parameters.size()));
  }
  for (size_t p = 0; p < candidate.parameters.size(); ++p) {
    const Parameter& theirs = candidate.parameters[p];
    const Parameter& ours = state_->parameters[p];
    if (theirs.name != ours.name) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint's parameter ", p, " is '", theirs.name,
                                                     "', the model's '", ours.name, "'"));
    }
    if (theirs.data.dtype() != ours.data.dtype() || theirs.data.shape() != ours.data.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint's parameter '", theirs.name, "' is ",
                                                     theirs.data.DebugString(), ", the model's ",
                                                     ours.data.DebugString()));
    }
    if (theirs.requires_grad != ours.requires_grad) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint's parameter '", theirs.name, "' is ",
                                                     theirs.requires_grad ? "trainable" : "frozen",
                                                     ", the model's is not"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Module::Feeds(const CompiledModel& compiled, const NamedTensors& inputs,
                                                  bool reset, bool check_shapes) const {
  TRAIND_RETURN_IF_ERROR(CheckState());
  const Plan& plan = compiled.session->plan();
  // The caller's tensors by user-input index.
  std::vector<const Tensor*> user(compiled.user_inputs.size(), nullptr);
  for (const auto& [name, tensor] : inputs) {
    size_t index = 0;
    while (index < compiled.user_inputs.size() && compiled.user_inputs[index] != name) ++index;
    if (index == compiled.user_inputs.size()) {
      const bool parameter = std::count(parameter_names_.begin(), parameter_names_.end(), name) > 0;
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown input '", name, "'", parameter ? " (a parameter: it comes from the checkpoint state)" : "",
          "; the model takes: ", absl::StrJoin(compiled.user_inputs, ", ")));
    }
    if (user[index] != nullptr) return absl::InvalidArgumentError(absl::StrCat("input '", name, "' given twice"));
    user[index] = &tensor;
  }
  for (size_t i = 0; i < user.size(); ++i) {
    if (user[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", compiled.user_inputs[i], "'"));
    }
  }
  for (const ClassTarget& target : compiled.class_targets) {
    const Tensor& ids = *user[target.user_input];
    if (ids.dtype() != DataType::kInt64 || !ids.defined()) continue;  // the declaration check reports it
    const int64_t* values = ids.data<int64_t>();
    for (int64_t e = 0; e < ids.num_elements(); ++e) {
      if ((values[e] < 0 || values[e] >= target.classes) && values[e] != target.ignore_index) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", compiled.user_inputs[target.user_input], "' holds class id ", values[e], " at element ", e,
            ", outside [0, ", target.classes, ")",
            target.ignore_index < 0 || target.ignore_index >= target.classes
                ? absl::StrCat(" and not the ignore_index ", target.ignore_index)
                : ""));
      }
    }
  }

  std::vector<Tensor> feeds(compiled.feeds.size());
  for (size_t i = 0; i < compiled.feeds.size(); ++i) {
    const Feed& feed = compiled.feeds[i];
    switch (feed.source) {
      case Feed::Source::kUser:
        // Checked here, not only by the executor, so that the message is about the caller's input.
        if (check_shapes) TRAIND_RETURN_IF_ERROR(CheckInputMatchesDeclaration(plan.inputs[i], *user[feed.index]));
        feeds[i] = *user[feed.index];
        break;
      case Feed::Source::kParameter:
        feeds[i] = state_->parameters[feed.index].data;
        break;
      case Feed::Source::kGradientBuffer: {
        const Parameter& parameter = state_->parameters[feed.index];
        if (reset) {
          feeds[i] = parameter.data;  // Not read under reset (AccumulateGradient); any tensor of the right type.
        } else if (parameter.has_grad()) {
          feeds[i] = parameter.grad;
        } else {
          // A state loaded without this gradient while others are being accumulated: it starts at zero.
          TRAIND_ASSIGN_OR_RETURN(feeds[i], Tensor::Allocate(parameter.data.dtype(), parameter.data.shape()));
        }
        break;
      }
      case Feed::Source::kLazyReset: {
        TRAIND_ASSIGN_OR_RETURN(feeds[i], Tensor::Allocate(DataType::kBool, {}));
        *feeds[i].mutable_data<uint8_t>() = reset ? 1 : 0;
        break;
      }
    }
  }
  return feeds;
}

std::vector<GraphValue> Module::UserInputs(const CompiledModel& compiled) {
  std::vector<GraphValue> inputs;
  if (compiled.session == nullptr) return inputs;
  const Plan& plan = compiled.session->plan();
  for (size_t i = 0; i < compiled.feeds.size(); ++i) {
    if (compiled.feeds[i].source == Feed::Source::kUser) inputs.push_back(plan.inputs[i]);
  }
  return inputs;
}

std::optional<bool> Module::GradientsCheckedFinite(absl::Span<const int> parameters) const {
  for (const int p : parameters) {
    const Tensor& grad = state_->parameters[p].grad;
    if (!grad.defined()) return std::nullopt;
    auto it = checked_gradients_.find(grad.buffer().get());
    // The same live buffer (a buffer freed since, whose address was reused, fails the lock).
    if (it == checked_gradients_.end() || it->second.lock() != grad.buffer()) return std::nullopt;
  }
  return checked_gradients_finite_;
}

NamedTensors Module::UserOutputs(const CompiledModel& compiled, std::vector<Tensor>& outputs) {
  NamedTensors named;
  named.reserve(compiled.user_outputs.size());
  for (size_t u = 0; u < compiled.user_outputs.size(); ++u) {
    named.emplace_back(compiled.user_outputs[u], std::move(outputs[compiled.user_output_indices[u]]));
  }
  return named;
}

absl::StatusOr<NamedTensors> Module::TrainStep(const NamedTensors& inputs) {
  if (no_loss_) return NoLossTrainingError();
  const bool reset = pending_reset_;
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> feeds, Feeds(train_, inputs, reset));
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, train_.session->Run(feeds));

  // A gradient output may share its buffer with something that changes later: a fed tensor (a parameter the
  // optimizer updates in place, a caller's input) or a constant of the plan. Held in Parameter::grad across steps,
  // it must own its storage.
  // (Buffers are compared, not host pointers: reading a device tensor's host pointer would download it.)
  absl::flat_hash_set<const Buffer*> foreign;
  for (const Tensor& feed : feeds) foreign.insert(feed.buffer().get());
  for (const auto& [slot, constant] : train_.session->plan().constants) foreign.insert(constant.buffer().get());
  for (const auto& [output, parameter] : train_.gradient_outputs) {
    Tensor& gradient = outputs[output];
    if (foreign.contains(gradient.buffer().get())) {
      TRAIND_ASSIGN_OR_RETURN(gradient, DeepCopy(gradient));
    }
  }
  // A batch holding NaN does not always show in the loss (Relu maps NaN to 0 here), but it does in the batch
  // statistics BatchNormalization blends into its running ones. On a GPU the gradients are checked too, so that
  // the Optimizer knows whether its step will be skipped without reading the flag back (GradientsCheckedFinite).
  // The loss and the checks come back in one download, here where a failure can still be reported; statistics and
  // gradients stay on the device.
  std::vector<std::vector<Tensor>> checked(gpu_stream_ != nullptr ? 2 : 1);
  for (const auto& [output, parameter] : train_.running_statistic_outputs) checked[0].push_back(outputs[output]);
  if (gpu_stream_ != nullptr) {
    for (const auto& [output, parameter] : train_.gradient_outputs) checked[1].push_back(outputs[output]);
  }
  TRAIND_ASSIGN_OR_RETURN(const std::vector<bool> checked_finite,
                          train_.session->executor().SyncScalarCheckingFinite(outputs[0], checked));
  TRAIND_ASSIGN_OR_RETURN(const double loss, ScalarValue(outputs[0], kLossName));
  const bool finite = std::isfinite(loss) && checked_finite[0];

  // Nothing fails from here on: the step is committed.
  for (const auto& [output, parameter] : train_.gradient_outputs) state_->parameters[parameter].grad = outputs[output];
  checked_gradients_.clear();
  if (gpu_stream_ != nullptr) {
    for (const Tensor& gradient : checked[1]) checked_gradients_.emplace(gradient.buffer().get(), gradient.buffer());
    checked_gradients_finite_ = checked_finite[1];
  }
  if (finite) {
    for (const auto& [output, parameter] : train_.running_statistic_outputs) {
      TRAIND_RETURN_IF_ERROR(CopyInPlace(outputs[output], state_->parameters[parameter].data));
    }
  }
  accumulated_steps_finite_ = (reset || accumulated_steps_finite_) && finite;
  pending_reset_ = false;
  return UserOutputs(train_, outputs);
}

absl::StatusOr<NamedTensors> Module::EvalStep(const NamedTensors& inputs) const {
  if (!has_eval_model()) return absl::FailedPreconditionError("this Module has no eval model");
  if (no_loss_) {
    return absl::FailedPreconditionError("these artifacts have no loss to evaluate: run Forward (training=false)");
  }
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> feeds, Feeds(eval_, inputs, /*reset=*/false));
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, eval_.session->Run(feeds));
  return UserOutputs(eval_, outputs);
}

void Module::LazyResetGrad() { pending_reset_ = true; }

absl::Status Module::CheckTrainingInputs(const NamedTensors& inputs, bool check_shapes) const {
  if (no_loss_) return NoLossTrainingError();
  return Feeds(train_, inputs, /*reset=*/true, check_shapes).status();
}

absl::StatusOr<NamedTensors> Module::Run(const NamedTensors& inputs) {
  return training_mode_ ? TrainStep(inputs) : EvalStep(inputs);
}

int64_t Module::GetParametersSize(bool trainable_only) const {
  return engine::GetParametersSize(*state_, trainable_only);
}

absl::StatusOr<Tensor> Module::GetContiguousParameters(bool trainable_only) const {
  TRAIND_RETURN_IF_ERROR(CheckState());
  return engine::GetContiguousParameters(*state_, trainable_only);
}

absl::Status Module::CopyBufferToParameters(absl::Span<const float> buffer, bool trainable_only) {
  // Not CheckState(): filling a nominal state is the point. Only the parameter list must be the compiled one.
  bool same = state_->parameters.size() == parameter_names_.size();
  for (size_t p = 0; same && p < parameter_names_.size(); ++p) same = state_->parameters[p].name == parameter_names_[p];
  if (!same) {
    return absl::FailedPreconditionError(
        "the checkpoint state no longer has the parameters this Module was created with");
  }
  return engine::CopyBufferToParameters(buffer, trainable_only, *state_);
}

absl::Status Module::ExportModelForInferencing(const std::string& path,
                                               const std::vector<std::string>& output_names) const {
  return ExportModelForInferencing(path, output_names, InferenceExportOptions()).status();
}

std::vector<std::string> Module::DefaultInferenceOutputs() const {
  std::vector<std::string> outputs;
  if (!has_eval_model()) return outputs;
  for (const auto& entry : eval_.model.metadata_props()) {
    if (entry.key() == kForwardOutputsMetadata) return absl::StrSplit(entry.value(), '\n', absl::SkipEmpty());
  }
  for (const std::string& name : eval_.user_outputs) {
    if (name != kLossName) outputs.push_back(name);
  }
  return outputs;
}

absl::StatusOr<std::string> Module::ExportInferenceModel(const std::vector<std::string>& output_names) const {
  TRAIND_ASSIGN_OR_RETURN(InferenceExport exported, ExportInference(output_names, InferenceExportOptions()));
  return std::move(exported.model_bytes);
}

absl::StatusOr<InferenceExport> Module::ExportInference(const std::vector<std::string>& output_names,
                                                        const InferenceExportOptions& options) const {
  std::vector<const Parameter*> embedded;
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto model, InferenceModel(output_names, &embedded));
  const std::string& data_file = options.external_data_file;
  if (!data_file.empty() && (data_file.find('/') != std::string::npos || data_file == "." || data_file == "..")) {
    return absl::InvalidArgumentError(absl::StrCat("external data file '", data_file, "' is not a plain file name"));
  }
  InferenceExport exported;
  exported.external_data = ExternalDataLayout(data_file);
  onnx::GraphProto* graph = model.mutable_graph();
  const int first = graph->initializer_size() - static_cast<int>(embedded.size());
  // Which parameters go inline, counted before any is copied: protobuf cannot serialize 2 GiB.
  int64_t inline_bytes = static_cast<int64_t>(model.ByteSizeLong());
  std::vector<bool> external(embedded.size(), false);
  for (size_t e = 0; e < embedded.size(); ++e) {
    const int64_t bytes = static_cast<int64_t>(embedded[e]->data.byte_size());
    external[e] = !data_file.empty() && bytes >= options.external_threshold_bytes;
    if (!external[e]) inline_bytes += bytes;
  }
  if (inline_bytes >= kMaxInlineModelBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the inference model would have ", inline_bytes, " bytes inline, beyond protobuf's 2 GiB: export its "
        "parameters to an external data file"));
  }
  // What is written must load: the graph (with the parameters as typed inputs, their data aside) is checked before
  // any parameter is copied. A failure here is a bug of this function, reported before anything is written.
  {
    onnx::ModelProto check = model;
    onnx::GraphProto* check_graph = check.mutable_graph();
    check_graph->mutable_initializer()->DeleteSubrange(first, static_cast<int>(embedded.size()));
    for (const Parameter* parameter : embedded) {
      onnx::ValueInfoProto* input = check_graph->add_input();
      input->set_name(parameter->name);
      auto* type = input->mutable_type()->mutable_tensor_type();
      type->set_elem_type(static_cast<int32_t>(parameter->data.dtype()));
      for (int64_t dim : parameter->data.shape()) type->mutable_shape()->add_dim()->set_dim_value(dim);
    }
    absl::StatusOr<onnx::ModelProto> loaded = LoadModelFromBytes(check.SerializeAsString());
    if (!loaded.ok()) {
      return absl::InternalError(absl::StrCat("the exported model does not load: ", loaded.status().message()));
    }
  }
  for (size_t e = 0; e < embedded.size(); ++e) {
    onnx::TensorProto* initializer = graph->mutable_initializer(first + static_cast<int>(e));
    if (external[e]) {
      exported.external_data.Add(embedded[e]->data, *initializer);
    } else {
      *initializer = TensorToProto(embedded[e]->data, embedded[e]->name);
    }
  }
  if (!model.SerializeToString(&exported.model_bytes)) {
    return absl::InternalError("the inference model cannot be serialized");
  }
  return exported;
}

absl::StatusOr<ExportedFiles> Module::ExportModelForInferencing(const std::string& path,
                                                                const std::vector<std::string>& output_names,
                                                                const InferenceExportOptions& options) const {
  const size_t slash = path.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "." : path.substr(0, slash);
  if (!options.external_data_file.empty() &&
      options.external_data_file == path.substr(slash == std::string::npos ? 0 : slash + 1)) {
    return absl::InvalidArgumentError("the external data file must not be the model file itself");
  }
  TRAIND_ASSIGN_OR_RETURN(InferenceExport exported, ExportInference(output_names, options));
  ExportedFiles files{path, static_cast<int64_t>(exported.model_bytes.size()), Sha256Hex(exported.model_bytes),
                      "", 0, ""};
  if (!exported.external_data.empty()) {
    // The data file first: a model never references a file that is not there.
    TRAIND_ASSIGN_OR_RETURN(files.external_data_sha256_hex,
                            WriteExternalData(exported.external_data, directory, options.durable));
    files.external_data_path = directory + "/" + exported.external_data.file_name();
    files.external_data_bytes = exported.external_data.size_bytes();
  }
  absl::Status written = WriteFileAtomically(path, exported.model_bytes);
  if (written.ok() && !exported.external_data.empty()) {
    // References checked against the written data file (which stays in its file: nothing is read).
    LoadOptions check;
    check.map_external_data = true;
    absl::StatusOr<onnx::ModelProto> loaded = LoadModelFromFile(path, check);
    if (!loaded.ok()) {
      written = absl::InternalError(absl::StrCat("the exported model does not load: ", loaded.status().message()));
      ::unlink(path.c_str());
    }
  }
  if (!written.ok()) {
    if (!files.external_data_path.empty()) ::unlink(files.external_data_path.c_str());
    return written;
  }
  return files;
}

absl::StatusOr<onnx::ModelProto> Module::InferenceModel(const std::vector<std::string>& output_names,
                                                        std::vector<const Parameter*>* embedded) const {
  if (!has_eval_model()) return absl::FailedPreconditionError("this Module has no eval model to export");
  TRAIND_RETURN_IF_ERROR(CheckState());
  if (output_names.empty()) return absl::InvalidArgumentError("no output to export");

  onnx::ModelProto model = eval_.model;
  onnx::GraphProto* graph = model.mutable_graph();

  // Every value's type, for the new graph outputs.
  TRAIND_ASSIGN_OR_RETURN(const auto types, ValueTypes(model));
  absl::flat_hash_set<std::string> produced;
  for (const auto& node : graph->node()) produced.insert(node.output().begin(), node.output().end());
  for (const std::string& name : eval_.user_inputs) produced.insert(name);
  std::set<std::string> seen;
  graph->clear_output();
  for (const std::string& name : output_names) {
    if (name.empty()) return absl::InvalidArgumentError("an output name is empty");
    if (name == kLossName) {
      return absl::InvalidArgumentError(absl::StrCat("'", kLossName,
                                                     "' cannot be exported: an inference model has "
                                                     "no loss (export the loss's input instead)"));
    }
    if (!seen.insert(name).second) return absl::InvalidArgumentError(absl::StrCat("output '", name, "' given twice"));
    if (!produced.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a value of the eval model"));
    }
    auto type = types.find(name);
    if (type == types.end()) return absl::InvalidArgumentError(absl::StrCat("output '", name, "' has no known type"));
    onnx::ValueInfoProto* output = graph->add_output();
    output->set_name(name);
    *output->mutable_type() = type->second;
  }

  // Keep the nodes the outputs need (nodes are in topological order: walk backwards).
  absl::flat_hash_set<std::string> needed(output_names.begin(), output_names.end());
  std::vector<bool> keep(graph->node_size(), false);
  for (int n = graph->node_size() - 1; n >= 0; --n) {
    const onnx::NodeProto& node = graph->node(n);
    for (const auto& output : node.output()) keep[n] = keep[n] || needed.contains(output);
    if (!keep[n]) continue;
    needed.insert(node.input().begin(), node.input().end());
    // Subgraph (If/Loop/Scan) bodies may read outer values by name: keep whatever they mention.
    for (const auto& attribute : node.attribute()) {
      std::vector<const onnx::GraphProto*> bodies;
      if (attribute.has_g()) bodies.push_back(&attribute.g());
      for (const auto& g : attribute.graphs()) bodies.push_back(&g);
      while (!bodies.empty()) {
        const onnx::GraphProto* body = bodies.back();
        bodies.pop_back();
        for (const auto& inner : body->node()) {
          needed.insert(inner.input().begin(), inner.input().end());
          for (const auto& a : inner.attribute()) {
            if (a.has_g()) bodies.push_back(&a.g());
            for (const auto& g : a.graphs()) bodies.push_back(&g);
          }
        }
      }
    }
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  std::set<std::string> domains_used;
  for (int n = 0; n < graph->node_size(); ++n) {
    if (!keep[n]) continue;
    const onnx::NodeProto& node = graph->node(n);
    if (node.domain() == kTraindTrainingDomain || node.domain() == kOnnxPreviewTrainingDomain) {
      return absl::InternalError(absl::StrCat("the eval model's node '", node.name(), "' (", node.domain(),
                                              "::", node.op_type(), ") is a training op; it cannot be exported"));
    }
    domains_used.insert(node.domain() == "ai.onnx" ? "" : node.domain());
    *nodes.Add() = node;
  }
  graph->mutable_node()->Swap(&nodes);

  // Parameters become initializers with their current values; unused inputs (targets) and initializers go.
  absl::flat_hash_map<std::string, const Parameter*> parameters;
  for (const Parameter& parameter : state_->parameters) parameters[parameter.name] = &parameter;
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  google::protobuf::RepeatedPtrField<onnx::TensorProto> initializers;
  for (const auto& initializer : graph->initializer()) {
    if (needed.contains(initializer.name())) *initializers.Add() = initializer;
  }
  // Parameters come last, as shells (name, dtype, dims): the callers fill in their data, inline or external.
  embedded->clear();
  for (const auto& input : graph->input()) {
    if (!needed.contains(input.name())) continue;
    auto parameter = parameters.find(input.name());
    if (parameter == parameters.end()) {
      *inputs.Add() = input;
    } else {
      embedded->push_back(parameter->second);
    }
  }
  for (const Parameter* parameter : *embedded) {
    onnx::TensorProto* shell = initializers.Add();
    shell->set_name(parameter->name);
    shell->set_data_type(static_cast<int32_t>(parameter->data.dtype()));
    for (int64_t dim : parameter->data.shape()) shell->add_dims(dim);
  }
  graph->mutable_input()->Swap(&inputs);
  graph->mutable_initializer()->Swap(&initializers);
  graph->clear_value_info();  // Stale for the pruned graph; the loader re-infers.

  google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto> opsets;
  for (const auto& opset : model.opset_import()) {
    const std::string domain = opset.domain() == "ai.onnx" ? "" : opset.domain();
    if (domain.empty() || domains_used.count(domain) > 0) *opsets.Add() = opset;
  }
  model.mutable_opset_import()->Swap(&opsets);
  model.set_producer_name("traind ExportModelForInferencing");
  // The loss's targets are gone: so is what the Module knew about them, and the training-only notes.
  google::protobuf::RepeatedPtrField<onnx::StringStringEntryProto> metadata;
  for (const auto& entry : model.metadata_props()) {
    if (!absl::StartsWith(entry.key(), kClassTargetMetadataPrefix) && entry.key() != kForwardOutputsMetadata) {
      *metadata.Add() = entry;
    }
  }
  model.mutable_metadata_props()->Swap(&metadata);
  return model;
}

// -------------------------------------------------------------------------------------------------------------
// Forward / Backward (artifacts without a loss) and inference

int64_t ForwardPass::SavedBytes() const {
  int64_t bytes = 0;
  for (const Tensor& tensor : saved) bytes += static_cast<int64_t>(tensor.byte_size());
  return bytes;
}

absl::Status Module::InitializeForwardBackward(const onnx::ModelProto& training_model) {
  for (const auto& entry : training_model.metadata_props()) {
    if (entry.key() == kDifferentiatedOutputsMetadata) {
      differentiated_outputs_ = absl::StrSplit(entry.value(), '\n', absl::SkipEmpty());
    } else if (entry.key() == kInputGradientsMetadata) {
      input_gradient_names_ = absl::StrSplit(entry.value(), '\n', absl::SkipEmpty());
    }
  }
  TRAIND_ASSIGN_OR_RETURN(ForwardBackwardSplit split, SplitForwardBackward(training_model, parameter_names_));
  TRAIND_RETURN_IF_ERROR(CompileModel(std::move(split.forward), Role::kForwardPart, forward_part_));
  forward_inputs_ = forward_part_.user_inputs;
  // The forward part's caller outputs: the forward model's outputs, then the computed saved values.
  const size_t forward_count = forward_part_.user_outputs.size() - split.computed_saved.size();
  forward_outputs_.assign(forward_part_.user_outputs.begin(), forward_part_.user_outputs.begin() + forward_count);
  for (const std::string& name : split.saved) {
    auto input = std::find(forward_inputs_.begin(), forward_inputs_.end(), name);
    if (input != forward_inputs_.end()) {
      saved_sources_.push_back(-1 - static_cast<int>(input - forward_inputs_.begin()));
      continue;
    }
    auto output = std::find(forward_part_.user_outputs.begin(), forward_part_.user_outputs.end(), name);
    if (output == forward_part_.user_outputs.end()) {
      return absl::InternalError(absl::StrCat("the forward part does not return '", name, "'"));
    }
    saved_sources_.push_back(static_cast<int>(output - forward_part_.user_outputs.begin()));
  }
  saved_names_ = std::move(split.saved);
  backward_part_model_ = std::move(split.backward);
  // The usual variant (every input gradient) now, so that a model the backward part cannot run fails here.
  return BackwardPart(std::vector<bool>(input_gradient_names_.size(), true)).status();
}

absl::StatusOr<const Module::CompiledModel*> Module::BackwardPart(const std::vector<bool>& wanted) {
  if (auto it = backward_parts_.find(wanted); it != backward_parts_.end()) return it->second.get();
  // Few variants in practice (which input gradients a caller wants rarely changes); a bounded cache all the same.
  constexpr size_t kMaxVariants = 8;
  if (backward_parts_.size() >= kMaxVariants) backward_parts_.erase(backward_parts_.begin());
  std::vector<std::string> outputs;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]) outputs.push_back(GradientName(input_gradient_names_[i]));
  }
  std::vector<std::string> inputs;
  for (const auto& output : backward_part_model_.graph().output()) {
    if (absl::EndsWith(output.name(), GradientAccumulationOutputName(""))) outputs.push_back(output.name());
  }
  for (const auto& input : backward_part_model_.graph().input()) inputs.push_back(input.name());
  auto compiled = std::make_unique<CompiledModel>();
  TRAIND_RETURN_IF_ERROR(
      CompileModel(RestrictToOutputs(backward_part_model_, outputs, inputs), Role::kBackwardPart, *compiled));
  return backward_parts_.emplace(wanted, std::move(compiled)).first->second.get();
}

absl::StatusOr<ForwardPass> Module::Forward(const NamedTensors& inputs) const {
  if (!no_loss_) {
    return absl::FailedPreconditionError(
        "these artifacts have a loss: train with TrainStep (Forward with training needs artifacts generated without "
        "a loss)");
  }
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> feeds, Feeds(forward_part_, inputs, /*reset=*/false));
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, forward_part_.session->Run(feeds));
  ForwardPass pass;
  const std::vector<int>& indices = forward_part_.user_output_indices;
  for (size_t o = 0; o < forward_outputs_.size(); ++o) {
    pass.finite = pass.finite && AllFinite(outputs[indices[o]]);
    pass.outputs.emplace_back(forward_outputs_[o], outputs[indices[o]]);
  }
  for (const auto& [output, parameter] : forward_part_.running_statistic_outputs) {
    pass.finite = pass.finite && AllFinite(outputs[output]);
    pass.running_statistics.push_back(outputs[output]);
  }
  // Feeds are in plan order; the caller's inputs among them by user-input index.
  std::vector<const Tensor*> user(forward_inputs_.size(), nullptr);
  for (size_t i = 0; i < forward_part_.feeds.size(); ++i) {
    if (forward_part_.feeds[i].source == Feed::Source::kUser) user[forward_part_.feeds[i].index] = &feeds[i];
  }
  for (const int source : saved_sources_) {
    pass.saved.push_back(source < 0 ? *user[-1 - source] : outputs[indices[source]]);
  }
  return pass;
}

absl::Status Module::ApplyRunningStatistics(const ForwardPass& pass) {
  if (!pass.finite) return absl::OkStatus();
  const auto& statistics = forward_part_.running_statistic_outputs;
  for (size_t s = 0; s < statistics.size() && s < pass.running_statistics.size(); ++s) {
    TRAIND_RETURN_IF_ERROR(CopyInPlace(pass.running_statistics[s], state_->parameters[statistics[s].second].data));
  }
  return absl::OkStatus();
}

absl::StatusOr<BackwardResult> Module::Backward(const ForwardPass& pass, const NamedTensors& output_gradients,
                                                const std::vector<std::string>& input_gradients,
                                                bool return_parameter_gradients) {
  if (!no_loss_) return absl::FailedPreconditionError("these artifacts have a loss: train with TrainStep");
  if (pass.saved.size() != saved_names_.size()) {
    return absl::InvalidArgumentError("the forward pass does not come from this Module");
  }
  // The outputs' gradients: known, once each, exactly of the forward pass's output shapes; zeros where missing.
  NamedTensors feeds_by_name;
  feeds_by_name.reserve(saved_names_.size() + differentiated_outputs_.size());
  for (size_t s = 0; s < saved_names_.size(); ++s) feeds_by_name.emplace_back(saved_names_[s], pass.saved[s]);
  bool finite = pass.finite;
  for (const std::string& output : differentiated_outputs_) {
    const Tensor* forward_value = nullptr;
    for (const auto& [name, tensor] : pass.outputs) {
      if (name == output) forward_value = &tensor;
    }
    if (forward_value == nullptr) return absl::InternalError(absl::StrCat("the pass lacks output '", output, "'"));
    const Tensor* given = nullptr;
    for (const auto& [name, tensor] : output_gradients) {
      if (name != output) continue;
      if (given != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("the gradient of output '", output, "' is given twice"));
      }
      given = &tensor;
    }
    if (given == nullptr) {
      TRAIND_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Allocate(forward_value->dtype(), forward_value->shape()));
      feeds_by_name.emplace_back(GradientName(output), std::move(zeros));
      continue;
    }
    if (given->dtype() != forward_value->dtype() || given->shape() != forward_value->shape()) {
      return absl::InvalidArgumentError(absl::StrCat("the gradient of output '", output, "' is ", given->DebugString(),
                                                     "; the output is ", DataTypeName(forward_value->dtype()), " ",
                                                     ShapeToString(forward_value->shape())));
    }
    finite = finite && AllFinite(*given);
    feeds_by_name.emplace_back(GradientName(output), *given);
  }
  for (const auto& [name, tensor] : output_gradients) {
    if (std::find(differentiated_outputs_.begin(), differentiated_outputs_.end(), name) ==
        differentiated_outputs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an output these artifacts differentiate (",
                                                     absl::StrJoin(differentiated_outputs_, ", "), ")"));
    }
  }
  std::vector<bool> wanted(input_gradient_names_.size(), false);
  for (const std::string& name : input_gradients) {
    auto it = std::find(input_gradient_names_.begin(), input_gradient_names_.end(), name);
    if (it == input_gradient_names_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no gradient of input '", name, "' (these artifacts give ",
                                                     input_gradient_names_.empty()
                                                         ? std::string("none")
                                                         : absl::StrJoin(input_gradient_names_, ", "),
                                                     ")"));
    }
    if (wanted[it - input_gradient_names_.begin()]) {
      return absl::InvalidArgumentError(absl::StrCat("the gradient of input '", name, "' is asked for twice"));
    }
    wanted[it - input_gradient_names_.begin()] = true;
  }
  TRAIND_ASSIGN_OR_RETURN(const CompiledModel* backward, BackwardPart(wanted));
  // Run with the reset flag set, so that the gradient outputs are this pass's own; they are accumulated below as
  // AccumulateGradient does (buffer + gradient, the same float addition).
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> feeds, Feeds(*backward, feeds_by_name, /*reset=*/true));
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, backward->session->Run(feeds));

  absl::flat_hash_set<const Buffer*> foreign;  // buffers, not host pointers (see TrainStep)
  for (const Tensor& feed : feeds) foreign.insert(feed.buffer().get());
  for (const auto& [slot, constant] : backward->session->plan().constants) foreign.insert(constant.buffer().get());
  BackwardResult result;
  std::vector<std::pair<int, Tensor>> accumulated;  // parameter index, new gradient
  for (const auto& [output, parameter] : backward->gradient_outputs) {
    Tensor gradient = outputs[output];
    if (foreign.contains(gradient.buffer().get())) {
      TRAIND_ASSIGN_OR_RETURN(gradient, DeepCopy(gradient));
    }
    const Parameter& held = state_->parameters[parameter];
    Tensor total = gradient;
    if (!pending_reset_ && held.has_grad()) {
      if (gradient.dtype() != DataType::kFloat32 || held.grad.dtype() != DataType::kFloat32) {
        return absl::UnimplementedError(absl::StrCat("gradients of '", held.name, "' accumulate in float32 only"));
      }
      TRAIND_ASSIGN_OR_RETURN(total, Tensor::Allocate(gradient.dtype(), gradient.shape()));
      const float* a = held.grad.data<float>();
      const float* b = gradient.data<float>();
      float* sum = total.mutable_data<float>();
      for (int64_t i = 0; i < total.num_elements(); ++i) sum[i] = a[i] + b[i];
    }
    if (return_parameter_gradients) {
      TRAIND_ASSIGN_OR_RETURN(Tensor copy, DeepCopy(gradient));
      result.parameter_gradients.emplace_back(held.name, std::move(copy));
    }
    accumulated.emplace_back(parameter, std::move(total));
  }
  NamedTensors returned = UserOutputs(*backward, outputs);
  for (const std::string& name : input_gradients) {
    for (auto& [output, tensor] : returned) {
      if (output == GradientName(name)) result.input_gradients.emplace_back(name, tensor);
    }
  }
  // Nothing fails from here on: the gradients are committed.
  for (auto& [parameter, gradient] : accumulated) state_->parameters[parameter].grad = std::move(gradient);
  accumulated_steps_finite_ = (pending_reset_ || accumulated_steps_finite_) && finite;
  pending_reset_ = false;
  return result;
}

absl::StatusOr<NamedTensors> Module::Infer(const NamedTensors& inputs, const std::vector<std::string>& requested) {
  if (!has_eval_model()) return absl::FailedPreconditionError("this Module has no eval model to run inference with");
  // Any value of the eval model but the loss may be an output (as ExportInferenceModel allows); by default the
  // forward model's outputs that the eval model computes (with a loss, it keeps only what the loss and the
  // additional outputs need).
  auto produced_by = [](const onnx::ModelProto& model) {
    absl::flat_hash_set<std::string> produced;
    for (const auto& node : model.graph().node()) produced.insert(node.output().begin(), node.output().end());
    return produced;
  };
  std::vector<std::string> outputs = requested;
  if (outputs.empty()) {
    const absl::flat_hash_set<std::string> produced = produced_by(eval_.model);
    for (const std::string& name : forward_outputs_) {
      if (produced.contains(name)) outputs.push_back(name);
    }
  }
  if (outputs.empty()) return absl::InvalidArgumentError("no output to compute");
  auto it = inference_models_.find(outputs);
  if (it == inference_models_.end()) {
    onnx::ModelProto model = eval_.model;
    TRAIND_ASSIGN_OR_RETURN(const auto types, ValueTypes(model));
    const absl::flat_hash_set<std::string> produced = produced_by(model);
    std::set<std::string> seen;
    model.mutable_graph()->clear_output();
    for (const std::string& name : outputs) {
      auto type = types.find(name);
      if (name == kLossName || !produced.contains(name) || type == types.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown output '", name, "'; the model's outputs are: ",
                                                       absl::StrJoin(forward_outputs_, ", ")));
      }
      if (!seen.insert(name).second) return absl::InvalidArgumentError(absl::StrCat("output '", name, "' twice"));
      onnx::ValueInfoProto* output = model.mutable_graph()->add_output();
      output->set_name(name);
      *output->mutable_type() = type->second;
    }
    constexpr size_t kMaxVariants = 8;
    if (inference_models_.size() >= kMaxVariants) inference_models_.erase(inference_models_.begin());
    auto compiled = std::make_unique<CompiledModel>();
    onnx::ModelProto restricted = RestrictToOutputs(model, outputs, parameter_names_);
    // The loss's targets are gone, and with them what the Module knew about them.
    google::protobuf::RepeatedPtrField<onnx::StringStringEntryProto> metadata;
    for (const auto& entry : restricted.metadata_props()) {
      if (!absl::StartsWith(entry.key(), kClassTargetMetadataPrefix)) *metadata.Add() = entry;
    }
    restricted.mutable_metadata_props()->Swap(&metadata);
    TRAIND_RETURN_IF_ERROR(CompileModel(std::move(restricted), Role::kInference, *compiled));
    it = inference_models_.emplace(outputs, std::move(compiled)).first;
  }
  const CompiledModel& model = *it->second;
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> feeds, Feeds(model, inputs, /*reset=*/false));
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> results, model.session->Run(feeds));
  return UserOutputs(model, results);
}

// -------------------------------------------------------------------------------------------------------------
// Optimizer

Optimizer::~Optimizer() = default;

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const onnx::ModelProto& optimizer_model, Module* module,
                                                             const OptimizerOptions& options) {
  if (module == nullptr) return absl::InvalidArgumentError("Optimizer needs a Module");
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto model, Validated(optimizer_model, "optimizer"));
  std::unique_ptr<Optimizer> optimizer(new Optimizer(module));
  TRAIND_RETURN_IF_ERROR(optimizer->Initialize(model, options));
  return optimizer;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::CreateFromFile(const std::string& optimizer_model_path,
                                                                     Module* module, const OptimizerOptions& options) {
  if (module == nullptr) return absl::InvalidArgumentError("Optimizer needs a Module");
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto model, LoadedFromFile(optimizer_model_path, "optimizer"));
  std::unique_ptr<Optimizer> optimizer(new Optimizer(module));
  TRAIND_RETURN_IF_ERROR(optimizer->Initialize(model, options));
  return optimizer;
}

absl::Status Optimizer::Initialize(const onnx::ModelProto& optimizer_model, const OptimizerOptions& options) {
  if (options.initial_learning_rate.has_value()) {
    initial_learning_rate_ = *options.initial_learning_rate;
  } else {
    for (const auto& entry : optimizer_model.metadata_props()) {
      if (entry.key() == kInitialLearningRateMetadata && !absl::SimpleAtof(entry.value(), &initial_learning_rate_)) {
        return absl::InvalidArgumentError(absl::StrCat("the optimizer model's metadata '", entry.key(), "' = '",
                                                       entry.value(), "' is not a number"));
      }
    }
  }
  if (!std::isfinite(initial_learning_rate_) || initial_learning_rate_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial learning rate must be finite and >= 0, got ", initial_learning_rate_));
  }
  TRAIND_ASSIGN_OR_RETURN(session_, Session::Create(optimizer_model, module_->session_options()));
  const Plan& plan = session_->plan();
  const CheckpointState& state = *module_->state();

  // Inputs: learning_rate, step, then per parameter: p, GradientName(p), p.<state>... (artifacts.h).
  auto input_error = [](const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer model: ", problem));
  };
  if (plan.inputs.size() < 2 || plan.inputs[0].name != kLearningRateName || plan.inputs[1].name != kStepName) {
    return input_error(absl::StrCat("its first inputs must be '", kLearningRateName, "' and '", kStepName, "'"));
  }
  if (plan.inputs[0].dtype != DataType::kFloat32 || plan.inputs[1].dtype != DataType::kInt64) {
    return input_error(absl::StrCat("'", kLearningRateName, "' must be float and '", kStepName, "' int64"));
  }
  absl::flat_hash_map<std::string, int> checkpoint_index;
  for (size_t p = 0; p < state.parameters.size(); ++p) checkpoint_index[state.parameters[p].name] = static_cast<int>(p);
  size_t i = 2;
  bool first = true;
  std::vector<int> updated_inputs;  // parameters and states
  while (i < plan.inputs.size()) {
    const std::string& name = plan.inputs[i].name;
    auto it = checkpoint_index.find(name);
    if (it == checkpoint_index.end() || !state.parameters[it->second].requires_grad) {
      return input_error(absl::StrCat("input '", name, "' is not a trainable parameter of the checkpoint"));
    }
    if (i + 1 >= plan.inputs.size() || plan.inputs[i + 1].name != GradientName(name)) {
      return input_error(
          absl::StrCat("parameter '", name, "' must be followed by its gradient '", GradientName(name), "'"));
    }
    std::vector<std::string> states;
    size_t next = i + 2;
    const std::string prefix = OptimizerStateName(name, "");
    while (next < plan.inputs.size() && absl::StartsWith(plan.inputs[next].name, prefix) &&
           checkpoint_index.count(plan.inputs[next].name) == 0) {
      states.push_back(plan.inputs[next].name.substr(prefix.size()));
      ++next;
    }
    if (first) {
      state_names_ = states;
      first = false;
    } else if (states != state_names_) {
      return input_error(absl::StrCat("parameter '", name, "' has states {", absl::StrJoin(states, ", "), "}, others {",
                                      absl::StrJoin(state_names_, ", "), "}"));
    }
    for (size_t k = i; k < next; ++k) {
      TRAIND_RETURN_IF_ERROR(CheckDeclaredLike(plan.inputs[k], state.parameters[it->second].data,
                                               absl::StrCat("parameter '", name, "'"), "optimizer"));
    }
    parameter_names_.push_back(name);
    parameter_indices_.push_back(it->second);
    updated_inputs.push_back(static_cast<int>(i));
    for (size_t k = i + 2; k < next; ++k) updated_inputs.push_back(static_cast<int>(k));
    i = next;
  }
  const std::vector<std::string>& trainable = module_->TrainableParameterNames();
  if (std::set<std::string>(trainable.begin(), trainable.end()) !=
          std::set<std::string>(parameter_names_.begin(), parameter_names_.end()) ||
      parameter_names_.size() != trainable.size()) {
    return input_error(absl::StrCat("it updates {", absl::StrJoin(parameter_names_, ", "), "}, but the module trains {",
                                    absl::StrJoin(trainable, ", "), "}"));
  }
  // Outputs: UpdatedName of every parameter and state, in input order, then skipped.
  std::vector<std::string> expected_outputs;
  for (const std::string& name : parameter_names_) {
    expected_outputs.push_back(UpdatedName(name));
    for (const std::string& s : state_names_) expected_outputs.push_back(UpdatedName(OptimizerStateName(name, s)));
  }
  expected_outputs.push_back(kSkippedName);
  std::vector<std::string> outputs;
  for (const GraphValue& output : plan.outputs) outputs.push_back(output.name);
  if (outputs != expected_outputs) {
    return input_error(absl::StrCat("its outputs are {", absl::StrJoin(outputs, ", "), "}, expected {",
                                    absl::StrJoin(expected_outputs, ", "), "}"));
  }
  if (plan.outputs.back().dtype != DataType::kBool) {
    return input_error(absl::StrCat("'", kSkippedName, "' must be bool"));
  }
  // In-place updates only when one node is the whole model (GenerateArtifacts' fused AdamW / SGD): that node checks
  // everything before its first write, so a failed step changes nothing. A model of several nodes (ONNX's standard
  // optimizer ops, or an uploaded model) could fail after a write; its results are copied back after the run.
  if (plan.nodes.size() == 1) donated_inputs_ = std::move(updated_inputs);
  if (module_->memory_budget() != nullptr) {
    const int64_t per_state = module_->GradientBytes();
    const int64_t states = static_cast<int64_t>(state_names_.size());
    TRAIND_ASSIGN_OR_RETURN(
        state_memory_, MemoryReservation::Make(module_->memory_budget(),
                                               states > 0 && per_state > std::numeric_limits<int64_t>::max() / states
                                                   ? std::numeric_limits<int64_t>::max()
                                                   : per_state * states,
                                               "the optimizer state"));
  }
  return EnsureState();
}

absl::Status Optimizer::EnsureState() {
  CheckpointState& state = *module_->state();
  for (size_t k = 0; k < parameter_indices_.size(); ++k) {
    const int p = parameter_indices_[k];
    if (static_cast<size_t>(p) >= state.parameters.size() || state.parameters[p].name != parameter_names_[k]) {
      return absl::FailedPreconditionError(
          "the checkpoint state no longer has the parameters this Optimizer was created with");
    }
  }
  if (!state.optimizer.has_value()) {
    OptimizerState& created = state.optimizer.emplace();
    created.group.step = 0;
    created.group.initial_learning_rate = initial_learning_rate_;
    created.group.learning_rate = initial_learning_rate_;
    if (!state.scheduler.kind.empty()) {
      TRAIND_ASSIGN_OR_RETURN(LearningRateScheduler scheduler, LearningRateScheduler::FromState(state.scheduler));
      TRAIND_ASSIGN_OR_RETURN(created.group.learning_rate,
                              scheduler.LearningRate(0, created.group.initial_learning_rate));
    }
  }
  // Check everything before creating anything, so that a mismatch changes nothing.
  TRAIND_RETURN_IF_ERROR(CheckOptimizerState(state));
  OptimizerState& optimizer = *state.optimizer;
  for (size_t k = 0; k < parameter_indices_.size(); ++k) {
    const Parameter& parameter = state.parameters[parameter_indices_[k]];
    std::map<std::string, Tensor>& states = optimizer.parameter_states[parameter.name];
    for (const std::string& name : state_names_) {
      if (states.count(name) > 0) continue;
      TRAIND_ASSIGN_OR_RETURN(states[name], Tensor::Allocate(parameter.data.dtype(), parameter.data.shape()));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::CheckReplacement(const CheckpointState& candidate) const {
  if (!candidate.optimizer.has_value()) return absl::OkStatus();
  return CheckOptimizerState(candidate);
}

absl::Status Optimizer::CheckOptimizerState(const CheckpointState& state) const {
  if (!state.optimizer.has_value()) return absl::OkStatus();
  const OptimizerState& optimizer = *state.optimizer;
  if (optimizer.group.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's optimizer step is negative: ", optimizer.group.step));
  }
  if (!std::isfinite(optimizer.group.learning_rate) || optimizer.group.learning_rate < 0 ||
      !std::isfinite(optimizer.group.initial_learning_rate) || optimizer.group.initial_learning_rate < 0) {
    return absl::InvalidArgumentError("the checkpoint's learning rates must be finite and >= 0");
  }
  for (size_t k = 0; k < parameter_indices_.size(); ++k) {
    const Parameter& parameter = state.parameters[parameter_indices_[k]];
    auto states = optimizer.parameter_states.find(parameter.name);
    if (states == optimizer.parameter_states.end()) continue;
    for (const auto& [name, tensor] : states->second) {
      if (std::find(state_names_.begin(), state_names_.end(), name) == state_names_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("the checkpoint's optimizer state '", name, "' of '",
                                                       parameter.name, "' is not one this optimizer keeps ({",
                                                       absl::StrJoin(state_names_, ", "), "}): another optimizer?"));
      }
      if (tensor.dtype() != parameter.data.dtype() || tensor.shape() != parameter.data.shape() || !tensor.defined()) {
        return absl::InvalidArgumentError(absl::StrCat("the checkpoint's optimizer state '", name, "' of '",
                                                       parameter.name, "' is ", tensor.DebugString(),
                                                       ", the parameter ", parameter.data.DebugString()));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OptimizerStepResult> Optimizer::Step() {
  CheckpointState& state = *module_->state();
  TRAIND_RETURN_IF_ERROR(module_->CheckState());
  TRAIND_RETURN_IF_ERROR(EnsureState());
  OptimizerGroupState& group = state.optimizer->group;
  OptimizerStepResult result;
  result.step = group.step;
  result.learning_rate = group.learning_rate;
  for (const int p : parameter_indices_) {
    if (!state.parameters[p].has_grad()) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameter '", state.parameters[p].name, "' has no gradient: run TrainStep first"));
    }
  }
  // The fused optimizer skips exactly when a gradient element is not finite (optimizers.cc); where the last
  // TrainStep already checked these gradients on the GPU, the answer is known and `skipped` is not read back.
  const std::optional<bool> gradients_finite = module_->GradientsCheckedFinite(parameter_indices_);
  if (!module_->accumulated_steps_finite() || gradients_finite == false) {
    result.skipped = true;
    return result;
  }

  // The next learning rate, computed before anything is written so that a scheduler error changes nothing.
  float next_learning_rate = group.learning_rate;
  if (!state.scheduler.kind.empty()) {
    TRAIND_ASSIGN_OR_RETURN(LearningRateScheduler scheduler, LearningRateScheduler::FromState(state.scheduler));
    TRAIND_ASSIGN_OR_RETURN(next_learning_rate, scheduler.LearningRate(group.step + 1, group.initial_learning_rate));
  }
  const Plan& plan = session_->plan();
  std::vector<Tensor> feeds;
  feeds.reserve(plan.inputs.size());
  TRAIND_ASSIGN_OR_RETURN(feeds.emplace_back(), Tensor::FromVector<float>({}, {group.learning_rate}));
  TRAIND_ASSIGN_OR_RETURN(feeds.emplace_back(), Tensor::FromVector<int64_t>({}, {group.step + 1}));
  for (const int p : parameter_indices_) {
    const Parameter& parameter = state.parameters[p];
    feeds.push_back(parameter.data);
    feeds.push_back(parameter.grad);
    const std::map<std::string, Tensor>& states = state.optimizer->parameter_states.at(parameter.name);
    for (const std::string& name : state_names_) feeds.push_back(states.at(name));
  }
  // Parameters and states are updated where they are: the model's fused node writes into them (donated_inputs_,
  // see Initialize) after checking everything, so a failed run has changed nothing. Where the executor did not
  // take a donation, the result is copied back below.
  RunOptions run_options;
  run_options.donated_inputs = donated_inputs_;
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, session_->Run(feeds, run_options));
  const Tensor& skipped = outputs.back();
  if (skipped.dtype() != DataType::kBool || skipped.num_elements() != 1) {
    return absl::InternalError(absl::StrCat("the optimizer model's '", kSkippedName, "' is ", skipped.DebugString()));
  }
  if (!gradients_finite.has_value()) TRAIND_RETURN_IF_ERROR(skipped.buffer()->SyncToHost());
  if (!gradients_finite.has_value() && *skipped.data<uint8_t>() != 0) {
    result.skipped = true;
    return result;
  }
  // Write in place: the Module's sessions read these buffers, and anyone holding a parameter sees the update.
  size_t o = 0;
  for (const int p : parameter_indices_) {
    Parameter& parameter = state.parameters[p];
    TRAIND_RETURN_IF_ERROR(CopyInPlace(outputs[o++], parameter.data));
    std::map<std::string, Tensor>& states = state.optimizer->parameter_states.at(parameter.name);
    for (const std::string& name : state_names_) TRAIND_RETURN_IF_ERROR(CopyInPlace(outputs[o++], states.at(name)));
  }
  group.step += 1;
  group.learning_rate = next_learning_rate;
  result.step = group.step;
  result.learning_rate = group.learning_rate;
  return result;
}

absl::Status Optimizer::SetLearningRate(float learning_rate) {
  if (!std::isfinite(learning_rate) || learning_rate < 0) {
    return absl::InvalidArgumentError(absl::StrCat("learning rate must be finite and >= 0, got ", learning_rate));
  }
  TRAIND_RETURN_IF_ERROR(EnsureState());
  module_->state()->optimizer->group.learning_rate = learning_rate;
  return absl::OkStatus();
}

absl::Status Optimizer::SetInitialLearningRate(float learning_rate) {
  TRAIND_RETURN_IF_ERROR(SetLearningRate(learning_rate));
  module_->state()->optimizer->group.initial_learning_rate = learning_rate;
  return absl::OkStatus();
}

float Optimizer::GetLearningRate() const {
  const CheckpointState& state = *module_->state();
  return state.optimizer ? state.optimizer->group.learning_rate : initial_learning_rate_;
}

float Optimizer::GetInitialLearningRate() const {
  const CheckpointState& state = *module_->state();
  return state.optimizer ? state.optimizer->group.initial_learning_rate : initial_learning_rate_;
}

int64_t Optimizer::GetStep() const {
  const CheckpointState& state = *module_->state();
  return state.optimizer ? state.optimizer->group.step : 0;
}

absl::Status Optimizer::SetScheduler(const LearningRateScheduler& scheduler) {
  TRAIND_RETURN_IF_ERROR(EnsureState());
  OptimizerGroupState& group = module_->state()->optimizer->group;
  TRAIND_ASSIGN_OR_RETURN(const float learning_rate, scheduler.LearningRate(group.step, group.initial_learning_rate));
  module_->state()->scheduler = scheduler.ToState();
  group.learning_rate = learning_rate;
  return absl::OkStatus();
}

void Optimizer::ClearScheduler() { module_->state()->scheduler = SchedulerState(); }

absl::Status ReplaceCheckpointState(CheckpointState candidate, Module& module, Optimizer* optimizer) {
  TRAIND_RETURN_IF_ERROR(module.CheckReplacement(candidate));
  if (optimizer != nullptr) TRAIND_RETURN_IF_ERROR(optimizer->CheckReplacement(candidate));
  if (!candidate.scheduler.kind.empty()) {
    TRAIND_RETURN_IF_ERROR(LearningRateScheduler::FromState(candidate.scheduler).status());
  }
  // The Module and Optimizer read every tensor from the state at each run, so swapping the whole state is enough;
  // a missing optimizer section is created by the next Optimizer::Step (GetLearningRate reports the Optimizer's
  // initial learning rate until then).
  *module.state() = std::move(candidate);
  module.LazyResetGrad();
  return absl::OkStatus();
}

}  // namespace traind::engine
