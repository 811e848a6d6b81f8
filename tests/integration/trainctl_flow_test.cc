// The whole on-device training flow through the real trainctl binary against the real daemon, on the golden MLP
// (tests/golden/data/mlp, reference losses from PyTorch 1.13): artifacts generate -> session create -> train from
// .npy -> eval -> lr -> checkpoint save / list / load -> params get / set round trips -> export -> session close.
// Every --json document is parsed strictly into its message; exit codes are checked for each failure kind.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/tensor.h"
#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/integration/trainctl_testing.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using testing::CommandResult;
using testing::Field;
using testing::ParseJson;
using testing::Trainctl;

std::string Golden(const std::string& relative) {
  return testing::RunfilePath("tests/golden/data/mlp/" + relative);
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// PyTorch's AdamW losses of the golden MLP (lr 0.01, weight decay 0.01): entry i is the loss of step i + 1.
std::vector<double> ReferenceLosses() {
  absl::StatusOr<engine::Tensor> losses = engine::ReadNpy(Golden("ref/adamw_losses.npy"));
  EXPECT_TRUE(losses.ok()) << losses.status();
  std::vector<double> values;
  for (int64_t i = 0; losses.ok() && i < losses->num_elements(); ++i) {
    values.push_back(losses->dtype() == engine::DataType::kFloat64 ? losses->data<double>()[i]
                                                                   : losses->data<float>()[i]);
  }
  return values;
}

class TrainctlFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = testing::DaemonProcess::Start({});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    dir_ = testing::MakeTempDir("trainctl-flow");
  }

  // trainctl <args> --address=<daemon>; expects exit 0 and returns stdout.
  std::string Ok(std::vector<std::string> args) {
    args.push_back("--address=" + daemon_->grpc_address());
    const CommandResult result = Trainctl(args);
    EXPECT_EQ(result.exit_code, 0) << args[0] << " " << (args.size() > 1 ? args[1] : "") << "\nstdout:\n"
                                   << result.stdout_text << "\nstderr:\n" << result.stderr_text;
    return result.stdout_text;
  }
  CommandResult Run(std::vector<std::string> args) {
    args.push_back("--address=" + daemon_->grpc_address());
    return Trainctl(args);
  }
  std::vector<std::string> Inputs(const std::string& flag = "--input") {
    return {flag, "input=" + Golden("inputs/input.npy"), flag, "target=" + Golden("targets/target.npy")};
  }
  std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  // Generates the golden MLP's artifacts (AdamW as in the reference) into dir_/artifacts.
  v1::GenerateArtifactsResponse Generate() {
    v1::GenerateArtifactsResponse artifacts;
    EXPECT_TRUE(ParseJson(Ok({"artifacts", "generate", "--model", Golden("model.onnx"), "--loss", "cross_entropy",
                              "--output", "logits", "--additional-output", "logits", "--optimizer", "adamw", "--lr",
                              "0.01", "--weight-decay", "0.01", "--out", dir_ + "/artifacts", "--json"}),
                          &artifacts));
    return artifacts;
  }
  v1::Session CreateSession(const std::vector<std::string>& source) {
    v1::Session session;
    EXPECT_TRUE(ParseJson(Ok(With({"session", "create", "--json"}, source)), &session));
    return session;
  }

  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::string dir_;
};

