// Artifacts without a loss and Module's Forward / Backward / Infer, on golden models (tests/golden/make_golden.py,
// PyTorch 1.13): the caller computes the loss's gradient with respect to the outputs, and the parameters'
// gradients must be PyTorch's; gradients accumulate as TrainStep's; running statistics follow the training-mode
// forward; bad use is refused with nothing changed.
#include "engine/training/forward_backward.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_builder.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/training/artifacts.h"
#include "engine/training/module.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

std::string GoldenDir(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/tests/golden/data/", name);
}

Tensor Npy(const std::string& path) {
  absl::StatusOr<Tensor> tensor = ReadNpy(path);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return tensor.ok() ? *tensor : Tensor();
}

onnx::ModelProto Forward(const std::string& name) {
  absl::StatusOr<onnx::ModelProto> model = LoadModelFromFile(GoldenDir(name) + "/model.onnx");
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

std::vector<double> Values(const Tensor& tensor) {
  std::vector<double> values(tensor.num_elements());
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    values[i] = tensor.dtype() == DataType::kFloat64 ? tensor.data<double>()[i] : tensor.data<float>()[i];
  }
  return values;
}

// |actual - expected| <= tolerance * max|expected|, element-wise.
void ExpectClose(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.num_elements(), expected.num_elements()) << what;
  const std::vector<double> a = Values(actual), e = Values(expected);
  double scale = 1e-12;
  for (double value : e) scale = std::max(scale, std::fabs(value));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], tolerance * scale) << what << " element " << i;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

Tensor FloatTensor(Shape shape, const std::vector<float>& values) { return *Tensor::FromVector<float>(shape, values); }

const Tensor& Named(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return tensor;
  }
  ADD_FAILURE() << "no '" << name << "'";
  static const Tensor* const kNone = new Tensor();
  return *kNone;
}

const Parameter& ParameterOf(const CheckpointState& state, const std::string& name) {
  for (const Parameter& parameter : state.parameters) {
    if (parameter.name == name) return parameter;
  }
  ADD_FAILURE() << "no parameter '" << name << "'";
  return state.parameters.front();
}

ArtifactOptions NoLoss(OptimizerKind kind = OptimizerKind::kSgd) {
  ArtifactOptions options;
  options.output_gradients = OutputGradientOptions{};
  options.optimizer.kind = kind;
  options.optimizer.weight_decay = 0.0f;
  return options;
}

// d(0.4 mse(out1, t1) + 0.6 mse(out2, t2)) / d(out_k) = w_k * 2 (out_k - t_k) / numel: the two-head golden loss.
Tensor WeightedMseGradient(const Tensor& output, const Tensor& target, float weight) {
  Tensor gradient = *Tensor::Allocate(DataType::kFloat32, output.shape());
  for (int64_t i = 0; i < output.num_elements(); ++i) {
    gradient.mutable_data<float>()[i] = weight * 2.0f * (output.data<float>()[i] - target.data<float>()[i]) /
                                        static_cast<float>(output.num_elements());
  }
  return gradient;
}

// d(cross_entropy(logits, ids), mean) / d(logits) = (softmax(logits) - onehot(ids)) / N.
Tensor CrossEntropyGradient(const Tensor& logits, const Tensor& ids) {
  const int64_t n = logits.dim(0), classes = logits.dim(1);
  Tensor gradient = *Tensor::Allocate(DataType::kFloat32, logits.shape());
  for (int64_t row = 0; row < n; ++row) {
    const float* z = logits.data<float>() + row * classes;
    double top = z[0], total = 0;
    for (int64_t c = 1; c < classes; ++c) top = std::max<double>(top, z[c]);
    for (int64_t c = 0; c < classes; ++c) total += std::exp(z[c] - top);
    for (int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(z[c] - top) / total - (ids.data<int64_t>()[row] == c ? 1.0 : 0.0);
      gradient.mutable_data<float>()[row * classes + c] = static_cast<float>(p / static_cast<double>(n));
    }
  }
  return gradient;
}

struct Trained {
  Artifacts artifacts;
  CheckpointState state;
  std::unique_ptr<Module> module;
};

std::unique_ptr<Trained> Open(const onnx::ModelProto& forward, const ArtifactOptions& options) {
  auto trained = std::make_unique<Trained>();
  absl::StatusOr<Artifacts> artifacts = GenerateArtifacts(forward, options);
  EXPECT_TRUE(artifacts.ok()) << artifacts.status();
  if (!artifacts.ok()) return nullptr;
  trained->artifacts = *std::move(artifacts);
  trained->state = trained->artifacts.checkpoint;
  absl::StatusOr<std::unique_ptr<Module>> module = Module::Create(trained->artifacts, &trained->state);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  trained->module = *std::move(module);
  return trained;
}

