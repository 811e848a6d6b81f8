// Every loss of engine/training/loss.h reproduces PyTorch 1.13 (tests/golden/make_golden.py, loss cases) on a
// small three-headed model: the loss within 1e-5 relative, the per-element loss of reduction none within 1e-5 of
// its largest element, and every parameter gradient within 1e-4 of that parameter's largest gradient.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autodiff/gradient_builder.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/session.h"
#include "engine/training/artifacts.h"
#include "engine/training/loss.h"
#include "engine/training/module.h"
#include "engine/training/training_graph.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

std::string LossDir() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/tests/golden/data/losses";
}

// The parts of a term make_golden.py's loss_cases() fixes in code; its constants (class weights, BCE weight,
// pos_weight) and loss graphs are read from the case directory, so the two sides cannot drift apart silently.
struct TermSpec {
  TermSpec(LossKind kind, std::string output, std::string target, Reduction reduction = Reduction::kMean,
           float weight = 1.0f, int64_t ignore_index = -100)
      : kind(kind), output(output), target(target), reduction(reduction), weight(weight), ignore_index(ignore_index) {}
  LossKind kind;
  std::string output;
  std::string target;
  Reduction reduction;
  float weight;
  int64_t ignore_index;
};

struct LossCase {
  std::string name;
  std::vector<TermSpec> terms;
};

std::vector<float> FloatValues(const Tensor& tensor) {
  return std::vector<float>(tensor.data<float>(), tensor.data<float>() + tensor.num_elements());
}

// The LossTerms of a case (constants and loss graphs from its directory).
std::vector<LossTerm> TermsOf(const LossCase& golden) {
  const std::string dir = LossDir() + "/" + golden.name;
  std::vector<LossTerm> terms;
  for (size_t t = 0; t < golden.terms.size(); ++t) {
    const TermSpec& spec = golden.terms[t];
    LossTerm term(spec.kind, spec.output, spec.target, spec.weight);
    term.reduction = spec.reduction;
    term.ignore_index = spec.ignore_index;
    if (spec.reduction == Reduction::kNone) term.per_element_output = "per_element_loss";
    const std::string stem = dir + "/term" + std::to_string(t) + "_";
    if (std::filesystem::exists(stem + "class_weight.npy")) {
      term.class_weight = FloatValues(*ReadNpy(stem + "class_weight.npy"));
    }
    if (std::filesystem::exists(stem + "pos_weight.npy")) {
      term.pos_weight = FloatValues(*ReadNpy(stem + "pos_weight.npy"));
    }
    if (std::filesystem::exists(stem + "bce_weight.npy")) {
      Tensor weight = *ReadNpy(stem + "bce_weight.npy");
      term.bce_weight.dims = weight.shape();
      term.bce_weight.values = FloatValues(weight);
    }
    if (std::filesystem::exists(stem + "loss_graph.onnx")) {
      std::ifstream file(stem + "loss_graph.onnx", std::ios::binary);
      std::stringstream bytes;
      bytes << file.rdbuf();
      EXPECT_TRUE(term.graph.ParseFromString(bytes.str())) << stem;
    }
    terms.push_back(std::move(term));
  }
  return terms;
}

class LossGoldenTest : public ::testing::TestWithParam<LossCase> {};

