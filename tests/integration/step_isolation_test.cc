// A step never takes the daemon down: in one session a kernel error, an allocation beyond the session memory
// budget and a non-finite batch each fail (or skip) that call alone, while another session trains on between
// them, and the failing session trains normally afterwards.
#include <signal.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/tensor_bytes.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/process.h"
#include "tests/testing/service.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

using testing::Call;
using testing::Stub;

// y = x * w + 0 * (ReduceSum(Cast(Range(0, n, 1))) + ReduceSum(Reshape(x, s))): the client's n decides what Range
// allocates, its s whether Reshape fails; neither is known before the step.
std::string HostageModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("hostage");
  auto declare = [](onnx::ValueInfoProto* value, const std::string& name, int type, std::vector<int64_t> dims) {
    value->set_name(name);
    auto* tensor = value->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(type);
    auto* shape = tensor->mutable_shape();
    for (int64_t dim : dims) shape->add_dim()->set_dim_value(dim);
  };
  declare(graph->add_input(), "x", onnx::TensorProto::FLOAT, {4});
  declare(graph->add_input(), "n", onnx::TensorProto::INT64, {});
  declare(graph->add_input(), "s", onnx::TensorProto::INT64, {2});
  declare(graph->add_output(), "y", onnx::TensorProto::FLOAT, {4});
  auto initializer = [graph](const std::string& name, int type, std::vector<int64_t> dims, std::vector<float> f,
                             std::vector<int64_t> i) {
    onnx::TensorProto* tensor = graph->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(type);
    for (int64_t dim : dims) tensor->add_dims(dim);
    for (float v : f) tensor->add_float_data(v);
    for (int64_t v : i) tensor->add_int64_data(v);
  };
  initializer("w", onnx::TensorProto::FLOAT, {4}, {0.5f, -0.25f, 1.0f, 2.0f}, {});
  initializer("zero", onnx::TensorProto::INT64, {}, {}, {0});
  initializer("one", onnx::TensorProto::INT64, {}, {}, {1});
  initializer("nothing", onnx::TensorProto::FLOAT, {}, {0.0f}, {});
  initializer("scalar_shape", onnx::TensorProto::INT64, {0}, {}, {});
  auto node = [graph](const char* op, std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto* added = graph->add_node();
    added->set_op_type(op);
    added->set_name(output);
    for (const auto& input : inputs) added->add_input(input);
    added->add_output(output);
    return added;
  };
  node("Mul", {"x", "w"}, "xw");
  node("Range", {"zero", "n", "one"}, "r");
  onnx::AttributeProto* to = node("Cast", {"r"}, "rf")->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  // keepdims=0: scalars whatever the client's n and s, so that shape inference knows every rank (gradients need them).
  auto reduce_to_scalar = [&node](const char* input, const char* output) {
    onnx::AttributeProto* keepdims = node("ReduceSum", {input}, output)->add_attribute();
    keepdims->set_name("keepdims");
    keepdims->set_type(onnx::AttributeProto::INT);
    keepdims->set_i(0);
  };
  reduce_to_scalar("rf", "rs");
  node("Reshape", {"x", "s"}, "q");
  reduce_to_scalar("q", "qs");
  node("Add", {"rs", "qs"}, "t");
  // Shape inference cannot follow n and s; a Reshape to the constant shape [] makes the term's rank known.
  node("Reshape", {"t", "scalar_shape"}, "ts");
  node("Mul", {"ts", "nothing"}, "tz");
  node("Add", {"xw", "tz"}, "y");
  return model.SerializeAsString();
}

v1::Tensor Floats(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  v1::Tensor tensor;
  tensor.set_name(name);
  tensor.set_dtype(v1::FLOAT32);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return tensor;
}

v1::Tensor Ints(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  v1::Tensor tensor;
  tensor.set_name(name);
  tensor.set_dtype(v1::INT64);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)));
  return tensor;
}

