#include "server/wire_convert.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor_bytes.h"

namespace traind {

using engine::DataType;

absl::StatusOr<DataType> DataTypeFromWire(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return DataType::kFloat32;
    case v1::FLOAT64:
      return DataType::kFloat64;
    case v1::INT64:
      return DataType::kInt64;
    case v1::INT32:
      return DataType::kInt32;
    case v1::BOOL:
      return DataType::kBool;
    case v1::UINT8:
      return DataType::kUint8;
    case v1::INT8:
      return DataType::kInt8;
    case v1::FLOAT16:
      return DataType::kFloat16;
    default:
      return absl::InvalidArgumentError(absl::StrCat("dtype ", static_cast<int>(dtype), " is not a tensor dtype"));
  }
}

absl::StatusOr<v1::DataType> DataTypeToWire(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return v1::FLOAT32;
    case DataType::kFloat64:
      return v1::FLOAT64;
    case DataType::kInt64:
      return v1::INT64;
    case DataType::kInt32:
      return v1::INT32;
    case DataType::kBool:
      return v1::BOOL;
    case DataType::kUint8:
      return v1::UINT8;
    case DataType::kInt8:
      return v1::INT8;
    case DataType::kFloat16:
      return v1::FLOAT16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a ", engine::DataTypeName(dtype), " tensor cannot be sent (the wire has no such dtype)"));
  }
}

absl::StatusOr<engine::Tensor> TensorFromWire(const v1::Tensor& tensor, int64_t max_bytes, const std::string& what,
                                              engine::BufferPool* pool) {
  absl::StatusOr<DataType> dtype = DataTypeFromWire(tensor.dtype());
  if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", dtype.status().message()));
  return engine::TensorFromBytes(*dtype, tensor.shape(), tensor.data(), max_bytes, what, pool);
}

absl::Status TensorToWire(const std::string& name, const engine::Tensor& tensor, v1::Tensor* wire) {
  TRAIND_ASSIGN_OR_RETURN(const v1::DataType dtype, DataTypeToWire(tensor.dtype()));
  wire->set_name(name);
  wire->set_dtype(dtype);
  wire->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  wire->set_data(engine::TensorToBytes(tensor));
  return absl::OkStatus();
}

absl::StatusOr<engine::NamedTensors> NamedTensorsFromWire(const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors,
                                                          int64_t max_bytes, const std::string& field,
                                                          const std::string& item, engine::BufferPool* pool) {
  engine::NamedTensors named;
  named.reserve(tensors.size());
  for (int i = 0; i < tensors.size(); ++i) {
    const v1::Tensor& tensor = tensors.Get(i);
    if (tensor.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] has no name"));
    }
    TRAIND_ASSIGN_OR_RETURN(
        engine::Tensor decoded,
        TensorFromWire(tensor, max_bytes, absl::StrCat(item, " '", absl::CHexEscape(tensor.name()), "'"), pool));
    named.emplace_back(tensor.name(), std::move(decoded));
  }
  return named;
}

void TensorInfoToWire(const engine::GraphValue& value, v1::TensorInfo* wire) {
  wire->set_name(value.name);
  absl::StatusOr<v1::DataType> dtype = DataTypeToWire(value.dtype);
  wire->set_dtype(dtype.ok() ? *dtype : v1::DATA_TYPE_UNSPECIFIED);
  if (value.has_shape) {
    for (const int64_t dim : value.dims) wire->add_shape(dim < 0 ? -1 : dim);
  }
}

absl::StatusOr<engine::PropertyValue> PropertyFromWire(const std::string& name, const v1::Property& property) {
  switch (property.value_case()) {
    case v1::Property::kIntValue:
      return engine::PropertyValue(property.int_value());
    case v1::Property::kFloatValue:
      return engine::PropertyValue(property.float_value());
    case v1::Property::kStringValue:
      return engine::PropertyValue(property.string_value());
    default:
      return absl::InvalidArgumentError(absl::StrCat("property '", name, "' has no value"));
  }
}

void PropertyToWire(const engine::PropertyValue& value, v1::Property* wire) {
  if (const int64_t* integer = std::get_if<int64_t>(&value)) {
    wire->set_int_value(*integer);
  } else if (const float* real = std::get_if<float>(&value)) {
    wire->set_float_value(*real);
  } else {
    wire->set_string_value(std::get<std::string>(value));
  }
}

