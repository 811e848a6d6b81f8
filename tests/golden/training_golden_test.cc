// The training graph (forward + loss + autodiff) reproduces PyTorch 1.13's loss and every parameter gradient on
// the golden models (tests/golden/make_golden.py): error at most 1e-4 of the largest gradient of each parameter.
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "engine/autodiff/gradient_builder.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/session.h"
#include "engine/training/optimizer.h"
#include "engine/training/training_graph.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

std::string GoldenDir() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/tests/golden/data";
}

struct GoldenCase {
  std::string name;
  std::vector<LossTerm> loss;
};

class TrainingGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(TrainingGoldenTest, LossAndGradientsMatchPyTorch) {
  const std::string dir = GoldenDir() + "/" + GetParam().name;
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  TrainingGraphOptions options;
  options.loss = GetParam().loss;
  auto training = BuildTrainingGraph(*forward, options);
  ASSERT_TRUE(training.ok()) << training.status();
  // The training model is valid ONNX: the checker and strict shape inference pass.
  auto validated = LoadModelFromBytes(training->model.SerializeAsString());
  ASSERT_TRUE(validated.ok()) << validated.status();
  auto session = Session::Create(*validated);
  ASSERT_TRUE(session.ok()) << session.status();

  NamedTensors inputs;
  for (const char* folder : {"inputs", "targets"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/" + folder)) {
      auto tensor = ReadNpy(entry.path().string());
      ASSERT_TRUE(tensor.ok()) << tensor.status();
      inputs.emplace_back(entry.path().stem().string(), *tensor);
    }
  }
  for (const auto& initializer : forward->graph().initializer()) {
    if (std::find(training->trainable.begin(), training->trainable.end(), initializer.name()) ==
        training->trainable.end()) {
      continue;
    }
    auto tensor = TensorFromProto(initializer);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    inputs.emplace_back(initializer.name(), *tensor);
  }
  auto outputs = (*session)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> results;
  for (const auto& [name, tensor] : *outputs) results[name] = tensor;

  auto expected_loss = ReadNpy(dir + "/ref/loss.npy");
  ASSERT_TRUE(expected_loss.ok());
  const double loss = results.at("loss").data<float>()[0];
  EXPECT_NEAR(loss, expected_loss->data<double>()[0], 1e-5 * std::fabs(expected_loss->data<double>()[0]));

  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/ref/grads")) {
    const std::string parameter = entry.path().stem().string();
    auto expected = ReadNpy(entry.path().string());
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(results.count(GradientName(parameter))) << "no gradient for " << parameter;
    const Tensor& actual = results.at(GradientName(parameter));
    ASSERT_EQ(actual.shape(), expected->shape()) << parameter;
    double max_error = 0, max_reference = 0;
    for (int64_t i = 0; i < actual.num_elements(); ++i) {
      max_error = std::max(max_error, std::fabs(actual.data<float>()[i] - expected->data<double>()[i]));
      max_reference = std::max(max_reference, std::fabs(expected->data<double>()[i]));
    }
    EXPECT_LE(max_error, 1e-4 * std::max(max_reference, 1e-12)) << GetParam().name << " " << parameter;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(training->trainable.size()));
}

// Five optimizer steps follow PyTorch's loss trajectory (6 losses: before each step and after the last).
void ExpectTrajectory(const GoldenCase& golden, const std::string& reference_file,
                      const std::function<absl::Status(int64_t, std::vector<ParameterUpdate>&)>& step) {
  const std::string dir = GoldenDir() + "/" + golden.name;
  auto forward = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  TrainingGraphOptions options;
  options.loss = golden.loss;
  auto training = BuildTrainingGraph(*forward, options);
  ASSERT_TRUE(training.ok()) << training.status();
  auto session = Session::Create(training->model);
  ASSERT_TRUE(session.ok()) << session.status();

  NamedTensors data;
  for (const char* folder : {"inputs", "targets"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/" + folder)) {
      data.emplace_back(entry.path().stem().string(), *ReadNpy(entry.path().string()));
    }
  }
  std::map<std::string, Tensor> parameters;
  std::map<std::string, std::map<std::string, Tensor>> state;
  for (const auto& initializer : forward->graph().initializer()) {
    if (std::count(training->trainable.begin(), training->trainable.end(), initializer.name())) {
      parameters[initializer.name()] = *TensorFromProto(initializer);
    }
  }
  std::vector<double> losses;
  for (int64_t t = 1; t <= 6; ++t) {
    NamedTensors inputs = data;
    for (const auto& [name, tensor] : parameters) inputs.emplace_back(name, tensor);
    auto outputs = (*session)->Run(inputs);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    std::map<std::string, Tensor> results(outputs->begin(), outputs->end());
    losses.push_back(results.at("loss").data<float>()[0]);
    if (t == 6) break;
    std::vector<ParameterUpdate> updates;
    for (auto& [name, tensor] : parameters) {
      updates.push_back({&tensor, &results.at(GradientName(name)), &state[name]});
    }
    ASSERT_TRUE(AllFinite(updates));
    ASSERT_TRUE(step(t, updates).ok());
  }
  auto expected = ReadNpy(dir + "/ref/" + reference_file);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(expected->num_elements(), 6);
  for (int i = 0; i < 6; ++i) {
    const double reference = expected->data<double>()[i];
    EXPECT_NEAR(losses[i], reference, 1e-4 * std::fabs(reference)) << golden.name << " loss " << i;
  }
}

TEST_P(TrainingGoldenTest, FiveAdamWStepsFollowPyTorch) {
  AdamWOptions adamw;  // tests/golden/make_golden.py's ADAMW
  adamw.lr = 1e-2f;
  adamw.weight_decay = 1e-2f;
  ExpectTrajectory(GetParam(), "adamw_losses.npy", [&adamw](int64_t t, std::vector<ParameterUpdate>& updates) {
    return AdamWStep(adamw, t, updates);
  });
}

TEST_P(TrainingGoldenTest, FiveSgdNesterovStepsFollowPyTorch) {
  SgdOptions sgd;  // tests/golden/make_golden.py's SGD_NESTEROV
  sgd.lr = 5e-2f;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  ExpectTrajectory(GetParam(), "sgd_nesterov_losses.npy", [&sgd](int64_t t, std::vector<ParameterUpdate>& updates) {
    return SgdStep(sgd, t, updates);
  });
}

LossTerm CrossEntropy() { return {LossKind::kCrossEntropy, "logits", "target", 1.0f}; }

INSTANTIATE_TEST_SUITE_P(
    Golden, TrainingGoldenTest,
    ::testing::Values(GoldenCase{"mlp", {CrossEntropy()}}, GoldenCase{"cnn_bn_maxpool", {CrossEntropy()}},
                      GoldenCase{"resnet_block", {CrossEntropy()}}, GoldenCase{"transformer_encoder", {CrossEntropy()}},
                      GoldenCase{"two_head_weighted_mse",
                                 {{LossKind::kMeanSquaredError, "out1", "target1", 0.4f},
                                  {LossKind::kMeanSquaredError, "out2", "target2", 0.6f}}}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace traind::engine
