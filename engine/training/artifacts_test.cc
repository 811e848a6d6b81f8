// GenerateArtifacts against the artifact contract (engine/training/artifacts.h), with PyTorch 1.13 references
// from tests/golden/make_golden.py.
#include "engine/training/artifacts.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

std::string GoldenDir() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/tests/golden/data";
}

LossTerm CrossEntropy() { return {LossKind::kCrossEntropy, "logits", "target", 1.0f}; }

struct GoldenCase {
  std::string name;
  std::vector<LossTerm> loss;
};

std::vector<GoldenCase> GoldenCases() {
  return {{"mlp", {CrossEntropy()}},
          {"cnn_bn_maxpool", {CrossEntropy()}},
          {"resnet_block", {CrossEntropy()}},
          {"transformer_encoder", {CrossEntropy()}},
          {"two_head_weighted_mse",
           {{LossKind::kMeanSquaredError, "out1", "target1", 0.4f},
            {LossKind::kMeanSquaredError, "out2", "target2", 0.6f}}}};
}

// Largest absolute difference relative to the reference's largest magnitude (float32 results, float64 or float32
// references).
double RelativeError(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  double max_error = 0, max_reference = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double reference =
        expected.dtype() == DataType::kFloat64 ? expected.data<double>()[i] : expected.data<float>()[i];
    max_error = std::max(max_error, std::fabs(actual.data<float>()[i] - reference));
    max_reference = std::max(max_reference, std::fabs(reference));
  }
  return max_error / std::max(max_reference, 1e-30);
}

Tensor Scalar(bool value) {
  return *Tensor::FromVector<uint8_t>({}, std::vector<uint8_t>{static_cast<uint8_t>(value)}, DataType::kBool);
}

Tensor ZerosLike(const Tensor& like) {
  Tensor zeros = *Tensor::Allocate(like.dtype(), like.shape());
  std::fill_n(zeros.mutable_data<float>(), zeros.num_elements(), 0.0f);
  return zeros;
}

// The batch of a golden case: its inputs and targets by name.
std::map<std::string, Tensor> ReadBatch(const std::string& dir) {
  std::map<std::string, Tensor> batch;
  for (const char* folder : {"inputs", "targets"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/" + folder)) {
      auto tensor = ReadNpy(entry.path().string());
      EXPECT_TRUE(tensor.ok()) << tensor.status();
      batch[entry.path().stem().string()] = *tensor;
    }
  }
  return batch;
}

std::map<std::string, Tensor> ByName(const NamedTensors& tensors) {
  std::map<std::string, Tensor> result;
  for (const auto& [name, tensor] : tensors) result[name] = tensor;
  return result;
}

std::vector<std::string> InputNames(const onnx::ModelProto& model) {
  std::vector<std::string> names;
  for (const auto& input : model.graph().input()) names.push_back(input.name());
  return names;
}

std::vector<std::string> OutputNames(const onnx::ModelProto& model) {
  std::vector<std::string> names;
  for (const auto& output : model.graph().output()) names.push_back(output.name());
  return names;
}

// Feeds for the training or eval model: the batch, every parameter from the checkpoint, then (training model)
// accumulation buffers and the reset flag.
NamedTensors Feeds(const onnx::ModelProto& model, const std::map<std::string, Tensor>& batch,
                   const CheckpointState& checkpoint, const std::map<std::string, Tensor>& buffers, bool lazy_reset) {
  std::map<std::string, Tensor> available = batch;
  for (const Parameter& parameter : checkpoint.parameters) available[parameter.name] = parameter.data;
  for (const auto& [name, tensor] : buffers) available[name] = tensor;
  available[kLazyResetGradName] = Scalar(lazy_reset);
  NamedTensors feeds;
  for (const std::string& name : InputNames(model)) {
    EXPECT_TRUE(available.count(name)) << "no feed for input " << name;
    feeds.emplace_back(name, available[name]);
  }
  return feeds;
}

class ArtifactsGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

// Every model GenerateArtifacts returns passes the onnx checker and strict shape inference, and the interfaces
// follow the contract.
TEST_P(ArtifactsGoldenTest, ModelsLoadAndFollowTheContract) {
  const std::string dir = GoldenDir() + "/" + GetParam().name;
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = GetParam().loss;
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  for (const onnx::ModelProto* model :
       {&artifacts->training_model, &artifacts->eval_model, &artifacts->optimizer_model}) {
    auto loaded = LoadModelFromBytes(model->SerializeAsString());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
  }
  EXPECT_TRUE(artifacts->coverage.complete()) << artifacts->coverage.ToText();

  // Checkpoint: every floating-point initializer in model order; BatchNormalization statistics frozen.
  std::vector<std::string> expected_parameters, expected_trainable;
  for (const auto& initializer : forward->graph().initializer()) {
    if (initializer.data_type() != onnx::TensorProto::FLOAT) continue;
    expected_parameters.push_back(initializer.name());
    if (initializer.name().find("running_") == std::string::npos) expected_trainable.push_back(initializer.name());
  }
  std::vector<std::string> parameters;
  for (const Parameter& parameter : artifacts->checkpoint.parameters) {
    parameters.push_back(parameter.name);
    EXPECT_EQ(parameter.requires_grad, parameter.name.find("running_") == std::string::npos) << parameter.name;
    EXPECT_FALSE(parameter.has_grad());
  }
  EXPECT_EQ(parameters, expected_parameters);
  EXPECT_EQ(artifacts->trainable, expected_trainable);
  EXPECT_FALSE(artifacts->checkpoint.optimizer.has_value());
  EXPECT_TRUE(artifacts->checkpoint.properties.empty());

  // Input order: forward inputs, targets, parameters, (training:) buffers, lazy reset.
  std::vector<std::string> eval_inputs;
  for (const auto& input : forward->graph().input()) eval_inputs.push_back(input.name());
  for (const LossTerm& term : GetParam().loss) eval_inputs.push_back(term.target);
  eval_inputs.insert(eval_inputs.end(), expected_parameters.begin(), expected_parameters.end());
  EXPECT_EQ(InputNames(artifacts->eval_model), eval_inputs);
  std::vector<std::string> training_inputs = eval_inputs;
  for (const std::string& p : expected_trainable) training_inputs.push_back(GradientAccumulationBufferName(p));
  training_inputs.push_back(kLazyResetGradName);
  EXPECT_EQ(InputNames(artifacts->training_model), training_inputs);

  std::vector<std::string> training_outputs = {kLossName};
  for (const std::string& p : expected_trainable) training_outputs.push_back(GradientAccumulationOutputName(p));
  for (const auto& node : forward->graph().node()) {
    if (node.op_type() != "BatchNormalization") continue;
    training_outputs.push_back(RunningStatisticOutputName(node.input(3)));
    training_outputs.push_back(RunningStatisticOutputName(node.input(4)));
  }
  EXPECT_EQ(OutputNames(artifacts->training_model), training_outputs);
  EXPECT_EQ(OutputNames(artifacts->eval_model), std::vector<std::string>{kLossName});

  // Optimizer (AdamW by default): lr, step, then per parameter (p, grad, m, v); outputs in the same order.
  std::vector<std::string> optimizer_inputs = {kLearningRateName, kStepName}, optimizer_outputs;
  for (const std::string& p : expected_trainable) {
    for (const std::string& name :
         {p, p + "_grad", OptimizerStateName(p, "momentum0"), OptimizerStateName(p, "momentum1")}) {
      optimizer_inputs.push_back(name);
      if (name != p + "_grad") optimizer_outputs.push_back(UpdatedName(name));
    }
  }
  optimizer_outputs.push_back(kSkippedName);
  EXPECT_EQ(InputNames(artifacts->optimizer_model), optimizer_inputs);
  EXPECT_EQ(OutputNames(artifacts->optimizer_model), optimizer_outputs);
}

