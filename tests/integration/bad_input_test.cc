// Every byte a client sends is hostile until checked: each bad request of the training service gets its precise
// status (and a message naming the culprit), and the session it aimed at is exactly as it was — parameters,
// gradients, optimizer step and learning rate. Runs the real daemon over a real socket.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/connection.h"
#include "engine/core/tensor_bytes.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/process.h"
#include "tests/testing/service.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using Stub = v1::TrainingService::Stub;
using testing::Call;

constexpr int64_t kMessageLimit = 1 << 20;

v1::Tensor WireTensor(const std::string& name, v1::DataType dtype, std::vector<int64_t> shape, std::string data) {
  v1::Tensor tensor;
  tensor.set_name(name);
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_data(std::move(data));
  return tensor;
}

v1::Tensor FromNpy(const std::string& name, const std::string& path) {
  auto tensor = engine::ReadNpy(path);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return WireTensor(name, tensor->dtype() == engine::DataType::kInt64 ? v1::INT64 : v1::FLOAT32, tensor->shape(),
                    engine::TensorToBytes(*tensor));
}

// x * w1 -> Sin -> * w2 + b: Sin has no gradient rule, so w1 cannot be trained (w2 and b can).
std::string SinModelBytes() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("sin");
  auto declare = [](onnx::ValueInfoProto* value, const std::string& name) {
    value->set_name(name);
    auto* type = value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(4);
  };
  declare(graph->add_input(), "x");
  declare(graph->add_output(), "y");
  for (const char* name : {"w1", "w2", "b"}) {
    onnx::TensorProto* initializer = graph->add_initializer();
    initializer->set_name(name);
    initializer->set_data_type(onnx::TensorProto::FLOAT);
    initializer->add_dims(4);
    for (int i = 0; i < 4; ++i) initializer->add_float_data(0.5f);
  }
  auto node = [graph](const char* op, std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto* added = graph->add_node();
    added->set_op_type(op);
    added->set_name(output);
    for (const auto& input : inputs) added->add_input(input);
    added->add_output(output);
  };
  node("Mul", {"x", "w1"}, "h");
  node("Sin", {"h"}, "s");
  node("Mul", {"s", "w2"}, "t");
  node("Add", {"t", "b"}, "y");
  return model.SerializeAsString();
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = testing::MakeTempDir("state");
    // No OpenCL platform for this daemon (an empty ICD directory, inherited): a GPU session is one of the refusals.
    const std::string no_icd = testing::MakeTempDir("no-icd");
    setenv("OCL_ICD_VENDORS", no_icd.c_str(), 1);
    auto process = testing::DaemonProcess::Start(
        {absl::StrCat("--max_message_bytes=", kMessageLimit), "--max_sessions=3", "--state_dir=" + state_dir_});
    unsetenv("OCL_ICD_VENDORS");
    ASSERT_TRUE(process.ok()) << process.status();
    daemon_ = std::move(*process);
    ConnectionOptions options;
    options.address = daemon_->grpc_address();
    stub_ = v1::TrainingService::NewStub(*Connect(options));

    v1::GenerateArtifactsRequest generate = MlpArtifactsRequest();
    generate.set_return_artifact_bytes(true);
    ASSERT_TRUE(Call(*stub_, &Stub::GenerateArtifacts, generate, &artifacts_).ok());
    v1::CreateSessionRequest create;
    create.set_artifact_id(artifacts_.artifact_id());
    v1::Session session;
    ASSERT_TRUE(Call(*stub_, &Stub::CreateSession, create, &session).ok());
    session_ = session.session_id();
    // One accumulated step, so that gradients exist and "nothing changed" covers them too.
    v1::TrainStepRequest step = GoodStep();
    step.set_accumulate_only(true);
    v1::TrainStepResponse response;
    ASSERT_TRUE(Call(*stub_, &Stub::TrainStep, step, &response).ok());
  }

  static v1::GenerateArtifactsRequest MlpArtifactsRequest() {
    v1::GenerateArtifactsRequest request;
    request.mutable_model()->set_onnx_bytes(testing::ReadRunfile("tests/golden/data/mlp/model.onnx"));
    request.mutable_loss()->mutable_builtin()->set_type(v1::CROSS_ENTROPY);
    request.mutable_loss()->mutable_builtin()->set_output_name("logits");
    request.add_additional_output_names("logits");
    return request;
  }

  v1::TrainStepRequest GoodStep() const {
    v1::TrainStepRequest request;
    request.set_session_id(session_);
    *request.add_inputs() = FromNpy("input", testing::RunfilePath("tests/golden/data/mlp/inputs/input.npy"));
    *request.add_inputs() = FromNpy("target", testing::RunfilePath("tests/golden/data/mlp/targets/target.npy"));
    return request;
  }

  // Parameters, gradients, optimizer step and learning rate of the session.
  std::string Observe() {
    v1::GetParametersRequest request;
    request.set_session_id(session_);
    request.set_include_gradients(true);
    v1::GetParametersResponse parameters;
    EXPECT_TRUE(Call(*stub_, &Stub::GetParameters, request, &parameters).ok());
    v1::GetSessionRequest get;
    get.set_session_id(session_);
    v1::Session session;
    EXPECT_TRUE(Call(*stub_, &Stub::GetSession, get, &session).ok());
    return absl::StrCat(parameters.buffer().data(), "|", parameters.gradient_buffer().data(), "|",
                        session.optimizer_step(), "|", session.learning_rate());
  }

  // Runs `call`, which must fail with `code` and a message containing `message`, and leave the session as it was.
  void ExpectRefused(const std::string& what, const std::function<grpc::Status()>& call, grpc::StatusCode code,
                     const std::string& message) {
    SCOPED_TRACE(what);
    const std::string before = Observe();
    const grpc::Status status = call();
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(message));
    EXPECT_TRUE(Observe() == before) << "the session changed";
  }

  std::string state_dir_;
  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<Stub> stub_;
  v1::GenerateArtifactsResponse artifacts_;
  std::string session_;
};