void SessionInfoToWire(const SessionInfo& info, v1::Session* wire) {
  wire->set_session_id(info.session_id);
  wire->set_display_name(info.display_name);
  wire->set_artifact_id(info.artifact_id);
  wire->set_state(info.busy ? v1::BUSY : v1::READY);
  wire->set_executor(info.gpu ? v1::GPU : v1::CPU);
  if (info.gpu) wire->set_device_index(info.device_index);
  for (const auto& input : info.training_inputs) TensorInfoToWire(input, wire->add_training_inputs());
  for (const auto& input : info.eval_inputs) TensorInfoToWire(input, wire->add_eval_inputs());
  for (const auto& name : info.output_names) wire->add_output_names(name);
  for (const auto& name : info.eval_output_names) wire->add_eval_output_names(name);
  wire->set_trainable_parameter_count(info.trainable_parameter_count);
  wire->set_optimizer_step(info.optimizer_step);
  wire->set_learning_rate(info.learning_rate);
  for (const auto& [name, value] : info.properties) PropertyToWire(value, &(*wire->mutable_properties())[name]);
  wire->set_has_eval_model(info.has_eval_model);
  wire->set_has_optimizer(info.has_optimizer);
  wire->set_num_threads(info.num_threads);
  wire->set_scheduler(info.scheduler);
  wire->set_last_loss(info.last_loss);
  wire->set_train_steps(info.train_steps);
  wire->set_tenant(info.tenant);
  wire->mutable_checkpoint_policy()->set_every_steps(info.checkpoint_policy.every_steps);
  wire->mutable_checkpoint_policy()->set_every_seconds(info.checkpoint_policy.every_seconds);
  wire->set_checkpoint_step(info.checkpoint_step);
  wire->set_checkpoint_time(info.checkpoint_time);
  wire->set_has_loss(info.has_loss);
  for (const auto& name : info.forward_inputs) wire->add_forward_inputs(name);
  for (const auto& name : info.forward_outputs) wire->add_forward_outputs(name);
  for (const auto& name : info.differentiated_outputs) wire->add_differentiated_outputs(name);
  for (const auto& name : info.input_gradients) wire->add_input_gradients(name);
  wire->set_forward_handles(static_cast<int32_t>(info.forward_handles));
  wire->set_forward_handle_bytes(info.forward_handle_bytes);
}

// ---- GenerateArtifacts ----

namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<std::vector<float>> FloatValues(const v1::Tensor& tensor, const std::string& what) {
  TRAIND_ASSIGN_OR_RETURN(engine::Tensor decoded, TensorFromWire(tensor, int64_t{64} << 20, what));
  if (decoded.dtype() != DataType::kFloat32) return Invalid(absl::StrCat(what, " must be float32"));
  return std::vector<float>(decoded.data<float>(), decoded.data<float>() + decoded.num_elements());
}

absl::StatusOr<engine::LossTerm> BuiltinTermFromWire(const v1::BuiltinLoss& loss, const std::string& default_output,
                                                     const std::string& default_target, const std::string& what) {
  engine::LossTerm term;
  switch (loss.type()) {
    case v1::MSE:
      term.kind = engine::LossKind::kMeanSquaredError;
      break;
    case v1::CROSS_ENTROPY:
      term.kind = engine::LossKind::kCrossEntropy;
      break;
    case v1::BCE_WITH_LOGITS:
      term.kind = engine::LossKind::kBinaryCrossEntropyWithLogits;
      break;
    case v1::L1:
      term.kind = engine::LossKind::kL1;
      break;
    default:
      return Invalid(absl::StrCat(what, ": loss type ", static_cast<int>(loss.type()), " is not a built-in loss"));
  }
  term.output = loss.output_name().empty() ? default_output : loss.output_name();
  term.target = loss.target_name().empty() ? default_target : loss.target_name();
  switch (loss.reduction()) {
    case v1::REDUCTION_UNSPECIFIED:
    case v1::MEAN:
      term.reduction = engine::Reduction::kMean;
      break;
    case v1::SUM:
      term.reduction = engine::Reduction::kSum;
      break;
    case v1::NONE:
      term.reduction = engine::Reduction::kNone;
      term.per_element_output =
          loss.per_element_output_name().empty() ? term.output + "_loss" : loss.per_element_output_name();
      break;
    default:
      return Invalid(absl::StrCat(what, ": reduction ", static_cast<int>(loss.reduction()), " is unknown"));
  }
  if (loss.reduction() != v1::NONE && !loss.per_element_output_name().empty()) {
    return Invalid(absl::StrCat(what, ": per_element_output_name applies to reduction NONE only"));
  }
  term.class_weight.assign(loss.class_weight().begin(), loss.class_weight().end());
  if (loss.has_ignore_index()) term.ignore_index = loss.ignore_index();
  if (loss.has_weight()) {
    TRAIND_ASSIGN_OR_RETURN(term.bce_weight.values, FloatValues(loss.weight(), absl::StrCat(what, " weight")));
    term.bce_weight.dims.assign(loss.weight().shape().begin(), loss.weight().shape().end());
  }
  if (loss.has_pos_weight()) {
    TRAIND_ASSIGN_OR_RETURN(term.pos_weight, FloatValues(loss.pos_weight(), absl::StrCat(what, " pos_weight")));
  }
  return term;
}

