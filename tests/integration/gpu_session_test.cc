// GPU sessions through the real daemon: GetServerInfo lists the OpenCL devices, CreateSession(executor=GPU) trains
// as a CPU session over the same artifacts and batches (losses, eval, parameters read back), the session comes back
// on the GPU after a restart, a restarted daemon compiles no kernel again, Forward / Backward artifacts run on the
// GPU, the session memory budget holds for GPU sessions, trainctl --device gpu creates one, training jobs run on GPU
// sessions, and a daemon without any OpenCL platform answers FAILED_PRECONDITION instead of falling back to the CPU.
// Runs on pocl (OpenCL on the CPU) in CI; skipped where this machine has no OpenCL device at all.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor_bytes.h"
#include "engine/gpu/gpu_testing.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/trainctl_testing.h"
#include "tests/testing/process.h"
#include "tests/testing/service.h"

namespace traind {
namespace {

namespace v1 = traind::v1;
using NamedTensors = std::vector<std::pair<std::string, engine::Tensor>>;
using testing::Call;
using testing::Stub;
using ::testing::HasSubstr;

NamedTensors GoldenBatch(const std::string& name) {
  NamedTensors batch;
  for (const char* folder : {"inputs", "targets"}) {
    const std::string dir = testing::RunfilePath("tests/golden/data/" + name + "/" + folder);
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      auto tensor = engine::ReadNpy(entry.path().string());
      EXPECT_TRUE(tensor.ok()) << tensor.status();
      batch.emplace_back(entry.path().stem().string(), *tensor);
    }
  }
  return batch;
}

v1::TrainStepRequest StepRequest(const std::string& session, const NamedTensors& batch) {
  v1::TrainStepRequest request;
  request.set_session_id(session);
  for (const auto& [name, tensor] : batch) {
    v1::Tensor* wire = request.add_inputs();
    wire->set_name(name);
    wire->set_dtype(tensor.dtype() == engine::DataType::kInt64 ? v1::INT64 : v1::FLOAT32);
    for (int64_t dim : tensor.shape()) wire->add_shape(dim);
    wire->set_data(engine::TensorToBytes(tensor));
  }
  return request;
}

std::string GenerateArtifacts(Stub& stub, const std::string& golden = "cnn_bn_maxpool") {
  v1::GenerateArtifactsRequest request;
  request.mutable_model()->set_onnx_bytes(testing::ReadRunfile("tests/golden/data/" + golden + "/model.onnx"));
  v1::BuiltinLoss* loss = request.mutable_loss()->mutable_builtin();
  loss->set_type(v1::CROSS_ENTROPY);
  loss->set_output_name("logits");
  request.mutable_optimizer()->mutable_adamw()->set_lr(1e-2f);
  v1::GenerateArtifactsResponse response;
  EXPECT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, request, &response));
  return response.artifact_id();
}

v1::CreateSessionRequest SessionRequest(const std::string& artifact_id, bool gpu) {
  v1::CreateSessionRequest request;
  request.set_artifact_id(artifact_id);
  request.set_seed(5);
  request.set_num_threads(1);
  if (gpu) request.set_executor(v1::GPU);
  return request;
}

std::vector<float> Parameters(Stub& stub, const std::string& session) {
  v1::GetParametersRequest request;
  request.set_session_id(session);
  v1::GetParametersResponse response;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetParameters, request, &response));
  const std::string& bytes = response.buffer().data();
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// Equal within 1e-4 of the largest CPU element.
void ExpectSameFloats(const std::vector<float>& on_gpu, const std::vector<float>& on_cpu, const std::string& what) {
  ASSERT_EQ(on_gpu.size(), on_cpu.size()) << what;
  float largest = 0;
  for (float value : on_cpu) largest = std::max(largest, std::fabs(value));
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_NEAR(on_gpu[i], on_cpu[i], 1e-4 * largest) << what << " " << i;
}