TEST_F(BadInputTest, BadTrainStepInputsNameTheCulpritAndChangeNothing) {
  struct Case {
    std::string what;
    std::function<void(v1::TrainStepRequest&)> spoil;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown session", [](auto& r) { r.set_session_id("s-0123"); }, grpc::NOT_FOUND, "no session 's-0123'"},
      {"wrong name", [](auto& r) { r.mutable_inputs(0)->set_name("inptu"); }, grpc::INVALID_ARGUMENT,
       "unknown input 'inptu'"},
      {"missing target", [](auto& r) { r.mutable_inputs()->RemoveLast(); }, grpc::INVALID_ARGUMENT,
       "missing input 'target'"},
      {"repeated", [](auto& r) { *r.add_inputs() = r.inputs(0); }, grpc::INVALID_ARGUMENT, "given twice"},
      {"no name", [](auto& r) { r.mutable_inputs(0)->clear_name(); }, grpc::INVALID_ARGUMENT, "inputs[0] has no name"},
      {"wrong dtype",
       [](auto& r) {
         v1::Tensor* input = r.mutable_inputs(0);
         input->set_dtype(v1::FLOAT64);
         input->set_data(input->data() + input->data());
       },
       grpc::INVALID_ARGUMENT, "input 'input' has dtype double"},
      {"wrong shape",
       [](auto& r) {
         v1::Tensor* input = r.mutable_inputs(0);
         const int64_t rows = input->shape(0), columns = input->shape(1);
         input->set_shape(0, columns);
         input->set_shape(1, rows);
       },
       grpc::INVALID_ARGUMENT, "input 'input' has shape"},
      {"bytes do not match the shape", [](auto& r) { r.mutable_inputs(0)->mutable_data()->pop_back(); },
       grpc::INVALID_ARGUMENT, "bytes expected"},
      {"no dtype", [](auto& r) { r.mutable_inputs(0)->set_dtype(v1::DATA_TYPE_UNSPECIFIED); },
       grpc::INVALID_ARGUMENT, "input 'input': dtype 0 is not a tensor dtype"},
      {"negative dimension", [](auto& r) { r.mutable_inputs(0)->set_shape(0, -4); }, grpc::INVALID_ARGUMENT,
       "negative dimension -4"},
      {"overflowing dimensions",
       [](auto& r) {
         r.mutable_inputs(0)->set_shape(0, int64_t{1} << 40);
         r.mutable_inputs(0)->set_shape(1, int64_t{1} << 40);
       },
       grpc::INVALID_ARGUMENT, "overflows"},
      {"class id out of range",
       [](auto& r) {
         std::string& ids = *r.mutable_inputs(1)->mutable_data();
         const int64_t bad = 4;  // the golden mlp has 4 classes
         std::memcpy(ids.data(), &bad, sizeof(bad));
       },
       grpc::INVALID_ARGUMENT, "input 'target' holds class id 4 at element 0, outside [0, 4)"},
      {"negative class id",
       [](auto& r) {
         std::string& ids = *r.mutable_inputs(1)->mutable_data();
         const int64_t bad = -1;
         std::memcpy(ids.data() + 8, &bad, sizeof(bad));
       },
       grpc::INVALID_ARGUMENT, "class id -1 at element 1"},
      {"unknown output", [](auto& r) { r.add_fetch_outputs("probabilities"); }, grpc::INVALID_ARGUMENT,
       "unknown output 'probabilities'; the training model has: loss, logits"},
  };
  for (const Case& bad : cases) {
    v1::TrainStepRequest request = GoodStep();
    bad.spoil(request);
    ExpectRefused(
        bad.what,
        [&] {
          v1::TrainStepResponse response;
          return Call(*stub_, &Stub::TrainStep, request, &response);
        },
        bad.code, bad.message);
    // Eval takes the same inputs and refuses them the same way.
    if (bad.what == "unknown output") continue;
    v1::EvalRequest eval;
    eval.set_session_id(request.session_id());
    *eval.mutable_inputs() = request.inputs();
    v1::EvalResponse eval_response;
    EXPECT_EQ(Call(*stub_, &Stub::Eval, eval, &eval_response).error_code(), bad.code) << bad.what;
  }
}

