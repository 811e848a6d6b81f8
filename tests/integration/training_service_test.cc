// TrainingService against the real daemon process over real sockets: the golden models (tests/golden, PyTorch
// 1.13) trained over gRPC give exactly what the in-process engine gives on the same artifacts (loss and gradients
// bit for bit, 5 AdamW and SGD-Nesterov steps to the same parameters); sessions train concurrently as they would
// serially; save -> close -> create from the checkpoint -> continue equals uninterrupted training; the exported
// model runs; and every bad input gets its precise status while nothing changes.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "engine/core/tensor_bytes.h"
#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/session.h"
#include "engine/training/checkpoint.h"
#include "engine/training/module.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/service.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using engine::NamedTensors;
using engine::Tensor;
using testing::DaemonProcess;
using Stub = v1::TrainingService::Stub;
using testing::Call;

constexpr int kThreads = 2;  // the same in the daemon's sessions and in-process, so results can be bit-identical
constexpr uint64_t kSeed = 1234;

// ---- The daemon and calls ----

// ---- Tensors ----

v1::Tensor ToWire(const std::string& name, const Tensor& tensor) {
  v1::Tensor wire;
  wire.set_name(name);
  switch (tensor.dtype()) {
    case engine::DataType::kFloat32:
      wire.set_dtype(v1::FLOAT32);
      break;
    case engine::DataType::kInt64:
      wire.set_dtype(v1::INT64);
      break;
    default:
      ADD_FAILURE() << "unexpected dtype in a test batch";
  }
  for (int64_t dim : tensor.shape()) wire.add_shape(dim);
  wire.set_data(engine::TensorToBytes(tensor));
  return wire;
}