TEST_F(TrainctlFlowTest, GenerateCreateTrainEvalCheckpointParamsExportClose) {
  // ---- artifacts generate: the four files in --out, each matching the digest the daemon reported.
  const v1::GenerateArtifactsResponse artifacts = Generate();
  ASSERT_FALSE(artifacts.artifact_id().empty());
  ASSERT_EQ(artifacts.files_size(), 4);
  for (const v1::ArtifactFile& file : artifacts.files()) {
    const std::string content = ReadFile(dir_ + "/artifacts/" + file.file_name());
    EXPECT_EQ(static_cast<int64_t>(content.size()), file.size_bytes()) << file.file_name();
    EXPECT_EQ(engine::Sha256Hex(content), file.sha256_hex()) << file.file_name();
    EXPECT_TRUE(file.content().empty());
  }
  ASSERT_EQ(artifacts.training_inputs_size(), 2);
  EXPECT_EQ(artifacts.training_inputs(0).name(), "input");
  EXPECT_EQ(artifacts.training_inputs(1).name(), "target");
  EXPECT_THAT(artifacts.eval_output_names(), ::testing::Contains("logits"));

  // ---- session create from the stored artifacts, and from the files in the directory (uploaded by digest).
  const v1::Session session = CreateSession({"--artifact", artifacts.artifact_id(), "--name", "flow", "--threads",
                                             "1", "--seed", "7"});
  const std::string id = session.session_id();
  EXPECT_EQ(session.artifact_id(), artifacts.artifact_id());
  EXPECT_EQ(session.state(), v1::READY);
  EXPECT_EQ(session.display_name(), "flow");
  EXPECT_EQ(session.num_threads(), 1);
  EXPECT_EQ(session.trainable_parameter_count(), 16 * 8 + 16 + 4 * 16 + 4);
  const v1::Session uploaded = CreateSession({"--artifact-dir", dir_ + "/artifacts"});
  EXPECT_TRUE(uploaded.artifact_id().empty());
  EXPECT_TRUE(uploaded.has_eval_model());
  EXPECT_TRUE(uploaded.has_optimizer());
  // The directory's files are on the daemon now: an upload of one is skipped.
  google::protobuf::Struct upload;
  ASSERT_TRUE(ParseJson(Ok({"upload", dir_ + "/artifacts/checkpoint", "--json"}), &upload));
  EXPECT_FALSE(Field(upload, "uploaded").bool_value());
  EXPECT_EQ(Field(upload, "blob_id").string_value(), artifacts.files(3).sha256_hex());
  v1::ListSessionsResponse sessions;
  ASSERT_TRUE(ParseJson(Ok({"session", "list", "--json"}), &sessions));
  EXPECT_EQ(sessions.sessions_size(), 2);

  // ---- train: 5 AdamW steps from the .npy files give PyTorch's losses.
  const std::vector<double> reference = ReferenceLosses();
  ASSERT_GE(reference.size(), 6u);
  google::protobuf::Struct trained;
  ASSERT_TRUE(ParseJson(Ok(With({"train", "--session", id, "--steps", "5", "--json"}, Inputs())), &trained));
  EXPECT_EQ(Field(trained, "session_id").string_value(), id);
  const auto& steps = Field(trained, "steps").list_value().values();
  ASSERT_EQ(steps.size(), 5);
  for (int i = 0; i < 5; ++i) {
    v1::TrainStepResponse step;
    ASSERT_TRUE(ParseJson(testing::MessageJson(steps[i]), &step));
    EXPECT_NEAR(step.loss(), reference[i], 1e-4 * reference[i]) << "step " << i + 1;
    EXPECT_EQ(step.optimizer_step(), i + 1);
    EXPECT_FLOAT_EQ(step.learning_rate(), 0.01f);
    EXPECT_FALSE(step.skipped());
  }
  // The same in text, on the session made from the uploaded files: one line per step with its loss.
  const std::string text = Ok(With({"train", "--session", uploaded.session_id(), "--steps", "2"}, Inputs()));
  EXPECT_THAT(text, HasSubstr("step 1/2  loss 1.3769"));
  EXPECT_THAT(text, HasSubstr("step 2/2  loss 1.3177"));
  EXPECT_THAT(text, HasSubstr("2 steps in"));

  // ---- eval: the loss after 5 steps is the loss PyTorch's 6th step started from; logits saved as .npy.
  v1::EvalResponse eval;
  const std::string logits_path = dir_ + "/logits.npy";
  ASSERT_TRUE(ParseJson(Ok(With({"eval", "--session", id, "--save", "logits=" + logits_path, "--json"}, Inputs())),
                        &eval));
  EXPECT_NEAR(eval.loss(), reference[5], 1e-4 * reference[5]);
  ASSERT_EQ(eval.outputs_size(), 1);
  EXPECT_EQ(eval.outputs(0).name(), "logits");
  absl::StatusOr<engine::Tensor> logits = engine::ReadNpy(logits_path);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->shape(), (engine::Shape{5, 4}));

  // ---- lr get / set.
  v1::LearningRate rate;
  ASSERT_TRUE(ParseJson(Ok({"lr", "get", "--session", id, "--json"}), &rate));
  EXPECT_FLOAT_EQ(rate.learning_rate(), 0.01f);
  EXPECT_EQ(rate.optimizer_step(), 5);
  ASSERT_TRUE(ParseJson(Ok({"lr", "set", "--session", id, "0.02", "--json"}), &rate));
  EXPECT_FLOAT_EQ(rate.learning_rate(), 0.02f);
  EXPECT_THAT(Ok({"lr", "get", "--session", id}), HasSubstr("lr 0.02 at optimizer step 5"));

  // ---- checkpoint save (on the daemon and to a file), then train on, then load: the saved parameters return.
  const std::string saved_params = dir_ + "/saved.npy";
  Ok({"params", "get", "--session", id, "--out", saved_params});
  v1::SaveCheckpointResponse saved;
  const std::string checkpoint_file = dir_ + "/ck1.ckpt";
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "save", "--session", id, "--name", "ck1", "--include-optimizer-state",
                            "--out", checkpoint_file, "--json"}),
                        &saved));
  EXPECT_EQ(saved.name(), "ck1");
  EXPECT_EQ(engine::Sha256Hex(ReadFile(checkpoint_file)), saved.sha256_hex());
  EXPECT_EQ(static_cast<int64_t>(ReadFile(checkpoint_file).size()), saved.size_bytes());
  v1::ListCheckpointsResponse checkpoints;
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "list", "--json"}), &checkpoints));
  bool found = false;
  for (const auto& checkpoint : checkpoints.checkpoints()) {
    found |= checkpoint.name() == "ck1" && checkpoint.sha256_hex() == saved.sha256_hex();
  }
  EXPECT_TRUE(found) << checkpoints.DebugString();
  Ok(With({"train", "--session", id, "--steps", "1"}, Inputs()));
  const std::string moved_params = dir_ + "/moved.npy";
  Ok({"params", "get", "--session", id, "--out", moved_params});
  EXPECT_NE(ReadFile(moved_params), ReadFile(saved_params));
  v1::LoadCheckpointResponse loaded;
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "load", "--session", id, "--name", "ck1", "--json"}), &loaded));
  EXPECT_EQ(loaded.session().optimizer_step(), 5);
  const std::string restored_params = dir_ + "/restored.npy";
  Ok({"params", "get", "--session", id, "--out", restored_params});
  EXPECT_EQ(ReadFile(restored_params), ReadFile(saved_params));
  // From the file (uploaded by digest): the same.
  Ok(With({"train", "--session", id, "--steps", "1"}, Inputs()));
  Ok({"checkpoint", "load", "--session", id, "--file", checkpoint_file});
  Ok({"params", "get", "--session", id, "--out", restored_params});
  EXPECT_EQ(ReadFile(restored_params), ReadFile(saved_params));

  // ---- params: contiguous and per-name round trips through .npy files.
  v1::GetParametersResponse layout;
  ASSERT_TRUE(ParseJson(Ok({"params", "get", "--session", id, "--out-dir", dir_ + "/by_name", "--json"}), &layout));
  ASSERT_EQ(layout.layout_size(), 4);
  EXPECT_TRUE(layout.buffer().data().empty());  // --json leaves tensor data out
  for (const v1::ParameterSlice& slice : layout.layout()) {
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/by_name/" + slice.name() + ".npy")) << slice.name();
  }
  absl::StatusOr<engine::Tensor> fc2_bias = engine::ReadNpy(dir_ + "/by_name/fc2.bias.npy");
  ASSERT_TRUE(fc2_bias.ok());
  EXPECT_EQ(fc2_bias->shape(), (engine::Shape{4}));
  Ok(With({"train", "--session", id, "--steps", "1"}, Inputs()));
  google::protobuf::Struct set_by_name;
  ASSERT_TRUE(ParseJson(Ok({"params", "set", "--session", id, "--in-dir", dir_ + "/by_name", "--json"}), &set_by_name));
  EXPECT_EQ(Field(set_by_name, "parameters").list_value().values_size(), 4);
  Ok({"params", "get", "--session", id, "--out", restored_params});
  EXPECT_EQ(ReadFile(restored_params), ReadFile(saved_params));
  Ok(With({"train", "--session", id, "--steps", "1"}, Inputs()));
  Ok({"params", "set", "--session", id, "--in", saved_params});
  Ok({"params", "get", "--session", id, "--out", restored_params});
  EXPECT_EQ(ReadFile(restored_params), ReadFile(saved_params));
  // One parameter by name, and trainable-only with gradients.
  Ok({"params", "set", "--session", id, "--param", "fc2.bias=" + dir_ + "/by_name/fc2.bias.npy"});
  Ok({"params", "get", "--session", id, "--trainable-only", "--out", dir_ + "/trainable.npy", "--gradients",
      dir_ + "/gradients.npy"});
  absl::StatusOr<engine::Tensor> gradients = engine::ReadNpy(dir_ + "/gradients.npy");
  ASSERT_TRUE(gradients.ok());
  EXPECT_EQ(gradients->shape(), (engine::Shape{session.trainable_parameter_count()}));
  // A buffer of the wrong size is refused by the daemon and changes nothing.
  const CommandResult wrong_size = Run({"params", "set", "--session", id, "--in", Golden("targets/target.npy")});
  EXPECT_EQ(wrong_size.exit_code, 3) << wrong_size.stderr_text;
  Ok({"params", "get", "--session", id, "--out", restored_params});
  EXPECT_EQ(ReadFile(restored_params), ReadFile(saved_params));

  // ---- export: an ONNX model with the logits output, matching its digest.
  const std::string exported = dir_ + "/exported.onnx";
  google::protobuf::Struct export_document;
  ASSERT_TRUE(ParseJson(Ok({"export", "--session", id, "--output", "logits", "--out", exported, "--json"}),
                        &export_document));
  const std::string model_bytes = ReadFile(exported);
  EXPECT_EQ(engine::Sha256Hex(model_bytes), Field(export_document, "sha256_hex").string_value());
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(model_bytes));
  ASSERT_EQ(model.graph().output_size(), 1);
  EXPECT_EQ(model.graph().output(0).name(), "logits");

  // ---- session close; afterwards the id is NOT_FOUND (exit 3), in text and in JSON.
  google::protobuf::Struct closed;
  ASSERT_TRUE(ParseJson(Ok({"session", "close", id, "--json"}), &closed));
  EXPECT_TRUE(Field(closed, "closed").bool_value());
  const CommandResult gone = Run({"session", "show", id});
  EXPECT_EQ(gone.exit_code, 3);
  EXPECT_THAT(gone.stderr_text, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(gone.stderr_text, HasSubstr(id));
  const CommandResult gone_json = Run({"session", "show", id, "--json"});
  EXPECT_EQ(gone_json.exit_code, 3);
  google::protobuf::Struct error;
  ASSERT_TRUE(ParseJson(gone_json.stdout_text, &error));
  const google::protobuf::Struct& detail = Field(error, "error").struct_value();
  EXPECT_EQ(Field(detail, "code").string_value(), "NOT_FOUND");
  EXPECT_EQ(Field(detail, "kind").string_value(), "call");
  EXPECT_EQ(Field(detail, "exit_code").number_value(), 3);
  EXPECT_EQ(Field(Field(detail, "detail").struct_value(), "reason").string_value(), "SESSION_NOT_FOUND");
}