// The training model's loss and accumulated gradients equal PyTorch's loss and gradients; a second call without
// reset adds the gradients to the buffers, a call with reset ignores them.
TEST_P(ArtifactsGoldenTest, TrainingModelAccumulatesPyTorchGradients) {
  const std::string dir = GoldenDir() + "/" + GetParam().name;
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = GetParam().loss;
  options.additional_output_names = {GetParam().loss.front().output};
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->training_model);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::map<std::string, Tensor> batch = ReadBatch(dir);

  // Buffers full of garbage: with lazy_reset they must not be read.
  std::map<std::string, Tensor> buffers;
  for (const Parameter& parameter : artifacts->checkpoint.parameters) {
    if (!parameter.requires_grad) continue;
    Tensor garbage = ZerosLike(parameter.data);
    std::fill_n(garbage.mutable_data<float>(), garbage.num_elements(), NAN);
    buffers[GradientAccumulationBufferName(parameter.name)] = garbage;
  }
  auto first = session.value()->Run(Feeds(artifacts->training_model, batch, artifacts->checkpoint, buffers, true));
  ASSERT_TRUE(first.ok()) << first.status();
  std::map<std::string, Tensor> results = ByName(*first);
  auto expected_loss = ReadNpy(dir + "/ref/loss.npy");
  ASSERT_TRUE(expected_loss.ok());
  EXPECT_NEAR(results.at(kLossName).data<float>()[0], expected_loss->data<double>()[0],
              1e-5 * std::fabs(expected_loss->data<double>()[0]));
  const std::string& additional = GetParam().loss.front().output;
  auto expected_output = ReadNpy(dir + "/ref/outputs/" + additional + ".npy");
  ASSERT_TRUE(expected_output.ok());
  EXPECT_LT(RelativeError(results.at(additional), *expected_output), 1e-5);
  int checked = 0;
  for (const std::string& parameter : artifacts->trainable) {
    auto expected = ReadNpy(dir + "/ref/grads/" + parameter + ".npy");
    ASSERT_TRUE(expected.ok()) << parameter;
    EXPECT_LT(RelativeError(results.at(GradientAccumulationOutputName(parameter)), *expected), 1e-4) << parameter;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(std::distance(std::filesystem::directory_iterator(dir + "/ref/grads"), {})));

  // Accumulate: feed the first results back without reset: twice the gradient.
  for (const std::string& parameter : artifacts->trainable) {
    buffers[GradientAccumulationBufferName(parameter)] = results.at(GradientAccumulationOutputName(parameter));
  }
  auto second = session.value()->Run(Feeds(artifacts->training_model, batch, artifacts->checkpoint, buffers, false));
  ASSERT_TRUE(second.ok()) << second.status();
  std::map<std::string, Tensor> accumulated = ByName(*second);
  for (const std::string& parameter : artifacts->trainable) {
    const Tensor& once = results.at(GradientAccumulationOutputName(parameter));
    const Tensor& twice = accumulated.at(GradientAccumulationOutputName(parameter));
    for (int64_t i = 0; i < once.num_elements(); ++i) {
      ASSERT_EQ(twice.data<float>()[i], 2.0f * once.data<float>()[i]) << parameter << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ArtifactsGoldenTest, ::testing::ValuesIn(GoldenCases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

TEST(WriteArtifactsTest, WritesFourFilesThatLoadBack) {
  auto forward = LoadModelFromFile(GoldenDir() + "/mlp/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/artifacts";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteArtifacts(*artifacts, dir, "mlp_").ok());
  for (const char* name : {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"}) {
    auto model = LoadModelFromFile(dir + "/mlp_" + name);
    EXPECT_TRUE(model.ok()) << name << ": " << model.status();
  }
  auto checkpoint = LoadCheckpoint(dir + "/mlp_checkpoint");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_EQ(checkpoint->parameters.size(), artifacts->checkpoint.parameters.size());
  for (size_t i = 0; i < checkpoint->parameters.size(); ++i) {
    const Parameter& loaded = checkpoint->parameters[i];
    const Parameter& original = artifacts->checkpoint.parameters[i];
    EXPECT_EQ(loaded.name, original.name);
    EXPECT_EQ(loaded.requires_grad, original.requires_grad);
    ASSERT_EQ(loaded.data.shape(), original.data.shape());
    EXPECT_TRUE(std::equal(loaded.data.data<float>(), loaded.data.data<float>() + loaded.data.num_elements(),
                           original.data.data<float>()));
  }
  // No temporary files are left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 4);
  EXPECT_FALSE(WriteArtifacts(*artifacts, dir + "/missing/directory", "").ok());
}

TEST(GenerateArtifactsTest, BadOptionsAreInvalidArgument) {
  auto forward = LoadModelFromFile(GoldenDir() + "/mlp/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto expect_invalid = [&](ArtifactOptions options, const std::string& why) {
    auto artifacts = GenerateArtifacts(*forward, options);
    EXPECT_EQ(artifacts.status().code(), absl::StatusCode::kInvalidArgument) << why << ": " << artifacts.status();
  };
  ArtifactOptions good;
  good.loss = {CrossEntropy()};
  ArtifactOptions no_loss = good;
  no_loss.loss.clear();
  expect_invalid(no_loss, "no loss");
  ArtifactOptions unknown = good;
  unknown.requires_grad = {"fc1.weight", "no_such_parameter"};
  expect_invalid(unknown, "unknown trainable parameter");
  ArtifactOptions both = good;
  both.requires_grad = {"fc1.weight"};
  both.frozen_params = {"fc1.weight"};
  expect_invalid(both, "trainable and frozen");
  ArtifactOptions unknown_output = good;
  unknown_output.additional_output_names = {"no_such_value"};
  expect_invalid(unknown_output, "unknown additional output");
  ArtifactOptions unknown_loss_output = good;
  unknown_loss_output.loss[0].output = "no_such_output";
  expect_invalid(unknown_loss_output, "unknown loss output");
  ArtifactOptions not_an_output = good;
  not_an_output.loss[0].output = "fc1.weight";
  expect_invalid(not_an_output, "loss on a value that is not an output");
  ArtifactOptions target_collides = good;
  target_collides.loss[0].target = "input";
  expect_invalid(target_collides, "target named like a model input");
  ArtifactOptions bad_nesterov = good;
  bad_nesterov.optimizer.kind = OptimizerKind::kSgd;
  bad_nesterov.optimizer.nesterov = true;
  expect_invalid(bad_nesterov, "Nesterov without momentum");
}

// Only the listed parameters train; the others (frozen) are still inputs fed from the checkpoint.
TEST(GenerateArtifactsTest, RequiresGradSelectsTrainableParametersInCheckpointOrder) {
  auto forward = LoadModelFromFile(GoldenDir() + "/mlp/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  options.requires_grad = {"fc2.bias", "fc1.weight"};
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  EXPECT_EQ(artifacts->trainable, (std::vector<std::string>{"fc1.weight", "fc2.bias"}));
  for (const Parameter& parameter : artifacts->checkpoint.parameters) {
    EXPECT_EQ(parameter.requires_grad, parameter.name == "fc1.weight" || parameter.name == "fc2.bias");
  }
  EXPECT_EQ(OutputNames(artifacts->training_model),
            (std::vector<std::string>{kLossName, GradientAccumulationOutputName("fc1.weight"),
                                      GradientAccumulationOutputName("fc2.bias")}));
}

// A user loss graph over the mlp's logits [5, 4] with `targets` (each typed like the logits):
// mean(logits) + sum over targets of mean((logits - target)^2).
onnx::ModelProto LossGraphWithTargets(const std::vector<std::string>& targets) {
  onnx::ModelProto loss;
  loss.set_ir_version(8);
  loss.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = loss.mutable_graph();
  graph->set_name("user_loss");
  auto add_info = [](google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* field, const std::string& name,
                     std::vector<int64_t> dims) {
    onnx::ValueInfoProto* info = field->Add();
    info->set_name(name);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = info->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int64_t dim : dims) shape->add_dim()->set_dim_value(dim);
  };
  auto add_node = [graph](const std::string& op, std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type(op);
    for (const std::string& input : inputs) node->add_input(input);
    node->add_output(output);
    if (op == "ReduceMean") {
      onnx::AttributeProto* keepdims = node->add_attribute();
      keepdims->set_name("keepdims");
      keepdims->set_type(onnx::AttributeProto::INT);
      keepdims->set_i(0);
    }
  };
  add_info(graph->mutable_input(), "logits", {5, 4});
  add_node("ReduceMean", {"logits"}, "total_0");
  for (size_t t = 0; t < targets.size(); ++t) {
    const std::string i = std::to_string(t);
    add_info(graph->mutable_input(), targets[t], {5, 4});
    add_node("Sub", {"logits", targets[t]}, "difference_" + i);
    add_node("Mul", {"difference_" + i, "difference_" + i}, "square_" + i);
    add_node("ReduceMean", {"square_" + i}, "mse_" + i);
    add_node("Add", {"total_" + i, "mse_" + i}, "total_" + std::to_string(t + 1));
  }
  add_info(graph->mutable_output(), "total_" + std::to_string(targets.size()), {});
  return loss;
}

TEST(GenerateArtifactsTest, LossGraphTargetsBecomeTrainingInputsInOrder) {
  auto forward = LoadModelFromFile(GoldenDir() + "/mlp/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  // No target (the loss reads model outputs only), one, and several (`target`, then `extra_targets`).
  const std::vector<std::vector<std::string>> cases = {{}, {"t1"}, {"t1", "t2", "t0"}};
  for (const std::vector<std::string>& targets : cases) {
    LossTerm term(LossKind::kOnnxGraph, "", targets.empty() ? "" : targets.front());
    term.graph = LossGraphWithTargets(targets);
    if (!targets.empty()) term.extra_targets.assign(targets.begin() + 1, targets.end());
    ArtifactOptions options;
    options.loss = {term};
    auto artifacts = GenerateArtifacts(*forward, options);
    ASSERT_TRUE(artifacts.ok()) << targets.size() << " targets: " << artifacts.status();
    for (const onnx::ModelProto* model : {&artifacts->training_model, &artifacts->eval_model}) {
      const std::vector<std::string> inputs = InputNames(*model);
      std::vector<std::string> expected = {"input"};
      expected.insert(expected.end(), targets.begin(), targets.end());
      EXPECT_EQ(std::vector<std::string>(inputs.begin(), inputs.begin() + expected.size()), expected);
    }
  }
}

// ---- Optimizer models ----

// A forward model whose float parameters are `shapes` (named `names`): out_i = x_i * p_i, loss = sum of MSEs. Its
// optimizer model updates exactly those parameters.
onnx::ModelProto ElementwiseModel(const std::vector<std::string>& names, const std::vector<Shape>& shapes) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("elementwise");
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor value = *Tensor::Allocate(DataType::kFloat32, shapes[i]);
    std::fill_n(value.mutable_data<float>(), value.num_elements(), 0.5f);
    *graph->add_initializer() = TensorToProto(value, names[i]);
    for (const std::string& io : {"x" + std::to_string(i), "out" + std::to_string(i)}) {
      onnx::ValueInfoProto* info = io[0] == 'x' ? graph->add_input() : graph->add_output();
      info->set_name(io);
      info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t dim : shapes[i]) {
        info->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(dim);
      }
    }
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("Mul");
    node->set_name("mul" + std::to_string(i));
    node->add_input("x" + std::to_string(i));
    node->add_input(names[i]);
    node->add_output("out" + std::to_string(i));
  }
  return model;
}

absl::StatusOr<Artifacts> ElementwiseArtifacts(const std::vector<std::string>& names, const std::vector<Shape>& shapes,
                                               const OptimizerSpec& spec) {
  ArtifactOptions options;
  for (size_t i = 0; i < names.size(); ++i) {
    options.loss.push_back({LossKind::kMeanSquaredError, "out" + std::to_string(i), "t" + std::to_string(i), 1.0f});
  }
  options.optimizer = spec;
  auto forward = LoadModelFromBytes(ElementwiseModel(names, shapes).SerializeAsString());
  if (!forward.ok()) return forward.status();
  return GenerateArtifacts(*forward, options);
}

Tensor Slice(const Tensor& matrix, int64_t row, int64_t offset, const Shape& shape) {
  Tensor result = *Tensor::Allocate(DataType::kFloat32, shape);
  const int64_t columns = matrix.shape().back();
  std::copy_n(matrix.data<float>() + row * columns + offset, result.num_elements(), result.mutable_data<float>());
  return result;
}

Tensor FloatScalar(float value) { return *Tensor::FromVector<float>({}, std::vector<float>{value}); }
Tensor StepScalar(int64_t value) { return *Tensor::FromVector<int64_t>({}, std::vector<int64_t>{value}); }

double MaxAbsDifference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double difference = 0;
  for (int64_t i = 0; i < std::min(a.num_elements(), b.num_elements()); ++i) {
    difference = std::max(difference, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  }
  return difference;
}

// Runs the optimizer model by name; `values` maps every input name to its tensor and receives the updated ones.
void RunOptimizerStep(const Session& session, std::map<std::string, Tensor>& values, bool expect_skipped) {
  NamedTensors feeds;
  for (const auto& input : session.plan().inputs) feeds.emplace_back(input.name, values.at(input.name));
  auto outputs = session.Run(feeds);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (const auto& [name, tensor] : *outputs) {
    if (name == kSkippedName) {
      EXPECT_EQ(tensor.data<uint8_t>()[0] != 0, expect_skipped);
      continue;
    }
    ASSERT_EQ(name.substr(name.size() - std::string(".updated").size()), ".updated");
    values[name.substr(0, name.size() - std::string(".updated").size())] = tensor;
  }
}

// Scenarios of tests/golden/make_optimizer_golden.py (same hyper-parameters).
struct TorchScenario {
  std::string name;
  OptimizerSpec spec;
};

std::vector<TorchScenario> TorchScenarios(bool onnx_standard_op) {
  std::vector<TorchScenario> scenarios;
  auto adamw = [](float beta1, float beta2, float eps, float weight_decay, float max_norm) {
    OptimizerSpec spec;
    spec.kind = OptimizerKind::kAdamW;
    spec.beta1 = beta1;
    spec.beta2 = beta2;
    spec.eps = eps;
    spec.weight_decay = weight_decay;
    spec.max_grad_norm = max_norm;
    return spec;
  };
  auto sgd = [](float momentum, float dampening, bool nesterov, float weight_decay, float max_norm) {
    OptimizerSpec spec;
    spec.kind = OptimizerKind::kSgd;
    spec.momentum = momentum;
    spec.dampening = dampening;
    spec.nesterov = nesterov;
    spec.weight_decay = weight_decay;
    spec.max_grad_norm = max_norm;
    return spec;
  };
  if (!onnx_standard_op) {
    // ONNX's Adam is not PyTorch's AdamW, and its Momentum needs momentum > 0.
    scenarios.push_back({"adamw", adamw(0.9f, 0.999f, 1e-8f, 1e-2f, 0.0f)});
    scenarios.push_back({"adamw_clip", adamw(0.8f, 0.99f, 1e-6f, 0.1f, 0.5f)});
    scenarios.push_back({"sgd", sgd(0.0f, 0.0f, false, 0.0f, 0.0f)});
  }
  scenarios.push_back({"sgd_momentum_dampening", sgd(0.9f, 0.1f, false, 1e-3f, 0.0f)});
  scenarios.push_back({"sgd_nesterov_clip", sgd(0.9f, 0.0f, true, 1e-2f, 1.0f)});
  for (auto& scenario : scenarios) scenario.spec.onnx_standard_op = onnx_standard_op;
  return scenarios;
}

class OptimizerModelTest : public ::testing::TestWithParam<TorchScenario> {};

// Four steps with a changing learning rate reproduce torch.optim.AdamW / SGD (+ clip_grad_norm_) parameter by
// parameter, and the final optimizer state equals torch's.
TEST_P(OptimizerModelTest, ReproducesPyTorch) {
  const std::string dir = GoldenDir() + "/optimizers/" + GetParam().name;
  auto params = ReadNpy(dir + "/params.npy");
  auto grads = ReadNpy(dir + "/grads.npy");
  auto lrs = ReadNpy(dir + "/lrs.npy");
  auto state = ReadNpy(dir + "/state.npy");
  ASSERT_TRUE(params.ok() && grads.ok() && lrs.ok() && state.ok()) << dir;
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<Shape> shapes = {{3, 4}, {5}};
  const std::vector<int64_t> offsets = {0, 12};
  auto artifacts = ElementwiseArtifacts(names, shapes, GetParam().spec);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->optimizer_model);
  ASSERT_TRUE(session.ok()) << session.status();
  const bool adamw = GetParam().spec.kind == OptimizerKind::kAdamW;
  std::vector<std::string> states;
  if (adamw) states = {"momentum0", "momentum1"};
  if (!adamw && GetParam().spec.momentum != 0.0f) states = {"momentum0"};

  std::map<std::string, Tensor> values;
  for (size_t i = 0; i < names.size(); ++i) {
    values[names[i]] = Slice(*params, 0, offsets[i], shapes[i]);
    for (const std::string& s : states) values[OptimizerStateName(names[i], s)] = ZerosLike(values[names[i]]);
  }
  const int64_t steps = lrs->num_elements();
  for (int64_t t = 1; t <= steps; ++t) {
    values[kLearningRateName] = FloatScalar(lrs->data<float>()[t - 1]);
    values[kStepName] = StepScalar(t);
    for (size_t i = 0; i < names.size(); ++i) values[names[i] + "_grad"] = Slice(*grads, t - 1, offsets[i], shapes[i]);
    RunOptimizerStep(**session, values, /*expect_skipped=*/false);
    for (size_t i = 0; i < names.size(); ++i) {
      const Tensor expected = Slice(*params, t, offsets[i], shapes[i]);
      EXPECT_LT(MaxAbsDifference(values[names[i]], expected), 2e-6)
          << GetParam().name << " step " << t << " parameter " << names[i];
    }
  }
  for (size_t s = 0; s < states.size(); ++s) {
    for (size_t i = 0; i < names.size(); ++i) {
      const Tensor expected = Slice(*state, s, offsets[i], shapes[i]);
      const Tensor& actual = values[OptimizerStateName(names[i], states[s])];
      EXPECT_LT(MaxAbsDifference(actual, expected),
                2e-6 * std::max(1.0, MaxAbsDifference(expected, ZerosLike(expected))))
          << GetParam().name << " state " << states[s] << " of " << names[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fused, OptimizerModelTest, ::testing::ValuesIn(TorchScenarios(false)),
                         [](const ::testing::TestParamInfo<TorchScenario>& info) { return info.param.name; });
// ONNX's Momentum with T = step - 1 is torch.optim.SGD (with momentum) exactly: the same references pass.
INSTANTIATE_TEST_SUITE_P(OnnxStandardOp, OptimizerModelTest, ::testing::ValuesIn(TorchScenarios(true)),
                         [](const ::testing::TestParamInfo<TorchScenario>& info) { return info.param.name; });

// A non-finite gradient anywhere: nothing changes and skipped is true; the next finite step proceeds normally.
TEST(OptimizerModelTest, NonFiniteGradientSkipsTheStep) {
  for (bool onnx_standard_op : {false, true}) {
    for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
      OptimizerSpec spec;
      spec.kind = kind;
      spec.momentum = 0.9f;
      spec.max_grad_norm = 1.0f;
      spec.onnx_standard_op = onnx_standard_op;
      auto artifacts = ElementwiseArtifacts({"a", "b"}, {{2, 2}, {3}}, spec);
      ASSERT_TRUE(artifacts.ok()) << artifacts.status();
      auto session = Session::Create(artifacts->optimizer_model);
      ASSERT_TRUE(session.ok()) << session.status();
      std::map<std::string, Tensor> values;
      values[kLearningRateName] = FloatScalar(0.1f);
      values[kStepName] = StepScalar(1);
      for (const auto& graph_input : session.value()->plan().inputs) {
        const std::string& input = graph_input.name;
        if (input == kLearningRateName || input == kStepName) continue;
        const Shape shape = input[0] == 'a' ? Shape{2, 2} : Shape{3};
        Tensor tensor = *Tensor::Allocate(DataType::kFloat32, shape);
        std::fill_n(tensor.mutable_data<float>(), tensor.num_elements(),
                    input.find("_grad") != std::string::npos ? 0.25f : 1.0f);
        values[input] = tensor;
      }
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::map<std::string, Tensor> before = values;
        Tensor gradient = *Tensor::Allocate(DataType::kFloat32, {3});
        std::fill_n(gradient.mutable_data<float>(), 3, 0.5f);
        gradient.mutable_data<float>()[1] = bad;
        values["b_grad"] = gradient;
        RunOptimizerStep(**session, values, /*expect_skipped=*/true);
        for (const auto& [name, tensor] : before) {
          if (name == "b_grad") continue;
          const Tensor& after = values.at(name);
          for (int64_t i = 0; i < tensor.num_elements(); ++i) {
            if (tensor.dtype() != DataType::kFloat32) continue;
            ASSERT_EQ(after.data<float>()[i], tensor.data<float>()[i]) << name << " changed on a skipped step";
          }
        }
      }
      Tensor finite = *Tensor::Allocate(DataType::kFloat32, {3});
      std::fill_n(finite.mutable_data<float>(), 3, 0.25f);
      values["b_grad"] = finite;
      const float a_before = values["a"].data<float>()[0];
      RunOptimizerStep(**session, values, /*expect_skipped=*/false);
      EXPECT_NE(values["a"].data<float>()[0], a_before) << "a finite step must update";
    }
  }
}

// scikit-learn's elastic-net penalty (sklearn/linear_model/_sgd_fast.pyx): per step, the L2 part scales w by
// (1 - lr * alpha * (1 - l1_ratio)) together with the gradient step; then u += lr * alpha * l1_ratio and each weight
// is truncated towards zero by the penalty it has not yet received (u + q for positive weights, u - q for negative
// ones), q accumulating what was applied. Only the penalized parameter moves so; a skipped step changes nothing.
TEST(OptimizerModelTest, ElasticNetPenaltyIsScikitLearns) {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kSgd;
  spec.weight_decay = 0.0f;
  spec.penalty_alpha = 0.5f;
  spec.penalty_l1_ratio = 0.25f;
  spec.penalized = {"a"};
  auto artifacts = ElementwiseArtifacts({"a", "b"}, {{4}, {2}}, spec);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->optimizer_model);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<std::string> inputs;
  for (const auto& input : session.value()->plan().inputs) inputs.push_back(input.name);
  EXPECT_THAT(inputs, ::testing::ElementsAre(kLearningRateName, kStepName, "a", "a_grad", "a.l1_total",
                                             "a.l1_applied", "b", "b_grad", "b.l1_total", "b.l1_applied"));
  const float lr = 0.1f;
  std::vector<double> w = {0.30, -0.02, 0.01, -0.5}, q(4, 0.0);
  double u = 0;
  std::map<std::string, Tensor> values;
  values["a"] = *Tensor::FromVector<float>({4}, std::vector<float>{0.30f, -0.02f, 0.01f, -0.5f});
  values["b"] = *Tensor::FromVector<float>({2}, std::vector<float>{0.30f, -0.02f});
  for (const char* state : {"a.l1_total", "a.l1_applied", "b.l1_total", "b.l1_applied"}) {
    values[state] = *Tensor::Allocate(DataType::kFloat32, {state[0] == 'a' ? 4 : 2});
  }
  const std::vector<std::vector<float>> gradients = {{0.2f, 0.1f, 0.05f, 0.05f}, {-0.1f, 0.4f, 0.2f, 0.0f}};
  for (size_t step = 0; step < gradients.size(); ++step) {
    values[kLearningRateName] = FloatScalar(lr);
    values[kStepName] = StepScalar(static_cast<int64_t>(step) + 1);
    values["a_grad"] = *Tensor::FromVector<float>({4}, gradients[step]);
    values["b_grad"] = *Tensor::FromVector<float>({2}, std::vector<float>{0.5f, 0.5f});
    RunOptimizerStep(**session, values, /*expect_skipped=*/false);
    u += lr * 0.5 * 0.25;
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = w[i] * (1 - lr * 0.5 * 0.75) - lr * gradients[step][i];
      const double z = w[i];
      if (w[i] > 0) w[i] = std::max(0.0, w[i] - (u + q[i]));
      else if (w[i] < 0) w[i] = std::min(0.0, w[i] + (u - q[i]));
      q[i] += w[i] - z;
      EXPECT_NEAR(values["a"].data<float>()[i], w[i], 1e-6) << "step " << step << " element " << i;
      EXPECT_NEAR(values["a.l1_applied"].data<float>()[i], q[i], 1e-6);
      EXPECT_NEAR(values["a.l1_total"].data<float>()[i], u, 1e-7);
    }
  }
  // Truncation took weights to exactly zero (the point of L1), and b, unpenalized, took plain SGD steps.
  EXPECT_EQ(values["a"].data<float>()[2], 0.0f);
  EXPECT_FLOAT_EQ(values["b"].data<float>()[0], 0.30f - 2 * 0.1f * 0.5f);
  EXPECT_EQ(values["b.l1_total"].data<float>()[0], 0.0f);
  // A non-finite gradient: nothing moves, the L1 states included.
  std::map<std::string, Tensor> before = values;
  values["a_grad"] = *Tensor::FromVector<float>({4}, std::vector<float>{NAN, 0, 0, 0});
  RunOptimizerStep(**session, values, /*expect_skipped=*/true);
  for (const char* name : {"a", "a.l1_total", "a.l1_applied"}) {
    EXPECT_EQ(MaxAbsDifference(values[name], before[name]), 0.0) << name;
  }
  // Options are checked.
  OptimizerSpec bad = spec;
  bad.penalized = {"nope"};
  EXPECT_EQ(ElementwiseArtifacts({"a", "b"}, {{4}, {2}}, bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = spec;
  bad.penalty_l1_ratio = 1.5f;
  EXPECT_EQ(ElementwiseArtifacts({"a", "b"}, {{4}, {2}}, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// ONNX's own optimizer test data (ai.onnx.preview.training, onnx 1.12): optimizer models built with
// OptimizerSpec::onnx_standard_op and the test's attributes reproduce the expected outputs.
onnx::AttributeProto Attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return attribute;
  }
  return onnx::AttributeProto();
}

Tensor ReadTensorProto(const std::string& path, std::string* name) {
  auto bytes = ReadFileLimited(path, 1 << 20);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  onnx::TensorProto proto;
  EXPECT_TRUE(proto.ParseFromString(bytes.value_or("")));
  *name = proto.name();
  auto tensor = TensorFromProto(proto);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return tensor.value_or(Tensor());
}

class OnnxOptimizerTestData : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxOptimizerTestData, OnnxStandardOpReproducesExpectedOutputs) {
  const std::string dir = "/usr/share/libonnx-testdata/data/node/" + GetParam();
  auto test_model = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(test_model.ok()) << test_model.status();
  const onnx::NodeProto& node = test_model->graph().node(0);
  const bool adam = node.op_type() == "Adam";
  const int states = adam ? 2 : 1;
  // Inputs R, T, X..., G..., states...; n parameters.
  const int n = (node.input_size() - 2) / (2 + states);
  std::vector<Tensor> inputs, outputs;
  for (int i = 0; i < node.input_size(); ++i) {
    std::string name;
    inputs.push_back(ReadTensorProto(dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb", &name));
  }
  for (int i = 0; i < node.output_size(); ++i) {
    std::string name;
    outputs.push_back(ReadTensorProto(dir + "/test_data_set_0/output_" + std::to_string(i) + ".pb", &name));
  }
  OptimizerSpec spec;
  spec.onnx_standard_op = true;
  spec.weight_decay = Attribute(node, "norm_coefficient").f();
  if (adam) {
    spec.kind = OptimizerKind::kAdamW;
    spec.beta1 = Attribute(node, "alpha").has_f() ? Attribute(node, "alpha").f() : 0.9f;
    spec.beta2 = Attribute(node, "beta").has_f() ? Attribute(node, "beta").f() : 0.999f;
    spec.eps = Attribute(node, "epsilon").has_f() ? Attribute(node, "epsilon").f() : 1e-6f;  // ONNX's default
    // onnx/onnx#7749 (see ModelErrata in tests/onnx_backend/backend_runner.cc): test_adam_multiple's outputs were
    // computed with epsilon 1e-2, which its model.onnx does not say.
    if (GetParam() == "test_adam_multiple" && !Attribute(node, "epsilon").has_f()) spec.eps = 1e-2f;
    spec.onnx_norm_coefficient_post = Attribute(node, "norm_coefficient_post").f();
  } else {
    spec.kind = OptimizerKind::kSgd;
    spec.momentum = Attribute(node, "alpha").f();
    spec.dampening = 1.0f - Attribute(node, "beta").f();
    spec.nesterov = Attribute(node, "mode").s() == "nesterov";
  }
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (int p = 0; p < n; ++p) {
    names.push_back(node.input(2 + p));
    shapes.push_back(inputs[2 + p].shape());
  }
  auto artifacts = ElementwiseArtifacts(names, shapes, spec);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->optimizer_model);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<std::string> state_names =
      adam ? std::vector<std::string>{"momentum0", "momentum1"} : std::vector<std::string>{"momentum0"};
  std::map<std::string, Tensor> values;
  values[kLearningRateName] = inputs[0];
  // Adam's T is the step; Momentum's T is step - 1 (see OptimizerSpec::onnx_standard_op).
  values[kStepName] = StepScalar(inputs[1].data<int64_t>()[0] + (adam ? 0 : 1));
  for (int p = 0; p < n; ++p) {
    values[names[p]] = inputs[2 + p];
    values[names[p] + "_grad"] = inputs[2 + n + p];
    for (int s = 0; s < states; ++s) values[OptimizerStateName(names[p], state_names[s])] = inputs[2 + (2 + s) * n + p];
  }
  RunOptimizerStep(**session, values, /*expect_skipped=*/false);
  for (int p = 0; p < n; ++p) {
    EXPECT_LT(MaxAbsDifference(values[names[p]], outputs[p]), 1e-6) << names[p];
    for (int s = 0; s < states; ++s) {
      EXPECT_LT(MaxAbsDifference(values[OptimizerStateName(names[p], state_names[s])], outputs[(1 + s) * n + p]), 1e-6)
          << names[p] << " " << state_names[s];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Onnx, OnnxOptimizerTestData,
                         ::testing::Values("test_adam", "test_adam_multiple", "test_momentum", "test_momentum_multiple",
                                           "test_nesterov_momentum"));

// ---- Eval mode and BatchNormalization running statistics (golden case bn_dropout_eval) ----

// The eval model is PyTorch's model.eval(): BatchNormalization with the running statistics, Dropout off.
TEST(EvalModelTest, MatchesPyTorchEvalMode) {
  const std::string dir = GoldenDir() + "/bn_dropout_eval";
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  options.additional_output_names = {"logits"};
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->eval_model);
  ASSERT_TRUE(session.ok()) << session.status();
  const auto feeds = Feeds(artifacts->eval_model, ReadBatch(dir), artifacts->checkpoint, {}, false);
  for (int run = 0; run < 2; ++run) {  // Deterministic: no dropout mask is drawn.
    auto outputs = session.value()->Run(feeds);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    std::map<std::string, Tensor> results = ByName(*outputs);
    auto expected_loss = ReadNpy(dir + "/ref/eval/loss.npy");
    auto expected_logits = ReadNpy(dir + "/ref/eval/outputs/logits.npy");
    ASSERT_TRUE(expected_loss.ok() && expected_logits.ok());
    EXPECT_NEAR(results.at(kLossName).data<float>()[0], expected_loss->data<double>()[0],
                1e-5 * std::fabs(expected_loss->data<double>()[0]));
    EXPECT_LT(RelativeError(results.at("logits"), *expected_logits), 1e-5);
  }
  // No training-mode node is left: BatchNormalization has one output and Dropout no training_mode input.
  for (const auto& node : artifacts->eval_model.graph().node()) {
    if (node.op_type() == "BatchNormalization") {
      EXPECT_EQ(node.output_size(), 1);
    }
    if (node.op_type() == "Dropout") {
      EXPECT_LE(node.input_size(), 2);
    }
  }
}

// The training model's running-statistic outputs are PyTorch's buffers after one train-mode forward (momentum
// 0.1, unbiased batch variance), not ONNX's biased-variance blend.
TEST(TrainingModelTest, RunningStatisticsMatchPyTorchBuffers) {
  const std::string dir = GoldenDir() + "/bn_dropout_eval";
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->training_model);
  ASSERT_TRUE(session.ok()) << session.status();
  std::map<std::string, Tensor> buffers;
  for (const Parameter& parameter : artifacts->checkpoint.parameters) {
    if (parameter.requires_grad) buffers[GradientAccumulationBufferName(parameter.name)] = ZerosLike(parameter.data);
  }
  auto outputs =
      session.value()->Run(Feeds(artifacts->training_model, ReadBatch(dir), artifacts->checkpoint, buffers, true));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> results = ByName(*outputs);
  for (const char* statistic : {"bn.running_mean", "bn.running_var"}) {
    auto expected = ReadNpy(dir + "/ref/running/" + std::string(statistic) + ".npy");
    ASSERT_TRUE(expected.ok()) << statistic;
    ASSERT_TRUE(results.count(RunningStatisticOutputName(statistic))) << statistic;
    EXPECT_LT(RelativeError(results.at(RunningStatisticOutputName(statistic)), *expected), 1e-5) << statistic;
  }
}

// Dropout is on in the training model (a fresh mask each run) and off in the eval model.
TEST(TrainingModelTest, DropoutIsActiveInTrainingOnly) {
  const std::string dir = GoldenDir() + "/bn_dropout_eval";
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  // Forward exports that set Dropout's training_mode to false (or omit it) are trained with it on all the same.
  for (auto& node : *forward->mutable_graph()->mutable_node()) {
    if (node.op_type() == "Dropout") node.mutable_input()->DeleteSubrange(2, 1);
  }
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  options.additional_output_names = {"/Relu_output_0", "/drop/Dropout_output_0"};
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  std::map<std::string, Tensor> buffers;
  for (const Parameter& parameter : artifacts->checkpoint.parameters) {
    if (parameter.requires_grad) buffers[GradientAccumulationBufferName(parameter.name)] = ZerosLike(parameter.data);
  }
  const std::map<std::string, Tensor> batch = ReadBatch(dir);
  auto training = Session::Create(artifacts->training_model);
  auto eval = Session::Create(artifacts->eval_model);
  ASSERT_TRUE(training.ok() && eval.ok());
  std::vector<Tensor> masks;
  for (int run = 0; run < 2; ++run) {
    auto outputs = training.value()->Run(Feeds(artifacts->training_model, batch, artifacts->checkpoint, buffers, true));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    const Tensor relu = ByName(*outputs).at("/Relu_output_0");
    const Tensor dropped = ByName(*outputs).at("/drop/Dropout_output_0");
    // Every element is dropped (0) or kept and scaled by 1 / (1 - 0.3); about 30% of the nonzero ones are dropped.
    Tensor mask = ZerosLike(relu);
    int64_t nonzero = 0, dropped_count = 0;
    for (int64_t i = 0; i < relu.num_elements(); ++i) {
      const float x = relu.data<float>()[i], y = dropped.data<float>()[i];
      ASSERT_TRUE(y == 0.0f || std::fabs(y - x / 0.7f) <= 1e-6f * std::fabs(x)) << i << ": " << x << " -> " << y;
      mask.mutable_data<float>()[i] = y != 0.0f;
      if (x != 0.0f) {
        ++nonzero;
        dropped_count += y == 0.0f;
      }
    }
    ASSERT_GT(nonzero, 100);
    const double fraction = static_cast<double>(dropped_count) / static_cast<double>(nonzero);
    EXPECT_GT(fraction, 0.1);
    EXPECT_LT(fraction, 0.5);
    masks.push_back(mask);
  }
  EXPECT_GT(MaxAbsDifference(masks[0], masks[1]), 0.0) << "the same mask twice";
  auto evaluated = eval.value()->Run(Feeds(artifacts->eval_model, batch, artifacts->checkpoint, {}, false));
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(MaxAbsDifference(ByName(*evaluated).at("/Relu_output_0"), ByName(*evaluated).at("/drop/Dropout_output_0")),
            0.0);
}

// A forward model exported in eval mode (BatchNormalization without training_mode and with one output) trains in
// training mode all the same: its gradients are PyTorch's train-mode gradients.
TEST(TrainingModelTest, EvalModeExportTrainsInTrainingMode) {
  const std::string dir = GoldenDir() + "/cnn_bn_maxpool";
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  for (auto& node : *forward->mutable_graph()->mutable_node()) {
    if (node.op_type() != "BatchNormalization") continue;
    node.mutable_output()->DeleteSubrange(1, node.output_size() - 1);
    node.clear_attribute();
  }
  auto eval_form = LoadModelFromBytes(forward->SerializeAsString());
  ASSERT_TRUE(eval_form.ok()) << eval_form.status();
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  auto artifacts = GenerateArtifacts(*eval_form, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  auto session = Session::Create(artifacts->training_model);
  ASSERT_TRUE(session.ok()) << session.status();
  std::map<std::string, Tensor> buffers;
  for (const std::string& parameter : artifacts->trainable) {
    for (const Parameter& p : artifacts->checkpoint.parameters) {
      if (p.name == parameter) buffers[GradientAccumulationBufferName(parameter)] = ZerosLike(p.data);
    }
  }
  auto outputs =
      session.value()->Run(Feeds(artifacts->training_model, ReadBatch(dir), artifacts->checkpoint, buffers, true));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> results = ByName(*outputs);
  for (const std::string& parameter : artifacts->trainable) {
    auto expected = ReadNpy(dir + "/ref/grads/" + parameter + ".npy");
    ASSERT_TRUE(expected.ok()) << parameter;
    EXPECT_LT(RelativeError(results.at(GradientAccumulationOutputName(parameter)), *expected), 1e-4) << parameter;
  }
  EXPECT_TRUE(results.count(RunningStatisticOutputName("bn.running_var")));
}

// Training-mode BatchNormalization needs opset 14 (training_mode); Dropout needs opset 12 (its training_mode input).
TEST(TrainingModelTest, OpsetsWithoutATrainingModeAreUnimplemented) {
  onnx::ModelProto model = ElementwiseModel({"w"}, {{2, 3}});
  model.mutable_opset_import(0)->set_version(13);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->mutable_output(0)->set_name("y");
  onnx::NodeProto* dropout = graph->add_node();
  dropout->set_op_type("Dropout");
  dropout->set_name("dropout");
  dropout->add_input("out0");
  dropout->add_output("y");
  ArtifactOptions options;
  options.loss = {{LossKind::kMeanSquaredError, "y", "target", 1.0f}};
  auto opset13 = LoadModelFromBytes(model.SerializeAsString());
  ASSERT_TRUE(opset13.ok()) << opset13.status();
  EXPECT_TRUE(GenerateArtifacts(*opset13, options).ok());  // Dropout has training_mode since opset 12
  model.mutable_opset_import(0)->set_version(11);
  auto opset11 = LoadModelFromBytes(model.SerializeAsString());
  ASSERT_TRUE(opset11.ok()) << opset11.status();
  const absl::Status refused = GenerateArtifacts(*opset11, options).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.message().find("Dropout"), std::string::npos) << refused;
}

// A model value named like something the artifacts add is refused, not silently shadowed.
TEST(GenerateArtifactsTest, ReservedNamesAreInvalidArgument) {
  onnx::ModelProto model = ElementwiseModel({"w"}, {{3}});
  model.mutable_graph()->mutable_output(0)->set_name(kLossName);
  model.mutable_graph()->mutable_node(0)->set_output(0, kLossName);
  auto forward = LoadModelFromBytes(model.SerializeAsString());
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {{LossKind::kMeanSquaredError, kLossName, "target", 1.0f}};
  EXPECT_EQ(GenerateArtifacts(*forward, options).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Gradient coverage ----

// y = Sin(x * w1) * w2 + b: the engine has no Sin kernel, hence no gradient rule, and Sin blocks w1 only.
onnx::ModelProto SinModel() {
  onnx::ModelProto model = ElementwiseModel({"w1"}, {{4}});
  onnx::GraphProto* graph = model.mutable_graph();
  graph->mutable_output(0)->set_name("y");
  for (const char* name : {"w2", "b"}) {
    Tensor value = *Tensor::Allocate(DataType::kFloat32, {4});
    std::fill_n(value.mutable_data<float>(), 4, 0.25f);
    *graph->add_initializer() = TensorToProto(value, name);
  }
  auto add = [graph](const char* op, std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type(op);
    node->set_name(output);
    for (const auto& input : inputs) node->add_input(input);
    node->add_output(output);
  };
  add("Sin", {"out0"}, "s");
  add("Mul", {"s", "w2"}, "scaled");
  add("Add", {"scaled", "b"}, "y");
  return model;
}

TEST(GradientCoverageTest, ReportsTheOpWithoutARuleAndTheParametersItBlocks) {
  auto forward = LoadModelFromBytes(SinModel().SerializeAsString());
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {{LossKind::kMeanSquaredError, "y", "target", 1.0f}};
  auto report = AnalyzeGradientCoverage(*forward, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->complete());
  std::map<std::string, OpCoverage> ops;
  for (const OpCoverage& op : report->ops) ops[op.op_type] = op;
  ASSERT_EQ(ops.size(), 3u) << report->ToText();
  EXPECT_FALSE(ops["Sin"].has_gradient);
  EXPECT_TRUE(ops["Sin"].on_gradient_path);
  EXPECT_EQ(ops["Sin"].blocked_parameters, std::vector<std::string>{"w1"});
  EXPECT_EQ(ops["Mul"].count, 2);
  EXPECT_TRUE(ops["Mul"].has_gradient);
  EXPECT_TRUE(ops["Mul"].blocked_parameters.empty());
  EXPECT_TRUE(ops["Add"].has_gradient);

  auto artifacts = GenerateArtifacts(*forward, options);
  EXPECT_EQ(artifacts.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(artifacts.status().message().find(report->ToText()), std::string::npos) << artifacts.status();

  // Training only what lies after Sin needs no rule for it.
  options.requires_grad = {"w2", "b"};
  report = AnalyzeGradientCoverage(*forward, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->complete()) << report->ToText();
  for (const OpCoverage& op : report->ops) {
    if (op.op_type == "Sin") {
      EXPECT_FALSE(op.on_gradient_path);
    }
  }
  artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  EXPECT_EQ(artifacts->trainable, (std::vector<std::string>{"w2", "b"}));
}

}  // namespace
}  // namespace traind::engine