Tensor FromWire(const v1::Tensor& wire) {
  const engine::DataType dtype = wire.dtype() == v1::INT64 ? engine::DataType::kInt64 : engine::DataType::kFloat32;
  auto tensor = engine::TensorFromBytes(dtype, wire.shape(), wire.data(), int64_t{1} << 30, "response tensor");
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return tensor.ok() ? *tensor : Tensor();
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

// The golden batch of a model: every file of inputs/ and targets/, named after the file.
NamedTensors GoldenBatch(const std::string& name) {
  NamedTensors batch;
  for (const char* folder : {"inputs", "targets"}) {
    for (const auto& entry : std::filesystem::directory_iterator(testing::RunfilePath("tests/golden/data/" + name + "/" + folder))) {
      auto tensor = engine::ReadNpy(entry.path().string());
      EXPECT_TRUE(tensor.ok()) << tensor.status();
      batch.emplace_back(entry.path().stem().string(), *tensor);
    }
  }
  return batch;
}

// The batch scaled (float inputs only): a different batch of the same shapes, for multi-step runs.
NamedTensors Scaled(const NamedTensors& batch, float factor) {
  NamedTensors scaled;
  for (const auto& [name, tensor] : batch) {
    Tensor copy = *Tensor::Allocate(tensor.dtype(), tensor.shape());
    std::memcpy(copy.mutable_raw_data(), tensor.raw_data(), tensor.byte_size());
    if (copy.dtype() == engine::DataType::kFloat32) {
      for (int64_t i = 0; i < copy.num_elements(); ++i) copy.mutable_data<float>()[i] *= factor;
    }
    scaled.emplace_back(name, std::move(copy));
  }
  return scaled;
}

void AddInputs(const NamedTensors& batch, google::protobuf::RepeatedPtrField<v1::Tensor>* inputs) {
  for (const auto& [name, tensor] : batch) *inputs->Add() = ToWire(name, tensor);
}

// ---- Artifacts and sessions ----

v1::OptimizerSpec AdamW() {
  v1::OptimizerSpec spec;
  spec.mutable_adamw()->set_lr(1e-2f);
  spec.mutable_adamw()->set_weight_decay(1e-2f);
  return spec;
}

v1::OptimizerSpec SgdNesterov() {
  v1::OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(5e-2f);
  spec.mutable_sgd()->set_momentum(0.9f);
  spec.mutable_sgd()->set_nesterov(true);
  return spec;
}

v1::GenerateArtifactsRequest ArtifactsRequest(const std::string& golden, const v1::OptimizerSpec& optimizer) {
  v1::GenerateArtifactsRequest request;
  request.mutable_model()->set_onnx_bytes(testing::ReadRunfile("tests/golden/data/" + golden + "/model.onnx"));
  v1::BuiltinLoss* loss = request.mutable_loss()->mutable_builtin();
  loss->set_type(v1::CROSS_ENTROPY);
  loss->set_output_name("logits");
  *request.mutable_optimizer() = optimizer;
  request.add_additional_output_names("logits");
  request.set_return_artifact_bytes(true);
  return request;
}

v1::CreateSessionRequest SessionRequest(const std::string& artifact_id) {
  v1::CreateSessionRequest request;
  request.set_artifact_id(artifact_id);
  request.set_num_threads(kThreads);
  request.set_seed(kSeed);
  return request;
}

// The same artifacts (the files the daemon returned) trained in this process.
struct InProcess {
  onnx::ModelProto training, eval, optimizer;
  engine::CheckpointState state;
  std::unique_ptr<engine::Module> module;
  std::unique_ptr<engine::Optimizer> step;
};

std::unique_ptr<InProcess> InProcessTrainer(const v1::GenerateArtifactsResponse& artifacts) {
  auto trainer = std::make_unique<InProcess>();
  for (const v1::ArtifactFile& file : artifacts.files()) {
    onnx::ModelProto* model = file.kind() == "training_model"    ? &trainer->training
                              : file.kind() == "eval_model"      ? &trainer->eval
                              : file.kind() == "optimizer_model" ? &trainer->optimizer
                                                                 : nullptr;
    if (model != nullptr) {
      EXPECT_TRUE(model->ParseFromString(file.content())) << file.kind();
    }
    if (file.kind() == "checkpoint") {
      auto state = engine::ParseCheckpoint(file.content());
      EXPECT_TRUE(state.ok()) << state.status();
      trainer->state = *std::move(state);
    }
  }
  engine::ModuleOptions options;
  options.num_threads = kThreads;
  options.random_seed = kSeed;
  auto module = engine::Module::Create(trainer->training, &trainer->eval, &trainer->state, options);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return nullptr;
  trainer->module = *std::move(module);
  auto optimizer = engine::Optimizer::Create(trainer->optimizer, trainer->module.get());
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  if (!optimizer.ok()) return nullptr;
  trainer->step = *std::move(optimizer);
  return trainer;
}

float InProcessStep(InProcess& trainer, const NamedTensors& batch) {
  auto outputs = trainer.module->TrainStep(batch);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_TRUE(trainer.step->Step().ok());
  trainer.module->LazyResetGrad();
  return outputs.ok() ? *(*outputs)[0].second.data<float>() : NAN;
}

float RemoteStep(Stub& stub, const std::string& session, const NamedTensors& batch) {
  v1::TrainStepRequest request;
  request.set_session_id(session);
  AddInputs(batch, request.mutable_inputs());
  v1::TrainStepResponse response;
  EXPECT_GRPC_OK(Call(stub, &Stub::TrainStep, request, &response));
  EXPECT_FALSE(response.skipped()) << response.skip_reason();
  return response.loss();
}

// Every parameter (checkpoint order) as one buffer, plus the gradients.
v1::GetParametersResponse RemoteParameters(Stub& stub, const std::string& session) {
  v1::GetParametersRequest request;
  request.set_session_id(session);
  request.set_include_gradients(true);
  v1::GetParametersResponse response;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetParameters, request, &response));
  return response;
}

// What "nothing changed" compares: parameters, gradients, optimizer step and learning rate.
struct Observed {
  std::string parameters, gradients;
  int64_t step = 0;
  float learning_rate = 0;
  bool operator==(const Observed& other) const {
    return parameters == other.parameters && gradients == other.gradients && step == other.step &&
           learning_rate == other.learning_rate;
  }
};

Observed Observe(Stub& stub, const std::string& session) {
  Observed observed;
  v1::GetParametersResponse parameters = RemoteParameters(stub, session);
  observed.parameters = parameters.buffer().data();
  observed.gradients = parameters.gradient_buffer().data();
  v1::GetSessionRequest request;
  request.set_session_id(session);
  v1::Session info;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetSession, request, &info));
  observed.step = info.optimizer_step();
  observed.learning_rate = info.learning_rate();
  return observed;
}

// ---- Golden models over gRPC equal the in-process engine ----

struct GoldenCase {
  std::string model;
  bool adamw;
};

class GoldenOverGrpcTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenOverGrpcTest, LossGradientsAndFiveStepsEqualTheInProcessEngineBitForBit) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  const v1::GenerateArtifactsRequest artifacts_request =
      ArtifactsRequest(GetParam().model, GetParam().adamw ? AdamW() : SgdNesterov());
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, artifacts_request, &artifacts));
  ASSERT_EQ(artifacts.files_size(), 4);
  EXPECT_THAT(artifacts.training_output_names(), ::testing::ElementsAre("loss", "logits"));
  auto local = InProcessTrainer(artifacts);
  ASSERT_NE(local, nullptr);

  v1::Session session;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &session));
  EXPECT_EQ(session.trainable_parameter_count(), local->module->GetParametersSize(true));
  EXPECT_TRUE(session.has_optimizer());
  EXPECT_EQ(session.learning_rate(), local->step->GetLearningRate());
  const NamedTensors batch = GoldenBatch(GetParam().model);

  // Forward + backward: the loss and every gradient, bit for bit.
  v1::TrainStepRequest accumulate;
  accumulate.set_session_id(session.session_id());
  accumulate.set_accumulate_only(true);
  accumulate.add_fetch_outputs("logits");
  AddInputs(batch, accumulate.mutable_inputs());
  v1::TrainStepResponse remote;
  ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, accumulate, &remote));
  auto outputs = local->module->TrainStep(batch);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(remote.loss(), *(*outputs)[0].second.data<float>());
  ASSERT_EQ(remote.outputs_size(), 1);
  EXPECT_TRUE(SameBytes(FromWire(remote.outputs(0)), (*outputs)[1].second));
  EXPECT_EQ(remote.optimizer_step(), 0);
  v1::GetParametersRequest by_name;
  by_name.set_session_id(session.session_id());
  by_name.set_include_gradients(true);
  for (const engine::Parameter& parameter : local->state.parameters) {
    if (parameter.requires_grad) by_name.add_names(parameter.name);
  }
  v1::GetParametersResponse gradients;
  ASSERT_GRPC_OK(Call(stub, &Stub::GetParameters, by_name, &gradients));
  ASSERT_EQ(gradients.gradients_size(), by_name.names_size());
  for (int i = 0; i < by_name.names_size(); ++i) {
    const engine::Parameter* parameter = nullptr;
    for (const auto& p : local->state.parameters) {
      if (p.name == by_name.names(i)) parameter = &p;
    }
    ASSERT_NE(parameter, nullptr);
    EXPECT_TRUE(gradients.layout(i).has_gradient());
    EXPECT_TRUE(SameBytes(FromWire(gradients.gradients(i)), parameter->grad)) << parameter->name;
    EXPECT_TRUE(SameBytes(FromWire(gradients.parameters(i)), parameter->data)) << parameter->name;
  }

  // The three phases as separate RPCs, then five one-call steps: the same parameters.
  v1::OptimizerStepRequest step_request;
  step_request.set_session_id(session.session_id());
  v1::OptimizerStepResponse stepped;
  ASSERT_GRPC_OK(Call(stub, &Stub::OptimizerStep, step_request, &stepped));
  EXPECT_EQ(stepped.optimizer_step(), 1);
  v1::LazyResetGradRequest reset;
  reset.set_session_id(session.session_id());
  v1::LazyResetGradResponse reset_response;
  ASSERT_GRPC_OK(Call(stub, &Stub::LazyResetGrad, reset, &reset_response));
  ASSERT_TRUE(local->step->Step().ok());
  local->module->LazyResetGrad();
  for (int step = 0; step < 5; ++step) {
    const NamedTensors scaled = Scaled(batch, 1.0f + 0.1f * static_cast<float>(step));
    EXPECT_EQ(RemoteStep(stub, session.session_id(), scaled), InProcessStep(*local, scaled)) << step;
  }
  const v1::GetParametersResponse final_parameters = RemoteParameters(stub, session.session_id());
  auto expected = local->module->GetContiguousParameters(/*trainable_only=*/false);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_TRUE(SameBytes(FromWire(final_parameters.buffer()), *expected));
  EXPECT_EQ(Observe(stub, session.session_id()).step, 6);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenOverGrpcTest,
                         ::testing::Values(GoldenCase{"mlp", true}, GoldenCase{"mlp", false},
                                           GoldenCase{"cnn_bn_maxpool", true}, GoldenCase{"cnn_bn_maxpool", false},
                                           GoldenCase{"transformer_encoder", true},
                                           GoldenCase{"transformer_encoder", false}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.model + (info.param.adamw ? "_adamw" : "_sgd_nesterov");
                         });

// ---- Concurrency ----

