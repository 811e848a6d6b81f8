// A model beyond protobuf's 2 GiB, end to end through the real daemon and the real trainctl: a generated MLP with
// about 2.4 GB of float32 weights in an ONNX external data file (nine 8192 x 8192 Gemm layers and a head). trainctl
// uploads the model and its data file by digest, GenerateArtifacts reads the weights in place (mapped, never copied
// into the model) and streams the checkpoint, the session loads it in pieces, trains the last layer and the head
// with AdamW for a few steps, and the export comes back as a model plus its external data file, which the engine
// runs to the session's own eval output. The daemon's peak RSS stays under 3x the weights: the frozen weights once,
// plus the trained part's gradients and two moments. Optimised build only (ASan's shadow memory would not fit),
// and everything it writes is removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "engine/core/tensor.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/integration/trainctl_testing.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using testing::CommandResult;
using testing::Field;
using testing::ParseJson;

constexpr int64_t kWidth = 8192;
constexpr int kLayers = 9;
constexpr int64_t kClasses = 16;
constexpr int64_t kBatch = 4;
constexpr int64_t kAlignment = 4096;

// Deterministic, fast uniform numbers in [-scale, scale) (SplitMix64).
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : state_(seed) {}
  float Next(float scale) {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return scale * (static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }

 private:
  uint64_t state_;
};

void AddExternal(onnx::GraphProto* graph, const std::string& name, std::vector<int64_t> dims, int64_t offset) {
  onnx::TensorProto* tensor = graph->add_initializer();
  tensor->set_name(name);
  tensor->set_data_type(onnx::TensorProto::FLOAT);
  int64_t count = 1;
  for (int64_t dim : dims) {
    tensor->add_dims(dim);
    count *= dim;
  }
  tensor->set_data_location(onnx::TensorProto::EXTERNAL);
  for (const auto& [key, value] : {std::make_pair(std::string("location"), std::string("weights.bin")),
                                   std::make_pair(std::string("offset"), std::to_string(offset)),
                                   std::make_pair(std::string("length"), std::to_string(count * 4))}) {
    auto* entry = tensor->add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  }
}