TEST(ForwardBackwardTest, ArtifactsFollowTheContract) {
  const onnx::ModelProto forward = Forward("two_head_weighted_mse");
  absl::StatusOr<Artifacts> artifacts = GenerateArtifacts(forward, NoLoss());
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  const onnx::GraphProto& graph = artifacts->training_model.graph();
  std::vector<std::string> inputs, outputs;
  for (const auto& input : graph.input()) inputs.push_back(input.name());
  for (const auto& output : graph.output()) outputs.push_back(output.name());
  ASSERT_GE(inputs.size(), 3u);
  EXPECT_EQ(inputs[0], "input");
  EXPECT_EQ(inputs[1], "out1_grad");
  EXPECT_EQ(inputs[2], "out2_grad");
  EXPECT_EQ(inputs.back(), kLazyResetGradName);
  ASSERT_GE(outputs.size(), 3u);
  EXPECT_EQ(outputs[0], "out1");
  EXPECT_EQ(outputs[1], "out2");
  EXPECT_EQ(outputs[2], "input_grad");
  // No loss anywhere: neither in the training nor in the eval model.
  for (const auto& output : artifacts->eval_model.graph().output()) EXPECT_NE(output.name(), kLossName);
  EXPECT_EQ(artifacts->eval_model.graph().output_size(), 2);

  // Both parts load, and together they are the training model's nodes.
  std::vector<std::string> parameters;
  for (const Parameter& parameter : artifacts->checkpoint.parameters) parameters.push_back(parameter.name);
  absl::StatusOr<ForwardBackwardSplit> split = SplitForwardBackward(artifacts->training_model, parameters);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->forward.graph().node_size() + split->backward.graph().node_size(), graph.node_size());
  EXPECT_TRUE(LoadModelFromBytes(split->forward.SerializeAsString()).ok());
  EXPECT_TRUE(LoadModelFromBytes(split->backward.SerializeAsString()).ok());
  for (const auto& node : split->forward.graph().node()) EXPECT_NE(node.op_type(), "AccumulateGradient");
}

TEST(ForwardBackwardTest, ParameterGradientsArePyTorchs) {
  const std::string dir = GoldenDir("two_head_weighted_mse");
  std::unique_ptr<Trained> trained = Open(Forward("two_head_weighted_mse"), NoLoss());
  ASSERT_NE(trained, nullptr);
  Module& module = *trained->module;
  EXPECT_FALSE(module.has_loss());
  EXPECT_EQ(module.ForwardInputNames(), std::vector<std::string>({"input"}));
  EXPECT_EQ(module.ForwardOutputNames(), std::vector<std::string>({"out1", "out2"}));
  EXPECT_EQ(module.InputGradientNames(), std::vector<std::string>({"input"}));

  absl::StatusOr<ForwardPass> pass = module.Forward({{"input", Npy(dir + "/inputs/input.npy")}});
  ASSERT_TRUE(pass.ok()) << pass.status();
  const Tensor& out1 = Named(pass->outputs, "out1");
  const Tensor& out2 = Named(pass->outputs, "out2");
  ExpectClose(out1, Npy(dir + "/ref/outputs/out1.npy"), 1e-5, "out1");
  ExpectClose(out2, Npy(dir + "/ref/outputs/out2.npy"), 1e-5, "out2");
  EXPECT_GT(pass->SavedBytes(), 0);
  // Forward changes nothing.
  for (const Parameter& parameter : trained->state.parameters) EXPECT_FALSE(parameter.has_grad());

  const NamedTensors gradients = {
      {"out1", WeightedMseGradient(out1, Npy(dir + "/targets/target1.npy"), 0.4f)},
      {"out2", WeightedMseGradient(out2, Npy(dir + "/targets/target2.npy"), 0.6f)}};
  absl::StatusOr<BackwardResult> result = module.Backward(*pass, gradients, {"input"}, true);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->input_gradients.size(), 1u);
  EXPECT_EQ(result->input_gradients[0].second.shape(), Shape({4, 6}));
  ASSERT_EQ(result->parameter_gradients.size(), module.TrainableParameterNames().size());
  for (const auto& [name, gradient] : result->parameter_gradients) {
    ExpectClose(gradient, Npy(absl::StrCat(dir, "/ref/grads/", name, ".npy")), 1e-4, name);
    EXPECT_TRUE(SameBytes(ParameterOf(trained->state, name).grad, gradient)) << name;
  }
  // The input's gradient is the model's transposed Jacobian times the outputs' gradients: check it by directional
  // finite differences of sum(out . g) along a few random directions, in float64 sums of float32 outputs.
  const Tensor& input = Npy(dir + "/inputs/input.npy");
  const Tensor& input_gradient = result->input_gradients[0].second;
  auto objective = [&](const Tensor& x) {
    absl::StatusOr<NamedTensors> outputs = module.Infer({{"input", x}}, {"out1", "out2"});
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    double total = 0;
    for (const auto& [name, output] : *outputs) {
      const Tensor& g = Named(gradients, name);
      for (int64_t i = 0; i < output.num_elements(); ++i) total += double(output.data<float>()[i]) * g.data<float>()[i];
    }
    return total;
  };
  for (int direction = 0; direction < 3; ++direction) {
    std::vector<float> d(input.num_elements());
    double predicted = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      d[i] = std::sin(1.7 * double(i) + direction);
      predicted += double(d[i]) * input_gradient.data<float>()[i];
    }
    const float eps = 1e-2f;
    std::vector<float> plus(d.size()), minus(d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      plus[i] = input.data<float>()[i] + eps * d[i];
      minus[i] = input.data<float>()[i] - eps * d[i];
    }
    const double measured =
        (objective(FloatTensor(input.shape(), plus)) - objective(FloatTensor(input.shape(), minus))) / (2 * eps);
    EXPECT_NEAR(measured, predicted, 2e-3 * std::max(1.0, std::fabs(predicted))) << "direction " << direction;
  }
}