TEST(GpuSessionTest, ServerInfoListsTheDevicesAndAGpuSessionTrainsAsACpuSession) {
  TRAIND_REQUIRE_GPU();
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::ServerInfo info;
  ASSERT_GRPC_OK(Call(stub, &Stub::GetServerInfo, v1::GetServerInfoRequest(), &info));
  EXPECT_THAT(info.executors(), ::testing::Contains("gpu"));
  ASSERT_GT(info.gpu_devices_size(), 0);
  EXPECT_EQ(info.gpu_devices(0).index(), 0);
  EXPECT_FALSE(info.gpu_devices(0).name().empty());
  EXPECT_GT(info.gpu_devices(0).global_memory_bytes(), 0);

  const std::string artifact = GenerateArtifacts(stub);
  v1::Session cpu, gpu;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifact, false), &cpu));
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifact, true), &gpu));
  EXPECT_EQ(gpu.executor(), v1::GPU);
  EXPECT_EQ(gpu.device_index(), 0);
  EXPECT_EQ(cpu.executor(), v1::CPU);

  const NamedTensors batch = GoldenBatch("cnn_bn_maxpool");
  for (int step = 0; step < 3; ++step) {
    v1::TrainStepResponse on_cpu, on_gpu;
    ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, StepRequest(cpu.session_id(), batch), &on_cpu));
    ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, StepRequest(gpu.session_id(), batch), &on_gpu));
    EXPECT_NEAR(on_gpu.loss(), on_cpu.loss(), 1e-4 * std::fabs(on_cpu.loss())) << "step " << step;
  }
  v1::EvalRequest eval_cpu, eval_gpu;
  *eval_cpu.mutable_inputs() = StepRequest(cpu.session_id(), batch).inputs();
  eval_cpu.set_session_id(cpu.session_id());
  *eval_gpu.mutable_inputs() = eval_cpu.inputs();
  eval_gpu.set_session_id(gpu.session_id());
  v1::EvalResponse evaluated_cpu, evaluated_gpu;
  ASSERT_GRPC_OK(Call(stub, &Stub::Eval, eval_cpu, &evaluated_cpu));
  ASSERT_GRPC_OK(Call(stub, &Stub::Eval, eval_gpu, &evaluated_gpu));
  EXPECT_NEAR(evaluated_gpu.loss(), evaluated_cpu.loss(), 1e-4 * std::fabs(evaluated_cpu.loss()));
  // The parameters, read back from the device, are the CPU session's.
  ExpectSameFloats(Parameters(stub, gpu.session_id()), Parameters(stub, cpu.session_id()), "parameters");

  v1::CreateSessionRequest bad_index = SessionRequest(artifact, true);
  bad_index.set_device_index(info.gpu_devices_size());
  v1::Session refused;
  const grpc::Status status = Call(stub, &Stub::CreateSession, bad_index, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("device_index"));
}

TEST(GpuSessionTest, AGpuSessionComesBackOnTheGpuAfterARestart) {
  TRAIND_REQUIRE_GPU();
  const std::string state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/restart";
  std::string session_id;
  {
    auto daemon = testing::StartService({}, state_dir);
    ASSERT_NE(daemon, nullptr);
    v1::Session session;
    ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::CreateSession, SessionRequest(GenerateArtifacts(*daemon->stub), true),
                        &session));
    session_id = session.session_id();
    v1::TrainStepResponse step;
    ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::TrainStep, StepRequest(session_id, GoldenBatch("cnn_bn_maxpool")), &step));
  }
  auto daemon = testing::StartService({}, state_dir);
  ASSERT_NE(daemon, nullptr);
  v1::GetSessionRequest get;
  get.set_session_id(session_id);
  v1::Session session;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::GetSession, get, &session));
  EXPECT_EQ(session.executor(), v1::GPU);
  // The compiled kernels came from the state directory's program cache.
  EXPECT_TRUE(std::filesystem::exists(state_dir + "/opencl-cache"));
  v1::TrainStepResponse step;
  EXPECT_GRPC_OK(Call(*daemon->stub, &Stub::TrainStep, StepRequest(session_id, GoldenBatch("cnn_bn_maxpool")), &step));
}

