#include "tests/fuzz/harness.h"

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/core/memory_budget.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/model/model_loader.h"
#include "engine/runtime/session.h"
#include "engine/training/artifacts.h"
#include "engine/training/module.h"

namespace traind::fuzz {

using engine::DataType;
using engine::GraphValue;
using engine::Tensor;

absl::StatusOr<std::vector<Tensor>> MakeInputs(absl::Span<const GraphValue> inputs, int64_t max_bytes) {
  std::vector<Tensor> tensors;
  int64_t total = 0;
  for (const GraphValue& input : inputs) {
    engine::Shape shape;
    for (int64_t dim : input.dims) shape.push_back(dim < 0 ? 1 : dim);
    TRAIND_ASSIGN_OR_RETURN(const int64_t count, engine::ElementCount(shape));
    const int64_t element = static_cast<int64_t>(engine::ElementSize(input.dtype));
    if (element == 0) return absl::UnimplementedError(absl::StrCat("input '", input.name, "' has no element size"));
    if (count > (max_bytes - total) / element) {
      return absl::ResourceExhaustedError(
          absl::StrCat("inputs beyond ", max_bytes, " bytes (input '", input.name, "' ", engine::ShapeToString(shape), ")"));
    }
    total += count * element;
    TRAIND_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(input.dtype, shape));  // zero-filled
    if (input.dtype == DataType::kFloat32) {
      float* data = tensor.mutable_data<float>();
      for (int64_t i = 0; i < count; ++i) data[i] = std::sin(0.37f * static_cast<float>(i + 1));
    } else if (input.dtype == DataType::kFloat64) {
      double* data = tensor.mutable_data<double>();
      for (int64_t i = 0; i < count; ++i) data[i] = std::sin(0.37 * static_cast<double>(i + 1));
    }
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

namespace {

engine::LoadOptions LoadOptionsFor(const HarnessLimits& limits) {
  engine::LoadOptions options;
  options.limits.max_decoded_bytes = limits.max_decoded_bytes;
  return options;
}

engine::NamedTensors Named(absl::Span<const GraphValue> declared, std::vector<Tensor> tensors) {
  engine::NamedTensors named;
  for (size_t i = 0; i < declared.size(); ++i) named.emplace_back(declared[i].name, std::move(tensors[i]));
  return named;
}

}  // namespace

absl::Status LoadCompileAndRun(absl::string_view model_bytes, const HarnessLimits& limits,
                               const std::string& external_data_dir) {
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto model,
                          engine::LoadModelFromBytes(model_bytes, LoadOptionsFor(limits), external_data_dir));
  engine::ThreadPool threads(limits.num_threads);
  engine::SessionOptions options;
  options.threads = &threads;
  options.memory_budget = engine::MemoryBudget::Create(limits.memory_budget_bytes);
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<engine::Session> session, engine::Session::Create(model, options));
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, MakeInputs(session->plan().inputs, limits.max_input_bytes));
  return session->Run(inputs).status();
}

namespace {

absl::Status TrainArtifacts(const engine::Artifacts& artifacts, const HarnessLimits& limits) {
  engine::CheckpointState state = artifacts.checkpoint;
  engine::ModuleOptions module_options;
  module_options.num_threads = limits.num_threads;
  module_options.random_seed = 1;
  module_options.memory_budget_bytes = limits.memory_budget_bytes;
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<engine::Module> module,
                          engine::Module::Create(artifacts, &state, module_options));
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<engine::Optimizer> optimizer,
                          engine::Optimizer::Create(artifacts.optimizer_model, module.get()));
  const std::vector<GraphValue> declared = module->TrainingInputs();
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, MakeInputs(declared, limits.max_input_bytes));
  const engine::NamedTensors batch = Named(declared, std::move(inputs));
  for (int step = 0; step < 2; ++step) {
    TRAIND_RETURN_IF_ERROR(module->TrainStep(batch).status());
    TRAIND_RETURN_IF_ERROR(optimizer->Step().status());
    module->LazyResetGrad();
  }
  if (!module->has_eval_model()) return absl::OkStatus();
  const std::vector<GraphValue> eval_declared = module->EvalInputs();
  TRAIND_ASSIGN_OR_RETURN(std::vector<Tensor> eval_inputs, MakeInputs(eval_declared, limits.max_input_bytes));
  return module->EvalStep(Named(eval_declared, std::move(eval_inputs))).status();
}

}  // namespace

absl::Status GenerateAndTrain(absl::string_view model_bytes, const HarnessLimits& limits) {
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto forward, engine::LoadModelFromBytes(model_bytes, LoadOptionsFor(limits)));
  std::string output;
  for (const auto& value : forward.graph().output()) {
    const int type = value.type().tensor_type().elem_type();
    if (type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE) {
      output = value.name();
      break;
    }
  }
  if (output.empty()) return absl::InvalidArgumentError("the model has no floating-point output to train on");
  engine::ArtifactOptions options;
  options.loss.emplace_back(engine::LossKind::kMeanSquaredError, output, "target");
  options.optimizer.max_grad_norm = 1.0f;
  TRAIND_ASSIGN_OR_RETURN(engine::Artifacts artifacts, engine::GenerateArtifacts(forward, options));
  return TrainArtifacts(artifacts, limits);
}

std::string SmallForwardModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("small");
  auto declare = [](onnx::ValueInfoProto* value, const char* name, std::vector<int64_t> dims) {
    value->set_name(name);
    auto* type = value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t dim : dims) type->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  declare(graph->add_input(), "x", {2, 3});
  declare(graph->add_output(), "y", {2, 4});
  onnx::TensorProto* w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  w->add_dims(4);
  for (int i = 0; i < 12; ++i) w->add_float_data(0.1f * static_cast<float>(i % 5) - 0.2f);
  onnx::TensorProto* b = graph->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::FLOAT);
  b->add_dims(4);
  for (int i = 0; i < 4; ++i) b->add_float_data(0.05f * static_cast<float>(i));
  onnx::NodeProto* gemm = graph->add_node();
  gemm->set_op_type("Gemm");
  gemm->set_name("gemm");
  gemm->add_input("x");
  gemm->add_input("w");
  gemm->add_input("b");
  gemm->add_output("h");
  onnx::NodeProto* relu = graph->add_node();
  relu->set_op_type("Relu");
  relu->set_name("relu");
  relu->add_input("h");
  relu->add_output("y");
  return model.SerializeAsString();
}

absl::Status TrainWithLossGraph(absl::string_view loss_graph_bytes, const HarnessLimits& limits) {
  static const std::string* const forward_bytes = new std::string(SmallForwardModel());
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto forward, engine::LoadModelFromBytes(*forward_bytes));
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto loss_graph,
                          engine::LoadModelFromBytes(loss_graph_bytes, LoadOptionsFor(limits)));
  engine::LossTerm term;
  term.kind = engine::LossKind::kOnnxGraph;
  // Inputs that are not the forward model's output y are targets.
  for (const auto& input : loss_graph.graph().input()) {
    if (input.name() == "y") continue;
    if (term.target.empty()) {
      term.target = input.name();
    } else {
      term.extra_targets.push_back(input.name());
    }
  }
  term.graph = std::move(loss_graph);
  engine::ArtifactOptions options;
  options.loss.push_back(std::move(term));
  TRAIND_ASSIGN_OR_RETURN(engine::Artifacts artifacts, engine::GenerateArtifacts(forward, options));
  return TrainArtifacts(artifacts, limits);
}

}  // namespace traind::fuzz