TEST(ForwardBackwardTest, GradientsAccumulateAsTrainStepsDo) {
  const std::string dir = GoldenDir("two_head_weighted_mse");
  std::unique_ptr<Trained> trained = Open(Forward("two_head_weighted_mse"), NoLoss());
  ASSERT_NE(trained, nullptr);
  Module& module = *trained->module;
  const Tensor input = Npy(dir + "/inputs/input.npy");
  absl::StatusOr<ForwardPass> first = module.Forward({{"input", input}});
  absl::StatusOr<ForwardPass> second = module.Forward({{"input", input}});
  ASSERT_TRUE(first.ok() && second.ok());
  const Tensor g1 = FloatTensor({4, 2}, std::vector<float>(8, 0.25f));
  const Tensor g2 = FloatTensor({4, 1}, std::vector<float>(4, -0.5f));
  absl::StatusOr<BackwardResult> a = module.Backward(*first, {{"out1", g1}}, {}, true);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<BackwardResult> b = module.Backward(*second, {{"out2", g2}}, {}, true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(a->input_gradients.empty());
  for (size_t p = 0; p < a->parameter_gradients.size(); ++p) {
    const std::string& name = a->parameter_gradients[p].first;
    const Tensor& held = ParameterOf(trained->state, name).grad;
    for (int64_t i = 0; i < held.num_elements(); ++i) {
      ASSERT_EQ(held.data<float>()[i], a->parameter_gradients[p].second.data<float>()[i] +
                                           b->parameter_gradients[p].second.data<float>()[i])
          << name;
    }
  }
  // After a lazy reset the next backward pass replaces the gradients.
  module.LazyResetGrad();
  absl::StatusOr<ForwardPass> third = module.Forward({{"input", input}});
  absl::StatusOr<BackwardResult> c = module.Backward(*third, {{"out1", g1}}, {}, true);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const auto& [name, gradient] : c->parameter_gradients) {
    EXPECT_TRUE(SameBytes(ParameterOf(trained->state, name).grad, gradient)) << name;
  }
  // And the optimizer applies them as usual.
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(trained->artifacts.optimizer_model, &module);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  absl::StatusOr<OptimizerStepResult> step = (*optimizer)->Step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_FALSE(step->skipped);
  EXPECT_EQ(step->step, 1);
}