TEST(ConcurrencyTest, TwoSessionsTrainedAtOnceFromTwoClientsEqualSerialTraining) {
  auto daemon = testing::StartService({"--max_concurrent_steps=2"});
  ASSERT_NE(daemon, nullptr);
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::GenerateArtifacts, ArtifactsRequest("cnn_bn_maxpool", AdamW()), &artifacts));
  const NamedTensors batch = GoldenBatch("cnn_bn_maxpool");
  auto train = [&](Stub& stub, const std::string& session, float base) {
    for (int step = 0; step < 6; ++step) RemoteStep(stub, session, Scaled(batch, base + 0.05f * step));
  };
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    v1::Session session;
    ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &session));
    ids.push_back(session.session_id());
  }
  // Sessions 0 and 1 one after the other; 2 and 3 at once, each from its own client (channel).
  train(*daemon->stub, ids[0], 1.0f);
  train(*daemon->stub, ids[1], 0.5f);
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      ConnectionOptions options;
      options.address = daemon->process->grpc_address();
      auto stub = v1::TrainingService::NewStub(*Connect(options));
      train(*stub, ids[2 + i], i == 0 ? 1.0f : 0.5f);
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_TRUE(Observe(*daemon->stub, ids[0]) == Observe(*daemon->stub, ids[2]));
  EXPECT_TRUE(Observe(*daemon->stub, ids[1]) == Observe(*daemon->stub, ids[3]));
  EXPECT_FALSE(Observe(*daemon->stub, ids[0]) == Observe(*daemon->stub, ids[1]));
  v1::ListSessionsResponse list;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::ListSessions, v1::ListSessionsRequest(), &list));
  EXPECT_EQ(list.sessions_size(), 4);
  for (const v1::Session& session : list.sessions()) EXPECT_EQ(session.train_steps(), 6);
}

// ---- Deferred calls: an ORT-style loop in one round trip a step ----

v1::TrainStepRequest AccumulateRequest(const std::string& session, const NamedTensors& batch,
                                       std::vector<v1::DeferredCall> before_step = {}) {
  v1::TrainStepRequest request;
  request.set_session_id(session);
  request.set_accumulate_only(true);
  AddInputs(batch, request.mutable_inputs());
  for (v1::DeferredCall call : before_step) request.add_before_step(call);
  return request;
}

void SetManualLinearSchedule(Stub& stub, const std::string& session) {
  v1::SetSchedulerRequest request;
  request.set_session_id(session);
  request.mutable_scheduler()->mutable_linear_warmup_decay()->set_warmup_steps(2);
  request.mutable_scheduler()->mutable_linear_warmup_decay()->set_total_steps(6);
  request.set_initial_learning_rate(0.01f);
  request.set_manual_step(true);
  v1::SetSchedulerResponse response;
  ASSERT_GRPC_OK(Call(stub, &Stub::SetScheduler, request, &response));
}

void OptimizerSchedulerReset(Stub& stub, const std::string& session) {
  v1::OptimizerStepRequest step;
  step.set_session_id(session);
  v1::OptimizerStepResponse stepped;
  ASSERT_GRPC_OK(Call(stub, &Stub::OptimizerStep, step, &stepped));
  v1::SchedulerStepRequest schedule;
  schedule.set_session_id(session);
  v1::LearningRate scheduled;
  ASSERT_GRPC_OK(Call(stub, &Stub::SchedulerStep, schedule, &scheduled));
  v1::LazyResetGradRequest reset;
  reset.set_session_id(session);
  v1::LazyResetGradResponse was_reset;
  ASSERT_GRPC_OK(Call(stub, &Stub::LazyResetGrad, reset, &was_reset));
}

TEST(DeferredCallsTest, StepsCarryingTheirPredecessorsCallsEqualTheCallsMadeOneByOneBitForBit) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, ArtifactsRequest("mlp", AdamW()), &artifacts));
  std::string one_by_one, deferred;
  for (std::string* id : {&one_by_one, &deferred}) {
    v1::Session session;
    ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &session));
    *id = session.session_id();
    SetManualLinearSchedule(stub, *id);
  }
  const NamedTensors batch = GoldenBatch("mlp");
  const std::vector<v1::DeferredCall> loop_tail = {v1::DEFERRED_OPTIMIZER_STEP, v1::DEFERRED_SCHEDULER_STEP,
                                                   v1::DEFERRED_LAZY_RESET_GRAD};
  for (int step = 0; step < 4; ++step) {
    const NamedTensors scaled = Scaled(batch, 1.0f + 0.1f * step);
    // ORT's loop: module(batch); optimizer.step(); scheduler.step(); module.lazy_reset_grad().
    v1::TrainStepResponse separate;
    ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, AccumulateRequest(one_by_one, scaled), &separate));
    OptimizerSchedulerReset(stub, one_by_one);
    // The same loop with the three calls after each step sent with the next one.
    v1::TrainStepResponse carried;
    ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep,
                        AccumulateRequest(deferred, scaled, step == 0 ? std::vector<v1::DeferredCall>() : loop_tail),
                        &carried));
    EXPECT_EQ(carried.loss(), separate.loss()) << "step " << step;
    ASSERT_EQ(carried.deferred_optimizer_steps_size(), step == 0 ? 0 : 1);
    if (step > 0) {
      EXPECT_EQ(carried.deferred_optimizer_steps(0).optimizer_step(), step);
      EXPECT_FALSE(carried.deferred_optimizer_steps(0).skipped());
    }
  }
  OptimizerSchedulerReset(stub, deferred);  // the last step's calls, made when the loop ends
  const Observed separate = Observe(stub, one_by_one), carried = Observe(stub, deferred);
  EXPECT_EQ(separate.step, 4);
  EXPECT_TRUE(carried == separate);
  EXPECT_NE(separate.learning_rate, 0.01f);  // the schedule moved it
}

