// Module and Optimizer (the training API) on GenerateArtifacts' artifacts of the golden models
// (tests/golden/make_golden.py, PyTorch 1.13): loss trajectories, gradient accumulation, lazy reset, checkpoint
// resume, non-finite skipping, parameter buffers, schedulers, export for inference, and input validation.
#include "engine/training/module.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_builder.h"
#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "engine/model/external_tensor.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string GoldenDir(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/tests/golden/data/", name);
}

std::string TestDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

// The golden batch: every file of inputs/ and targets/, named after the file.
NamedTensors ReadBatch(const std::string& name) {
  NamedTensors batch;
  for (const char* folder : {"inputs", "targets"}) {
    for (const auto& entry : std::filesystem::directory_iterator(GoldenDir(name) + "/" + folder)) {
      absl::StatusOr<Tensor> tensor = ReadNpy(entry.path().string());
      EXPECT_TRUE(tensor.ok()) << tensor.status();
      batch.emplace_back(entry.path().stem().string(), *tensor);
    }
  }
  return batch;
}

Tensor ReadReference(const std::string& path) {
  absl::StatusOr<Tensor> tensor = ReadNpy(path);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return tensor.ok() ? *tensor : Tensor();
}

std::vector<double> Values(const Tensor& tensor) {
  std::vector<double> values(tensor.num_elements());
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    values[i] = tensor.dtype() == DataType::kFloat64 ? tensor.data<double>()[i] : tensor.data<float>()[i];
  }
  return values;
}

// Element-wise |actual - expected| <= tolerance * max|expected| (the golden tests' measure for gradients).
void ExpectClose(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<double> a = Values(actual), e = Values(expected);
  double scale = 1e-12;
  for (double value : e) scale = std::max(scale, std::fabs(value));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], e[i], tolerance * scale) << what << " element " << i;
  }
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

absl::StatusOr<Tensor> Copy(const Tensor& tensor) {
  absl::StatusOr<Tensor> copy = Tensor::Allocate(tensor.dtype(), tensor.shape());
  if (copy.ok()) std::memcpy(copy->mutable_raw_data(), tensor.raw_data(), tensor.byte_size());
  return copy;
}

// A deep copy of every tensor of a state (the state's tensors are updated in place).
CheckpointState Snapshot(const CheckpointState& state) {
  CheckpointState copy = state;
  for (Parameter& parameter : copy.parameters) {
    parameter.data = *Copy(parameter.data);
    if (parameter.has_grad()) parameter.grad = *Copy(parameter.grad);
  }
  if (copy.optimizer) {
    for (auto& [name, states] : copy.optimizer->parameter_states) {
      for (auto& [state_name, tensor] : states) tensor = *Copy(tensor);
    }
  }
  return copy;
}

void ExpectSameState(const CheckpointState& actual, const CheckpointState& expected) {
  ASSERT_EQ(actual.parameters.size(), expected.parameters.size());
  for (size_t p = 0; p < expected.parameters.size(); ++p) {
    EXPECT_TRUE(SameBytes(actual.parameters[p].data, expected.parameters[p].data)) << expected.parameters[p].name;
  }
  ASSERT_EQ(actual.optimizer.has_value(), expected.optimizer.has_value());
  if (!expected.optimizer) return;
  EXPECT_EQ(actual.optimizer->group.step, expected.optimizer->group.step);
  EXPECT_EQ(actual.optimizer->group.learning_rate, expected.optimizer->group.learning_rate);
  for (const auto& [name, states] : expected.optimizer->parameter_states) {
    for (const auto& [state_name, tensor] : states) {
      EXPECT_TRUE(SameBytes(actual.optimizer->parameter_states.at(name).at(state_name), tensor))
          << name << "." << state_name;
    }
  }
}

struct GoldenCase {
  std::string name;
  std::vector<LossTerm> loss;
};

LossTerm CrossEntropy() { return {LossKind::kCrossEntropy, "logits", "target", 1.0f}; }

GoldenCase Case(const std::string& name) {
  if (name == "two_head_weighted_mse") {
    return {name,
            {{LossKind::kMeanSquaredError, "out1", "target1", 0.4f},
             {LossKind::kMeanSquaredError, "out2", "target2", 0.6f}}};
  }
  return {name, {CrossEntropy()}};
}

// tests/golden/make_golden.py's ADAMW and SGD_NESTEROV.
OptimizerSpec GoldenAdamW() {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kAdamW;
  spec.weight_decay = 1e-2f;
  return spec;
}
constexpr float kGoldenAdamWLearningRate = 1e-2f;

OptimizerSpec GoldenSgdNesterov() {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kSgd;
  spec.momentum = 0.9f;
  spec.nesterov = true;
  spec.weight_decay = 0.0f;
  return spec;
}
constexpr float kGoldenSgdLearningRate = 5e-2f;

OptimizerSpec PlainSgd() {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kSgd;
  spec.weight_decay = 0.0f;
  return spec;
}

Artifacts MakeArtifacts(const GoldenCase& golden, const OptimizerSpec& optimizer,
                        std::vector<std::string> additional_outputs = {}) {
  absl::StatusOr<onnx::ModelProto> forward = LoadModelFromFile(GoldenDir(golden.name) + "/model.onnx");
  EXPECT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = golden.loss;
  options.optimizer = optimizer;
  options.additional_output_names = std::move(additional_outputs);
  absl::StatusOr<Artifacts> artifacts = GenerateArtifacts(*forward, options);
  EXPECT_TRUE(artifacts.ok()) << artifacts.status();
  return artifacts.ok() ? *std::move(artifacts) : Artifacts();
}

// A Module + Optimizer over their own state.
struct Trainer {
  CheckpointState state;
  std::unique_ptr<Module> module;
  std::unique_ptr<Optimizer> optimizer;
};

std::unique_ptr<Trainer> MakeTrainer(const Artifacts& artifacts, float learning_rate,
                                     const ModuleOptions& module_options = {}) {
  auto trainer = std::make_unique<Trainer>();
  trainer->state = artifacts.checkpoint;
  absl::StatusOr<std::unique_ptr<Module>> module = Module::Create(artifacts, &trainer->state, module_options);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  trainer->module = *std::move(module);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(artifacts.optimizer_model, trainer->module.get(), {learning_rate});
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  if (!optimizer.ok()) return nullptr;
  trainer->optimizer = *std::move(optimizer);
  return trainer;
}

float Loss(const NamedTensors& outputs) {
  EXPECT_EQ(outputs.at(0).first, kLossName);
  return outputs.at(0).second.data<float>()[0];
}

// TrainStep, Optimizer::Step, LazyResetGrad (ONNX Runtime's loop); returns the step's loss.
float TrainingIteration(Trainer& trainer, const NamedTensors& batch, bool expect_skipped = false) {
  absl::StatusOr<NamedTensors> outputs = trainer.module->TrainStep(batch);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return NAN;
  absl::StatusOr<OptimizerStepResult> result = trainer.optimizer->Step();
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) {
    EXPECT_EQ(result->skipped, expect_skipped);
  }
  trainer.module->LazyResetGrad();
  return Loss(*outputs);
}