TEST(ForwardBackwardTest, BatchNormalizationAndCrossEntropyAsPyTorch) {
  const std::string dir = GoldenDir("cnn_bn_maxpool");
  const onnx::ModelProto forward = Forward("cnn_bn_maxpool");
  std::unique_ptr<Trained> trained = Open(forward, NoLoss());
  ASSERT_NE(trained, nullptr);
  const Tensor input = Npy(dir + "/inputs/input.npy");
  absl::StatusOr<ForwardPass> pass = trained->module->Forward({{"input", input}});
  ASSERT_TRUE(pass.ok()) << pass.status();
  const Tensor& logits = Named(pass->outputs, "logits");
  ExpectClose(logits, Npy(dir + "/ref/outputs/logits.npy"), 1e-5, "logits");
  ASSERT_FALSE(pass->running_statistics.empty());
  absl::StatusOr<BackwardResult> result = trained->module->Backward(
      *pass, {{"logits", CrossEntropyGradient(logits, Npy(dir + "/targets/target.npy"))}}, {"input"}, true);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const auto& [name, gradient] : result->parameter_gradients) {
    ExpectClose(gradient, Npy(absl::StrCat(dir, "/ref/grads/", name, ".npy")), 1e-4, name);
  }
  // The running statistics move as in a loss-style training step on the same batch.
  ArtifactOptions with_loss;
  LossTerm term;
  term.kind = LossKind::kCrossEntropy;
  term.output = "logits";
  term.target = "target";
  with_loss.loss = {term};
  std::unique_ptr<Trained> reference = Open(forward, with_loss);
  ASSERT_NE(reference, nullptr);
  ASSERT_TRUE(reference->module->TrainStep({{"input", input}, {"target", Npy(dir + "/targets/target.npy")}}).ok());
  ASSERT_TRUE(trained->module->ApplyRunningStatistics(*pass).ok());
  for (const Parameter& parameter : reference->state.parameters) {
    if (parameter.requires_grad) continue;
    EXPECT_TRUE(SameBytes(ParameterOf(trained->state, parameter.name).data, parameter.data)) << parameter.name;
  }
}