absl::StatusOr<engine::LossTerm> CustomTermFromWire(const v1::CustomLoss& loss, const onnx::ModelProto& forward,
                                                    const ModelResolver& resolve, const std::string& what) {
  engine::LossTerm term;
  term.kind = engine::LossKind::kOnnxGraph;
  TRAIND_ASSIGN_OR_RETURN(term.graph, resolve(loss.graph(), absl::StrCat(what, " graph")));
  std::vector<std::string> targets(loss.target_names().begin(), loss.target_names().end());
  if (targets.empty()) {
    std::set<std::string> model_outputs, initializers;
    for (const auto& output : forward.graph().output()) model_outputs.insert(output.name());
    for (const auto& initializer : term.graph.graph().initializer()) initializers.insert(initializer.name());
    for (const auto& input : term.graph.graph().input()) {
      if (model_outputs.count(input.name()) == 0 && initializers.count(input.name()) == 0) {
        targets.push_back(input.name());
      }
    }
  }
  if (!targets.empty()) {
    term.target = targets.front();
    term.extra_targets.assign(targets.begin() + 1, targets.end());
  }
  return term;
}

// A weight of a weighted loss: finite (it multiplies the loss and every gradient).
absl::Status CheckWeight(float weight, const std::string& what) {
  if (!std::isfinite(weight)) return Invalid(absl::StrCat(what, " has a weight that is not finite"));
  return absl::OkStatus();
}

absl::Status CheckRange(const char* name, float value, float low, float high, bool high_inclusive) {
  const bool ok = std::isfinite(value) && value >= low && (high_inclusive ? value <= high : value < high);
  if (ok) return absl::OkStatus();
  return Invalid(absl::StrCat("optimizer ", name, " must be in [", low, ", ", high, high_inclusive ? "]" : ")",
                              ", got ", value));
}

constexpr float kInfinity = std::numeric_limits<float>::infinity();