TEST_F(TrainctlFlowTest, GradientAccumulationOptimizerPhasesSchedulerAndProperties) {
  const v1::GenerateArtifactsResponse artifacts = Generate();
  const std::string id = CreateSession({"--artifact", artifacts.artifact_id(), "--scheduler", "step", "--step-size",
                                        "2", "--gamma", "0.5"})
                             .session_id();
  // --device gpu:N names ServerInfo.gpu_devices[N]: one past the last is refused; the first, where there is one,
  // makes a GPU session.
  v1::ServerInfo info;
  ASSERT_TRUE(ParseJson(Ok({"info", "--json"}), &info));
  const CommandResult no_such_gpu = Run({"session", "create", "--artifact", artifacts.artifact_id(), "--device",
                                         absl::StrCat("gpu:", info.gpu_devices_size())});
  EXPECT_EQ(no_such_gpu.exit_code, 3) << no_such_gpu.stderr_text;
  if (info.gpu_devices_size() > 0) {
    const v1::Session gpu = CreateSession({"--artifact", artifacts.artifact_id(), "--device", "gpu:0"});
    EXPECT_EQ(gpu.executor(), v1::GPU);
    EXPECT_EQ(gpu.device_index(), 0);
  }
  // Two accumulated passes, then one optimizer step: step count 1, and the scheduler moved with it.
  const std::string accumulated = Ok(With({"train", "--session", id, "--steps", "2", "--accumulate"}, Inputs()));
  EXPECT_THAT(accumulated, HasSubstr("(accumulated)"));
  v1::OptimizerStepResponse stepped;
  ASSERT_TRUE(ParseJson(Ok({"optimizer", "step", "--session", id, "--json"}), &stepped));
  EXPECT_EQ(stepped.optimizer_step(), 1);
  Ok({"optimizer", "reset-grad", "--session", id});
  // Batches of 2 rows of the 5-example arrays: 3 batches (the last has 1 row) fail the model's fixed batch of 5.
  const CommandResult batched = Run(With({"train", "--session", id, "--batch-size", "2"}, Inputs()));
  EXPECT_EQ(batched.exit_code, 3);
  EXPECT_THAT(batched.stderr_text, HasSubstr("INVALID_ARGUMENT"));
  // A manual schedule: the learning rate moves only on 'lr step'.
  v1::SetSchedulerResponse scheduled;
  ASSERT_TRUE(ParseJson(Ok({"lr", "schedule", "--session", id, "--scheduler", "constant", "--warmup-steps", "4",
                            "--initial-lr", "0.04", "--manual-step", "--json"}),
                        &scheduled));
  v1::LearningRate rate;
  ASSERT_TRUE(ParseJson(Ok({"lr", "step", "--session", id, "--json"}), &rate));
  EXPECT_FLOAT_EQ(rate.learning_rate(), 0.04f * 1 / 4);  // warm-up at optimizer step 1 of 4
  Ok({"lr", "schedule", "--session", id});                 // removed: the rate stays
  v1::UpdatePropertiesResponse properties;
  ASSERT_TRUE(ParseJson(Ok({"session", "properties", "--session", id, "--set", "epoch=3", "--set", "ratio=0.5",
                            "--set-string", "note=007", "--json"}),
                        &properties));
  EXPECT_EQ(properties.properties().at("epoch").int_value(), 3);
  EXPECT_FLOAT_EQ(properties.properties().at("ratio").float_value(), 0.5f);
  EXPECT_EQ(properties.properties().at("note").string_value(), "007");
  ASSERT_TRUE(ParseJson(Ok({"session", "properties", "--session", id, "--remove", "note", "--json"}), &properties));
  EXPECT_EQ(properties.properties().count("note"), 0u);
  EXPECT_THAT(Ok({"session", "show", id}), HasSubstr("property epoch = 3"));
}