TEST_F(BadInputTest, AMessageOverTheLimitIsResourceExhausted) {
  v1::TrainStepRequest request = GoodStep();
  *request.add_inputs() = WireTensor("padding", v1::FLOAT32, {kMessageLimit / 4}, std::string(kMessageLimit, '\0'));
  ExpectRefused(
      "oversized",
      [&] {
        v1::TrainStepResponse response;
        return Call(*stub_, &Stub::TrainStep, request, &response);
      },
      grpc::RESOURCE_EXHAUSTED, "");
}

// TrainStep parses its request into a message the daemon reuses from call to call (server/message_pool.h): bytes
// that are no TrainStepRequest are refused as such, and nothing of one request shows in the next.
TEST_F(BadInputTest, AnUnparseableTrainStepIsRefusedAndNoRequestLeaksIntoTheNext) {
  auto send_raw = [this](const std::string& bytes) {
    grpc::GenericStub stub(grpc::CreateChannel(daemon_->grpc_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::CompletionQueue queue;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    auto call = stub.PrepareUnaryCall(&context, "/traind.v1.TrainingService/TrainStep", request, &queue);
    call->StartCall();
    grpc::ByteBuffer response;
    grpc::Status status;
    call->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue.Next(&tag, &ok));
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
    return status;
  };
  // Field 2 (inputs) as a length-delimited value claiming 1000 bytes, followed by 3.
  ExpectRefused("not a TrainStepRequest", [&] { return send_raw(std::string("\x12\xe8\x07" "abc", 6)); },
                grpc::INVALID_ARGUMENT, "the TrainStep request could not be read or parsed");

  // A request that fetches an output and only accumulates, then a plain one: the second neither fetches nor
  // accumulates (its message is the first one's, reused).
  v1::TrainStepRequest fetching = GoodStep();
  fetching.add_fetch_outputs("logits");
  fetching.set_accumulate_only(true);
  v1::TrainStepResponse response;
  ASSERT_TRUE(Call(*stub_, &Stub::TrainStep, fetching, &response).ok());
  EXPECT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.optimizer_step(), 0);
  ASSERT_TRUE(Call(*stub_, &Stub::TrainStep, GoodStep(), &response).ok());
  EXPECT_EQ(response.outputs_size(), 0);
  EXPECT_EQ(response.optimizer_step(), 1);
  // A request with one input too many (refused), then a good one: the extra input does not linger.
  v1::TrainStepRequest extra = GoodStep();
  *extra.add_inputs() = WireTensor("padding", v1::FLOAT32, {2}, std::string(8, '\0'));
  EXPECT_EQ(Call(*stub_, &Stub::TrainStep, extra, &response).error_code(), grpc::INVALID_ARGUMENT);
  ASSERT_TRUE(Call(*stub_, &Stub::TrainStep, GoodStep(), &response).ok());
  EXPECT_EQ(response.optimizer_step(), 2);
}