TEST(DeferredCallsTest, ARefusedStepAppliesNoneOfItsDeferredCalls) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, ArtifactsRequest("mlp", AdamW()), &artifacts));
  v1::Session session;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &session));
  const std::string id = session.session_id();
  const NamedTensors batch = GoldenBatch("mlp");
  v1::TrainStepResponse response;
  ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, AccumulateRequest(id, batch), &response));
  const Observed before = Observe(stub, id);  // gradients accumulated, no optimizer step yet

  const std::vector<v1::DeferredCall> step_and_reset = {v1::DEFERRED_OPTIMIZER_STEP, v1::DEFERRED_LAZY_RESET_GRAD};
  struct Case {
    std::string what;
    std::function<void(v1::TrainStepRequest&)> mutate;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown input", [](auto& r) { r.mutable_inputs(0)->set_name("pixels"); }, grpc::INVALID_ARGUMENT,
       "unknown input 'pixels'"},
      {"class id out of range",
       [](auto& r) {
         for (v1::Tensor& tensor : *r.mutable_inputs()) {
           if (tensor.dtype() != v1::INT64) continue;
           const int64_t bad = 4;  // the golden mlp has 4 classes
           std::memcpy(tensor.mutable_data()->data(), &bad, sizeof(bad));
         }
       },
       grpc::INVALID_ARGUMENT, "outside [0, 4)"},
      {"a scheduler step without a scheduler", [](auto& r) { r.add_before_step(v1::DEFERRED_SCHEDULER_STEP); },
       grpc::FAILED_PRECONDITION, "has no scheduler"},
      {"an unknown deferred call", [](auto& r) { r.add_before_step(static_cast<v1::DeferredCall>(42)); },
       grpc::INVALID_ARGUMENT, "before_step[2] is 42"},
      {"the unspecified deferred call", [](auto& r) { r.add_before_step(v1::DEFERRED_CALL_UNSPECIFIED); },
       grpc::INVALID_ARGUMENT, "before_step[2] is 0"},
      {"too many deferred calls",
       [](auto& r) {
         for (int i = 0; i < 15; ++i) r.add_before_step(v1::DEFERRED_LAZY_RESET_GRAD);
       },
       grpc::INVALID_ARGUMENT, "at most 16"},
      {"with examples_per_step", [](auto& r) { r.set_examples_per_step(2); }, grpc::INVALID_ARGUMENT,
       "before_step cannot be combined with examples_per_step"},
      {"unknown session", [](auto& r) { r.set_session_id("no-such-session"); }, grpc::NOT_FOUND, "no-such-session"},
  };
  for (const Case& bad : cases) {
    v1::TrainStepRequest request = AccumulateRequest(id, batch, step_and_reset);
    bad.mutate(request);
    v1::TrainStepResponse refused;
    const grpc::Status status = Call(stub, &Stub::TrainStep, request, &refused);
    EXPECT_EQ(status.error_code(), bad.code) << bad.what << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(bad.message)) << bad.what;
    EXPECT_TRUE(Observe(stub, id) == before) << bad.what << " changed the session";
  }
  // And the good request, once: the optimizer step, then the reset, then a step whose gradients replace the old.
  ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, AccumulateRequest(id, batch, step_and_reset), &response));
  ASSERT_EQ(response.deferred_optimizer_steps_size(), 1);
  EXPECT_EQ(response.deferred_optimizer_steps(0).optimizer_step(), 1);
  const Observed after = Observe(stub, id);
  EXPECT_EQ(after.step, 1);
  EXPECT_NE(after.parameters, before.parameters);
}

// ---- Checkpoints ----