TEST(GpuSessionTest, TrainctlCreatesAGpuSession) {
  TRAIND_REQUIRE_GPU();
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  const std::string artifact = GenerateArtifacts(*daemon->stub);
  const std::string address = "--address=" + daemon->process->grpc_address();
  testing::CommandResult info = testing::Trainctl({"info", address});
  ASSERT_EQ(info.exit_code, 0) << info.stderr_text;
  EXPECT_THAT(info.stdout_text, HasSubstr("gpu:0"));
  testing::CommandResult created =
      testing::Trainctl({"session", "create", address, "--artifact", artifact, "--device", "gpu", "--json"});
  ASSERT_EQ(created.exit_code, 0) << created.stderr_text;
  v1::Session session;
  ASSERT_TRUE(testing::ParseJson(created.stdout_text, &session));
  EXPECT_EQ(session.executor(), v1::GPU);
}

v1::GpuDevice FirstDevice(Stub& stub) {
  v1::ServerInfo info;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetServerInfo, v1::GetServerInfoRequest(), &info));
  EXPECT_GT(info.gpu_devices_size(), 0);
  return info.gpu_devices_size() > 0 ? info.gpu_devices(0) : v1::GpuDevice();
}

// The program cache across a restart: the first daemon compiles its kernels into an empty cache directory, the
// second (same directory, same session work) compiles none and loads every program from the cache.
TEST(GpuSessionTest, ARestartedDaemonCompilesNoKernelAgain) {
  TRAIND_REQUIRE_GPU();
  const std::string cache = std::string(std::getenv("TEST_TMPDIR")) + "/program-cache";
  std::filesystem::remove_all(cache);
  int64_t compiled_first = 0;
  for (int start = 0; start < 2; ++start) {
    SCOPED_TRACE(start == 0 ? "first start" : "second start");
    auto daemon = testing::StartService({"--gpu_program_cache_dir=" + cache});
    ASSERT_NE(daemon, nullptr);
    Stub& stub = *daemon->stub;
    const v1::GpuDevice unused = FirstDevice(stub);
    EXPECT_EQ(unused.programs_compiled() + unused.programs_loaded_from_cache(), 0) << "before any GPU session";
    v1::Session session;
    ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(GenerateArtifacts(stub), true), &session));
    v1::TrainStepResponse step;
    ASSERT_GRPC_OK(Call(stub, &Stub::TrainStep, StepRequest(session.session_id(), GoldenBatch("cnn_bn_maxpool")), &step));
    const v1::GpuDevice used = FirstDevice(stub);
    if (start == 0) {
      EXPECT_GT(used.programs_compiled(), 0);
      EXPECT_EQ(used.programs_loaded_from_cache(), 0);
      compiled_first = used.programs_compiled();
    } else {
      EXPECT_EQ(used.programs_compiled(), 0);
      EXPECT_EQ(used.programs_loaded_from_cache(), compiled_first);
    }
  }
}

