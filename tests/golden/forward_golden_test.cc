// The engine's forward pass on the golden models (tests/golden/make_golden.py) equals PyTorch's train-mode
// forward: BatchNormalization with batch statistics, Dropout with ratio 0, LayerNormalization, GELU as Erf.
#include <cmath>
#include <filesystem>
#include <string>

#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

std::string GoldenDir() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/tests/golden/data";
}

// Largest absolute difference relative to the reference's largest magnitude.
double RelativeError(const Tensor& actual, const Tensor& expected) {
  double max_error = 0, max_reference = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double reference = expected.data<double>()[i];
    max_error = std::max(max_error, std::fabs(actual.data<float>()[i] - reference));
    max_reference = std::max(max_reference, std::fabs(reference));
  }
  return max_error / std::max(max_reference, 1e-30);
}

class ForwardGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardGoldenTest, MatchesPyTorchTrainModeForward) {
  const std::string dir = GoldenDir() + "/" + GetParam();
  auto model = LoadModelFromFile(dir + "/model.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  auto session = Session::Create(*model);
  ASSERT_TRUE(session.ok()) << session.status();
  NamedTensors inputs;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/inputs")) {
    auto tensor = ReadNpy(entry.path().string());
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    inputs.emplace_back(entry.path().stem().string(), *tensor);
  }
  auto outputs = (*session)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (const auto& [name, actual] : *outputs) {
    auto expected = ReadNpy(dir + "/ref/outputs/" + name + ".npy");
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_EQ(actual.shape(), expected->shape()) << name;
    ASSERT_EQ(actual.dtype(), DataType::kFloat32);
    EXPECT_LT(RelativeError(actual, *expected), 1e-5) << GetParam() << " output " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, ForwardGoldenTest,
                         ::testing::Values("mlp", "cnn_bn_maxpool", "resnet_block", "transformer_encoder",
                                           "two_head_weighted_mse"));

}  // namespace
}  // namespace traind::engine