TEST_P(LossGoldenTest, LossElementsAndGradientsMatchPyTorch) {
  const std::string dir = LossDir() + "/" + GetParam().name;
  auto forward = LoadModelFromFile(LossDir() + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  TrainingGraphOptions options;
  options.loss = TermsOf(GetParam());
  // Train what the loss depends on: PyTorch leaves the other heads' gradients None.
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/grads")) {
    options.trainable.push_back(entry.path().stem().string());
  }
  std::sort(options.trainable.begin(), options.trainable.end());
  auto training = BuildTrainingGraph(*forward, options);
  ASSERT_TRUE(training.ok()) << training.status();
  // Valid ONNX: the checker and strict shape inference pass.
  auto validated = LoadModelFromBytes(training->model.SerializeAsString());
  ASSERT_TRUE(validated.ok()) << validated.status();
  auto session = Session::Create(*validated);
  ASSERT_TRUE(session.ok()) << session.status();

  NamedTensors inputs;
  std::map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& initializer : forward->graph().initializer()) initializers[initializer.name()] = &initializer;
  for (const auto& input : validated->graph().input()) {
    const std::string& name = input.name();
    if (initializers.count(name)) {
      auto tensor = TensorFromProto(*initializers.at(name));
      ASSERT_TRUE(tensor.ok()) << tensor.status();
      inputs.emplace_back(name, *tensor);
      continue;
    }
    const bool is_target = std::count(training->targets.begin(), training->targets.end(), name) > 0;
    auto tensor = ReadNpy(LossDir() + (is_target ? "/targets/" : "/inputs/") + name + ".npy");
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    inputs.emplace_back(name, *tensor);
  }
  auto outputs = (*session)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> results(outputs->begin(), outputs->end());

  auto expected_loss = ReadNpy(dir + "/loss.npy");
  ASSERT_TRUE(expected_loss.ok()) << expected_loss.status();
  const double reference_loss = expected_loss->data<double>()[0];
  EXPECT_NEAR(results.at(training->loss).data<float>()[0], reference_loss, 1e-5 * std::fabs(reference_loss));

  const bool has_elements = std::filesystem::exists(dir + "/elements.npy");
  ASSERT_EQ(training->per_element_losses.size(), has_elements ? 1u : 0u);
  if (has_elements) {
    auto expected = ReadNpy(dir + "/elements.npy");
    ASSERT_TRUE(expected.ok()) << expected.status();
    const Tensor& actual = results.at(training->per_element_losses[0]);
    ASSERT_EQ(actual.shape(), expected->shape());
    double largest = 0;
    for (int64_t i = 0; i < expected->num_elements(); ++i) {
      largest = std::max(largest, std::fabs(expected->data<double>()[i]));
    }
    for (int64_t i = 0; i < expected->num_elements(); ++i) {
      EXPECT_NEAR(actual.data<float>()[i], expected->data<double>()[i], 1e-5 * largest) << "element " << i;
    }
  }

  for (const std::string& parameter : options.trainable) {
    auto expected = ReadNpy(dir + "/grads/" + parameter + ".npy");
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(results.count(GradientName(parameter))) << "no gradient for " << parameter;
    const Tensor& actual = results.at(GradientName(parameter));
    ASSERT_EQ(actual.shape(), expected->shape()) << parameter;
    double max_error = 0, max_reference = 0;
    for (int64_t i = 0; i < actual.num_elements(); ++i) {
      max_error = std::max(max_error, std::fabs(actual.data<float>()[i] - expected->data<double>()[i]));
      max_reference = std::max(max_reference, std::fabs(expected->data<double>()[i]));
    }
    EXPECT_GT(max_reference, 0.0) << parameter;
    EXPECT_LE(max_error, 1e-4 * max_reference) << parameter;
  }
}