// The largest difference between a float32 .npy and a float64 reference .npy, relative to the reference's largest
// magnitude.
double RelativeError(const std::string& actual_path, const std::string& reference_path) {
  absl::StatusOr<engine::Tensor> actual = engine::ReadNpy(actual_path);
  absl::StatusOr<engine::Tensor> reference = engine::ReadNpy(reference_path);
  EXPECT_TRUE(actual.ok() && reference.ok()) << actual_path;
  if (!actual.ok() || !reference.ok() || actual->num_elements() != reference->num_elements()) return 1e9;
  double error = 0, scale = 0;
  for (int64_t i = 0; i < actual->num_elements(); ++i) {
    error = std::max(error, std::fabs(actual->data<float>()[i] - reference->data<double>()[i]));
    scale = std::max(scale, std::fabs(reference->data<double>()[i]));
  }
  return error / scale;
}

// Losses and optimizers chosen on the command line give PyTorch's numbers: a custom ONNX loss graph and an L1 sum
// (loss and every gradient, tests/golden/data/losses), and a weighted two-head MSE trained with SGD + Nesterov
// (the 5-step trajectory). The artifacts carry a prefix, which session create finds in the directory.
TEST_F(TrainctlFlowTest, LossesAndOptimizersFromFlagsMatchPyTorch) {
  const std::string losses = testing::RunfilePath("tests/golden/data/losses/");
  const std::vector<std::string> parameters = {"trunk.weight", "trunk.bias", "regression.weight", "regression.bias"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"onnx_smooth_l1", {"--loss-graph", losses + "onnx_smooth_l1/term0_loss_graph.onnx"}},
      {"l1_sum", {"--loss", "l1", "--output", "regression", "--target", "target_reg", "--reduction", "sum"}},
  };
  for (const auto& [name, loss_flags] : cases) {
    v1::GenerateArtifactsResponse artifacts;
    ASSERT_TRUE(ParseJson(Ok(With({"artifacts", "generate", "--model", losses + "model.onnx", "--requires-grad",
                                   absl::StrJoin(parameters, ","), "--json"},
                                  loss_flags)),
                          &artifacts))
        << name;
    const std::string id = CreateSession({"--artifact", artifacts.artifact_id()}).session_id();
    google::protobuf::Struct trained;
    ASSERT_TRUE(ParseJson(Ok({"train", "--session", id, "--accumulate", "--input", "x=" + losses + "inputs/x.npy",
                              "--input", "target_reg=" + losses + "targets/target_reg.npy", "--json"}),
                          &trained));
    v1::TrainStepResponse step;
    ASSERT_TRUE(ParseJson(testing::MessageJson(Field(trained, "steps").list_value().values(0)), &step));
    absl::StatusOr<engine::Tensor> reference = engine::ReadNpy(losses + name + "/loss.npy");
    ASSERT_TRUE(reference.ok());
    EXPECT_NEAR(step.loss(), reference->data<double>()[0], 1e-5 * std::fabs(reference->data<double>()[0])) << name;
    const std::string gradients = dir_ + "/" + name + "_grads";
    Ok({"params", "get", "--session", id, "--name", absl::StrJoin(parameters, ","), "--out-dir",
        dir_ + "/" + name + "_params", "--gradients", gradients});
    for (const std::string& parameter : parameters) {
      EXPECT_LE(RelativeError(gradients + "/" + parameter + ".npy", losses + name + "/grads/" + parameter + ".npy"),
                1e-4)
          << name << " " << parameter;
    }
  }

  // Weighted terms + SGD with Nesterov momentum, artifacts under a prefix.
  const std::string two_heads = testing::RunfilePath("tests/golden/data/two_head_weighted_mse/");
  Ok({"artifacts", "generate", "--model", two_heads + "model.onnx", "--term", "0.4:mse:out1:target1", "--term",
      "0.6:mse:out2:target2:mean", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov",
      "--prefix", "heads_", "--out", dir_ + "/heads"});
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/heads/heads_training_model.onnx"));
  const std::string id = CreateSession({"--artifact-dir", dir_ + "/heads"}).session_id();
  google::protobuf::Struct trained;
  ASSERT_TRUE(ParseJson(Ok({"train", "--session", id, "--steps", "5", "--input", "input=" + two_heads +
                            "inputs/input.npy", "--input", "target1=" + two_heads + "targets/target1.npy", "--input",
                            "target2=" + two_heads + "targets/target2.npy", "--json"}),
                        &trained));
  absl::StatusOr<engine::Tensor> trajectory = engine::ReadNpy(two_heads + "ref/sgd_nesterov_losses.npy");
  ASSERT_TRUE(trajectory.ok());
  const auto& steps = Field(trained, "steps").list_value().values();
  ASSERT_EQ(steps.size(), 5);
  for (int i = 0; i < 5; ++i) {
    v1::TrainStepResponse step;
    ASSERT_TRUE(ParseJson(testing::MessageJson(steps[i]), &step));
    EXPECT_NEAR(step.loss(), trajectory->data<double>()[i], 1e-4 * trajectory->data<double>()[i]) << i;
  }
  // A frozen parameter stays as it was.
  v1::GenerateArtifactsResponse frozen;
  ASSERT_TRUE(ParseJson(Ok({"artifacts", "generate", "--model", two_heads + "model.onnx", "--term",
                            "1:mse:out1:target1", "--term", "1:mse:out2:target2", "--frozen", "trunk.weight,trunk.bias",
                            "--json"}),
                        &frozen));
  EXPECT_THAT(frozen.frozen_parameters(), ::testing::UnorderedElementsAre("trunk.weight", "trunk.bias"));
  EXPECT_THAT(frozen.trainable_parameters(), ::testing::Not(::testing::Contains("trunk.weight")));
}