// Artifacts without a loss (Forward / Backward, then OptimizerStep) on a GPU session: outputs, input and parameter
// gradients, and the parameters after the step are the CPU session's.
TEST(GpuSessionTest, ForwardAndBackwardOnTheGpuMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(testing::ReadRunfile("tests/golden/data/two_head_weighted_mse/model.onnx"));
  generate.mutable_loss()->mutable_no_loss();
  generate.mutable_optimizer()->mutable_sgd()->set_lr(0.1f);
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, generate, &artifacts));
  v1::Session cpu, gpu;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id(), false), &cpu));
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(artifacts.artifact_id(), true), &gpu));
  EXPECT_EQ(gpu.executor(), v1::GPU);
  EXPECT_FALSE(gpu.has_loss());

  auto floats = [](const v1::Tensor& tensor) {
    std::vector<float> values(tensor.data().size() / sizeof(float));
    std::memcpy(values.data(), tensor.data().data(), values.size() * sizeof(float));
    return values;
  };
  auto expect_same = [&](const v1::Tensor& on_gpu, const v1::Tensor& on_cpu) {
    EXPECT_EQ(on_gpu.name(), on_cpu.name());
    ExpectSameFloats(floats(on_gpu), floats(on_cpu), on_cpu.name());
  };
  const NamedTensors batch = GoldenBatch("two_head_weighted_mse");
  v1::ForwardResponse forward[2];
  v1::BackwardResponse backward[2];
  for (int device = 0; device < 2; ++device) {
    const std::string& session = device == 0 ? cpu.session_id() : gpu.session_id();
    v1::ForwardRequest request;
    request.set_session_id(session);
    request.set_training(true);
    *request.add_inputs() = StepRequest(session, batch).inputs(0);  // "input"; the targets are not the model's
    ASSERT_EQ(request.inputs(0).name(), "input");
    ASSERT_GRPC_OK(Call(stub, &Stub::Forward, request, &forward[device]));
    v1::BackwardRequest back;
    back.set_session_id(session);
    back.set_handle(forward[device].handle());
    for (const v1::Tensor& output : forward[device].outputs()) {
      v1::Tensor* gradient = back.add_output_gradients();
      *gradient = output;  // d(sum of squares / 2) = the output itself
    }
    back.add_input_gradients("input");
    back.set_return_parameter_gradients(true);
    ASSERT_GRPC_OK(Call(stub, &Stub::Backward, back, &backward[device]));
    v1::OptimizerStepRequest step;
    step.set_session_id(session);
    v1::OptimizerStepResponse stepped;
    ASSERT_GRPC_OK(Call(stub, &Stub::OptimizerStep, step, &stepped));
    EXPECT_FALSE(stepped.skipped());
    EXPECT_EQ(stepped.optimizer_step(), 1);
  }
  ASSERT_EQ(forward[1].outputs_size(), forward[0].outputs_size());
  for (int o = 0; o < forward[0].outputs_size(); ++o) expect_same(forward[1].outputs(o), forward[0].outputs(o));
  ASSERT_EQ(backward[1].input_gradients_size(), 1);
  expect_same(backward[1].input_gradients(0), backward[0].input_gradients(0));
  ASSERT_EQ(backward[1].parameter_gradients_size(), backward[0].parameter_gradients_size());
  ASSERT_GT(backward[0].parameter_gradients_size(), 0);
  for (int p = 0; p < backward[0].parameter_gradients_size(); ++p) {
    expect_same(backward[1].parameter_gradients(p), backward[0].parameter_gradients(p));
  }
  ExpectSameFloats(Parameters(stub, gpu.session_id()), Parameters(stub, cpu.session_id()), "parameters");
}

// Under --session_memory_budget a GPU session is held to the budget as a CPU session is: a model whose parameters
// alone exceed it is RESOURCE_EXHAUSTED naming the budget, for the GPU as for the CPU; so is a step beyond it. (The
// artifacts come from a daemon without the budget, over the same state directory: GenerateArtifacts is budgeted
// too.)
TEST(GpuSessionTest, AGpuSessionOverTheMemoryBudgetIsResourceExhausted) {
  TRAIND_REQUIRE_GPU();
  const std::string state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/budget";
  std::string small, large;
  {
    auto daemon = testing::StartService({}, state_dir);
    ASSERT_NE(daemon, nullptr);
    small = GenerateArtifacts(*daemon->stub);
    large = GenerateArtifacts(*daemon->stub, "transformer_encoder");
  }
  // 2 KiB: above cnn_bn_maxpool's 604 bytes of parameters, below transformer_encoder's 3,148.
  auto daemon = testing::StartService({"--session_memory_budget=2048"}, state_dir);
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  for (bool gpu : {false, true}) {
    SCOPED_TRACE(gpu ? "GPU" : "CPU");
    v1::Session session;
    const grpc::Status status = Call(stub, &Stub::CreateSession, SessionRequest(large, gpu), &session);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("session memory budget"));
  }
  // A model within it opens on the GPU; its step then needs more than the budget has left (the host values of the
  // nodes placed on the CPU count, as on a CPU session): RESOURCE_EXHAUSTED for that call, the session stays.
  v1::Session session;
  ASSERT_GRPC_OK(Call(stub, &Stub::CreateSession, SessionRequest(small, true), &session));
  EXPECT_EQ(session.executor(), v1::GPU);
  v1::TrainStepResponse step;
  const grpc::Status trained =
      Call(stub, &Stub::TrainStep, StepRequest(session.session_id(), GoldenBatch("cnn_bn_maxpool")), &step);
  EXPECT_EQ(trained.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << trained.error_message();
  EXPECT_THAT(trained.error_message(), HasSubstr("session memory budget of 2.0 KiB"));
  v1::GetSessionRequest get;
  get.set_session_id(session.session_id());
  v1::Session still;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetSession, get, &still));
}