TEST(ForwardBackwardTest, BadUseIsRefusedAndChangesNothing) {
  const std::string dir = GoldenDir("two_head_weighted_mse");
  std::unique_ptr<Trained> trained = Open(Forward("two_head_weighted_mse"), NoLoss());
  ASSERT_NE(trained, nullptr);
  Module& module = *trained->module;
  absl::StatusOr<ForwardPass> pass = module.Forward({{"input", Npy(dir + "/inputs/input.npy")}});
  ASSERT_TRUE(pass.ok());
  const Tensor g1 = FloatTensor({4, 2}, std::vector<float>(8, 1.0f));
  auto refused = [&](const NamedTensors& gradients, const std::vector<std::string>& inputs, const char* message) {
    absl::StatusOr<BackwardResult> result = module.Backward(*pass, gradients, inputs, false);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(message));
  };
  refused({{"out1", FloatTensor({2, 4}, std::vector<float>(8, 1.0f))}}, {}, "the gradient of output 'out1' is");
  refused({{"out1", FloatTensor({4, 2, 1}, std::vector<float>(8, 1.0f))}}, {}, "the output is float [4,2]");
  refused({{"out1", g1}, {"out1", g1}}, {}, "given twice");
  refused({{"nope", g1}}, {}, "'nope' is not an output these artifacts differentiate");
  refused({{"out1", g1}}, {"out1"}, "no gradient of input 'out1'");
  refused({{"out1", g1}}, {"input", "input"}, "asked for twice");
  for (const Parameter& parameter : trained->state.parameters) EXPECT_FALSE(parameter.has_grad());

  EXPECT_EQ(module.TrainStep({{"input", Npy(dir + "/inputs/input.npy")}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(module.Forward({{"input", FloatTensor({4, 5}, std::vector<float>(20, 0.0f))}}).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Artifacts with a loss have no forward/backward passes, but infer without their targets.
  ArtifactOptions with_loss;
  LossTerm term;
  term.kind = LossKind::kMeanSquaredError;
  term.output = "out1";
  term.target = "target1";
  with_loss.loss = {term};
  with_loss.requires_grad = {"trunk.weight", "trunk.bias", "head1.weight", "head1.bias"};
  std::unique_ptr<Trained> lossy = Open(Forward("two_head_weighted_mse"), with_loss);
  ASSERT_NE(lossy, nullptr);
  EXPECT_EQ(lossy->module->Forward({{"input", Npy(dir + "/inputs/input.npy")}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<NamedTensors> inferred = lossy->module->Infer({{"input", Npy(dir + "/inputs/input.npy")}}, {});
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  // The eval model keeps what the loss reads: out1, not out2.
  ASSERT_EQ(inferred->size(), 1u);
  ExpectClose(Named(*inferred, "out1"), Npy(dir + "/ref/outputs/out1.npy"), 1e-5, "out1");
  EXPECT_EQ(lossy->module->Infer({{"input", Npy(dir + "/inputs/input.npy")}}, {"out2"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lossy->module->Infer({{"input", Npy(dir + "/inputs/input.npy")}}, {"loss"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ForwardBackwardTest, OptionsAreChecked) {
  const onnx::ModelProto forward = Forward("two_head_weighted_mse");
  ArtifactOptions options = NoLoss();
  options.output_gradients->outputs = {"out2"};
  options.output_gradients->no_input_gradients = true;
  options.requires_grad = {"trunk.weight", "trunk.bias", "head2.weight", "head2.bias"};
  std::unique_ptr<Trained> trained = Open(forward, options);
  ASSERT_NE(trained, nullptr);
  EXPECT_EQ(trained->module->DifferentiatedOutputNames(), std::vector<std::string>({"out2"}));
  EXPECT_TRUE(trained->module->InputGradientNames().empty());
  for (const auto& [change, message] : std::vector<std::pair<std::function<void(ArtifactOptions&)>, std::string>>{
           {[](ArtifactOptions& o) { o.output_gradients->outputs = {"nope"}; }, "'nope' is not an output"},
           {[](ArtifactOptions& o) { o.output_gradients->inputs = {"out1"}; }, "'out1' is not an input"},
           {[](ArtifactOptions& o) { o.additional_output_names = {"out1"}; }, "additional_output_names"},
           {[](ArtifactOptions& o) { o.output_gradients->outputs = {"out1", "out1"}; }, "listed twice"}}) {
    ArtifactOptions bad = NoLoss();
    change(bad);
    absl::StatusOr<Artifacts> artifacts = GenerateArtifacts(forward, bad);
    EXPECT_EQ(artifacts.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(artifacts.status().message()), HasSubstr(message));
  }
}

// A symbolic batch dimension (e.g. scikit-learn's last, shorter batch): the gradient rules work from run-time
// shapes, and a batch of 4 gives exactly the static model's gradients; a batch of 3 runs too.
TEST(ForwardBackwardTest, SymbolicBatchDimension) {
  const std::string dir = GoldenDir("two_head_weighted_mse");
  onnx::ModelProto dynamic = Forward("two_head_weighted_mse");
  for (auto* values : {dynamic.mutable_graph()->mutable_input(), dynamic.mutable_graph()->mutable_output()}) {
    for (auto& value : *values) {
      value.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
    }
  }
  dynamic.mutable_graph()->clear_value_info();
  std::unique_ptr<Trained> symbolic = Open(dynamic, NoLoss());
  std::unique_ptr<Trained> fixed = Open(Forward("two_head_weighted_mse"), NoLoss());
  ASSERT_NE(symbolic, nullptr);
  ASSERT_NE(fixed, nullptr);
  const Tensor input = Npy(dir + "/inputs/input.npy");
  const NamedTensors gradients = {{"out1", FloatTensor({4, 2}, {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, 0.8f})},
                                  {"out2", FloatTensor({4, 1}, {1.0f, -1.0f, 0.5f, 0.25f})}};
  std::vector<BackwardResult> results;
  for (Trained* trained : {symbolic.get(), fixed.get()}) {
    absl::StatusOr<ForwardPass> pass = trained->module->Forward({{"input", input}});
    ASSERT_TRUE(pass.ok()) << pass.status();
    absl::StatusOr<BackwardResult> result = trained->module->Backward(*pass, gradients, {"input"}, true);
    ASSERT_TRUE(result.ok()) << result.status();
    results.push_back(*result);
  }
  for (size_t p = 0; p < results[0].parameter_gradients.size(); ++p) {
    ExpectClose(results[0].parameter_gradients[p].second, results[1].parameter_gradients[p].second, 1e-6,
                results[0].parameter_gradients[p].first);
  }
  ExpectClose(results[0].input_gradients[0].second, results[1].input_gradients[0].second, 1e-6, "input");
  const Tensor three = FloatTensor({3, 6}, std::vector<float>(input.data<float>(), input.data<float>() + 18));
  absl::StatusOr<ForwardPass> pass = symbolic->module->Forward({{"input", three}});
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(Named(pass->outputs, "out2").shape(), Shape({3, 1}));
  absl::StatusOr<BackwardResult> result =
      symbolic->module->Backward(*pass, {{"out2", FloatTensor({3, 1}, {1.0f, 1.0f, 1.0f})}}, {"input"}, false);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->input_gradients[0].second.shape(), Shape({3, 6}));
}

}  // namespace
}  // namespace traind::engine