TEST(CheckpointTest, SaveCloseCreateFromTheCheckpointAndContinueEqualsUninterruptedTraining) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, ArtifactsRequest("cnn_bn_maxpool", AdamW()), &artifacts));
  const NamedTensors batch = GoldenBatch("cnn_bn_maxpool");
  v1::CreateSessionRequest create = SessionRequest(artifacts.artifact_id());
  create.mutable_scheduler()->mutable_cosine()->set_warmup_steps(1);
  create.mutable_scheduler()->mutable_cosine()->set_total_steps(8);
  v1::Session first;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, create, &first));
  EXPECT_EQ(first.scheduler(), "cosine_with_warmup");
  for (int step = 0; step < 3; ++step) RemoteStep(stub, first.session_id(), Scaled(batch, 1.0f + 0.1f * step));
  v1::SaveCheckpointRequest save;
  save.set_session_id(first.session_id());
  save.set_name("after-3_steps.v1");
  save.set_include_optimizer_state(true);
  save.set_return_bytes(true);
  v1::SaveCheckpointResponse saved;
  ASSERT_GRPC_OK(Call(stub, &Stub::SaveCheckpoint, save, &saved));
  EXPECT_EQ(saved.sha256_hex(), engine::Sha256Hex(saved.content()));
  EXPECT_TRUE(std::filesystem::exists(daemon->state_dir + "/checkpoints/after-3_steps.v1"));
  std::vector<float> losses;
  for (int step = 3; step < 6; ++step) {
    losses.push_back(RemoteStep(stub, first.session_id(), Scaled(batch, 1.0f + 0.1f * step)));
  }
  const Observed uninterrupted = Observe(stub, first.session_id());
  v1::CloseSessionRequest close;
  close.set_session_id(first.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_GRPC_OK(Call(stub, &Stub::CloseSession, close, &closed));
  v1::GetSessionRequest get;
  get.set_session_id(first.session_id());
  v1::Session gone;
  v1::ErrorDetail detail;
  EXPECT_EQ(Call(stub, &Stub::GetSession, get, &gone, &detail).error_code(), grpc::NOT_FOUND);
  EXPECT_EQ(detail.reason(), "SESSION_NOT_FOUND");

  // A new session from the stored checkpoint, and one from the checkpoint's bytes uploaded as a blob.
  v1::CreateSessionRequest resume = SessionRequest(artifacts.artifact_id());
  resume.set_checkpoint_name("after-3_steps.v1");
  v1::Session resumed;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, resume, &resumed));
  EXPECT_EQ(resumed.optimizer_step(), 3);
  EXPECT_EQ(resumed.scheduler(), "cosine_with_warmup");
  for (int step = 3; step < 6; ++step) {
    EXPECT_EQ(RemoteStep(stub, resumed.session_id(), Scaled(batch, 1.0f + 0.1f * step)), losses[step - 3]);
  }
  EXPECT_TRUE(Observe(stub, resumed.session_id()) == uninterrupted);

  // ONNX Runtime's pattern: load the checkpoint into a live session that has trained on.
  v1::Session live;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &live));
  RemoteStep(stub, live.session_id(), batch);
  v1::LoadCheckpointRequest load;
  load.set_session_id(live.session_id());
  load.set_content(saved.content());
  v1::LoadCheckpointResponse loaded;
  ASSERT_GRPC_OK(Call(stub, &Stub::LoadCheckpoint, load, &loaded));
  EXPECT_EQ(loaded.session().optimizer_step(), 3);
  EXPECT_EQ(loaded.session().state(), v1::READY) << "the answer describes the session after the load, idle";
  for (int step = 3; step < 6; ++step) RemoteStep(stub, live.session_id(), Scaled(batch, 1.0f + 0.1f * step));
  EXPECT_TRUE(Observe(stub, live.session_id()) == uninterrupted);
}

// ---- Uploaded artifacts, the ORT-style three phases, schedulers ----