// A dataset of cnn_bn_maxpool's shape: 12 examples, 9 to train in batches of the model's 3 and 3 to evaluate.
std::pair<engine::Tensor, engine::Tensor> JobData() {
  engine::Tensor x = *engine::Tensor::Allocate(engine::DataType::kFloat32, {12, 1, 6, 6});
  engine::Tensor y = *engine::Tensor::Allocate(engine::DataType::kInt64, {12});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.mutable_data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  for (int64_t i = 0; i < 12; ++i) y.mutable_data<int64_t>()[i] = (i * 7) % 4;
  return {x, y};
}

// A job of 2 shuffled epochs over JobData (uploaded) on a new session of `artifact_id`.
v1::JobSpec JobOnNewSession(Stub& stub, const std::string& artifact_id, bool gpu) {
  const auto [x, y] = JobData();
  v1::JobSpec spec;
  spec.set_artifact_id(artifact_id);
  auto& blobs = *spec.mutable_train_data()->mutable_npy_blobs()->mutable_blob_ids();
  blobs["input"] = testing::Upload(stub, engine::SerializeNpy(x));
  blobs["target"] = testing::Upload(stub, engine::SerializeNpy(y));
  spec.set_eval_fraction(0.25f);
  spec.set_epochs(2);
  spec.set_batch_size(3);
  spec.set_shuffle_seed(3);
  spec.set_seed(5);
  spec.set_num_threads(1);
  if (gpu) spec.set_executor(v1::GPU);
  return spec;
}

v1::Job RunJob(Stub& stub, const v1::JobSpec& spec) {
  v1::Job job;
  EXPECT_GRPC_OK(Call(stub, &Stub::SubmitJob, spec, &job));
  const std::vector<v1::Job> updates = testing::WatchJob(stub, job.job_id());
  return updates.empty() ? job : updates.back();
}

v1::Session GetSession(Stub& stub, const std::string& session_id) {
  v1::GetSessionRequest get;
  get.set_session_id(session_id);
  v1::Session session;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetSession, get, &session));
  return session;
}

