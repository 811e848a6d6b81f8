// Durable sessions against the real daemon: a drained daemon's sessions come back under the same id and continue
// exactly as uninterrupted training; and 50 times over, kill -9 at a random moment (mid-step, mid-save) and
// restart: every session resumes at an acknowledged step (or the one after it, when the kill fell between its
// checkpoint and its answer) with exactly the parameters of the reference trajectory, every named checkpoint is a
// whole one, and every acknowledged save is there with the acknowledged digest.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "engine/core/tensor_bytes.h"
#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "engine/training/checkpoint.h"
#include "engine/training/module.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using engine::NamedTensors;
using engine::Tensor;
using Stub = v1::TrainingService::Stub;

constexpr int kThreads = 2;

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

NamedTensors Batch() {
  return {{"input", *engine::ReadNpy(Runfile("tests/golden/data/mlp/inputs/input.npy"))},
          {"target", *engine::ReadNpy(Runfile("tests/golden/data/mlp/targets/target.npy"))}};
}

v1::TrainStepRequest StepRequest(const std::string& session) {
  v1::TrainStepRequest request;
  request.set_session_id(session);
  for (const auto& [name, tensor] : Batch()) {
    v1::Tensor* wire = request.add_inputs();
    wire->set_name(name);
    wire->set_dtype(tensor.dtype() == engine::DataType::kInt64 ? v1::INT64 : v1::FLOAT32);
    for (int64_t dim : tensor.shape()) wire->add_shape(dim);
    wire->set_data(engine::TensorToBytes(tensor));
  }
  return request;
}

struct Daemon {
  std::unique_ptr<testing::DaemonProcess> process;
  std::unique_ptr<Stub> stub;
};

Daemon Start(const std::string& state_dir, std::vector<std::string> flags = {}) {
  Daemon daemon;
  flags.push_back("--state_dir=" + state_dir);
  auto process = testing::DaemonProcess::Start(flags);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return daemon;
  daemon.process = std::move(*process);
  ConnectionOptions options;
  options.address = daemon.process->grpc_address();
  daemon.stub = v1::TrainingService::NewStub(*Connect(options));
  return daemon;
}

template <typename Request, typename Response>
grpc::Status Call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const Request& request, Response* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return (stub.*method)(&context, request, response);
}

v1::GenerateArtifactsResponse Generate(Stub& stub) {
  v1::GenerateArtifactsRequest request;
  request.mutable_model()->set_onnx_bytes(ReadFile(Runfile("tests/golden/data/mlp/model.onnx")));
  request.mutable_loss()->mutable_builtin()->set_type(v1::CROSS_ENTROPY);
  request.mutable_optimizer()->mutable_adamw()->set_lr(1e-2f);
  request.set_return_artifact_bytes(true);
  v1::GenerateArtifactsResponse response;
  EXPECT_TRUE(Call(stub, &Stub::GenerateArtifacts, request, &response).ok());
  return response;
}