// The same through the artifacts (GenerateArtifacts) and the training API (Module::TrainStep), as the daemon runs
// them: built-in losses, weighted combinations and user loss graphs alike.
TEST_P(LossGoldenTest, ArtifactsTrainedByModuleMatchPyTorch) {
  const std::string dir = LossDir() + "/" + GetParam().name;
  auto forward = LoadModelFromFile(LossDir() + "/model.onnx");
  ASSERT_TRUE(forward.ok()) << forward.status();
  ArtifactOptions options;
  options.loss = TermsOf(GetParam());
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/grads")) {
    options.requires_grad.push_back(entry.path().stem().string());
  }
  auto artifacts = GenerateArtifacts(*forward, options);
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  CheckpointState state = artifacts->checkpoint;
  auto module = Module::Create(*artifacts, &state);
  ASSERT_TRUE(module.ok()) << module.status();
  NamedTensors batch;
  for (const std::string& name : (*module)->TrainingInputNames()) {
    const std::string input = LossDir() + "/inputs/" + name + ".npy";
    auto tensor = ReadNpy(std::filesystem::exists(input) ? input : LossDir() + "/targets/" + name + ".npy");
    ASSERT_TRUE(tensor.ok()) << name << ": " << tensor.status();
    batch.emplace_back(name, *tensor);
  }
  auto outputs = (*module)->TrainStep(batch);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const double reference_loss = ReadNpy(dir + "/loss.npy")->data<double>()[0];
  EXPECT_NEAR((*outputs)[0].second.data<float>()[0], reference_loss, 1e-5 * std::fabs(reference_loss));
  for (const Parameter& parameter : state.parameters) {
    if (!parameter.requires_grad) continue;
    ASSERT_TRUE(parameter.has_grad()) << parameter.name;
    auto expected = ReadNpy(dir + "/grads/" + parameter.name + ".npy");
    ASSERT_TRUE(expected.ok()) << expected.status();
    double max_error = 0, max_reference = 0;
    for (int64_t i = 0; i < parameter.grad.num_elements(); ++i) {
      max_error = std::max(max_error, std::fabs(parameter.grad.data<float>()[i] - expected->data<double>()[i]));
      max_reference = std::max(max_reference, std::fabs(expected->data<double>()[i]));
    }
    EXPECT_LE(max_error, 1e-4 * max_reference) << parameter.name;
  }
}

std::vector<LossCase> Cases() {
  const auto mse = LossKind::kMeanSquaredError, l1 = LossKind::kL1, ce = LossKind::kCrossEntropy;
  const auto bce = LossKind::kBinaryCrossEntropyWithLogits, graph = LossKind::kOnnxGraph;
  std::vector<LossCase> cases;
  for (Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    const std::string suffix = std::string("_") + ReductionName(reduction);
    cases.push_back({"mse" + suffix, {{mse, "regression", "target_reg", reduction}}});
    cases.push_back({"l1" + suffix, {{l1, "regression", "target_reg", reduction}}});
    cases.push_back({"ce" + suffix, {{ce, "logits", "target_cls", reduction}}});
    cases.push_back({"ce_kdim_weight_ignore" + suffix, {{ce, "logits_k", "target_k", reduction, 1.0f, 2}}});
    cases.push_back({"bce" + suffix, {{bce, "regression", "target_bin", reduction}}});
    cases.push_back({"bce_weight_pos_weight" + suffix, {{bce, "regression", "target_bin", reduction}}});
  }
  cases.push_back({"ce_weight_ignore_mean", {{ce, "logits", "target_cls_ignored"}}});
  cases.push_back({"combination",
                   {{mse, "regression", "target_reg", Reduction::kMean, 0.25f},
                    {ce, "logits_k", "target_k", Reduction::kMean, 0.5f, 2},
                    {bce, "regression", "target_bin", Reduction::kSum, 0.25f}}});
  cases.push_back({"onnx_smooth_l1", {{graph, "", "target_reg"}}});
  cases.push_back({"onnx_log_cosh_combination",
                   {{graph, "", "target_reg", Reduction::kMean, 0.7f}, {ce, "logits", "target_cls",
                                                                          Reduction::kMean, 0.3f}}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Golden, LossGoldenTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<LossCase>& info) { return info.param.name; });

// Every case make_golden.py wrote is run above (a case added there but not here fails).
TEST(LossGoldenDataTest, EveryGeneratedCaseIsTested) {
  std::vector<std::string> generated, tested;
  for (const auto& entry : std::filesystem::directory_iterator(LossDir())) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name != "inputs" && name != "targets") generated.push_back(name);
  }
  for (const LossCase& golden : Cases()) tested.push_back(golden.name);
  std::sort(generated.begin(), generated.end());
  std::sort(tested.begin(), tested.end());
  EXPECT_EQ(generated, tested);
}

}  // namespace
}  // namespace traind::engine