// Writes <dir>/model.onnx (references only) and <dir>/weights.bin; returns the weights' bytes.
int64_t WriteModel(const std::string& dir) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("large_mlp");
  auto value = [](onnx::ValueInfoProto* info, const std::string& name, int64_t rows, int64_t columns) {
    info->set_name(name);
    auto* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(rows);
    type->mutable_shape()->add_dim()->set_dim_value(columns);
  };
  value(graph->add_input(), "x", kBatch, kWidth);
  value(graph->add_output(), "y", kBatch, kClasses);

  const int fd = ::open((dir + "/weights.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  int64_t offset = 0;
  Uniform uniform(42);
  std::vector<float> buffer;
  // Appends a tensor of `count` values (page-aligned, so the daemon maps it) and returns its offset.
  auto append = [&](int64_t count, float scale) {
    const int64_t start = (offset + kAlignment - 1) / kAlignment * kAlignment;
    std::vector<char> padding(static_cast<size_t>(start - offset), 0);
    if (!padding.empty()) {
      EXPECT_EQ(::write(fd, padding.data(), padding.size()), static_cast<ssize_t>(padding.size()));
    }
    constexpr int64_t kPiece = int64_t{16} << 20;
    for (int64_t done = 0; done < count; done += kPiece) {
      const int64_t piece = std::min(kPiece, count - done);
      buffer.resize(static_cast<size_t>(piece));
      for (float& v : buffer) v = uniform.Next(scale);
      const ssize_t bytes = static_cast<ssize_t>(piece * 4);
      EXPECT_EQ(::write(fd, buffer.data(), static_cast<size_t>(bytes)), bytes);
    }
    offset = start + count * 4;
    return start;
  };
  std::string input = "x";
  const float scale = std::sqrt(6.0f / kWidth);  // keeps the activations' scale through ReLU
  for (int layer = 0; layer < kLayers; ++layer) {
    const std::string w = absl::StrCat("w", layer), b = absl::StrCat("b", layer);
    AddExternal(graph, w, {kWidth, kWidth}, append(kWidth * kWidth, scale));
    AddExternal(graph, b, {kWidth}, append(kWidth, 0.01f));
    auto* gemm = graph->add_node();
    gemm->set_op_type("Gemm");
    gemm->set_name(absl::StrCat("gemm", layer));
    for (const std::string& in : {input, w, b}) gemm->add_input(in);
    gemm->add_output(absl::StrCat("z", layer));
    auto* relu = graph->add_node();
    relu->set_op_type("Relu");
    relu->set_name(absl::StrCat("relu", layer));
    relu->add_input(absl::StrCat("z", layer));
    relu->add_output(absl::StrCat("h", layer));
    input = absl::StrCat("h", layer);
  }
  AddExternal(graph, "head_w", {kWidth, kClasses}, append(kWidth * kClasses, scale));
  AddExternal(graph, "head_b", {kClasses}, append(kClasses, 0.01f));
  auto* head = graph->add_node();
  head->set_op_type("Gemm");
  head->set_name("head");
  for (const std::string& in : {input, std::string("head_w"), std::string("head_b")}) head->add_input(in);
  head->add_output("y");
  EXPECT_EQ(::close(fd), 0);
  std::ofstream(dir + "/model.onnx", std::ios::binary) << model.SerializeAsString();
  return static_cast<int64_t>(std::filesystem::file_size(dir + "/weights.bin"));
}

void WriteNpy(const std::string& path, std::vector<int64_t> shape, uint64_t seed) {
  absl::StatusOr<engine::Tensor> tensor = engine::Tensor::Allocate(engine::DataType::kFloat32, shape);
  ASSERT_TRUE(tensor.ok());
  Uniform uniform(seed);
  for (int64_t i = 0; i < tensor->num_elements(); ++i) tensor->mutable_data<float>()[i] = uniform.Next(1.0f);
  ASSERT_TRUE(engine::WriteNpy(path, *tensor).ok());
}

// The daemon's peak resident set (VmHWM), in bytes.
int64_t PeakRss(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kilobytes = 0;
    if (fields.size() >= 2 && absl::SimpleAtoi(fields[1], &kilobytes)) return kilobytes * 1024;
  }
  return -1;
}