TEST(UploadedArtifactsTest, ASessionFromUploadedFilesTrainsLikeOneFromTheArtifactId) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, ArtifactsRequest("mlp", SgdNesterov()), &artifacts));
  v1::CreateSessionRequest create;
  create.set_num_threads(kThreads);
  std::map<std::string, std::string> blobs;
  for (const v1::ArtifactFile& file : artifacts.files()) {
    blobs[file.kind()] = testing::Upload(stub, file.content());
    v1::GetBlobInfoRequest info_request;
    info_request.set_blob_id(blobs[file.kind()]);
    v1::UploadBlobResponse info;
    ASSERT_GRPC_OK(Call(stub, &Stub::GetBlobInfo, info_request, &info));
    EXPECT_EQ(info.total_bytes(), file.size_bytes());
    EXPECT_EQ(info.sha256_hex(), file.sha256_hex());
  }
  create.mutable_uploaded()->set_training_model_blob_id(blobs["training_model"]);
  create.mutable_uploaded()->set_eval_model_blob_id(blobs["eval_model"]);
  create.mutable_uploaded()->set_optimizer_model_blob_id(blobs["optimizer_model"]);
  create.mutable_uploaded()->set_checkpoint_blob_id(blobs["checkpoint"]);
  v1::Session uploaded, by_id;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, create, &uploaded));
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &by_id));
  EXPECT_EQ(uploaded.learning_rate(), 5e-2f);  // the optimizer model records the artifacts' learning rate
  const NamedTensors batch = GoldenBatch("mlp");
  for (int step = 0; step < 3; ++step) {
    // ONNX Runtime's loop on one, one call per step on the other.
    v1::TrainStepRequest accumulate;
    accumulate.set_session_id(uploaded.session_id());
    accumulate.set_accumulate_only(true);
    AddInputs(batch, accumulate.mutable_inputs());
    v1::TrainStepResponse response;
    ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, accumulate, &response));
    v1::OptimizerStepRequest step_request;
    step_request.set_session_id(uploaded.session_id());
    v1::OptimizerStepResponse stepped;
    ASSERT_GRPC_OK(Call(stub, &Stub::OptimizerStep, step_request, &stepped));
    v1::LazyResetGradRequest reset;
    reset.set_session_id(uploaded.session_id());
    v1::LazyResetGradResponse reset_response;
    ASSERT_GRPC_OK(Call(stub, &Stub::LazyResetGrad, reset, &reset_response));
    EXPECT_EQ(response.loss(), RemoteStep(stub, by_id.session_id(), batch));
  }
  EXPECT_EQ(Observe(stub, uploaded.session_id()).parameters, Observe(stub, by_id.session_id()).parameters);

  // A manual scheduler (ONNX Runtime's LinearLRScheduler): the learning rate moves only on SchedulerStep.
  v1::SetSchedulerRequest schedule;
  schedule.set_session_id(uploaded.session_id());
  schedule.mutable_scheduler()->mutable_linear_warmup_decay()->set_warmup_steps(2);
  schedule.mutable_scheduler()->mutable_linear_warmup_decay()->set_total_steps(10);
  schedule.set_initial_learning_rate(0.1f);
  schedule.set_manual_step(true);
  v1::SetSchedulerResponse scheduled;
  ASSERT_GRPC_OK(Call(stub, &Stub::SetScheduler, schedule, &scheduled));
  // Applied at once at the current step, 3 (as ONNX Runtime's LinearLRScheduler constructor does).
  EXPECT_FLOAT_EQ(scheduled.learning_rate().learning_rate(), 0.1f * 7.0f / 8.0f);  // (10 - 3) / (10 - 2)
  RemoteStep(stub, uploaded.session_id(), batch);
  v1::LearningRate rate;
  v1::GetLearningRateRequest get_rate;
  get_rate.set_session_id(uploaded.session_id());
  ASSERT_GRPC_OK(Call(stub, &Stub::GetLearningRate, get_rate, &rate));
  EXPECT_EQ(rate.optimizer_step(), 4);
  EXPECT_FLOAT_EQ(rate.learning_rate(), 0.1f * 7.0f / 8.0f);  // unchanged by the optimizer step
  v1::SchedulerStepRequest scheduler_step;
  scheduler_step.set_session_id(uploaded.session_id());
  ASSERT_GRPC_OK(Call(stub, &Stub::SchedulerStep, scheduler_step, &rate));
  EXPECT_EQ(rate.optimizer_step(), 4);
  EXPECT_FLOAT_EQ(rate.learning_rate(), 0.1f * 6.0f / 8.0f);
  v1::SetLearningRateRequest set_rate;
  set_rate.set_session_id(uploaded.session_id());
  set_rate.set_learning_rate(0.25f);
  ASSERT_GRPC_OK(Call(stub, &Stub::SetLearningRate, set_rate, &rate));
  EXPECT_EQ(rate.learning_rate(), 0.25f);

  // Properties travel with the session and its checkpoints.
  v1::UpdatePropertiesRequest properties;
  properties.set_session_id(uploaded.session_id());
  (*properties.mutable_set())["epoch"].set_int_value(3);
  (*properties.mutable_set())["note"].set_string_value("fine-tuned");
  v1::UpdatePropertiesResponse updated;
  ASSERT_GRPC_OK(Call(stub, &Stub::UpdateProperties, properties, &updated));
  EXPECT_EQ(updated.properties().at("epoch").int_value(), 3);
  v1::SaveCheckpointRequest save;
  save.set_session_id(uploaded.session_id());
  save.set_return_bytes(true);
  v1::SaveCheckpointResponse saved;
  ASSERT_GRPC_OK(Call(stub, &Stub::SaveCheckpoint, save, &saved));
  auto state = engine::ParseCheckpoint(saved.content());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(std::get<std::string>(state->properties.at("note")), "fine-tuned");
  EXPECT_FALSE(state->optimizer.has_value());  // include_optimizer_state was not asked for
}

