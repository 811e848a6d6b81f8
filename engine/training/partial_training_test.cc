// Training a small part of a frozen model costs memory in proportion to that part: no gradient buffers or
// optimizer moments for frozen parameters, no backward pass through a frozen prefix, and no forward activations
// kept for a backward that does not happen. Checked on the artifacts' graphs and on the bytes the training run's
// buffer pool hands out, against a forward pass of the same model and against training all of it.
#include <iostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/session.h"
#include "engine/training/artifacts.h"
#include "engine/training/module.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

constexpr int kLayers = 8;
constexpr int64_t kBatch = 64;
constexpr int64_t kWidth = 256;
constexpr int64_t kClasses = 10;

Tensor Filled(Shape shape, float scale, uint32_t seed) {
  Tensor tensor = *Tensor::Allocate(DataType::kFloat32, std::move(shape));
  uint32_t state = seed;
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    state = state * 1664525u + 1013904223u;
    tensor.mutable_data<float>()[i] = scale * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  return tensor;
}

// A float32 [kBatch, columns] graph input or output.
void DeclareBatchValue(onnx::ValueInfoProto* info, const std::string& name, int64_t columns) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  type->mutable_shape()->add_dim()->set_dim_value(kBatch);
  type->mutable_shape()->add_dim()->set_dim_value(columns);
}

// x -> kLayers x (Gemm, Relu) -> Gemm head -> logits.
onnx::ModelProto Mlp() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("mlp");
  DeclareBatchValue(graph->add_input(), "x", kWidth);
  DeclareBatchValue(graph->add_output(), "logits", kClasses);
  std::string input = "x";
  for (int layer = 0; layer <= kLayers; ++layer) {
    const bool head = layer == kLayers;
    const std::string w = head ? "head_w" : absl::StrCat("w", layer), b = head ? "head_b" : absl::StrCat("b", layer);
    const int64_t out = head ? kClasses : kWidth;
    *graph->add_initializer() = TensorToProto(Filled({kWidth, out}, 0.15f, 11 + layer), w);
    *graph->add_initializer() = TensorToProto(Filled({out}, 0.01f, 101 + layer), b);
    auto* gemm = graph->add_node();
    gemm->set_op_type("Gemm");
    gemm->set_name(absl::StrCat("gemm", layer));
    for (const std::string& in : {input, w, b}) gemm->add_input(in);
    gemm->add_output(head ? "logits" : absl::StrCat("z", layer));
    if (head) break;
    auto* relu = graph->add_node();
    relu->set_op_type("Relu");
    relu->set_name(absl::StrCat("relu", layer));
    relu->add_input(absl::StrCat("z", layer));
    relu->add_output(absl::StrCat("h", layer));
    input = absl::StrCat("h", layer);
  }
  return *LoadModelFromBytes(model.SerializeAsString());
}

ArtifactOptions Options(std::vector<std::string> requires_grad) {
  ArtifactOptions options;
  options.requires_grad = std::move(requires_grad);
  options.loss = {{LossKind::kMeanSquaredError, "logits", "target", 1.0f}};
  return options;
}

// Peak bytes the training model's buffer pool handed out over two AdamW steps; the state after them.
size_t TrainingPeakBytes(const Artifacts& artifacts, CheckpointState& state) {
  state = artifacts.checkpoint;
  ModuleOptions options;
  options.num_threads = 1;
  auto module = Module::Create(artifacts, &state, options);
  EXPECT_TRUE(module.ok()) << module.status();
  auto optimizer = Optimizer::Create(artifacts.optimizer_model, module->get());
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  const NamedTensors batch = {{"x", Filled({kBatch, kWidth}, 1.0f, 5)}, {"target", Filled({kBatch, kClasses}, 1.0f, 6)}};
  for (int step = 0; step < 2; ++step) {
    auto outputs = (*module)->TrainStep(batch);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    EXPECT_TRUE((*optimizer)->Step().ok());
    (*module)->LazyResetGrad();
  }
  return static_cast<CpuExecutor&>((*module)->training_session().executor()).buffers().peak_bytes_in_use();
}