std::string Parameters(Stub& stub, const std::string& session, int64_t* step = nullptr) {
  v1::GetParametersRequest request;
  request.set_session_id(session);
  v1::GetParametersResponse response;
  const grpc::Status status = Call(stub, &Stub::GetParameters, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  if (step != nullptr) {
    v1::GetSessionRequest get;
    get.set_session_id(session);
    v1::Session info;
    EXPECT_TRUE(Call(stub, &Stub::GetSession, get, &info).ok());
    *step = info.optimizer_step();
  }
  return response.buffer().data();
}

// The parameters after each optimizer step, trained in this process on the artifacts' files.
std::vector<std::string> ReferenceTrajectory(const v1::GenerateArtifactsResponse& artifacts, int steps) {
  onnx::ModelProto training, eval, optimizer;
  engine::CheckpointState state;
  for (const v1::ArtifactFile& file : artifacts.files()) {
    if (file.kind() == "training_model") training.ParseFromString(file.content());
    if (file.kind() == "eval_model") eval.ParseFromString(file.content());
    if (file.kind() == "optimizer_model") optimizer.ParseFromString(file.content());
    if (file.kind() == "checkpoint") state = *engine::ParseCheckpoint(file.content());
  }
  engine::ModuleOptions options;
  options.num_threads = kThreads;
  auto module = engine::Module::Create(training, &eval, &state, options);
  EXPECT_TRUE(module.ok()) << module.status();
  auto step = engine::Optimizer::Create(optimizer, module->get());
  EXPECT_TRUE(step.ok()) << step.status();
  std::vector<std::string> trajectory = {engine::TensorToBytes(*(*module)->GetContiguousParameters(false))};
  const NamedTensors batch = Batch();
  for (int i = 0; i < steps; ++i) {
    EXPECT_TRUE((*module)->TrainStep(batch).ok());
    EXPECT_TRUE((*step)->Step().ok());
    (*module)->LazyResetGrad();
    trajectory.push_back(engine::TensorToBytes(*(*module)->GetContiguousParameters(false)));
  }
  return trajectory;
}

TEST(DurabilityTest, ADrainedDaemonsSessionsComeBackAndContinueAsIfUninterrupted) {
  const std::string state_dir = testing::MakeTempDir("state");
  Daemon daemon = Start(state_dir, {"--checkpoint_every_seconds=0"});  // only the drain checkpoints
  ASSERT_NE(daemon.stub, nullptr);
  const v1::GenerateArtifactsResponse artifacts = Generate(*daemon.stub);
  const std::vector<std::string> reference = ReferenceTrajectory(artifacts, 6);
  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  create.set_num_threads(kThreads);
  create.set_display_name("survivor");
  v1::Session session;
  ASSERT_TRUE(Call(*daemon.stub, &Stub::CreateSession, create, &session).ok());
  v1::TrainStepResponse stepped;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Call(*daemon.stub, &Stub::TrainStep, StepRequest(session.session_id()), &stepped).ok());
  v1::UpdatePropertiesRequest properties;
  properties.set_session_id(session.session_id());
  (*properties.mutable_set())["epoch"].set_int_value(7);
  v1::UpdatePropertiesResponse updated;
  ASSERT_TRUE(Call(*daemon.stub, &Stub::UpdateProperties, properties, &updated).ok());
  absl::Duration elapsed;
  ASSERT_EQ(*daemon.process->SignalAndWait(SIGTERM, absl::Seconds(10), &elapsed), 0);
  EXPECT_THAT(daemon.process->Log(), ::testing::HasSubstr("msg=\"sessions checkpointed\" sessions=1"));

  Daemon restarted = Start(state_dir);
  ASSERT_NE(restarted.stub, nullptr);
  v1::GetSessionRequest get;
  get.set_session_id(session.session_id());
  v1::Session back;
  ASSERT_TRUE(Call(*restarted.stub, &Stub::GetSession, get, &back).ok());
  EXPECT_EQ(back.display_name(), "survivor");
  EXPECT_EQ(back.optimizer_step(), 3);
  EXPECT_EQ(back.properties().at("epoch").int_value(), 7);
  EXPECT_EQ(back.num_threads(), kThreads);
  EXPECT_TRUE(Parameters(*restarted.stub, session.session_id()) == reference[3]);
  for (int i = 3; i < 6; ++i) {
    ASSERT_TRUE(Call(*restarted.stub, &Stub::TrainStep, StepRequest(session.session_id()), &stepped).ok());
  }
  EXPECT_TRUE(Parameters(*restarted.stub, session.session_id()) == reference[6]);
  // Closed sessions stay closed.
  v1::CloseSessionRequest close;
  close.set_session_id(session.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(Call(*restarted.stub, &Stub::CloseSession, close, &closed).ok());
  ASSERT_EQ(*restarted.process->SignalAndWait(SIGTERM, absl::Seconds(10), &elapsed), 0);
  Daemon third = Start(state_dir);
  ASSERT_NE(third.stub, nullptr);
  EXPECT_EQ(Call(*third.stub, &Stub::GetSession, get, &back).error_code(), grpc::NOT_FOUND);
}

TEST(DurabilityTest, KillNineAtRandomMomentsFiftyTimesLosesNoAcknowledgedState) {
  const std::string state_dir = testing::MakeTempDir("state");
  const std::vector<std::string> flags = {"--checkpoint_every_steps=1", "--checkpoint_every_seconds=0"};
  Daemon daemon = Start(state_dir, flags);
  ASSERT_NE(daemon.stub, nullptr);
  const v1::GenerateArtifactsResponse artifacts = Generate(*daemon.stub);
  constexpr int kRounds = 50, kMaxStepsPerRound = 3;
  const std::vector<std::string> reference = ReferenceTrajectory(artifacts, kRounds * kMaxStepsPerRound + 1);
  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  create.set_num_threads(kThreads);
  v1::Session session;
  ASSERT_TRUE(Call(*daemon.stub, &Stub::CreateSession, create, &session).ok());
  const std::string id = session.session_id();

  std::mt19937 random(20261124);
  int64_t acknowledged_step = 0;
  std::map<std::string, std::string> acknowledged_saves;  // name -> sha256 the daemon acknowledged
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    // Training and saving race with a kill -9 at a random moment.
    std::atomic<int64_t> acked{acknowledged_step};
    std::atomic<bool> first_acknowledged{false};
    std::map<std::string, std::string> saves;
    std::thread client([&, steps = 1 + static_cast<int>(random() % kMaxStepsPerRound), name = absl::StrCat("save-", round)] {
      for (int i = 0; i < steps; ++i) {
        v1::TrainStepResponse response;
        if (!Call(*daemon.stub, &Stub::TrainStep, StepRequest(id), &response).ok()) return;
        acked = response.optimizer_step();
        first_acknowledged = true;
        if (i == 0) {
          v1::SaveCheckpointRequest save;
          save.set_session_id(id);
          save.set_name(name);
          save.set_include_optimizer_state(true);
          v1::SaveCheckpointResponse saved;
          if (!Call(*daemon.stub, &Stub::SaveCheckpoint, save, &saved).ok()) return;
          saves[name] = saved.sha256_hex();
        }
      }
    });
    // Every fifth round, anywhere from before the first step on; the others after the first step's answer, during
    // the save and the later steps (so that the rounds make progress however slow the machine is).
    if (round % 5 != 0) {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (!first_acknowledged && absl::Now() < deadline) absl::SleepFor(absl::Microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 60000));
    ASSERT_EQ(::kill(daemon.process->pid(), SIGKILL), 0);
    client.join();
    absl::Duration elapsed;
    EXPECT_EQ(*daemon.process->SignalAndWait(0, absl::Seconds(10), &elapsed), 128 + SIGKILL);
    for (const auto& [name, sha] : saves) acknowledged_saves[name] = sha;
    acknowledged_step = acked;

    daemon = Start(state_dir, flags);
    ASSERT_NE(daemon.stub, nullptr) << "the daemon did not restart";
    int64_t step = -1;
    const std::string parameters = Parameters(*daemon.stub, id, &step);
    // The checkpoint of a step is written before the step is answered: at most one unacknowledged step more.
    ASSERT_GE(step, acknowledged_step);
    ASSERT_LE(step, acknowledged_step + 1);
    ASSERT_TRUE(parameters == reference[step]) << "step " << step;
    acknowledged_step = step;
    for (const auto& [name, sha] : acknowledged_saves) {
      const std::string bytes = ReadFile(state_dir + "/checkpoints/" + name);
      EXPECT_EQ(engine::Sha256Hex(bytes), sha) << name << " lost or torn";
    }
    for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/checkpoints")) {
      EXPECT_TRUE(engine::ParseCheckpoint(ReadFile(entry.path().string())).ok()) << entry.path() << " is torn";
    }
  }
  EXPECT_GT(acknowledged_step, kRounds / 2);  // the rounds did train
  EXPECT_FALSE(acknowledged_saves.empty());
}