TEST_F(BadInputTest, ANonFiniteLossSkipsTheStepAndChangesNoParameter) {
  v1::GetParametersRequest get;
  get.set_session_id(session_);
  v1::GetParametersResponse before, after;
  ASSERT_TRUE(Call(*stub_, &Stub::GetParameters, get, &before).ok());
  v1::TrainStepRequest request = GoodStep();
  std::string& data = *request.mutable_inputs(0)->mutable_data();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t offset = 0; offset < data.size(); offset += 4 * 17) std::memcpy(data.data() + offset, &nan, 4);
  v1::TrainStepResponse response;
  ASSERT_TRUE(Call(*stub_, &Stub::TrainStep, request, &response).ok());
  EXPECT_TRUE(response.skipped());
  EXPECT_THAT(response.skip_reason(), HasSubstr("not finite"));
  EXPECT_EQ(response.optimizer_step(), 0);
  ASSERT_TRUE(Call(*stub_, &Stub::GetParameters, get, &after).ok());
  EXPECT_TRUE(after.buffer().data() == before.buffer().data());
  // And the next good step trains normally.
  ASSERT_TRUE(Call(*stub_, &Stub::TrainStep, GoodStep(), &response).ok());
  EXPECT_FALSE(response.skipped());
  EXPECT_EQ(response.optimizer_step(), 1);
}