// A job on a new session asks for the GPU as CreateSession does (and trainctl job submit --device gpu); it trains there
// as the same job on a CPU session does (eval losses, parameters). A job on an existing GPU session trains it there;
// asking for another executor than the session's is FAILED_PRECONDITION, not a silent move.
TEST(GpuSessionTest, ATrainingJobRunsOnAGpuSessionAsOnACpuSession) {
  TRAIND_REQUIRE_GPU();
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  Stub& stub = *daemon->stub;
  const std::string artifact = GenerateArtifacts(stub);
  const v1::Job on_cpu = RunJob(stub, JobOnNewSession(stub, artifact, false));
  const v1::Job on_gpu = RunJob(stub, JobOnNewSession(stub, artifact, true));
  for (const v1::Job* job : {&on_cpu, &on_gpu}) {
    ASSERT_EQ(job->state(), v1::SUCCEEDED) << job->message();
    EXPECT_EQ(job->step(), 6);
    ASSERT_EQ(job->evals_size(), 2);
  }
  EXPECT_EQ(GetSession(stub, on_gpu.session_id()).executor(), v1::GPU);
  EXPECT_EQ(GetSession(stub, on_cpu.session_id()).executor(), v1::CPU);
  EXPECT_EQ(on_gpu.spec().executor(), v1::GPU);
  for (int e = 0; e < 2; ++e) {
    EXPECT_NEAR(on_gpu.evals(e).loss(), on_cpu.evals(e).loss(), 1e-4 * std::fabs(on_cpu.evals(e).loss())) << e;
  }
  ExpectSameFloats(Parameters(stub, on_gpu.session_id()), Parameters(stub, on_cpu.session_id()), "parameters");

  // Another job on the GPU session: it trains there, with or without naming its executor.
  v1::JobSpec again = JobOnNewSession(stub, artifact, true);
  again.set_session_id(on_gpu.session_id());
  v1::Job continued = RunJob(stub, again);
  EXPECT_EQ(continued.state(), v1::SUCCEEDED) << continued.message();
  EXPECT_EQ(GetSession(stub, on_gpu.session_id()).optimizer_step(), 12);
  again.set_executor(v1::CPU);
  v1::Job refused;
  grpc::Status status = Call(stub, &Stub::SubmitJob, again, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("runs on gpu:0, not cpu"));
  v1::JobSpec bad_index = JobOnNewSession(stub, artifact, true);
  bad_index.set_device_index(99);
  status = Call(stub, &Stub::SubmitJob, bad_index, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();

  // trainctl job submit --device gpu.
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/job-data";
  std::filesystem::create_directories(dir);
  const auto [x, y] = JobData();
  ASSERT_TRUE(engine::WriteNpy(dir + "/input.npy", x).ok());
  ASSERT_TRUE(engine::WriteNpy(dir + "/target.npy", y).ok());
  const std::string address = "--address=" + daemon->process->grpc_address();
  testing::CommandResult submitted = testing::Trainctl(
      {"job", "submit", address, "--artifact", artifact, "--data-input", "input=" + dir + "/input.npy",
       "--data-input", "target=" + dir + "/target.npy", "--batch-size", "3", "--device", "gpu", "--watch", "--json"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.stderr_text;
  v1::Job job;
  ASSERT_TRUE(testing::ParseJson(submitted.stdout_text, &job)) << submitted.stdout_text;
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  EXPECT_EQ(job.spec().executor(), v1::GPU);
  EXPECT_EQ(GetSession(stub, job.session_id()).executor(), v1::GPU);
  testing::CommandResult misused = testing::Trainctl(
      {"job", "submit", address, "--session", job.session_id(), "--data-input", "input=" + dir + "/input.npy",
       "--data-input", "target=" + dir + "/target.npy", "--batch-size", "3", "--device", "gpu"});
  EXPECT_NE(misused.exit_code, 0);
  EXPECT_THAT(misused.stderr_text, HasSubstr("--device apply to a job on a new session"));
}

// With no OpenCL platform at all (an empty ICD directory), the daemon offers only the CPU and a GPU session is
// FAILED_PRECONDITION with the reason, never a CPU session in disguise.
TEST(GpuSessionTest, WithoutOpenClAGpuSessionIsAFailedPrecondition) {
  const std::string empty = std::string(std::getenv("TEST_TMPDIR")) + "/no-icd";
  std::filesystem::create_directories(empty);
  setenv("OCL_ICD_VENDORS", empty.c_str(), 1);  // inherited by the daemon
  auto daemon = testing::StartService();
  unsetenv("OCL_ICD_VENDORS");
  ASSERT_NE(daemon, nullptr);
  v1::ServerInfo info;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::GetServerInfo, v1::GetServerInfoRequest(), &info));
  EXPECT_THAT(info.executors(), ::testing::ElementsAre("cpu"));
  EXPECT_EQ(info.gpu_devices_size(), 0);
  v1::ErrorDetail detail;
  v1::Session session;
  const grpc::Status status = Call(*daemon->stub, &Stub::CreateSession,
                                   SessionRequest(GenerateArtifacts(*daemon->stub), true), &session, &detail);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("OpenCL"));
  EXPECT_EQ(detail.reason(), "NO_GPU");
  // A training job on a new GPU session: the same answer, before anything is made.
  v1::ErrorDetail job_detail;
  v1::Job job;
  const grpc::Status job_status =
      Call(*daemon->stub, &Stub::SubmitJob, JobOnNewSession(*daemon->stub, GenerateArtifacts(*daemon->stub), true),
           &job, &job_detail);
  EXPECT_EQ(job_status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(job_detail.reason(), "NO_GPU");
  v1::ListSessionsResponse sessions;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::ListSessions, v1::ListSessionsRequest(), &sessions));
  EXPECT_EQ(sessions.sessions_size(), 0);
}

}  // namespace
}  // namespace traind
