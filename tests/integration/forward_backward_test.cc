// Forward / Backward over the real daemon (artifacts without a loss): the handle's whole life — kept by Forward,
// consumed by Backward, released, expired, invalidated by an optimizer step — with the precise status of every
// misuse, the bounds on handles (number and bytes), gradients that accumulate as TrainStep's, and the other issue-14
// additions to the wire: several steps in one TrainStep (examples_per_step) and SchedulerStep's metric.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/tensor_bytes.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/service.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using testing::Call;
using testing::Service;
using testing::StartService;
using testing::Stub;

constexpr const char* kGolden = "tests/golden/data/two_head_weighted_mse";

v1::Tensor FloatTensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  v1::Tensor tensor;
  tensor.set_name(name);
  tensor.set_dtype(v1::FLOAT32);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return tensor;
}

v1::Tensor Golden(const std::string& name, const std::string& file) {
  auto tensor = engine::ReadNpy(
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", kGolden, "/", file));
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  std::vector<float> values(tensor->num_elements());
  for (int64_t i = 0; i < tensor->num_elements(); ++i) {
    values[i] = tensor->dtype() == engine::DataType::kFloat64 ? static_cast<float>(tensor->data<double>()[i])
                                                              : tensor->data<float>()[i];
  }
  return FloatTensor(name, tensor->shape(), values);
}

// The golden model with a symbolic batch dimension (its file fixes 4), for steps of other sizes.
std::string DynamicBatchModel() {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(testing::ReadRunfile(absl::StrCat(kGolden, "/model.onnx"))));
  for (auto* values : {model.mutable_graph()->mutable_input(), model.mutable_graph()->mutable_output()}) {
    for (auto& value : *values) value.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("batch");
  }
  model.mutable_graph()->clear_value_info();
  return model.SerializeAsString();
}

std::vector<float> Floats(const v1::Tensor& tensor) {
  std::vector<float> values(tensor.data().size() / sizeof(float));
  std::memcpy(values.data(), tensor.data().data(), values.size() * sizeof(float));
  return values;
}

// Artifacts of the two-head golden model: without a loss, or with mse(out1) (which trains trunk and head1).
std::string Artifacts(Stub& stub, bool with_loss, bool dynamic_batch = false) {
  v1::GenerateArtifactsRequest request;
  request.mutable_model()->set_onnx_bytes(dynamic_batch ? DynamicBatchModel()
                                                        : testing::ReadRunfile(absl::StrCat(kGolden, "/model.onnx")));
  if (with_loss) {
    request.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
    request.mutable_loss()->mutable_builtin()->set_output_name("out1");
    for (const char* name : {"trunk.weight", "trunk.bias", "head1.weight", "head1.bias"}) request.add_requires_grad(name);
  } else {
    request.mutable_loss()->mutable_no_loss();
  }
  request.mutable_optimizer()->mutable_sgd()->set_lr(0.1f);
  v1::GenerateArtifactsResponse response;
  EXPECT_GRPC_OK(Call(stub, &Stub::GenerateArtifacts, request, &response));
  return response.artifact_id();
}

std::string NewSession(Stub& stub, const std::string& artifact_id) {
  v1::CreateSessionRequest request;
  request.set_artifact_id(artifact_id);
  request.set_seed(7);
  v1::Session session;
  EXPECT_GRPC_OK(Call(stub, &Stub::CreateSession, request, &session));
  return session.session_id();
}

grpc::Status Forward(Stub& stub, const std::string& session, bool training, v1::ForwardResponse* response) {
  v1::ForwardRequest request;
  request.set_session_id(session);
  request.set_training(training);
  *request.add_inputs() = Golden("input", "inputs/input.npy");
  return Call(stub, &Stub::Forward, request, response);
}

v1::BackwardRequest BackwardRequest(const std::string& session, const std::string& handle) {
  v1::BackwardRequest request;
  request.set_session_id(session);
  request.set_handle(handle);
  *request.add_output_gradients() = FloatTensor("out1", {4, 2}, std::vector<float>(8, 0.5f));
  *request.add_output_gradients() = FloatTensor("out2", {4, 1}, std::vector<float>(4, -1.0f));
  request.add_input_gradients("input");
  request.set_return_parameter_gradients(true);
  return request;
}

v1::Session GetSession(Stub& stub, const std::string& session) {
  v1::GetSessionRequest request;
  request.set_session_id(session);
  v1::Session response;
  EXPECT_GRPC_OK(Call(stub, &Stub::GetSession, request, &response));
  return response;
}

class ForwardBackwardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { service_ = StartService({"--max_forward_handles_per_session=3"}).release(); }
  static void TearDownTestSuite() {
    delete service_;
    service_ = nullptr;
  }
  Stub& stub() { return *service_->stub; }
  static Service* service_;
};
Service* ForwardBackwardTest::service_ = nullptr;

TEST_F(ForwardBackwardTest, BackwardReturnsInputGradientsAndAccumulatesParameterGradients) {
  ASSERT_NE(service_, nullptr);
  const std::string session = NewSession(stub(), Artifacts(stub(), false));
  const v1::Session info = GetSession(stub(), session);
  EXPECT_FALSE(info.has_loss());
  EXPECT_THAT(info.forward_inputs(), ::testing::ElementsAre("input"));
  EXPECT_THAT(info.differentiated_outputs(), ::testing::ElementsAre("out1", "out2"));
  EXPECT_THAT(info.input_gradients(), ::testing::ElementsAre("input"));

  v1::ForwardResponse first, second;
  ASSERT_GRPC_OK(Forward(stub(), session, true, &first));
  ASSERT_GRPC_OK(Forward(stub(), session, true, &second));
  EXPECT_NE(first.handle(), second.handle());
  EXPECT_GT(first.saved_bytes(), 0);
  ASSERT_EQ(first.outputs_size(), 2);
  EXPECT_EQ(first.outputs(0).name(), "out1");
  EXPECT_EQ(GetSession(stub(), session).forward_handles(), 2);
  EXPECT_EQ(GetSession(stub(), session).forward_handle_bytes(), first.saved_bytes() + second.saved_bytes());

  v1::BackwardResponse a, b;
  ASSERT_GRPC_OK(Call(stub(), &Stub::Backward, BackwardRequest(session, first.handle()), &a));
  ASSERT_GRPC_OK(Call(stub(), &Stub::Backward, BackwardRequest(session, second.handle()), &b));
  ASSERT_EQ(a.input_gradients_size(), 1);
  EXPECT_EQ(a.input_gradients(0).name(), "input");
  EXPECT_THAT(a.input_gradients(0).shape(), ::testing::ElementsAre(4, 6));
  ASSERT_EQ(a.parameter_gradients_size(), 6);
  EXPECT_EQ(GetSession(stub(), session).forward_handles(), 0);
  // The two passes' gradients were summed, as two accumulating TrainSteps would.
  v1::GetParametersRequest parameters;
  parameters.set_session_id(session);
  parameters.set_include_gradients(true);
  for (const auto& gradient : a.parameter_gradients()) parameters.add_names(gradient.name());
  v1::GetParametersResponse held;
  ASSERT_GRPC_OK(Call(stub(), &Stub::GetParameters, parameters, &held));
  for (int p = 0; p < a.parameter_gradients_size(); ++p) {
    const std::vector<float> x = Floats(a.parameter_gradients(p)), y = Floats(b.parameter_gradients(p));
    const std::vector<float> total = Floats(held.gradients(p));
    ASSERT_EQ(total.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(total[i], x[i] + y[i]) << a.parameter_gradients(p).name();
  }
  // ... and the optimizer applies them.
  v1::OptimizerStepRequest step;
  step.set_session_id(session);
  v1::OptimizerStepResponse stepped;
  ASSERT_GRPC_OK(Call(stub(), &Stub::OptimizerStep, step, &stepped));
  EXPECT_EQ(stepped.optimizer_step(), 1);
  EXPECT_FALSE(stepped.skipped());
}

TEST_F(ForwardBackwardTest, EveryMisuseHasItsStatus) {
  ASSERT_NE(service_, nullptr);
  const std::string session = NewSession(stub(), Artifacts(stub(), false));
  v1::ForwardResponse forward;
  ASSERT_GRPC_OK(Forward(stub(), session, true, &forward));
  v1::BackwardResponse response;
  v1::ErrorDetail detail;

  // Gradients of the wrong shape, an unknown output, an unknown input: INVALID_ARGUMENT, the handle stays usable.
  v1::BackwardRequest bad = BackwardRequest(session, forward.handle());
  *bad.mutable_output_gradients(0) = FloatTensor("out1", {2, 4}, std::vector<float>(8, 0.5f));
  grpc::Status status = Call(stub(), &Stub::Backward, bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the gradient of output 'out1'"));
  bad = BackwardRequest(session, forward.handle());
  bad.mutable_output_gradients(1)->set_name("logits");
  EXPECT_EQ(Call(stub(), &Stub::Backward, bad, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad = BackwardRequest(session, forward.handle());
  bad.add_input_gradients("target");
  EXPECT_EQ(Call(stub(), &Stub::Backward, bad, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad = BackwardRequest(session, forward.handle());
  bad.mutable_output_gradients(0)->set_data("short");
  EXPECT_EQ(Call(stub(), &Stub::Backward, bad, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GetParametersRequest parameters;
  parameters.set_session_id(session);
  parameters.set_trainable_only(true);
  v1::GetParametersResponse layout;
  ASSERT_GRPC_OK(Call(stub(), &Stub::GetParameters, parameters, &layout));
  for (const auto& slice : layout.layout()) EXPECT_FALSE(slice.has_gradient()) << slice.name();

  ASSERT_GRPC_OK(Call(stub(), &Stub::Backward, BackwardRequest(session, forward.handle()), &response));
  // Used: FAILED_PRECONDITION. Never issued: NOT_FOUND. Another session's: NOT_FOUND.
  status = Call(stub(), &Stub::Backward, BackwardRequest(session, forward.handle()), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("used by Backward"));
  EXPECT_EQ(Call(stub(), &Stub::Backward, BackwardRequest(session, "f-nonexistent"), &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const std::string other = NewSession(stub(), Artifacts(stub(), false));
  v1::ForwardResponse theirs;
  ASSERT_GRPC_OK(Forward(stub(), other, true, &theirs));
  EXPECT_EQ(Call(stub(), &Stub::Backward, BackwardRequest(session, theirs.handle()), &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::BackwardRequest no_handle = BackwardRequest(session, "");
  EXPECT_EQ(Call(stub(), &Stub::Backward, no_handle, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Released: FAILED_PRECONDITION; releasing is idempotent.
  v1::ForwardResponse released;
  ASSERT_GRPC_OK(Forward(stub(), session, true, &released));
  v1::ReleaseForwardRequest release;
  release.set_session_id(session);
  release.add_handles(released.handle());
  release.add_handles("f-unknown");
  v1::ReleaseForwardResponse release_response;
  ASSERT_GRPC_OK(Call(stub(), &Stub::ReleaseForward, release, &release_response));
  EXPECT_EQ(release_response.released(), 1);
  ASSERT_GRPC_OK(Call(stub(), &Stub::ReleaseForward, release, &release_response));
  EXPECT_EQ(release_response.released(), 0);
  status = Call(stub(), &Stub::Backward, BackwardRequest(session, released.handle()), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("released"));

  // The parameters changed (an optimizer step) between Forward and Backward: FAILED_PRECONDITION, handle gone.
  v1::ForwardResponse stale;
  ASSERT_GRPC_OK(Forward(stub(), session, true, &stale));
  v1::OptimizerStepRequest step;
  step.set_session_id(session);
  v1::OptimizerStepResponse stepped;
  ASSERT_GRPC_OK(Call(stub(), &Stub::OptimizerStep, step, &stepped));
  status = Call(stub(), &Stub::Backward, BackwardRequest(session, stale.handle()), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("parameters changed"));

  // Too many handles: RESOURCE_EXHAUSTED (this daemon allows 3 per session), with LIMIT_EXCEEDED.
  std::vector<std::string> handles;
  for (int i = 0; i < 3; ++i) {
    v1::ForwardResponse held;
    ASSERT_GRPC_OK(Forward(stub(), session, true, &held));
    handles.push_back(held.handle());
  }
  v1::ForwardRequest fourth;
  fourth.set_session_id(session);
  fourth.set_training(true);
  *fourth.add_inputs() = Golden("input", "inputs/input.npy");
  v1::ForwardResponse refused;
  status = Call(stub(), &Stub::Forward, fourth, &refused, &detail);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(detail.reason(), "LIMIT_EXCEEDED");
  // Inference keeps nothing, so it is never refused for that.
  EXPECT_GRPC_OK(Forward(stub(), session, false, &refused));
  EXPECT_TRUE(refused.handle().empty());
  release.clear_handles();
  for (const auto& handle : handles) release.add_handles(handle);
  ASSERT_GRPC_OK(Call(stub(), &Stub::ReleaseForward, release, &release_response));
  EXPECT_EQ(release_response.released(), 3);
  EXPECT_EQ(GetSession(stub(), session).forward_handles(), 0);

  // Bad inputs to Forward; TrainStep and Eval are for artifacts with a loss.
  v1::ForwardRequest wrong = fourth;
  *wrong.mutable_inputs(0) = FloatTensor("input", {4, 5}, std::vector<float>(20, 0.0f));
  EXPECT_EQ(Call(stub(), &Stub::Forward, wrong, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::TrainStepRequest train;
  train.set_session_id(session);
  *train.add_inputs() = Golden("input", "inputs/input.npy");
  v1::TrainStepResponse trained;
  EXPECT_EQ(Call(stub(), &Stub::TrainStep, train, &trained).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ForwardBackwardTest, InferenceOnArtifactsWithALossNeedsNoTargets) {
  ASSERT_NE(service_, nullptr);
  const std::string session = NewSession(stub(), Artifacts(stub(), true));
  EXPECT_TRUE(GetSession(stub(), session).has_loss());
  v1::ForwardResponse inferred;
  ASSERT_GRPC_OK(Forward(stub(), session, false, &inferred));
  ASSERT_EQ(inferred.outputs_size(), 1);  // the eval model computes what its loss reads: out1
  EXPECT_EQ(inferred.outputs(0).name(), "out1");
  const std::vector<float> out1 = Floats(inferred.outputs(0));
  const std::vector<float> reference = Floats(Golden("out1", "ref/outputs/out1.npy"));
  ASSERT_EQ(out1.size(), reference.size());
  for (size_t i = 0; i < out1.size(); ++i) EXPECT_NEAR(out1[i], reference[i], 1e-5);
  v1::ForwardResponse refused;
  EXPECT_EQ(Forward(stub(), session, true, &refused).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::ForwardRequest fetch;
  fetch.set_session_id(session);
  *fetch.add_inputs() = Golden("input", "inputs/input.npy");
  fetch.add_fetch_outputs("loss");
  EXPECT_EQ(Call(stub(), &Stub::Forward, fetch, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// examples_per_step: one call, N steps, the same parameters as N TrainStep calls; a bad example anywhere is refused
// before the first step.
TEST_F(ForwardBackwardTest, SeveralStepsInOneCallEqualOneCallPerStep) {
  ASSERT_NE(service_, nullptr);
  const std::string artifact = Artifacts(stub(), true, /*dynamic_batch=*/true);
  const std::string one_call = NewSession(stub(), artifact);
  const std::string per_step = NewSession(stub(), artifact);
  const v1::Tensor input = Golden("input", "inputs/input.npy");
  const v1::Tensor target = Golden("target", "targets/target1.npy");
  v1::TrainStepRequest request;
  request.set_session_id(one_call);
  *request.add_inputs() = input;
  *request.add_inputs() = target;
  request.set_examples_per_step(3);  // 4 examples: steps of 3 and 1
  v1::TrainStepResponse response;
  ASSERT_GRPC_OK(Call(stub(), &Stub::TrainStep, request, &response));
  EXPECT_EQ(response.step_losses_size(), 2);
  EXPECT_EQ(response.optimizer_step(), 2);
  EXPECT_NEAR(response.loss(), (3 * response.step_losses(0) + response.step_losses(1)) / 4, 1e-6);

  const std::vector<float> x = Floats(input), t = Floats(target);
  double losses[2];
  for (int step = 0; step < 2; ++step) {
    const int begin = step * 3, rows = step == 0 ? 3 : 1;
    v1::TrainStepRequest single;
    single.set_session_id(per_step);
    *single.add_inputs() =
        FloatTensor("input", {rows, 6}, std::vector<float>(x.begin() + begin * 6, x.begin() + (begin + rows) * 6));
    *single.add_inputs() =
        FloatTensor("target", {rows, 2}, std::vector<float>(t.begin() + begin * 2, t.begin() + (begin + rows) * 2));
    v1::TrainStepResponse stepped;
    ASSERT_GRPC_OK(Call(stub(), &Stub::TrainStep, single, &stepped));
    losses[step] = stepped.loss();
  }
  EXPECT_EQ(response.step_losses(0), losses[0]);
  EXPECT_EQ(response.step_losses(1), losses[1]);
  v1::GetParametersRequest parameters;
  v1::GetParametersResponse a, b;
  parameters.set_session_id(one_call);
  ASSERT_GRPC_OK(Call(stub(), &Stub::GetParameters, parameters, &a));
  parameters.set_session_id(per_step);
  ASSERT_GRPC_OK(Call(stub(), &Stub::GetParameters, parameters, &b));
  EXPECT_EQ(a.buffer().data(), b.buffer().data());

  // Mismatched example counts, and fetch_outputs, are refused; nothing moved.
  v1::TrainStepRequest mismatched = request;
  *mismatched.mutable_inputs(1) = FloatTensor("target", {3, 2}, std::vector<float>(6, 0.0f));
  EXPECT_EQ(Call(stub(), &Stub::TrainStep, mismatched, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::TrainStepRequest fetching = request;
  fetching.add_fetch_outputs("out1");
  EXPECT_EQ(Call(stub(), &Stub::TrainStep, fetching, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GetSession(stub(), one_call).optimizer_step(), 2);
}

// SchedulerStep's metric drives an 'adaptive' schedule (the rate divided by 5 after `patience` bad epochs, then
// `stalled`), and is refused by the other kinds.
TEST_F(ForwardBackwardTest, AdaptiveScheduleTakesMetrics) {
  ASSERT_NE(service_, nullptr);
  const std::string session = NewSession(stub(), Artifacts(stub(), true));
  v1::SetSchedulerRequest set;
  set.set_session_id(session);
  set.mutable_scheduler()->mutable_adaptive()->set_patience(1);
  set.mutable_scheduler()->mutable_adaptive()->set_min_lr(0.01f);
  v1::SetSchedulerResponse set_response;
  ASSERT_GRPC_OK(Call(stub(), &Stub::SetScheduler, set, &set_response));
  EXPECT_FLOAT_EQ(set_response.learning_rate().learning_rate(), 0.1f);
  v1::SchedulerStepRequest observe;
  observe.set_session_id(session);
  v1::LearningRate rate;
  for (double metric : {1.0, 1.1}) {
    observe.set_metric(metric);
    ASSERT_GRPC_OK(Call(stub(), &Stub::SchedulerStep, observe, &rate));
  }
  EXPECT_NEAR(rate.learning_rate(), 0.02, 1e-7);  // 1.1 did not improve: divided by 5
  EXPECT_FALSE(rate.stalled());
  observe.set_metric(1.2);
  ASSERT_GRPC_OK(Call(stub(), &Stub::SchedulerStep, observe, &rate));
  EXPECT_NEAR(rate.learning_rate(), 0.004, 1e-7);
  observe.set_metric(1.3);
  ASSERT_GRPC_OK(Call(stub(), &Stub::SchedulerStep, observe, &rate));
  EXPECT_TRUE(rate.stalled());  // 0.004 is below min_lr: no further reduction
  EXPECT_EQ(rate.evaluations_without_improvement(), 1);

  set.mutable_scheduler()->mutable_inverse_scaling()->set_power_t(0.5f);
  ASSERT_GRPC_OK(Call(stub(), &Stub::SetScheduler, set, &set_response));
  EXPECT_EQ(Call(stub(), &Stub::SchedulerStep, observe, &rate).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  set.mutable_scheduler()->mutable_optimal()->set_alpha(-1.0f);
  EXPECT_EQ(Call(stub(), &Stub::SetScheduler, set, &set_response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(ForwardHandleBoundsTest, BytesAndExpiry) {
  // A byte budget smaller than one pass: refused, and nothing is kept.
  std::unique_ptr<Service> tight = StartService({"--max_forward_bytes_per_session=1"});
  ASSERT_NE(tight, nullptr);
  const std::string session = NewSession(*tight->stub, Artifacts(*tight->stub, false));
  v1::ForwardResponse response;
  grpc::Status status = Forward(*tight->stub, session, true, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("bytes"));
  EXPECT_EQ(GetSession(*tight->stub, session).forward_handles(), 0);

  // Handles expire: Backward then says so; the bytes are given back.
  std::unique_ptr<Service> brief = StartService({"--forward_handle_ttl=1s"});
  ASSERT_NE(brief, nullptr);
  const std::string other = NewSession(*brief->stub, Artifacts(*brief->stub, false));
  ASSERT_GRPC_OK(Forward(*brief->stub, other, true, &response));
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  v1::BackwardResponse backward;
  status = Call(*brief->stub, &Stub::Backward, BackwardRequest(other, response.handle()), &backward);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("expired"));
  EXPECT_EQ(GetSession(*brief->stub, other).forward_handle_bytes(), 0);
}

}  // namespace
}  // namespace traind