TEST_F(TrainctlFlowTest, ExitCodesForUsageLocalFileAndCallFailures) {
  // Usage (2): a missing required flag, a malformed value, a flag of another command, flags that exclude
  // each other.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"train", "--input", "x=y.npy"},
           {"train", "--session", "s", "--input", "x"},
           {"train", "--session", "s", "--input", "x=y.npy", "--steps", "0"},
           {"lr", "set", "--session", "s", "fast"},
           {"session", "create"},
           {"session", "create", "--artifact", "a", "--artifact-dir", "d"},
           {"artifacts", "generate", "--model", "m.onnx"},
           {"artifacts", "generate", "--model", "m.onnx", "--loss", "mse", "--optimizer", "sgd", "--beta1", "0.9"},
           {"artifacts", "generate", "--model", "m.onnx", "--term", "1:mse:o:t:median"},
           {"artifacts", "generate", "--model", "m.onnx", "--loss", "mse", "--term", "1:mse"},
           {"session", "create", "--artifact", "a", "--device", "tpu"},
           {"session", "create", "--artifact", "a", "--scheduler", "linear"},
           {"params", "set", "--session", "s"},
           {"checkpoint", "save", "--session", "s"},
           {"job", "submit", "--artifact", "a"},
           {"health", "--session", "s"},
       }) {
    const CommandResult result = Run(args);
    EXPECT_EQ(result.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << result.stderr_text;
    EXPECT_THAT(result.stderr_text, HasSubstr("--help")) << absl::StrJoin(args, " ");
  }
  // Local files (4): a missing .npy, a file that is not .npy, an unwritable output.
  const CommandResult missing = Run({"train", "--session", "s", "--input", "x=" + dir_ + "/none.npy"});
  EXPECT_EQ(missing.exit_code, 4) << missing.stderr_text;
  EXPECT_THAT(missing.stderr_text, HasSubstr("none.npy"));
  const CommandResult not_npy = Run({"train", "--session", "s", "--input", "x=" + Golden("model.onnx")});
  EXPECT_EQ(not_npy.exit_code, 4) << not_npy.stderr_text;
  const CommandResult no_model = Run({"artifacts", "generate", "--model", dir_ + "/none.onnx", "--loss", "mse"});
  EXPECT_EQ(no_model.exit_code, 4) << no_model.stderr_text;
  EXPECT_EQ(Run({"upload", "/dev/zero"}).exit_code, 4);  // not a regular file: never read
  EXPECT_EQ(Run({"upload", dir_}).exit_code, 4);
  // Call failures (3): unknown ids answer NOT_FOUND, named in the message.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"session", "show", "s-unknown"},
           {"session", "close", "s-unknown"},
           {"train", "--session", "s-unknown", "--input", "input=" + Golden("inputs/input.npy")},
           {"lr", "get", "--session", "s-unknown"},
           {"params", "get", "--session", "s-unknown"},
           {"session", "create", "--artifact", "a-unknown"},
       }) {
    const CommandResult result = Run(args);
    EXPECT_EQ(result.exit_code, 3) << absl::StrJoin(args, " ") << "\n" << result.stderr_text;
    EXPECT_THAT(result.stderr_text, HasSubstr("NOT_FOUND")) << absl::StrJoin(args, " ");
    EXPECT_THAT(result.stderr_text, HasSubstr("-unknown")) << absl::StrJoin(args, " ");
  }
  // A deadline too short for the call: DEADLINE_EXCEEDED, exit 3.
  const CommandResult late = Run({"artifacts", "generate", "--model", Golden("model.onnx"), "--loss",
                                  "cross_entropy", "--timeout", "0.000001"});
  EXPECT_EQ(late.exit_code, 3) << late.stderr_text;
  EXPECT_THAT(late.stderr_text, HasSubstr("DEADLINE_EXCEEDED"));
  // A model the daemon refuses: INVALID_ARGUMENT, exit 3.
  const CommandResult bad_model = Run({"artifacts", "generate", "--model", Golden("inputs/input.npy"), "--loss", "mse"});
  EXPECT_EQ(bad_model.exit_code, 3) << bad_model.stderr_text;
  EXPECT_THAT(bad_model.stderr_text, HasSubstr("INVALID_ARGUMENT"));
}

}  // namespace
}  // namespace traind
