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
                   const CheckpointState& checkpoint, const std::map<std::string, Tensor>& buffers,
                   bool lazy_reset) {
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
    for (const std::string& name : {p, p + "_grad", OptimizerStateName(p, "momentum0"),
                                    OptimizerStateName(p, "momentum1")}) {
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
  EXPECT_EQ(checked, static_cast<int>(std::distance(
                         std::filesystem::directory_iterator(dir + "/ref/grads"), {})));

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

}  // namespace
}  // namespace traind::engine