const Parameter& ParameterNamed(const CheckpointState& state, const std::string& name) {
  for (const Parameter& parameter : state.parameters) {
    if (parameter.name == name) return parameter;
  }
  ADD_FAILURE() << "no parameter " << name;
  return state.parameters.front();
}

// ---- The golden trajectories ----

struct TrajectoryCase {
  std::string name;
  bool adamw;
  // ONNX's ai.onnx.preview.training Momentum instead of the fused op: the same interface, and torch.optim.SGD's
  // arithmetic exactly (artifacts.h), so the same trajectory.
  bool onnx_standard_op = false;
};

class GoldenTrajectoryTest : public ::testing::TestWithParam<TrajectoryCase> {};

// 5 optimizer steps through Module + Optimizer follow PyTorch's losses (6 forwards: before each step and after
// the last), as tests/golden/training_golden_test.cc checks for the hand-written loop.
TEST_P(GoldenTrajectoryTest, FollowsPyTorch) {
  const GoldenCase golden = Case(GetParam().name);
  OptimizerSpec spec = GetParam().adamw ? GoldenAdamW() : GoldenSgdNesterov();
  spec.onnx_standard_op = GetParam().onnx_standard_op;
  const Artifacts artifacts = MakeArtifacts(golden, spec);
  auto trainer = MakeTrainer(artifacts, GetParam().adamw ? kGoldenAdamWLearningRate : kGoldenSgdLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch(golden.name);
  // Parameters are updated in place: their buffers stay the ones the caller sees.
  std::vector<const void*> buffers;
  for (const Parameter& parameter : trainer->state.parameters) buffers.push_back(parameter.data.raw_data());

  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) losses.push_back(TrainingIteration(*trainer, batch));
  absl::StatusOr<NamedTensors> last = trainer->module->TrainStep(batch);
  ASSERT_TRUE(last.ok()) << last.status();
  losses.push_back(Loss(*last));

  const Tensor expected = ReadReference(GoldenDir(golden.name) + "/ref/" +
                                        (GetParam().adamw ? "adamw_losses.npy" : "sgd_nesterov_losses.npy"));
  ASSERT_EQ(expected.num_elements(), 6);
  for (int i = 0; i < 6; ++i) {
    const double reference = expected.data<double>()[i];
    EXPECT_NEAR(losses[i], reference, 1e-4 * std::fabs(reference)) << "loss " << i;
  }
  EXPECT_EQ(trainer->optimizer->GetStep(), 5);
  for (size_t p = 0; p < buffers.size(); ++p) {
    EXPECT_EQ(trainer->state.parameters[p].data.raw_data(), buffers[p]) << trainer->state.parameters[p].name;
  }
  // The optimizer's state lives in the checkpoint, named as artifacts.h says.
  ASSERT_TRUE(trainer->state.optimizer.has_value());
  for (const std::string& name : trainer->module->TrainableParameterNames()) {
    std::vector<std::string> states;
    for (const auto& [state, tensor] : trainer->state.optimizer->parameter_states.at(name)) states.push_back(state);
    if (GetParam().adamw) {
      EXPECT_THAT(states, ElementsAre("momentum0", "momentum1")) << name;
    } else {
      EXPECT_THAT(states, ElementsAre("momentum0")) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Golden, GoldenTrajectoryTest,
    ::testing::Values(TrajectoryCase{"mlp", true}, TrajectoryCase{"mlp", false}, TrajectoryCase{"cnn_bn_maxpool", true},
                      TrajectoryCase{"cnn_bn_maxpool", false}, TrajectoryCase{"resnet_block", true},
                      TrajectoryCase{"resnet_block", false}, TrajectoryCase{"transformer_encoder", true},
                      TrajectoryCase{"transformer_encoder", false}, TrajectoryCase{"two_head_weighted_mse", true},
                      TrajectoryCase{"two_head_weighted_mse", false}, TrajectoryCase{"mlp", false, true},
                      TrajectoryCase{"cnn_bn_maxpool", false, true}),
    [](const ::testing::TestParamInfo<TrajectoryCase>& info) {
      return info.param.name + (info.param.adamw ? "_adamw" : "_sgd_nesterov") +
             (info.param.onnx_standard_op ? "_onnx_momentum" : "");
    });

// ---- Gradients ----

// The convolution nets train alike with activations channels-last between their convolutions (the CPU default,
// engine/runtime/channels_last.h) and in NCHW throughout: the same losses, running statistics and parameters after
// AdamW steps, up to the rounding of sums taken in another order. (Both follow PyTorch: GoldenTrajectoryTest.)
TEST(ModuleTest, ConvolutionNetsTrainAlikeChannelsLastAndNchw) {
  for (const std::string name : {"cnn_bn_maxpool", "resnet_block"}) {
    SCOPED_TRACE(name);
    const GoldenCase golden = Case(name);
    const Artifacts artifacts = MakeArtifacts(golden, GoldenAdamW());
    // The pass does rewrite these training graphs.
    absl::StatusOr<std::shared_ptr<const Plan>> plan = Compile(artifacts.training_model);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int channels_last_convolutions = 0;
    for (const PlannedNode& node : (*plan)->nodes) channels_last_convolutions += node.op_type == "ChannelsLastConv";
    EXPECT_GT(channels_last_convolutions, 0);

    ModuleOptions nchw;
    nchw.channels_last = false;
    auto channels_last_trainer = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
    // Artifacts of their own: a CheckpointState copy shares its tensors' buffers, which the optimizer updates.
    auto nchw_trainer = MakeTrainer(MakeArtifacts(golden, GoldenAdamW()), kGoldenAdamWLearningRate, nchw);
    ASSERT_NE(channels_last_trainer, nullptr);
    ASSERT_NE(nchw_trainer, nullptr);
    const NamedTensors batch = ReadBatch(name);
    for (int step = 0; step < 4; ++step) {
      const float a = TrainingIteration(*channels_last_trainer, batch);
      const float b = TrainingIteration(*nchw_trainer, batch);
      EXPECT_NEAR(a, b, 1e-5 * std::fabs(b)) << "step " << step;
    }
    const auto& parameters = nchw_trainer->state.parameters;
    ASSERT_EQ(channels_last_trainer->state.parameters.size(), parameters.size());
    for (size_t p = 0; p < parameters.size(); ++p) {
      const Tensor& expected = parameters[p].data;
      const Tensor& actual = channels_last_trainer->state.parameters[p].data;
      ASSERT_EQ(actual.shape(), expected.shape()) << parameters[p].name;
      double largest = 0;
      for (int64_t i = 0; i < expected.num_elements(); ++i) {
        largest = std::max(largest, std::fabs(double{expected.data<float>()[i]}));
      }
      for (int64_t i = 0; i < expected.num_elements(); ++i) {
        ASSERT_NEAR(actual.data<float>()[i], expected.data<float>()[i], 1e-5 * std::max(largest, 1.0))
            << parameters[p].name << "[" << i << "]";
      }
    }
  }
}

TEST(ModuleTest, GradientsAccumulateAcrossTrainStepsUntilLazyReset) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  CheckpointState state = artifacts.checkpoint;
  auto module = Module::Create(artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  const NamedTensors batch = ReadBatch("mlp");

  ASSERT_TRUE((*module)->TrainStep(batch).ok());
  std::map<std::string, Tensor> once;
  for (const std::string& name : (*module)->TrainableParameterNames()) {
    const Parameter& parameter = ParameterNamed(state, name);
    ASSERT_TRUE(parameter.has_grad()) << name;
    // The gradient of one step is PyTorch's.
    ExpectClose(parameter.grad, ReadReference(GoldenDir("mlp") + "/ref/grads/" + name + ".npy"), 1e-4, name);
    once[name] = *Copy(parameter.grad);
  }

  ASSERT_TRUE((*module)->TrainStep(batch).ok());  // no reset: adds
  for (const auto& [name, gradient] : once) {
    const Tensor& twice = ParameterNamed(state, name).grad;
    ASSERT_EQ(twice.shape(), gradient.shape());
    for (int64_t i = 0; i < gradient.num_elements(); ++i) {
      EXPECT_EQ(twice.data<float>()[i], 2 * gradient.data<float>()[i]) << name << " " << i;
    }
  }

  (*module)->LazyResetGrad();
  // Lazy: nothing is zeroed until the next TrainStep, which replaces the sum.
  EXPECT_EQ(ParameterNamed(state, "fc1.weight").grad.data<float>()[0], 2 * once["fc1.weight"].data<float>()[0]);
  ASSERT_TRUE((*module)->TrainStep(batch).ok());
  for (const auto& [name, gradient] : once) {
    EXPECT_TRUE(SameBytes(ParameterNamed(state, name).grad, gradient)) << name;
  }
}

TEST(ModuleTest, NamesAndModes) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW(), {"logits"});
  CheckpointState state = artifacts.checkpoint;
  auto module = Module::Create(artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_THAT((*module)->TrainingInputNames(), ElementsAre("input", "target"));
  EXPECT_THAT((*module)->EvalInputNames(), ElementsAre("input", "target"));
  EXPECT_THAT((*module)->TrainingOutputNames(), ElementsAre("loss", "logits"));
  EXPECT_THAT((*module)->EvalOutputNames(), ElementsAre("loss", "logits"));
  EXPECT_THAT((*module)->TrainableParameterNames(), ElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
  EXPECT_EQ((*module)->GetParametersSize(), 16 * 8 + 16 + 4 * 16 + 4);

  const NamedTensors batch = ReadBatch("mlp");
  (*module)->SetTrainingMode(false);
  EXPECT_FALSE((*module)->is_training());
  auto eval = (*module)->Run(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_FALSE(state.parameters[0].has_grad());  // eval computes no gradient
  ExpectClose(eval->at(1).second, ReadReference(GoldenDir("mlp") + "/ref/outputs/logits.npy"), 1e-5, "logits");
  (*module)->SetTrainingMode(true);
  auto train = (*module)->Run(batch);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_TRUE(state.parameters[0].has_grad());
  // Without BatchNormalization or Dropout both modes compute the same loss: PyTorch's.
  const double reference = ReadReference(GoldenDir("mlp") + "/ref/loss.npy").data<double>()[0];
  EXPECT_NEAR(Loss(*eval), reference, 1e-5 * reference);
  EXPECT_NEAR(Loss(*train), reference, 1e-5 * reference);
}

// ---- BatchNormalization and eval mode against PyTorch ----

TEST(ModuleTest, BatchNormalizationRunningStatisticsAndEvalFollowPyTorch) {
  const GoldenCase golden = Case("bn_dropout_eval");
  const Artifacts artifacts = MakeArtifacts(golden, GoldenAdamW(), {"logits"});
  CheckpointState state = artifacts.checkpoint;
  auto module = Module::Create(artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  const NamedTensors batch = ReadBatch(golden.name);
  const std::string ref = GoldenDir(golden.name) + "/ref/";

  // model.eval() with the exported parameters.
  auto eval = (*module)->EvalStep(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  const double eval_loss = ReadReference(ref + "eval/loss.npy").data<double>()[0];
  EXPECT_NEAR(Loss(*eval), eval_loss, 1e-5 * std::fabs(eval_loss));
  ExpectClose(eval->at(1).second, ReadReference(ref + "eval/outputs/logits.npy"), 1e-5, "eval logits");

  // One train-mode forward moves the running statistics as PyTorch's does (unbiased variance).
  ASSERT_TRUE((*module)->TrainStep(batch).ok());
  for (const char* name : {"bn.running_mean", "bn.running_var"}) {
    const Parameter& statistic = ParameterNamed(state, name);
    EXPECT_FALSE(statistic.requires_grad);
    EXPECT_FALSE(statistic.has_grad());
    ExpectClose(statistic.data, ReadReference(ref + "running/" + name + ".npy"), 1e-5, name);
  }
}

// ---- Optimizer ----

// A NaN in the batch: the step is skipped and nothing changes. Runs once where the NaN reaches the loss, once
// where it only reaches BatchNormalization's statistics (Relu maps NaN to 0 before the loss).
class NonFiniteBatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NonFiniteBatchTest, SkipsTheStepAndChangesNothing) {
  const GoldenCase golden = Case(GetParam());
  const Artifacts artifacts = MakeArtifacts(golden, GoldenAdamW());
  auto trainer = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch(golden.name);
  TrainingIteration(*trainer, batch);  // a real step first, so that there are moments to keep

  NamedTensors poisoned = batch;
  ASSERT_EQ(poisoned[0].first, "input");
  poisoned[0].second = *Copy(batch[0].second);
  poisoned[0].second.mutable_data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  const CheckpointState before = Snapshot(trainer->state);
  auto outputs = trainer->module->TrainStep(poisoned);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  if (golden.name == "two_head_weighted_mse") {
    EXPECT_TRUE(std::isnan(Loss(*outputs)));
  }
  EXPECT_FALSE(trainer->module->accumulated_steps_finite());
  auto result = trainer->optimizer->Step();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->skipped);
  EXPECT_EQ(result->step, 1);
  EXPECT_EQ(result->learning_rate, kGoldenAdamWLearningRate);
  // Parameters (running statistics included), moments, step and learning rate are untouched.
  ExpectSameState(trainer->state, before);

  // The next clean batch trains normally.
  trainer->module->LazyResetGrad();
  TrainingIteration(*trainer, batch);
  EXPECT_EQ(trainer->optimizer->GetStep(), 2);
}

INSTANTIATE_TEST_SUITE_P(Golden, NonFiniteBatchTest, ::testing::Values("two_head_weighted_mse", "cnn_bn_maxpool"));

TEST(OptimizerTest, NonFiniteGradientSkipsTheStepAndChangesNothing) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenSgdNesterov());
  auto trainer = MakeTrainer(artifacts, kGoldenSgdLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch("mlp");
  TrainingIteration(*trainer, batch);
  ASSERT_TRUE(trainer->module->TrainStep(batch).ok());
  // A finite loss but an infinite gradient element: the optimizer model itself must refuse the step.
  trainer->state.parameters[2].grad.mutable_data<float>()[5] = std::numeric_limits<float>::infinity();
  const CheckpointState before = Snapshot(trainer->state);
  auto result = trainer->optimizer->Step();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->skipped);
  ExpectSameState(trainer->state, before);
}

// The fused optimizer node updates the CheckpointState's tensors where they are: the optimizer session allocates
// less than the largest parameter, and the tensors keep their buffers.
TEST(OptimizerTest, StepsUpdateParametersAndMomentsInPlace) {
  for (const OptimizerSpec& spec : {GoldenAdamW(), GoldenSgdNesterov()}) {
    const Artifacts artifacts = MakeArtifacts(Case("mlp"), spec);
    auto trainer = MakeTrainer(artifacts, 0.01f);
    ASSERT_NE(trainer, nullptr);
    const NamedTensors batch = ReadBatch("mlp");
    TrainingIteration(*trainer, batch);
    std::vector<const void*> buffers;
    size_t largest = 0;
    for (const Parameter& parameter : trainer->state.parameters) {
      buffers.push_back(parameter.data.raw_data());
      largest = std::max(largest, parameter.data.byte_size());
      for (const auto& [name, tensor] : trainer->state.optimizer->parameter_states.at(parameter.name)) {
        buffers.push_back(tensor.raw_data());
      }
    }
    const CheckpointState before = Snapshot(trainer->state);
    TrainingIteration(*trainer, batch);
    const auto& pool = dynamic_cast<const CpuExecutor&>(trainer->optimizer->session().executor()).buffers();
    EXPECT_LT(pool.peak_bytes_in_use(), largest) << "the optimizer model allocated fresh outputs";
    size_t b = 0;
    bool changed = false;
    for (size_t p = 0; p < trainer->state.parameters.size(); ++p) {
      const Parameter& parameter = trainer->state.parameters[p];
      EXPECT_EQ(parameter.data.raw_data(), buffers[b++]);
      changed = changed || !SameBytes(parameter.data, before.parameters[p].data);
      for (const auto& [name, tensor] : trainer->state.optimizer->parameter_states.at(parameter.name)) {
        EXPECT_EQ(tensor.raw_data(), buffers[b++]) << name;
      }
    }
    EXPECT_TRUE(changed);
  }
}

TEST(OptimizerTest, StepBeforeAnyTrainStepIsRefused) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  auto trainer = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
  ASSERT_NE(trainer, nullptr);
  auto result = trainer->optimizer->Step();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("no gradient"));
}