TEST(LargeModelTest, AModelBeyond2GiBTrainsThroughTheRpcsAndItsExportRunsInTheEngine) {
  const std::string dir = testing::MakeTempDir("large_model");
  const absl::Time start = absl::Now();
  const int64_t weight_bytes = WriteModel(dir);
  std::cout << "model written: " << absl::Now() - start << std::endl;
  std::filesystem::create_directories(dir + "/export");
  ASSERT_GT(weight_bytes, int64_t{2} << 30);  // beyond what one protobuf message can hold
  WriteNpy(dir + "/x.npy", {kBatch, kWidth}, 7);
  WriteNpy(dir + "/target.npy", {kBatch, kClasses}, 8);

  const std::string state_dir = dir + "/state";
  auto daemon = testing::DaemonProcess::Start({"--state_dir=" + state_dir, "--max_blob_bytes=8589934592",
                                               "--checkpoint_every_seconds=0", "--default_num_threads=2"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  absl::Time phase_start = absl::Now();
  auto ok = [&](std::vector<std::string> args) {
    args.push_back("--address=" + (*daemon)->grpc_address());
    const CommandResult result = testing::RunCommand(testing::RunfilePath("client/trainctl"), args, {},
                                                     absl::Minutes(10));
    EXPECT_EQ(result.exit_code, 0) << args[0] << " " << args[1] << "\n" << result.stdout_text << result.stderr_text;
    std::cout << "trainctl " << args[0] << " " << args[1] << ": " << absl::Now() - phase_start << std::endl;
    phase_start = absl::Now();
    return result.stdout_text;
  };

  // The model file (references only) and its data file go up; the trained part: the last hidden layer and the head.
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_TRUE(ParseJson(ok({"artifacts", "generate", "--model", dir + "/model.onnx", "--loss", "mse", "--requires-grad",
                            absl::StrCat("w", kLayers - 1, ",b", kLayers - 1, ",head_w,head_b"),
                            "--additional-output", "y", "--optimizer", "adamw", "--lr", "1e-5", "--json"}),
                        &artifacts));
  ASSERT_EQ(artifacts.trainable_parameters_size(), 4);
  ASSERT_EQ(artifacts.frozen_parameters_size(), 2 * (kLayers - 1));
  for (const v1::ArtifactFile& file : artifacts.files()) {
    if (file.kind() == "checkpoint") {
      EXPECT_GT(file.size_bytes(), weight_bytes - (int64_t{1} << 20));
    }
  }
  v1::Session session;
  ASSERT_TRUE(ParseJson(ok({"session", "create", "--artifact", artifacts.artifact_id(), "--threads", "2", "--json"}),
                        &session));
  google::protobuf::Struct trained;
  ASSERT_TRUE(ParseJson(ok({"train", "--session", session.session_id(), "--input", "x=" + dir + "/x.npy", "--input",
                            "target=" + dir + "/target.npy", "--steps", "3", "--json"}),
                        &trained));
  const auto& steps = Field(trained, "steps").list_value().values();
  ASSERT_EQ(steps.size(), 3);
  const double first_loss = steps[0].struct_value().fields().at("loss").number_value();
  const double last_loss = steps[2].struct_value().fields().at("loss").number_value();
  EXPECT_TRUE(std::isfinite(first_loss) && std::isfinite(last_loss));
  EXPECT_LT(last_loss, first_loss);  // AdamW on one batch: the loss goes down

  ok({"eval", "--session", session.session_id(), "--input", "x=" + dir + "/x.npy", "--input",
      "target=" + dir + "/target.npy", "--save", "y=" + dir + "/y.npy"});
  google::protobuf::Struct exported;
  ASSERT_TRUE(ParseJson(ok({"export", "--session", session.session_id(), "--out", dir + "/export/model.onnx",
                            "--external-data", "--output", "y", "--json"}),
                        &exported));
  EXPECT_LT(std::filesystem::file_size(dir + "/export/model.onnx"), 1u << 20);  // references only
  // Every weight but the head's bias (64 bytes: inline, under the 1 KiB threshold).
  EXPECT_GT(static_cast<int64_t>(std::filesystem::file_size(dir + "/export/model.onnx.data")),
            weight_bytes - (int64_t{1} << 20));

  // Peak memory of the whole run: the frozen weights once, the trained part with its gradients and moments.
  const int64_t peak = PeakRss((*daemon)->pid());
  std::cout << "daemon peak RSS " << peak / (1 << 20) << " MiB for " << weight_bytes / (1 << 20)
            << " MiB of weights (" << static_cast<double>(peak) / static_cast<double>(weight_bytes) << "x)\n";
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 3 * weight_bytes);
  daemon->reset();  // stops the daemon: its memory is back before the engine maps the export

  // The exported model runs in the engine (its weights mapped from the data file) to the session's eval output.
  engine::LoadOptions options;
  options.map_external_data = true;
  absl::StatusOr<onnx::ModelProto> model = engine::LoadModelFromFile(dir + "/export/model.onnx", options);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<engine::Session>> runner = engine::Session::Create(*model);
  ASSERT_TRUE(runner.ok()) << runner.status();
  absl::StatusOr<engine::Tensor> x = engine::ReadNpy(dir + "/x.npy");
  absl::StatusOr<engine::Tensor> expected = engine::ReadNpy(dir + "/y.npy");
  ASSERT_TRUE(x.ok() && expected.ok());
  absl::StatusOr<engine::NamedTensors> outputs = (*runner)->Run(engine::NamedTensors{{"x", *x}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const engine::Tensor& y = outputs->at(0).second;
  ASSERT_EQ(y.num_elements(), expected->num_elements());
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    EXPECT_NEAR(y.data<float>()[i], expected->data<float>()[i], 1e-5f + 1e-4f * std::fabs(expected->data<float>()[i]))
        << i;
  }
  runner->reset();
  model->Clear();
  std::error_code error;
  std::filesystem::remove_all(dir, error);
}

}  // namespace
}  // namespace traind