TEST(DurabilityTest, LeftoversOfInterruptedWritesAreRemovedAtStartUp) {
  const std::string state_dir = testing::MakeTempDir("state");
  Daemon daemon = Start(state_dir);
  ASSERT_NE(daemon.stub, nullptr);
  const v1::GenerateArtifactsResponse artifacts = Generate(*daemon.stub);
  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  v1::Session session;
  ASSERT_TRUE(Call(*daemon.stub, &Stub::CreateSession, create, &session).ok());
  ASSERT_EQ(::kill(daemon.process->pid(), SIGKILL), 0);
  absl::Duration elapsed;
  daemon.process->SignalAndWait(0, absl::Seconds(10), &elapsed).IgnoreError();
  const std::vector<std::string> leftovers = {
      state_dir + "/sessions/" + session.session_id() + "/checkpoint.tmp.99.0",
      state_dir + "/checkpoints/named.tmp.99.1", state_dir + "/blobs/upload.tmp.99.2",
      state_dir + "/artifacts/.tmp-a-0123/training_model.onnx"};
  for (const std::string& path : leftovers) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << "half-written";
  }
  daemon = Start(state_dir);
  ASSERT_NE(daemon.stub, nullptr);
  for (const std::string& path : leftovers) EXPECT_FALSE(std::filesystem::exists(path)) << path;
  v1::GetSessionRequest get;
  get.set_session_id(session.session_id());
  v1::Session back;
  EXPECT_TRUE(Call(*daemon.stub, &Stub::GetSession, get, &back).ok());
}

}  // namespace
}  // namespace traind