// With plain SGD p' = p - lr * g, so each step shows the learning rate it used.
TEST(OptimizerTest, SchedulerSetsTheLearningRateOfEachStep) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), PlainSgd());
  auto trainer = MakeTrainer(artifacts, 0.1f);
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), 0.1f);
  auto scheduler = LearningRateScheduler::LinearWarmupDecay(/*warmup_steps=*/2, /*total_steps=*/4);
  ASSERT_TRUE(scheduler.ok());
  ASSERT_TRUE(trainer->optimizer->SetScheduler(*scheduler).ok());
  EXPECT_EQ(trainer->state.scheduler.kind, kLinearWarmupDecaySchedule);
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), 0.0f);  // LambdaLR applies lambda(0) at once
  const NamedTensors batch = ReadBatch("mlp");
  // The rates LambdaLR gives with ORT's linear lambda after 0, 1, 2, 3, 4 steps.
  const std::vector<float> rates = {0.0f, 0.05f, 0.1f, 0.05f, 0.0f};
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(trainer->module->TrainStep(batch).ok());
    const Parameter& weight = ParameterNamed(trainer->state, "fc2.weight");
    const Tensor before = *Copy(weight.data);
    const Tensor gradient = *Copy(weight.grad);
    auto result = trainer->optimizer->Step();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_FALSE(result->skipped);
    EXPECT_EQ(result->step, step + 1);
    EXPECT_FLOAT_EQ(result->learning_rate, rates[step + 1]);
    for (int64_t i = 0; i < before.num_elements(); ++i) {
      const float expected = before.data<float>()[i] - rates[step] * gradient.data<float>()[i];
      EXPECT_NEAR(weight.data.data<float>()[i], expected, 1e-6f * (1 + std::fabs(expected))) << step << " " << i;
    }
    trainer->module->LazyResetGrad();
  }

  // A learning rate set by hand is used by the next step (the scheduler overrides it after).
  trainer->optimizer->ClearScheduler();
  ASSERT_TRUE(trainer->optimizer->SetLearningRate(0.25f).ok());
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), 0.25f);
  ASSERT_TRUE(trainer->module->TrainStep(batch).ok());
  const Parameter& bias = ParameterNamed(trainer->state, "fc2.bias");
  const Tensor before = *Copy(bias.data);
  const Tensor gradient = *Copy(bias.grad);
  ASSERT_TRUE(trainer->optimizer->Step().ok());
  for (int64_t i = 0; i < before.num_elements(); ++i) {
    EXPECT_FLOAT_EQ(bias.data.data<float>()[i], before.data<float>()[i] - 0.25f * gradient.data<float>()[i]);
  }
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), 0.25f);  // no scheduler: unchanged

  EXPECT_EQ(trainer->optimizer->SetLearningRate(-1.0f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->optimizer->SetLearningRate(NAN).code(), absl::StatusCode::kInvalidArgument);

  // Plain SGD keeps no per-parameter state; its group still round-trips through a checkpoint.
  const std::string path = TestDir("plain_sgd") + "/checkpoint";
  ASSERT_TRUE(SaveCheckpoint(path, trainer->state).ok());
  auto loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->optimizer.has_value());
  EXPECT_EQ(loaded->optimizer->group.step, 5);
  EXPECT_EQ(loaded->optimizer->group.learning_rate, 0.25f);
  EXPECT_EQ(loaded->optimizer->group.initial_learning_rate, 0.1f);
  EXPECT_TRUE(loaded->scheduler.kind.empty());

  // Schedulers scale the initial learning rate, from the current step on.
  ASSERT_TRUE(trainer->optimizer->SetInitialLearningRate(0.2f).ok());
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), 0.2f);
  ASSERT_TRUE(trainer->optimizer->SetScheduler(*LearningRateScheduler::Step(/*step_size=*/2, /*gamma=*/0.5f)).ok());
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), 0.2f * 0.25f);  // 5 steps taken: gamma^2
}