absl::Status OptimizerFromWire(const v1::OptimizerSpec& spec, engine::ArtifactOptions* options) {
  engine::OptimizerSpec& optimizer = options->optimizer;
  switch (spec.kind_case()) {
    case v1::OptimizerSpec::kSgd: {
      const v1::SgdOptions& sgd = spec.sgd();
      optimizer.kind = engine::OptimizerKind::kSgd;
      options->initial_learning_rate = sgd.has_lr() ? sgd.lr() : 1e-2f;
      optimizer.momentum = sgd.momentum();
      optimizer.dampening = sgd.dampening();
      optimizer.nesterov = sgd.nesterov();
      optimizer.weight_decay = sgd.weight_decay();
      TRAIND_RETURN_IF_ERROR(CheckRange("momentum", optimizer.momentum, 0, kInfinity, false));
      TRAIND_RETURN_IF_ERROR(CheckRange("dampening", optimizer.dampening, 0, 1, true));
      break;
    }
    case v1::OptimizerSpec::kAdamw:
    case v1::OptimizerSpec::KIND_NOT_SET: {
      // torch.optim.AdamW's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 1e-2.
      const v1::AdamWOptions& adamw = spec.adamw();
      optimizer.kind = engine::OptimizerKind::kAdamW;
      options->initial_learning_rate = adamw.has_lr() ? adamw.lr() : 1e-3f;
      if (adamw.has_beta1()) optimizer.beta1 = adamw.beta1();
      if (adamw.has_beta2()) optimizer.beta2 = adamw.beta2();
      if (adamw.has_eps()) optimizer.eps = adamw.eps();
      optimizer.weight_decay = adamw.has_weight_decay() ? adamw.weight_decay() : 1e-2f;
      if (adamw.has_bias_correction()) optimizer.bias_correction = adamw.bias_correction();
      TRAIND_RETURN_IF_ERROR(CheckRange("beta1", optimizer.beta1, 0, 1, false));
      TRAIND_RETURN_IF_ERROR(CheckRange("beta2", optimizer.beta2, 0, 1, false));
      TRAIND_RETURN_IF_ERROR(CheckRange("eps", optimizer.eps, 0, kInfinity, false));
      break;
    }
  }
  TRAIND_RETURN_IF_ERROR(CheckRange("lr", options->initial_learning_rate, 0, kInfinity, false));
  TRAIND_RETURN_IF_ERROR(CheckRange("weight_decay", optimizer.weight_decay, 0, kInfinity, false));
  optimizer.max_grad_norm = spec.has_max_grad_norm() ? spec.max_grad_norm() : 0.0f;
  TRAIND_RETURN_IF_ERROR(CheckRange("max_grad_norm", optimizer.max_grad_norm, 0, kInfinity, false));
  optimizer.onnx_standard_op = spec.onnx_standard_op();
  if (spec.has_penalty()) {
    optimizer.penalty_alpha = spec.penalty().alpha();
    optimizer.penalty_l1_ratio = spec.penalty().l1_ratio();
    optimizer.penalized.assign(spec.penalty().parameters().begin(), spec.penalty().parameters().end());
    TRAIND_RETURN_IF_ERROR(CheckRange("penalty.alpha", optimizer.penalty_alpha, 0, kInfinity, true));
    TRAIND_RETURN_IF_ERROR(CheckRange("penalty.l1_ratio", optimizer.penalty_l1_ratio, 0, 1, true));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<engine::ArtifactOptions> ArtifactOptionsFromWire(const v1::GenerateArtifactsRequest& request,
                                                                const onnx::ModelProto& forward,
                                                                const ModelResolver& resolve) {
  engine::ArtifactOptions options;
  options.requires_grad.assign(request.requires_grad().begin(), request.requires_grad().end());
  options.frozen_params.assign(request.frozen_params().begin(), request.frozen_params().end());
  options.additional_output_names.assign(request.additional_output_names().begin(),
                                         request.additional_output_names().end());
  if (forward.graph().output_size() == 0) return Invalid("the model has no output");
  const std::string first_output = forward.graph().output(0).name();
  const v1::LossSpec& loss = request.loss();
  switch (loss.kind_case()) {
    case v1::LossSpec::kBuiltin: {
      TRAIND_ASSIGN_OR_RETURN(engine::LossTerm term,
                              BuiltinTermFromWire(loss.builtin(), first_output, "target", "the loss"));
      options.loss.push_back(std::move(term));
      break;
    }
    case v1::LossSpec::kCustom: {
      TRAIND_ASSIGN_OR_RETURN(engine::LossTerm term, CustomTermFromWire(loss.custom(), forward, resolve, "the loss"));
      options.loss.push_back(std::move(term));
      break;
    }
    case v1::LossSpec::kWeighted: {
      if (loss.weighted().terms().empty()) return Invalid("the weighted loss has no term");
      for (int t = 0; t < loss.weighted().terms_size(); ++t) {
        const v1::WeightedLoss::Term& wire = loss.weighted().terms(t);
        const std::string what = absl::StrCat("loss term ", t);
        if (wire.has_loss() == wire.has_custom()) {
          return Invalid(absl::StrCat(what, " must have exactly one of loss and custom"));
        }
        TRAIND_RETURN_IF_ERROR(CheckWeight(wire.weight(), what));
        engine::LossTerm term;
        if (wire.has_loss()) {
          TRAIND_ASSIGN_OR_RETURN(
              term, BuiltinTermFromWire(wire.loss(), first_output, t == 0 ? "target" : absl::StrCat("target_", t), what));
        } else {
          TRAIND_ASSIGN_OR_RETURN(term, CustomTermFromWire(wire.custom(), forward, resolve, what));
        }
        term.weight = wire.weight();
        options.loss.push_back(std::move(term));
      }
      break;
    }
    case v1::LossSpec::kNoLoss: {
      engine::OutputGradientOptions& no_loss = options.output_gradients.emplace();
      no_loss.outputs.assign(loss.no_loss().outputs().begin(), loss.no_loss().outputs().end());
      no_loss.inputs.assign(loss.no_loss().input_gradients().begin(), loss.no_loss().input_gradients().end());
      no_loss.no_input_gradients = loss.no_loss().no_input_gradients();
      break;
    }
    case v1::LossSpec::KIND_NOT_SET:
      return Invalid("no loss given: set loss.builtin, loss.weighted, loss.custom or loss.no_loss");
  }
  TRAIND_RETURN_IF_ERROR(OptimizerFromWire(request.optimizer(), &options));
  return options;
}

void CoverageToWire(const engine::GradientCoverageReport& report, v1::GradientCoverage* wire) {
  std::map<std::string, std::vector<std::string>> blockers;  // parameter -> "op_type"
  for (const engine::OpCoverage& op : report.ops) {
    v1::GradientCoverage::OpCoverage* out = wire->add_ops();
    out->set_domain(op.domain);
    out->set_op_type(op.op_type);
    out->set_node_count(op.count);
    out->set_has_gradient_rule(op.has_gradient);
    out->set_on_gradient_path(op.on_gradient_path);
    for (const std::string& parameter : op.blocked_parameters) {
      blockers[parameter].push_back(absl::StrCat(op.domain, "::", op.op_type));
    }
  }
  for (const auto& [parameter, ops] : blockers) {
    v1::GradientCoverage::BlockedParameter* blocked = wire->add_blocked_parameters();
    blocked->set_parameter(parameter);
    for (const std::string& op : ops) blocked->add_blocking_nodes(op);
  }
}

absl::StatusOr<std::optional<engine::LearningRateScheduler>> SchedulerFromWire(const v1::SchedulerSpec& spec) {
  absl::StatusOr<engine::LearningRateScheduler> scheduler;
  switch (spec.kind_case()) {
    case v1::SchedulerSpec::kLinearWarmupDecay:
      scheduler = engine::LearningRateScheduler::LinearWarmupDecay(spec.linear_warmup_decay().warmup_steps(),
                                                                   spec.linear_warmup_decay().total_steps());
      break;
    case v1::SchedulerSpec::kConstantWithWarmup:
      scheduler = engine::LearningRateScheduler::ConstantWithWarmup(spec.constant_with_warmup().warmup_steps());
      break;
    case v1::SchedulerSpec::kCosine: {
      const v1::SchedulerSpec::Cosine& cosine = spec.cosine();
      scheduler = engine::LearningRateScheduler::CosineWithWarmup(
          cosine.warmup_steps(), cosine.total_steps(), cosine.num_cycles() == 0 ? 0.5f : cosine.num_cycles(),
          cosine.min_lr_rate());
      break;
    }
    case v1::SchedulerSpec::kStep:
      scheduler = engine::LearningRateScheduler::Step(spec.step().step_size(), spec.step().gamma());
      break;
    case v1::SchedulerSpec::kConstant:
      scheduler = engine::LearningRateScheduler::Constant();
      break;
    case v1::SchedulerSpec::kInverseScaling: {
      const v1::SchedulerSpec::InverseScaling& inverse = spec.inverse_scaling();
      scheduler = engine::LearningRateScheduler::InverseScaling(
          inverse.power_t(), inverse.offset() == 0 ? 1.0f : inverse.offset(),
          inverse.scale() == 0 ? 1.0f : inverse.scale(), inverse.interval() == 0 ? 1 : inverse.interval());
      break;
    }
    case v1::SchedulerSpec::kOptimal:
      scheduler = engine::LearningRateScheduler::Optimal(spec.optimal().alpha(),
                                                         spec.optimal().scale() == 0 ? 1.0f : spec.optimal().scale());
      break;
    case v1::SchedulerSpec::kAdaptive: {
      const v1::SchedulerSpec::Adaptive& adaptive = spec.adaptive();
      scheduler = engine::LearningRateScheduler::Adaptive(adaptive.patience(), adaptive.tol(),
                                                          adaptive.factor() == 0 ? 0.2f : adaptive.factor(),
                                                          adaptive.has_min_lr() ? adaptive.min_lr() : 1e-6f);
      break;
    }
    case v1::SchedulerSpec::KIND_NOT_SET:
      return std::optional<engine::LearningRateScheduler>();
  }
  if (!scheduler.ok()) return scheduler.status();
  return std::optional<engine::LearningRateScheduler>(*std::move(scheduler));
}

}  // namespace traind
