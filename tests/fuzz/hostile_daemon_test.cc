// The hostile-model corpus (make_hostile_models.py) sent to a real traind over gRPC, as a client would: every
// model goes through GenerateArtifacts, and whatever is accepted through CreateSession, TrainStep and Eval. Each
// malformed or hostile model ends in INVALID_ARGUMENT or FAILED_PRECONDITION, each resource bomb in
// RESOURCE_EXHAUSTED naming the limit; the daemon keeps serving throughout and trains a good model afterwards.
#include <signal.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/service.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

using testing::Call;
using testing::Stub;

struct Case {
  std::string path;
  std::string category;
  std::string expect;
};

std::vector<Case> GenerateCorpus(const std::string& directory) {
  const testing::CommandResult generated = testing::RunCommand(
      "/usr/bin/python3", {testing::RunfilePath("tests/fuzz/make_hostile_models.py"), directory}, {},
      absl::Seconds(300));
  EXPECT_EQ(generated.exit_code, 0) << generated.stderr_text;
  std::vector<Case> cases;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadWholeFile(directory + "/manifest.tsv"), '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields.size() == 3) cases.push_back({directory + "/" + fields[0], fields[1], fields[2]});
  }
  return cases;
}

// One tensor per declared input, as the harness of the in-process test makes them (dynamic dims 1).
v1::Tensor MakeInput(const v1::TensorInfo& info) {
  v1::Tensor tensor;
  tensor.set_name(info.name());
  tensor.set_dtype(info.dtype());
  int64_t count = 1;
  for (int64_t dim : info.shape()) {
    tensor.add_shape(dim < 0 ? 1 : dim);
    count *= dim < 0 ? 1 : dim;
  }
  size_t element = 4;
  switch (info.dtype()) {
    case v1::FLOAT64:
    case v1::INT64:
      element = 8;
      break;
    case v1::BOOL:
    case v1::UINT8:
    case v1::INT8:
      element = 1;
      break;
    case v1::FLOAT16:
      element = 2;
      break;
    default:
      break;
  }
  std::string data(static_cast<size_t>(count) * element, '\0');
  if (info.dtype() == v1::FLOAT32) {
    for (int64_t i = 0; i < count; ++i) {
      const float value = std::sin(0.37f * static_cast<float>(i + 1));
      std::memcpy(&data[static_cast<size_t>(i) * 4], &value, 4);
    }
  }
  tensor.set_data(std::move(data));
  return tensor;
}

// The first call that fails, through the whole life of a model; OK when everything succeeded.
grpc::Status Exercise(Stub& stub, const std::string& model_bytes) {
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(model_bytes);
  generate.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
  v1::GenerateArtifactsResponse artifacts;
  grpc::Status status = Call(stub, &Stub::GenerateArtifacts, generate, &artifacts);
  if (!status.ok()) return status;
  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  create.set_num_threads(1);
  v1::Session session;
  status = Call(stub, &Stub::CreateSession, create, &session);
  if (status.ok()) {
    // Inputs of absurd declared size are the wire's business (the message limit); a model that declares them was
    // refused before.
    int64_t bytes = 0;
    v1::TrainStepRequest step;
    step.set_session_id(session.session_id());
    for (const v1::TensorInfo& info : session.training_inputs()) {
      *step.add_inputs() = MakeInput(info);
      bytes += static_cast<int64_t>(step.inputs(step.inputs_size() - 1).data().size());
    }
    if (bytes > (int64_t{16} << 20)) return grpc::Status(grpc::StatusCode::INTERNAL, "inputs too large to send");
    v1::TrainStepResponse trained;
    status = Call(stub, &Stub::TrainStep, step, &trained);
    if (status.ok()) {
      v1::EvalRequest eval;
      eval.set_session_id(session.session_id());
      for (const v1::TensorInfo& info : session.eval_inputs()) *eval.add_inputs() = MakeInput(info);
      v1::EvalResponse evaluated;
      status = Call(stub, &Stub::Eval, eval, &evaluated);
    }
    v1::CloseSessionRequest close;
    close.set_session_id(session.session_id());
    v1::CloseSessionResponse closed;
    EXPECT_TRUE(Call(stub, &Stub::CloseSession, close, &closed).ok());
  }
  v1::DeleteArtifactRequest remove;
  remove.set_artifact_id(artifacts.artifact_id());
  v1::DeleteArtifactResponse removed;
  EXPECT_TRUE(Call(stub, &Stub::DeleteArtifact, remove, &removed).ok());
  return status;
}

TEST(HostileDaemonTest, EveryHostileModelIsRefusedAndTheDaemonKeepsServing) {
  const std::vector<Case> cases = GenerateCorpus(testing::MakeTempDir("hostile"));
  ASSERT_GE(cases.size(), 300u);
  auto service = testing::StartService({"--session_memory_budget=268435456", "--max_sessions=4"});
  ASSERT_NE(service, nullptr);
  int refused = 0, exhausted = 0;
  for (const Case& c : cases) {
    const grpc::Status status = Exercise(*service->stub, testing::ReadWholeFile(c.path));
    if (c.expect == "resource") {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << c.path << ": " << status.error_message();
      EXPECT_THAT(status.error_message(), ::testing::AnyOf(::testing::HasSubstr("limit"), ::testing::HasSubstr("budget")))
          << c.path;
      ++exhausted;
    } else {
      EXPECT_THAT(status.error_code(),
                  ::testing::AnyOf(grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION))
          << c.path << " (" << c.category << "): " << status.error_code() << " " << status.error_message();
      ++refused;
    }
    ASSERT_EQ(::kill(service->process->pid(), 0), 0) << "the daemon died on " << c.path;
  }
  std::fprintf(stderr, "%d hostile models refused, %d resource bombs refused over gRPC\n", refused, exhausted);
  // Still serving, and still training.
  const grpc::Status good = Exercise(*service->stub, testing::ReadRunfile("tests/fuzz/corpus/train_fuzzer/seed-mlp.onnx"));
  EXPECT_TRUE(good.ok()) << good.error_code() << ": " << good.error_message();
}

}  // namespace
}  // namespace traind