TEST(PartialTrainingTest, AFrozenPrefixHasNoBackwardPassAndNoTrainingState) {
  const onnx::ModelProto forward = Mlp();
  auto artifacts = GenerateArtifacts(forward, Options({"head_w", "head_b"}));
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();

  // The graph: nothing is computed for a frozen value's gradient, and the backward nodes read no activation of the
  // prefix but the head's input (which dW = h^T dY needs).
  absl::flat_hash_set<std::string> forward_nodes;
  for (const auto& node : forward.graph().node()) forward_nodes.insert(node.name());
  const std::string head_input = absl::StrCat("h", kLayers - 1);
  for (const auto& node : artifacts->training_model.graph().node()) {
    for (const auto& output : node.output()) {
      for (int layer = 0; layer < kLayers; ++layer) {
        for (const std::string& frozen : {absl::StrCat("w", layer), absl::StrCat("b", layer), absl::StrCat("z", layer),
                                          absl::StrCat("h", layer), std::string("x")}) {
          EXPECT_FALSE(absl::StartsWith(output, frozen + "_grad")) << node.op_type() << " computes " << output;
        }
      }
    }
    if (forward_nodes.contains(node.name())) continue;
    for (const auto& input : node.input()) {
      for (int layer = 0; layer < kLayers; ++layer) {
        if (absl::StrCat("h", layer) == head_input) continue;
        EXPECT_NE(input, absl::StrCat("h", layer)) << node.op_type() << " (backward) reads a frozen activation";
        EXPECT_NE(input, absl::StrCat("z", layer)) << node.op_type() << " (backward) reads a frozen activation";
        EXPECT_NE(input, absl::StrCat("w", layer)) << node.op_type() << " (backward) reads a frozen weight";
      }
    }
  }

  // Memory: the forward pass alone, then training the head, then training everything.
  auto inference = Session::Create(forward, {});
  ASSERT_TRUE(inference.ok()) << inference.status();
  ASSERT_TRUE((*inference)->Run(NamedTensors{{"x", Filled({kBatch, kWidth}, 1.0f, 5)}}).ok());
  const size_t forward_peak = static_cast<CpuExecutor&>((*inference)->executor()).buffers().peak_bytes_in_use();
  CheckpointState head_state;
  const size_t head_peak = TrainingPeakBytes(*artifacts, head_state);
  const size_t activation = kBatch * kWidth * sizeof(float);
  const size_t head_parameters = (kWidth + 1) * kClasses * sizeof(float);
  EXPECT_LE(head_peak, forward_peak + 2 * activation + 4 * head_parameters)
      << "forward " << forward_peak << " bytes, training the head " << head_peak;
  // Gradient buffers and moments exist for the trained parameters only.
  for (const Parameter& parameter : head_state.parameters) {
    EXPECT_EQ(parameter.has_grad(), parameter.requires_grad) << parameter.name;
    EXPECT_EQ(head_state.optimizer->parameter_states.count(parameter.name), parameter.requires_grad ? 1u : 0u)
        << parameter.name;
  }

  auto everything = GenerateArtifacts(forward, Options({}));
  ASSERT_TRUE(everything.ok()) << everything.status();
  CheckpointState full_state;
  const size_t full_peak = TrainingPeakBytes(*everything, full_state);
  std::cout << "buffer pool peak: forward " << forward_peak << " bytes, training the head " << head_peak
            << ", training everything " << full_peak << "\n";
  // The measure tells the two apart: training everything keeps every activation and every weight's gradient.
  EXPECT_GT(full_peak, 4 * head_peak) << "training everything " << full_peak << ", the head " << head_peak;
}