TEST_F(BadInputTest, BadParameterRequestsNameTheCulpritAndChangeNothing) {
  v1::GetParametersRequest get;
  get.set_session_id(session_);
  get.add_names("fc9.weight");
  v1::GetParametersResponse got;
  EXPECT_EQ(Call(*stub_, &Stub::GetParameters, get, &got).error_code(), grpc::INVALID_ARGUMENT);
  get.set_session_id("s-unknown");
  EXPECT_EQ(Call(*stub_, &Stub::GetParameters, get, &got).error_code(), grpc::NOT_FOUND);

  v1::GetParametersRequest all;
  all.set_session_id(session_);
  ASSERT_TRUE(Call(*stub_, &Stub::GetParameters, all, &got).ok());
  const v1::ParameterSlice first = got.layout(0);
  auto set_call = [&](const v1::SetParametersRequest& request) {
    return [this, request] {
      v1::SetParametersResponse response;
      return Call(*stub_, &Stub::SetParameters, request, &response);
    };
  };
  v1::SetParametersRequest short_buffer;
  short_buffer.set_session_id(session_);
  *short_buffer.mutable_buffer() = got.buffer();
  short_buffer.mutable_buffer()->set_shape(0, got.buffer().shape(0) - 1);
  short_buffer.mutable_buffer()->mutable_data()->resize(got.buffer().data().size() - 4);
  ExpectRefused("buffer of the wrong size", set_call(short_buffer), grpc::INVALID_ARGUMENT, "");
  v1::SetParametersRequest double_buffer;
  double_buffer.set_session_id(session_);
  *double_buffer.mutable_buffer() =
      WireTensor("", v1::FLOAT64, {got.buffer().shape(0)}, got.buffer().data() + got.buffer().data());
  ExpectRefused("buffer of the wrong dtype", set_call(double_buffer), grpc::INVALID_ARGUMENT, "float32 vector");
  v1::SetParametersRequest unknown;
  unknown.set_session_id(session_);
  *unknown.add_parameters() = WireTensor("fc9.weight", v1::FLOAT32, {1}, std::string(4, '\0'));
  ExpectRefused("unknown name", set_call(unknown), grpc::INVALID_ARGUMENT, "unknown parameter 'fc9.weight'");
  v1::SetParametersRequest reshaped;
  reshaped.set_session_id(session_);
  // A good first tensor, then a bad one: the good one must not be written either.
  int64_t elements = 1;
  for (int64_t dim : first.shape()) elements *= dim;
  *reshaped.add_parameters() = WireTensor(first.name(), v1::FLOAT32, {first.shape().begin(), first.shape().end()},
                                          std::string(elements * 4, '\0'));
  *reshaped.add_parameters() = WireTensor(got.layout(1).name(), v1::FLOAT32, {3}, std::string(12, '\0'));
  ExpectRefused("wrong shape after a good one", set_call(reshaped), grpc::INVALID_ARGUMENT,
                absl::StrCat("parameter '", got.layout(1).name(), "' is float["));
  v1::SetParametersRequest both;
  both.set_session_id(session_);
  *both.mutable_buffer() = got.buffer();
  *both.add_parameters() = reshaped.parameters(0);
  ExpectRefused("buffer and named", set_call(both), grpc::INVALID_ARGUMENT, "either buffer or parameters");

  for (float rate : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    v1::SetLearningRateRequest request;
    request.set_session_id(session_);
    request.set_learning_rate(rate);
    ExpectRefused(
        absl::StrCat("learning rate ", rate),
        [&] {
          v1::LearningRate response;
          return Call(*stub_, &Stub::SetLearningRate, request, &response);
        },
        grpc::INVALID_ARGUMENT, "learning rate must be finite and >= 0");
  }
}