// Save -> load -> resume (new Module and Optimizer from the files WriteArtifacts wrote) gives exactly the
// losses, parameters and learning rates of uninterrupted training; so does loading into the live state.
TEST(OptimizerTest, SaveLoadResumeEqualsUninterruptedTraining) {
  const GoldenCase golden = Case("cnn_bn_maxpool");  // AdamW moments, BatchNormalization running statistics
  const Artifacts artifacts = MakeArtifacts(golden, GoldenAdamW());
  const std::string dir = TestDir("resume");
  ASSERT_TRUE(WriteArtifacts(artifacts, dir, "").ok());
  const NamedTensors batch = ReadBatch(golden.name);
  auto scheduler = LearningRateScheduler::CosineWithWarmup(1, 6);
  ASSERT_TRUE(scheduler.ok());

  auto uninterrupted = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
  ASSERT_NE(uninterrupted, nullptr);
  ASSERT_TRUE(uninterrupted->optimizer->SetScheduler(*scheduler).ok());
  std::vector<float> losses, rates;
  for (int step = 0; step < 3; ++step) TrainingIteration(*uninterrupted, batch);
  const std::string checkpoint = dir + "/after3";
  ASSERT_TRUE(SaveCheckpoint(checkpoint, uninterrupted->state).ok());
  for (int step = 0; step < 3; ++step) {
    losses.push_back(TrainingIteration(*uninterrupted, batch));
    rates.push_back(uninterrupted->optimizer->GetLearningRate());
  }
  const CheckpointState final_state = Snapshot(uninterrupted->state);

  // A new process: everything from files.
  auto loaded = LoadCheckpoint(checkpoint);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Trainer resumed;
  resumed.state = *std::move(loaded);
  auto module = Module::CreateFromFiles(dir + "/training_model.onnx", dir + "/eval_model.onnx", &resumed.state);
  ASSERT_TRUE(module.ok()) << module.status();
  resumed.module = *std::move(module);
  // The checkpoint's learning rate, step and scheduler win over the options of a fresh start.
  auto optimizer = Optimizer::CreateFromFile(dir + "/optimizer_model.onnx", resumed.module.get(), {123.0f});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  resumed.optimizer = *std::move(optimizer);
  EXPECT_EQ(resumed.optimizer->GetStep(), 3);
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(TrainingIteration(resumed, batch), losses[step]) << step;
    EXPECT_EQ(resumed.optimizer->GetLearningRate(), rates[step]) << step;
  }
  ExpectSameState(resumed.state, final_state);

  // ORT's pattern: load into the state the live Module and Optimizer hold.
  auto reloaded = LoadCheckpoint(checkpoint);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ASSERT_TRUE(ReplaceCheckpointState(*std::move(reloaded), *uninterrupted->module, uninterrupted->optimizer.get()).ok());
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(TrainingIteration(*uninterrupted, batch), losses[step]) << step;
  }
  ExpectSameState(uninterrupted->state, final_state);
}