// ---- Export ----

TEST(ExportTest, TheExportedModelGivesEvalsOutputsInTheEngineAndInOnnxRuntime) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, ArtifactsRequest("cnn_bn_maxpool", SgdNesterov()), &artifacts));
  v1::Session session;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id()), &session));
  const NamedTensors batch = GoldenBatch("cnn_bn_maxpool");
  for (int step = 0; step < 2; ++step) RemoteStep(stub, session.session_id(), batch);
  v1::EvalRequest eval_request;
  eval_request.set_session_id(session.session_id());
  eval_request.add_fetch_outputs("logits");
  AddInputs(batch, eval_request.mutable_inputs());
  v1::EvalResponse eval;
  ASSERT_GRPC_OK(Call(stub, &Stub::Eval, eval_request, &eval));
  const Tensor logits = FromWire(eval.outputs(0));

  v1::ExportForInferenceRequest export_request;
  export_request.set_session_id(session.session_id());
  v1::ExportForInferenceResponse exported;
  ASSERT_GRPC_OK(Call(stub, &Stub::ExportForInference, export_request, &exported));
  EXPECT_EQ(exported.sha256_hex(), engine::Sha256Hex(exported.onnx_model()));
  auto model = engine::LoadModelFromBytes(exported.onnx_model());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->graph().output_size(), 1);
  EXPECT_EQ(model->graph().output(0).name(), "logits");
  auto inference = engine::Session::Create(*model);
  ASSERT_TRUE(inference.ok()) << inference.status();
  auto outputs = (*inference)->Run(NamedTensors{batch[0]});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  // Parameters are initializers now, so constant folding may round differently than the eval model's run.
  const Tensor& engine_logits = (*outputs)[0].second;
  ASSERT_EQ(engine_logits.shape(), logits.shape());
  for (int64_t i = 0; i < logits.num_elements(); ++i) {
    EXPECT_NEAR(engine_logits.data<float>()[i], logits.data<float>()[i], 1e-5) << i;
  }

  // onnxruntime-node, the independent peer (bench/setup_peers.sh installs it), within atol 1e-5.
  const std::string script = testing::RunfilePath("engine/training/testdata/run_with_onnxruntime.js");
  std::error_code error;
  const std::filesystem::path source = std::filesystem::canonical(script, error);
  std::string ort_dir = std::getenv("ORT_NODE_DIR") ? std::getenv("ORT_NODE_DIR") : "";
  if (ort_dir.empty() && !error) ort_dir = (source.parent_path() / "../../../bench/.peers/ort").string();
  if (ort_dir.empty() || !std::filesystem::exists(ort_dir + "/node_modules/onnxruntime-node/package.json") ||
      std::system("node --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "onnxruntime-node not found (`bash bench/setup_peers.sh` installs it, or set ORT_NODE_DIR): "
                    "skipping the cross-check of the exported model in onnxruntime";
  }
  const std::string dir = testing::MakeTempDir("ort");
  ASSERT_TRUE(engine::WriteFileAtomically(dir + "/model.onnx", exported.onnx_model()).ok());
  ASSERT_TRUE(engine::WriteFileAtomically(dir + "/input.f32", engine::TensorToBytes(batch[0].second)).ok());
  std::string dims;
  for (int64_t dim : batch[0].second.shape()) absl::StrAppend(&dims, dims.empty() ? "" : ",", dim);
  const std::string command = absl::StrCat("node '", script, "' '", ort_dir, "' '", dir, "/model.onnx' ",
                                           batch[0].first, " '", dir, "/input.f32' ", dims, " logits '", dir,
                                           "/logits.f32' > '", dir, "/ort.log' 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << testing::ReadWholeFile(dir + "/ort.log");
  const std::string ort_logits = testing::ReadWholeFile(dir + "/logits.f32");
  ASSERT_EQ(ort_logits.size(), logits.byte_size());
  for (int64_t i = 0; i < logits.num_elements(); ++i) {
    float value;
    std::memcpy(&value, ort_logits.data() + i * sizeof(float), sizeof(float));
    EXPECT_NEAR(value, logits.data<float>()[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace traind