TEST_F(BadInputTest, DamagedForeignAndMissingCheckpointsAreRefusedAndChangeNothing) {
  v1::SaveCheckpointRequest save;
  save.set_session_id(session_);
  save.set_return_bytes(true);
  save.set_include_optimizer_state(true);
  v1::SaveCheckpointResponse saved;
  ASSERT_TRUE(Call(*stub_, &Stub::SaveCheckpoint, save, &saved).ok());
  auto load_call = [&](const v1::LoadCheckpointRequest& request, v1::ErrorDetail* detail = nullptr) {
    return [this, request, detail] {
      v1::LoadCheckpointResponse response;
      return Call(*stub_, &Stub::LoadCheckpoint, request, &response, detail);
    };
  };
  v1::LoadCheckpointRequest damaged;
  damaged.set_session_id(session_);
  damaged.set_content(saved.content());
  (*damaged.mutable_content())[damaged.content().size() / 2] ^= 0x10;
  v1::ErrorDetail detail;
  ExpectRefused("one flipped bit", load_call(damaged, &detail), grpc::DATA_LOSS, "damaged");
  EXPECT_EQ(detail.reason(), "CHECKPOINT_DIGEST_MISMATCH");
  v1::LoadCheckpointRequest torn = damaged;
  torn.set_content(saved.content().substr(0, saved.content().size() - 100));
  ExpectRefused("torn", load_call(torn), grpc::DATA_LOSS, "damaged");
  v1::LoadCheckpointRequest garbage = damaged;
  garbage.set_content(std::string(200, 'x'));
  ExpectRefused("not a checkpoint", load_call(garbage), grpc::INVALID_ARGUMENT, "");

  // Another model's checkpoint: the CNN's artifacts.
  v1::GenerateArtifactsRequest cnn = MlpArtifactsRequest();
  cnn.mutable_model()->set_onnx_bytes(testing::ReadRunfile("tests/golden/data/cnn_bn_maxpool/model.onnx"));
  cnn.set_return_artifact_bytes(true);
  v1::GenerateArtifactsResponse cnn_artifacts;
  ASSERT_TRUE(Call(*stub_, &Stub::GenerateArtifacts, cnn, &cnn_artifacts).ok());
  v1::LoadCheckpointRequest foreign = damaged;
  for (const auto& file : cnn_artifacts.files()) {
    if (file.kind() == "checkpoint") foreign.set_content(file.content());
  }
  ExpectRefused("another model's", load_call(foreign), grpc::INVALID_ARGUMENT, "the checkpoint");

  v1::LoadCheckpointRequest missing;
  missing.set_session_id(session_);
  missing.set_name("never-saved");
  ExpectRefused("unknown name", load_call(missing), grpc::NOT_FOUND, "no checkpoint named 'never-saved'");
  for (const std::string& hostile : {std::string("../LOCK"), std::string("a/b"), std::string(".hidden"),
                                     std::string(200, 'a'), std::string("x.tmp.1.2"), std::string("nul\0l", 5)}) {
    v1::LoadCheckpointRequest request = missing;
    request.set_name(hostile);
    ExpectRefused("hostile name to load", load_call(request), grpc::INVALID_ARGUMENT, "checkpoint name");
    v1::SaveCheckpointRequest store;
    store.set_session_id(session_);
    store.set_name(hostile);
    v1::SaveCheckpointResponse stored;
    EXPECT_EQ(Call(*stub_, &Stub::SaveCheckpoint, store, &stored).error_code(), grpc::INVALID_ARGUMENT) << hostile;
  }
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/LOCK.tmp"));
  std::vector<std::string> stored;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir_ + "/checkpoints")) {
    stored.push_back(entry.path().filename().string());
  }
  EXPECT_TRUE(stored.empty());
}