TEST(OptimizerTest, StartsFromTheLearningRateTheArtifactsRecord) {
  absl::StatusOr<onnx::ModelProto> forward = LoadModelFromFile(GoldenDir("mlp") + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  options.initial_learning_rate = 0.0375f;
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  CheckpointState state = artifacts->checkpoint;
  auto module = Module::Create(*artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  auto recorded = Optimizer::Create(artifacts->optimizer_model, module->get());
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ((*recorded)->GetLearningRate(), 0.0375f);
  // The state now has an optimizer group, which wins over any option: start again from the artifacts' state.
  state = artifacts->checkpoint;
  auto overridden = Optimizer::Create(artifacts->optimizer_model, module->get(), {0.5f});
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ((*overridden)->GetLearningRate(), 0.5f);
}

TEST(OptimizerTest, ReplaceCheckpointStateRefusesAnotherModelsStateAndChangesNothing) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  auto trainer = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch("mlp");
  TrainingIteration(*trainer, batch);
  const CheckpointState before = Snapshot(trainer->state);

  std::vector<std::pair<std::string, CheckpointState>> bad;
  bad.emplace_back("another model", MakeArtifacts(Case("cnn_bn_maxpool"), GoldenAdamW()).checkpoint);
  CheckpointState reshaped = Snapshot(before);
  reshaped.parameters[0].data = *Tensor::Allocate(DataType::kFloat32, {3});
  bad.emplace_back("parameter '", std::move(reshaped));
  CheckpointState frozen = Snapshot(before);
  frozen.parameters[0].requires_grad = false;
  frozen.parameters[0].grad = Tensor();
  frozen.optimizer->parameter_states.erase(frozen.parameters[0].name);
  bad.emplace_back("is frozen", std::move(frozen));
  CheckpointState foreign_moment = Snapshot(before);
  foreign_moment.optimizer->parameter_states.begin()->second["momentum7"] =
      *Copy(foreign_moment.parameters[0].data);
  bad.emplace_back("momentum7", std::move(foreign_moment));
  CheckpointState nan_rate = Snapshot(before);
  nan_rate.optimizer->group.learning_rate = std::numeric_limits<float>::quiet_NaN();
  bad.emplace_back("learning rates", std::move(nan_rate));
  for (auto& [what, candidate] : bad) {
    SCOPED_TRACE(what);
    const absl::Status status =
        ReplaceCheckpointState(std::move(candidate), *trainer->module, trainer->optimizer.get());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    ExpectSameState(trainer->state, before);
  }

  // Without optimizer state the optimizer starts over.
  CheckpointState parameters_only = Snapshot(before);
  parameters_only.optimizer.reset();
  ASSERT_TRUE(ReplaceCheckpointState(std::move(parameters_only), *trainer->module, trainer->optimizer.get()).ok());
  EXPECT_EQ(trainer->optimizer->GetStep(), 0);
  EXPECT_EQ(trainer->optimizer->GetLearningRate(), kGoldenAdamWLearningRate);
  TrainingIteration(*trainer, batch);
  EXPECT_EQ(trainer->optimizer->GetStep(), 1);
}

TEST(OptimizerTest, RefusesAModelForOtherParametersAndForeignState) {
  const Artifacts mlp = MakeArtifacts(Case("mlp"), GoldenAdamW());
  const Artifacts cnn = MakeArtifacts(Case("cnn_bn_maxpool"), GoldenAdamW());
  CheckpointState state = mlp.checkpoint;
  auto module = Module::Create(mlp, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  auto wrong_model = Optimizer::Create(cnn.optimizer_model, module->get());
  EXPECT_EQ(wrong_model.status().code(), absl::StatusCode::kInvalidArgument) << wrong_model.status();

  // SGD-with-momentum state where AdamW expects its two moments.
  const Artifacts sgd = MakeArtifacts(Case("mlp"), GoldenSgdNesterov());
  ASSERT_TRUE(Optimizer::Create(sgd.optimizer_model, module->get()).ok());
  state.optimizer->parameter_states["fc1.bias"]["velocity"] = *Copy(state.parameters[1].data);
  auto foreign = Optimizer::Create(mlp.optimizer_model, module->get());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument) << foreign.status();
  EXPECT_THAT(std::string(foreign.status().message()), HasSubstr("velocity"));
}

// ---- Parameters ----

TEST(ModuleTest, ContiguousParametersRoundTripAndReachTheSessions) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  CheckpointState state = artifacts.checkpoint;
  auto module = Module::Create(artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  auto buffer = (*module)->GetContiguousParameters();
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  ASSERT_EQ(buffer->num_elements(), (*module)->GetParametersSize());
  // Checkpoint order: fc1.weight first.
  EXPECT_EQ(buffer->data<float>()[0], state.parameters[0].data.data<float>()[0]);

  const void* first_buffer = state.parameters[0].data.raw_data();
  std::vector<float> zeros(buffer->num_elements(), 0.0f);
  ASSERT_TRUE((*module)->CopyBufferToParameters(zeros).ok());
  EXPECT_EQ(state.parameters[0].data.raw_data(), first_buffer);  // in place
  // All-zero weights give all-zero logits: cross entropy log(4) for every sample, in both sessions.
  const NamedTensors batch = ReadBatch("mlp");
  auto eval = (*module)->EvalStep(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NEAR(Loss(*eval), std::log(4.0), 1e-6 * std::log(4.0) * 4);
  auto train = (*module)->TrainStep(batch);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_NEAR(Loss(*train), std::log(4.0), 1e-6 * std::log(4.0) * 4);

  ASSERT_TRUE(
      (*module)->CopyBufferToParameters(absl::MakeConstSpan(buffer->data<float>(), buffer->num_elements())).ok());
  auto again = (*module)->GetContiguousParameters();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(SameBytes(*again, *buffer));
  const double reference = ReadReference(GoldenDir("mlp") + "/ref/loss.npy").data<double>()[0];
  EXPECT_NEAR(Loss(*(*module)->EvalStep(batch)), reference, 1e-5 * reference);

  // A wrong size changes nothing.
  const std::vector<float> short_buffer(buffer->num_elements() - 1, 7.0f);
  EXPECT_EQ((*module)->CopyBufferToParameters(short_buffer).code(), absl::StatusCode::kInvalidArgument);
  auto unchanged = (*module)->GetContiguousParameters();
  EXPECT_TRUE(SameBytes(*unchanged, *buffer));
}

TEST(ModuleTest, NominalStateTrainsOnceParametersArrive) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  CheckpointState state = artifacts.checkpoint;
  const Tensor weights = *(*Module::Create(artifacts, &state))->GetContiguousParameters(false);
  for (Parameter& parameter : state.parameters) {
    parameter.data = Tensor(parameter.data.dtype(), parameter.data.shape(), nullptr, parameter.data.num_elements());
  }
  auto module = Module::Create(artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  const NamedTensors batch = ReadBatch("mlp");
  auto refused = (*module)->TrainStep(batch);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("CopyBufferToParameters"));
  ASSERT_TRUE((*module)
                  ->CopyBufferToParameters(absl::MakeConstSpan(weights.data<float>(), weights.num_elements()), false)
                  .ok());
  auto outputs = (*module)->TrainStep(batch);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const double reference = ReadReference(GoldenDir("mlp") + "/ref/loss.npy").data<double>()[0];
  EXPECT_NEAR(Loss(*outputs), reference, 1e-5 * reference);
}

TEST(ModuleTest, RefusesAStateThatDoesNotMatchTheModels) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  {
    CheckpointState missing = artifacts.checkpoint;
    missing.parameters.pop_back();
    auto module = Module::Create(artifacts, &missing);
    EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument) << module.status();
  }
  {
    CheckpointState frozen = artifacts.checkpoint;
    frozen.parameters[0].requires_grad = false;
    auto module = Module::Create(artifacts, &frozen);
    EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument) << module.status();
    EXPECT_THAT(std::string(module.status().message()), HasSubstr("fc1.weight"));
  }
  {
    CheckpointState reshaped = artifacts.checkpoint;
    reshaped.parameters[1].data = *Tensor::Allocate(DataType::kFloat32, {17});
    auto module = Module::Create(artifacts, &reshaped);
    EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument) << module.status();
    EXPECT_THAT(std::string(module.status().message()), HasSubstr("fc1.bias"));
  }
  {
    CheckpointState changed_later = artifacts.checkpoint;
    auto module = Module::Create(artifacts, &changed_later);
    ASSERT_TRUE(module.ok()) << module.status();
    changed_later.parameters.pop_back();
    auto step = (*module)->TrainStep(ReadBatch("mlp"));
    EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();
  }
  EXPECT_EQ(Module::Create(artifacts, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  CheckpointState state = artifacts.checkpoint;
  auto no_file = Module::CreateFromFiles(TestDir("none") + "/training_model.onnx", "", &state);
  EXPECT_FALSE(no_file.ok());
  EXPECT_THAT(std::string(no_file.status().message()), HasSubstr("training_model.onnx"));
}

// ---- Input validation: InvalidArgument naming the input, nothing changed ----

TEST(ModuleTest, BadInputsAreRefusedByName) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  CheckpointState state = artifacts.checkpoint;
  auto created = Module::Create(artifacts, &state);
  ASSERT_TRUE(created.ok()) << created.status();
  Module& module = **created;
  const NamedTensors batch = ReadBatch("mlp");
  ASSERT_EQ(batch[0].first, "input");
  ASSERT_EQ(batch[1].first, "target");
  const Tensor& input = batch[0].second;
  const Tensor& target = batch[1].second;

  struct BadCase {
    std::string what;
    NamedTensors inputs;
    std::string message;
  };
  std::vector<BadCase> cases = {
      {"unknown name", {{"inptu", input}, {"target", target}}, "unknown input 'inptu'"},
      {"missing", {{"input", input}}, "missing input 'target'"},
      {"twice", {{"input", input}, {"input", input}, {"target", target}}, "input 'input' given twice"},
      {"parameter",
       {{"input", input}, {"target", target}, {"fc1.bias", state.parameters[1].data}},
       "unknown input 'fc1.bias' (a parameter"},
      {"empty", {{"input", Tensor()}, {"target", target}}, "input 'input' is empty"},
      {"dtype",
       {{"input", *Tensor::Allocate(DataType::kFloat64, input.shape())}, {"target", target}},
       "input 'input' has dtype"},
      {"shape",
       {{"input", *Tensor::Allocate(DataType::kFloat32, {input.dim(0), 7})}, {"target", target}},
       "input 'input' has shape"},
      {"rank",
       {{"input", *Tensor::Allocate(DataType::kFloat32, {input.num_elements()})}, {"target", target}},
       "input 'input' has shape"},
      {"target dtype",
       {{"input", input}, {"target", *Tensor::Allocate(DataType::kFloat32, target.shape())}},
       "input 'target' has dtype"},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.what);
    auto train = module.TrainStep(bad.inputs);
    ASSERT_FALSE(train.ok());
    EXPECT_EQ(train.status().code(), absl::StatusCode::kInvalidArgument) << train.status();
    EXPECT_THAT(std::string(train.status().message()), HasSubstr(bad.message));
    auto eval = module.EvalStep(bad.inputs);
    ASSERT_FALSE(eval.ok());
    EXPECT_EQ(eval.status().code(), absl::StatusCode::kInvalidArgument) << eval.status();
    EXPECT_THAT(std::string(eval.status().message()), HasSubstr(bad.message));
  }
  for (const Parameter& parameter : state.parameters) EXPECT_FALSE(parameter.has_grad()) << parameter.name;
  EXPECT_TRUE(SameBytes(state.parameters[0].data, artifacts.checkpoint.parameters[0].data));
  EXPECT_TRUE(module.TrainStep(batch).ok());
}