v1::Tensor FromNpy(const std::string& name, const std::string& path) {
  auto tensor = engine::ReadNpy(path);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  v1::Tensor wire;
  wire.set_name(name);
  wire.set_dtype(tensor->dtype() == engine::DataType::kInt64 ? v1::INT64 : v1::FLOAT32);
  for (int64_t dim : tensor->shape()) wire.add_shape(dim);
  wire.set_data(engine::TensorToBytes(*tensor));
  return wire;
}

std::string CreateSession(Stub& stub, const std::string& model, const std::string& output) {
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(model);
  auto* builtin = generate.mutable_loss()->mutable_builtin();
  builtin->set_type(output == "logits" ? v1::CROSS_ENTROPY : v1::MSE);
  builtin->set_output_name(output);
  v1::GenerateArtifactsResponse artifacts;
  grpc::Status status = Call(stub, &Stub::GenerateArtifacts, generate, &artifacts);
  EXPECT_TRUE(status.ok()) << status.error_message();
  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  v1::Session session;
  status = Call(stub, &Stub::CreateSession, create, &session);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return session.session_id();
}

class StepIsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = testing::StartService({"--session_memory_budget=268435456"});
    ASSERT_NE(service_, nullptr);
    good_ = CreateSession(*service_->stub, testing::ReadRunfile("tests/golden/data/mlp/model.onnx"), "logits");
    hostage_ = CreateSession(*service_->stub, HostageModel(), "y");
    ASSERT_FALSE(good_.empty());
    ASSERT_FALSE(hostage_.empty());
  }

  // One step of the other session; it must train every time.
  void GoodSessionTrains() {
    v1::TrainStepRequest request;
    request.set_session_id(good_);
    *request.add_inputs() = FromNpy("input", testing::RunfilePath("tests/golden/data/mlp/inputs/input.npy"));
    *request.add_inputs() = FromNpy("target", testing::RunfilePath("tests/golden/data/mlp/targets/target.npy"));
    v1::TrainStepResponse response;
    const grpc::Status status = Call(*service_->stub, &Stub::TrainStep, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    EXPECT_FALSE(response.skipped());
    EXPECT_EQ(response.optimizer_step(), ++good_steps_);
  }

  grpc::Status HostageStep(std::vector<float> x, int64_t n, std::vector<int64_t> s, v1::TrainStepResponse* response) {
    v1::TrainStepRequest request;
    request.set_session_id(hostage_);
    *request.add_inputs() = Floats("x", {4}, x);
    *request.add_inputs() = Ints("n", {}, {n});
    *request.add_inputs() = Ints("s", {2}, s);
    *request.add_inputs() = Floats("target", {4}, {1, 1, 1, 1});
    return Call(*service_->stub, &Stub::TrainStep, request, response);
  }

  std::unique_ptr<testing::Service> service_;
  std::string good_, hostage_;
  int64_t good_steps_ = 0;
};

TEST_F(StepIsolationTest, FailuresStayInTheirSessionAndTheDaemonKeepsTraining) {
  GoodSessionTrains();
  v1::TrainStepResponse response;
  // An allocation far beyond the session's budget: refused before it is made.
  grpc::Status status = HostageStep({1, 2, 3, 4}, int64_t{1} << 36, {2, 2}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("session memory budget of 256.0 MiB"));
  GoodSessionTrains();
  // A kernel error (Reshape of 4 elements to [3, 3]).
  status = HostageStep({1, 2, 3, 4}, 3, {3, 3}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("Reshape"));
  GoodSessionTrains();
  // A non-finite batch: the step is skipped, nothing changes.
  status = HostageStep({1, std::numeric_limits<float>::quiet_NaN(), 3, 4}, 3, {2, 2}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(response.skipped());
  EXPECT_EQ(response.optimizer_step(), 0);
  GoodSessionTrains();
  // And the hostage trains normally now.
  status = HostageStep({1, 2, 3, 4}, 3, {2, 2}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(response.skipped());
  EXPECT_EQ(response.optimizer_step(), 1);
  GoodSessionTrains();
  EXPECT_EQ(::kill(service_->process->pid(), 0), 0);
}

}  // namespace
}  // namespace traind