TEST_F(BadInputTest, BadGenerateArtifactsRequestsNameTheProblem) {
  struct Case {
    std::string what;
    std::function<void(v1::GenerateArtifactsRequest&)> spoil;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no model", [](auto& r) { r.clear_model(); }, grpc::INVALID_ARGUMENT, "the model is missing"},
      {"garbage model", [](auto& r) { r.mutable_model()->set_onnx_bytes("definitely not onnx"); },
       grpc::INVALID_ARGUMENT, "the model"},
      {"truncated model",
       [](auto& r) { r.mutable_model()->set_onnx_bytes(r.model().onnx_bytes().substr(0, 300)); },
       grpc::INVALID_ARGUMENT, "the model"},
      {"unknown blob", [](auto& r) { r.mutable_model()->set_blob_id(std::string(64, 'a')); }, grpc::NOT_FOUND,
       "no blob"},
      {"hostile blob id", [](auto& r) { r.mutable_model()->set_blob_id("../LOCK"); }, grpc::INVALID_ARGUMENT,
       "not a blob id"},
      {"no loss", [](auto& r) { r.clear_loss(); }, grpc::INVALID_ARGUMENT, "no loss given"},
      {"loss of an unknown output", [](auto& r) { r.mutable_loss()->mutable_builtin()->set_output_name("nope"); },
       grpc::INVALID_ARGUMENT, "'nope', which is not a model output"},
      {"garbage loss graph",
       [](auto& r) { r.mutable_loss()->mutable_custom()->mutable_graph()->set_onnx_bytes("\x08\x01garbage"); },
       grpc::INVALID_ARGUMENT, "the loss graph"},
      {"unknown parameter", [](auto& r) { r.add_requires_grad("fc9.weight"); }, grpc::INVALID_ARGUMENT,
       "fc9.weight"},
      {"negative learning rate", [](auto& r) { r.mutable_optimizer()->mutable_adamw()->set_lr(-1); },
       grpc::INVALID_ARGUMENT, "optimizer lr must be in"},
      {"beta of one", [](auto& r) { r.mutable_optimizer()->mutable_adamw()->set_beta2(1.0f); },
       grpc::INVALID_ARGUMENT, "optimizer beta2"},
      {"nesterov without momentum", [](auto& r) { r.mutable_optimizer()->mutable_sgd()->set_nesterov(true); },
       grpc::INVALID_ARGUMENT, "Nesterov"},
      {"hostile prefix", [](auto& r) { r.set_prefix("../../x"); }, grpc::INVALID_ARGUMENT, "the artifact prefix"},
      {"unknown additional output", [](auto& r) { r.add_additional_output_names("nope"); }, grpc::INVALID_ARGUMENT,
       "additional output 'nope'"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.what);
    v1::GenerateArtifactsRequest request = MlpArtifactsRequest();
    bad.spoil(request);
    v1::GenerateArtifactsResponse response;
    const grpc::Status status = Call(*stub_, &Stub::GenerateArtifacts, request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(bad.message));
  }
  // Nothing half-written: only the artifact set of SetUp is stored.
  int sets = 0;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir_ + "/artifacts")) sets += !entry.path().empty();
  EXPECT_EQ(sets, 1);
}

TEST_F(BadInputTest, AnOpWithoutAGradientRuleIsAFailedPreconditionWithTheCoverageReport) {
  v1::GenerateArtifactsRequest request;
  request.mutable_model()->set_onnx_bytes(SinModelBytes());
  request.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
  v1::GenerateArtifactsResponse response;
  v1::ErrorDetail detail;
  const grpc::Status status = Call(*stub_, &Stub::GenerateArtifacts, request, &response, &detail);
  EXPECT_EQ(status.error_code(), grpc::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("Sin"));
  EXPECT_EQ(detail.reason(), "NO_GRADIENT_RULE");
  EXPECT_EQ(detail.op_type(), "Sin");
  EXPECT_EQ(detail.parameter(), "w1");
  ASSERT_EQ(detail.coverage().blocked_parameters_size(), 1);
  EXPECT_EQ(detail.coverage().blocked_parameters(0).parameter(), "w1");
  EXPECT_THAT(detail.coverage().blocked_parameters(0).blocking_nodes(), ::testing::ElementsAre("ai.onnx::Sin"));
  bool sin_reported = false;
  for (const auto& op : detail.coverage().ops()) {
    if (op.op_type() == "Sin") sin_reported = !op.has_gradient_rule() && op.on_gradient_path();
  }
  EXPECT_TRUE(sin_reported);
  // Training only what comes after Sin works, and the report says so.
  request.add_requires_grad("w2");
  request.add_requires_grad("b");
  ASSERT_TRUE(Call(*stub_, &Stub::GenerateArtifacts, request, &response).ok());
  EXPECT_THAT(response.trainable_parameters(), ::testing::ElementsAre("w2", "b"));
  EXPECT_THAT(response.frozen_parameters(), ::testing::ElementsAre("w1"));
  EXPECT_EQ(response.coverage().blocked_parameters_size(), 0);
}