TEST(ModuleTest, ClassIdsOutsideTheClassRangeAreRefused) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  CheckpointState state = artifacts.checkpoint;
  auto created = Module::Create(artifacts, &state);
  ASSERT_TRUE(created.ok()) << created.status();
  Module& module = **created;
  const NamedTensors batch = ReadBatch("mlp");
  ASSERT_EQ(batch[1].first, "target");
  const int64_t classes = 4;  // the golden mlp's logits are [N, 4]
  for (const int64_t bad : {classes, int64_t{-1}, int64_t{1} << 40}) {
    SCOPED_TRACE(bad);
    Tensor target = *Copy(batch[1].second);
    target.mutable_data<int64_t>()[target.num_elements() - 1] = bad;
    const NamedTensors inputs = {batch[0], {"target", target}};
    for (const auto& result : {module.TrainStep(inputs), module.EvalStep(inputs)}) {
      ASSERT_FALSE(result.ok());
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(result.status().message()),
                  HasSubstr(absl::StrCat("input 'target' holds class id ", bad, " at element ",
                                         target.num_elements() - 1, ", outside [0, 4)")));
    }
  }
  for (const Parameter& parameter : state.parameters) EXPECT_FALSE(parameter.has_grad()) << parameter.name;
  // The ignore_index is not a class, yet allowed.
  ArtifactOptions options;
  options.loss = {CrossEntropy()};
  options.loss[0].ignore_index = -1;
  auto ignoring = GenerateArtifacts(*LoadModelFromFile(GoldenDir("mlp") + "/model.onnx"), options);
  ASSERT_TRUE(ignoring.ok()) << ignoring.status();
  CheckpointState ignoring_state = ignoring->checkpoint;
  auto ignoring_module = Module::Create(*ignoring, &ignoring_state);
  ASSERT_TRUE(ignoring_module.ok()) << ignoring_module.status();
  Tensor target = *Copy(batch[1].second);
  target.mutable_data<int64_t>()[0] = -1;
  EXPECT_TRUE((*ignoring_module)->TrainStep({batch[0], {"target", target}}).ok());
  // The exported model has no target, so no class-id metadata either.
  const std::string exported = TestDir("class_ids") + "/model.onnx";
  ASSERT_TRUE((*ignoring_module)->ExportModelForInferencing(exported, {"logits"}).ok());
  auto loaded = LoadModelFromFile(exported);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const auto& entry : loaded->metadata_props()) EXPECT_THAT(entry.key(), ::testing::Not(HasSubstr("class_target")));
}