// x -> kLayers x (MatMul up to 4x the width + bias, GELU as PyTorch exports it, MatMul down + bias) -> logits.
onnx::ModelProto GeluFeedForward() {
  constexpr int64_t kWide = 4 * kWidth;
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("gelu_feed_forward");
  auto node = [&](const char* op, std::vector<std::string> inputs, const std::string& output) {
    auto* added = graph->add_node();
    added->set_op_type(op);
    added->set_name(output);
    for (const std::string& input : inputs) added->add_input(input);
    added->add_output(output);
  };
  DeclareBatchValue(graph->add_input(), "x", kWidth);
  DeclareBatchValue(graph->add_output(), "logits", kClasses);
  for (const auto& [name, constant] : {std::pair<const char*, float>{"sqrt2", 1.41421356f}, {"one", 1.0f}, {"half", 0.5f}}) {
    Tensor scalar = *Tensor::Allocate(DataType::kFloat32, {});
    scalar.mutable_data<float>()[0] = constant;
    *graph->add_initializer() = TensorToProto(scalar, name);
  }
  std::string input = "x";
  for (int layer = 0; layer < kLayers; ++layer) {
    auto name = [&](const char* what) { return absl::StrCat(what, layer); };
    *graph->add_initializer() = TensorToProto(Filled({kWidth, kWide}, 0.1f, 11 + layer), name("up"));
    *graph->add_initializer() = TensorToProto(Filled({kWide}, 0.01f, 31 + layer), name("up_bias"));
    *graph->add_initializer() = TensorToProto(Filled({kWide, kWidth}, 0.05f, 51 + layer), name("down"));
    *graph->add_initializer() = TensorToProto(Filled({kWidth}, 0.01f, 71 + layer), name("down_bias"));
    node("MatMul", {input, name("up")}, name("up_product"));
    node("Add", {name("up_product"), name("up_bias")}, name("wide"));
    node("Div", {name("wide"), "sqrt2"}, name("scaled"));
    node("Erf", {name("scaled")}, name("erf"));
    node("Add", {name("erf"), "one"}, name("one_plus_erf"));
    node("Mul", {name("wide"), name("one_plus_erf")}, name("times"));
    node("Mul", {name("times"), "half"}, name("gelu"));
    node("MatMul", {name("gelu"), name("down")}, name("down_product"));
    node("Add", {name("down_product"), name("down_bias")}, name("out"));
    input = name("out");
  }
  *graph->add_initializer() = TensorToProto(Filled({kWidth, kClasses}, 0.15f, 91), "head_w");
  node("MatMul", {input, "head_w"}, "logits");
  return *LoadModelFromBytes(model.SerializeAsString());
}

// Training the biases of a GELU feed-forward stack (frozen weights: the backward pass goes through every layer but
// needs no layer's input) keeps one activation per layer for the backward pass, GELU's input, as PyTorch's fused
// GELU does: the rest of GELU's arithmetic is recomputed there (Div, Erf, Add of the exported form, which would be
// kept otherwise: three wide activations per layer).
TEST(PartialTrainingTest, AGeluFeedForwardKeepsOneWideActivationPerLayer) {
  std::vector<std::string> biases;
  for (int layer = 0; layer < kLayers; ++layer) {
    biases.push_back(absl::StrCat("up_bias", layer));
    biases.push_back(absl::StrCat("down_bias", layer));
  }
  auto artifacts = GenerateArtifacts(GeluFeedForward(), Options(biases));
  ASSERT_TRUE(artifacts.ok()) << artifacts.status();
  CheckpointState state;
  const size_t peak = TrainingPeakBytes(*artifacts, state);
  const size_t wide = kBatch * 4 * kWidth * sizeof(float);
  std::cout << "buffer pool peak training the biases: " << peak << " bytes, " << 1.0 * peak / wide
            << " wide activations\n";
  // kLayers kept, and the last layer's GELU backward: its output gradient, the recomputed values, the input
  // gradient.
  EXPECT_LE(peak, (kLayers + 5) * wide) << peak << " bytes, " << 1.0 * peak / wide << " wide activations";
}

}  // namespace
}  // namespace traind::engine