TEST_F(BadInputTest, SessionLevelRefusals) {
  v1::CreateSessionRequest create;
  create.set_artifact_id("a-00000000000000000000000000000000");
  v1::Session session;
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, create, &session).error_code(), grpc::NOT_FOUND);
  create.set_artifact_id("../../etc/passwd");
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, create, &session).error_code(), grpc::NOT_FOUND);
  create.set_artifact_id(artifacts_.artifact_id());
  create.set_executor(v1::GPU);
  v1::ErrorDetail detail;
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, create, &session, &detail).error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_EQ(detail.reason(), "NO_GPU");
  create.set_executor(v1::CPU);
  create.set_num_threads(100000);
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, create, &session).error_code(), grpc::INVALID_ARGUMENT);
  create.set_num_threads(0);
  create.set_checkpoint_name("missing");
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, create, &session).error_code(), grpc::NOT_FOUND);
  create.clear_checkpoint_name();

  // A session without an optimizer model (uploaded artifacts may leave it out) can only accumulate.
  v1::CreateSessionRequest uploaded;
  std::map<std::string, std::string> blobs;
  for (const auto& file : artifacts_.files()) {
    grpc::ClientContext context;
    v1::UploadBlobResponse response;
    auto writer = stub_->UploadBlob(&context, &response);
    v1::UploadBlobRequest header, chunk;
    header.mutable_header()->set_total_bytes(file.size_bytes());
    chunk.set_chunk(file.content());
    writer->Write(header);
    writer->Write(chunk);
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
    blobs[file.kind()] = response.blob_id();
  }
  uploaded.mutable_uploaded()->set_training_model_blob_id(blobs["training_model"]);
  uploaded.mutable_uploaded()->set_checkpoint_blob_id(blobs["eval_model"]);  // not a checkpoint
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, uploaded, &session).error_code(), grpc::INVALID_ARGUMENT);
  uploaded.mutable_uploaded()->set_checkpoint_blob_id(blobs["checkpoint"]);
  ASSERT_TRUE(Call(*stub_, &Stub::CreateSession, uploaded, &session).ok());
  EXPECT_FALSE(session.has_optimizer());
  EXPECT_FALSE(session.has_eval_model());
  v1::TrainStepRequest step = GoodStep();
  step.set_session_id(session.session_id());
  v1::TrainStepResponse stepped;
  EXPECT_EQ(Call(*stub_, &Stub::TrainStep, step, &stepped).error_code(), grpc::FAILED_PRECONDITION);
  step.set_accumulate_only(true);
  EXPECT_TRUE(Call(*stub_, &Stub::TrainStep, step, &stepped).ok());
  v1::OptimizerStepRequest optimize;
  optimize.set_session_id(session.session_id());
  v1::OptimizerStepResponse optimized;
  EXPECT_EQ(Call(*stub_, &Stub::OptimizerStep, optimize, &optimized).error_code(), grpc::FAILED_PRECONDITION);
  v1::EvalRequest eval;
  eval.set_session_id(session.session_id());
  *eval.mutable_inputs() = step.inputs();
  v1::EvalResponse evaluated;
  EXPECT_EQ(Call(*stub_, &Stub::Eval, eval, &evaluated).error_code(), grpc::FAILED_PRECONDITION);
  v1::ExportForInferenceRequest export_request;
  export_request.set_session_id(session_);
  export_request.add_output_names("nope");
  v1::ExportForInferenceResponse exported;
  EXPECT_EQ(Call(*stub_, &Stub::ExportForInference, export_request, &exported).error_code(), grpc::INVALID_ARGUMENT);

  // --max_sessions=3: SetUp's, the uploaded one, one more, then no more.
  v1::Session third, fourth;
  ASSERT_TRUE(Call(*stub_, &Stub::CreateSession, create, &third).ok());
  EXPECT_EQ(Call(*stub_, &Stub::CreateSession, create, &fourth).error_code(), grpc::RESOURCE_EXHAUSTED);
  v1::CloseSessionRequest close;
  close.set_session_id(third.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(Call(*stub_, &Stub::CloseSession, close, &closed).ok());
  EXPECT_EQ(Call(*stub_, &Stub::CloseSession, close, &closed).error_code(), grpc::NOT_FOUND);
  EXPECT_TRUE(Call(*stub_, &Stub::CreateSession, create, &fourth).ok());
}

}  // namespace
}  // namespace traind