TEST(ModuleTest, SeededModulesRepeatTheirDropoutMasks) {
  // bn_dropout_eval has Dropout without a seed attribute: masks come from the Module's seed.
  auto losses = [](uint64_t seed) {
    const Artifacts artifacts = MakeArtifacts(Case("bn_dropout_eval"), GoldenAdamW());
    CheckpointState state = artifacts.checkpoint;
    ModuleOptions options;
    options.random_seed = seed;
    options.num_threads = 1;
    auto module = Module::Create(artifacts, &state, options);
    EXPECT_TRUE(module.ok()) << module.status();
    std::vector<float> values;
    for (int step = 0; step < 3; ++step) {
      auto outputs = (*module)->TrainStep(ReadBatch("bn_dropout_eval"));
      EXPECT_TRUE(outputs.ok()) << outputs.status();
      values.push_back(*(*outputs)[0].second.data<float>());
    }
    return values;
  };
  const std::vector<float> first = losses(42);
  EXPECT_EQ(losses(42), first);
  EXPECT_NE(losses(43), first);
  EXPECT_NE(first[0], first[1]);  // a fresh mask every run
}

// ---- Export for inference ----

TEST(ModuleTest, ExportedInferenceModelEqualsTheEvalModel) {
  const GoldenCase golden = Case("bn_dropout_eval");  // BatchNormalization statistics and Dropout
  const Artifacts artifacts = MakeArtifacts(golden, GoldenAdamW(), {"logits"});
  auto trainer = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch(golden.name);
  auto initial = trainer->module->EvalStep(batch);
  ASSERT_TRUE(initial.ok()) << initial.status();
  for (int step = 0; step < 2; ++step) TrainingIteration(*trainer, batch);
  auto eval = trainer->module->EvalStep(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();
  ASSERT_FALSE(SameBytes(eval->at(1).second, initial->at(1).second));  // training changed the model

  const std::string path = TestDir("export") + "/inference.onnx";
  ASSERT_TRUE(trainer->module->ExportModelForInferencing(path, {"logits"}).ok());
  auto exported = LoadModelFromFile(path);
  ASSERT_TRUE(exported.ok()) << exported.status();
  const onnx::GraphProto& graph = exported->graph();
  ASSERT_EQ(graph.input_size(), 1);  // no targets, no parameters
  EXPECT_EQ(graph.input(0).name(), "input");
  ASSERT_EQ(graph.output_size(), 1);
  EXPECT_EQ(graph.output(0).name(), "logits");
  std::set<std::string> op_types;
  for (const auto& node : graph.node()) {
    EXPECT_NE(node.domain(), kTraindTrainingDomain) << node.op_type();
    op_types.insert(node.op_type());
    for (const auto& output : node.output()) EXPECT_NE(output, kLossName);
  }
  EXPECT_EQ(op_types.count("SoftmaxCrossEntropyLoss"), 0u);
  for (const auto& opset : exported->opset_import()) EXPECT_NE(opset.domain(), kTraindTrainingDomain);
  for (const auto& initializer : graph.initializer()) {
    // Current values: the running statistics and weights after two steps.
    for (const Parameter& parameter : trainer->state.parameters) {
      if (parameter.name == initializer.name()) {
        EXPECT_TRUE(SameBytes(*TensorFromProto(initializer), parameter.data)) << parameter.name;
      }
    }
  }
  auto session = Session::Create(*exported);
  ASSERT_TRUE(session.ok()) << session.status();
  auto outputs = (*session)->Run(NamedTensors{{"input", batch[0].second}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ExpectClose(outputs->at(0).second, eval->at(1).second, 1e-6, "exported logits");

  // The file is replaced atomically, never left half-written; bad requests write nothing.
  EXPECT_EQ(trainer->module->ExportModelForInferencing(path, {"loss"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->module->ExportModelForInferencing(path, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->module->ExportModelForInferencing(path, {"logits", "logits"}).code(),
            absl::StatusCode::kInvalidArgument);
  auto unknown = trainer->module->ExportModelForInferencing(path, {"no_such_value"});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("no_such_value"));
  EXPECT_TRUE(LoadModelFromFile(path).ok());
}

// With an external data file: every parameter of at least the threshold goes there (page-aligned), the model file
// holds references only, and the model, loaded with its data left in the file (or read in), gives the same logits.
TEST(ModuleTest, ExportWithExternalDataGivesTheSameModel) {
  const GoldenCase golden = Case("bn_dropout_eval");
  const Artifacts artifacts = MakeArtifacts(golden, GoldenAdamW(), {"logits"});
  auto trainer = MakeTrainer(artifacts, kGoldenAdamWLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch(golden.name);
  TrainingIteration(*trainer, batch);
  auto eval = trainer->module->EvalStep(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();

  const std::string dir = TestDir("export_external");
  InferenceExportOptions options;
  options.external_data_file = "inference.onnx.data";
  options.external_threshold_bytes = 64;
  auto files = trainer->module->ExportModelForInferencing(dir + "/inference.onnx", {"logits"}, options);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->external_data_path, dir + "/inference.onnx.data");
  EXPECT_EQ(files->model_sha256_hex, Sha256HexOfFile(dir + "/inference.onnx").value());
  EXPECT_EQ(files->external_data_sha256_hex, Sha256HexOfFile(files->external_data_path).value());
  auto inline_model = trainer->module->ExportInferenceModel({"logits"});
  ASSERT_TRUE(inline_model.ok());
  EXPECT_LT(files->model_bytes, static_cast<int64_t>(inline_model->size()));

  int external = 0;
  for (bool mapped : {true, false}) {
    LoadOptions load;
    load.map_external_data = mapped;
    auto exported = LoadModelFromFile(dir + "/inference.onnx", load);
    ASSERT_TRUE(exported.ok()) << exported.status();
    for (const auto& initializer : exported->graph().initializer()) {
      if (initializer.data_location() != onnx::TensorProto::EXTERNAL) continue;
      ++external;
      for (const auto& entry : initializer.external_data()) {
        if (entry.key() == "offset") {
          EXPECT_EQ(std::stoll(entry.value()) % kExternalDataAlignment, 0);
        }
      }
    }
    auto session = Session::Create(*exported);
    ASSERT_TRUE(session.ok()) << session.status();
    auto outputs = (*session)->Run(NamedTensors{{"input", batch[0].second}});
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ExpectClose(outputs->at(0).second, eval->at(1).second, 1e-6, "exported logits");
  }
  EXPECT_GT(external, 0);
  // The data file may not be the model itself, nor leave the directory.
  options.external_data_file = "inference.onnx";
  EXPECT_EQ(trainer->module->ExportModelForInferencing(dir + "/inference.onnx", {"logits"}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.external_data_file = "../x.data";
  EXPECT_EQ(trainer->module->ExportModelForInferencing(dir + "/inference.onnx", {"logits"}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The exported model runs in an independent runtime too: onnxruntime-node, when bench/setup_peers.sh has
// installed it (bench/.peers/ort of the source tree, or ORT_NODE_DIR), agrees with the eval model.
std::string OnnxRuntimeNodeDir(const std::string& script) {
  if (const char* dir = std::getenv("ORT_NODE_DIR"); dir != nullptr && *dir != '\0') return dir;
  // The script's runfile links into the source tree: <root>/engine/training/testdata/<script>.
  std::error_code error;
  const std::filesystem::path source = std::filesystem::canonical(script, error);
  if (error) return "";
  return (source.parent_path().parent_path().parent_path().parent_path() / "bench/.peers/ort").string();
}

void WriteRawFloats(const std::string& path, const Tensor& tensor) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.byte_size()));
}

TEST(ModuleTest, ExportedModelAgreesWithOnnxRuntime) {
  const std::string script = absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                                          "/engine/training/testdata/run_with_onnxruntime.js");
  const std::string ort_dir = OnnxRuntimeNodeDir(script);
  if (ort_dir.empty() || !std::filesystem::exists(ort_dir + "/node_modules/onnxruntime-node/package.json") ||
      std::system("node --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "onnxruntime-node not found (looked in '" << ort_dir
                 << "'; `bash bench/setup_peers.sh` installs it, or set ORT_NODE_DIR) or node not on PATH: "
                    "skipping the cross-check of the exported model";
  }
  const GoldenCase golden = Case("cnn_bn_maxpool");
  const Artifacts artifacts = MakeArtifacts(golden, GoldenSgdNesterov(), {"logits"});
  auto trainer = MakeTrainer(artifacts, kGoldenSgdLearningRate);
  ASSERT_NE(trainer, nullptr);
  const NamedTensors batch = ReadBatch(golden.name);
  for (int step = 0; step < 2; ++step) TrainingIteration(*trainer, batch);
  auto eval = trainer->module->EvalStep(batch);
  ASSERT_TRUE(eval.ok()) << eval.status();

  const std::string dir = TestDir("ort");
  ASSERT_TRUE(trainer->module->ExportModelForInferencing(dir + "/model.onnx", {"logits"}).ok());
  const Tensor& input = batch[0].second;
  ASSERT_EQ(batch[0].first, "input");
  WriteRawFloats(dir + "/input.f32", input);
  std::string dims;
  for (int64_t dim : input.shape()) absl::StrAppend(&dims, dims.empty() ? "" : ",", dim);
  const std::string command =
      absl::StrCat("node '", script, "' '", ort_dir, "' '", dir, "/model.onnx' input '", dir, "/input.f32' ", dims,
                   " logits '", dir, "/logits.f32' > '", dir, "/ort.log' 2>&1");
  const int status = std::system(command.c_str());
  std::ifstream log(dir + "/ort.log");
  const std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << command << "\n" << log_text;

  const Tensor& expected = eval->at(1).second;
  EXPECT_EQ(log_text, absl::StrCat(expected.dim(0), ",", expected.dim(1), "\n"));
  std::ifstream in(dir + "/logits.f32", std::ios::binary);
  std::vector<float> logits(expected.num_elements());
  in.read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  ExpectClose(*Tensor::FromVector<float>(expected.shape(), logits), expected, 1e-5, "onnxruntime logits");
}

TEST(ModuleTest, WithoutAnEvalModelEvalAndExportAreRefused) {
  const Artifacts artifacts = MakeArtifacts(Case("mlp"), GoldenAdamW());
  CheckpointState state = artifacts.checkpoint;
  auto module = Module::Create(artifacts.training_model, nullptr, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_FALSE((*module)->has_eval_model());
  EXPECT_EQ((*module)->EvalStep(ReadBatch("mlp")).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*module)->ExportModelForInferencing(TestDir("x") + "/m.onnx", {"logits"}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*module)->TrainStep(ReadBatch("mlp")).ok());
}

}  // namespace
}  // namespace traind::engine
