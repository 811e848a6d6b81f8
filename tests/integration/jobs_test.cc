// Training jobs against the real daemon: a job over an uploaded dataset runs to completion while WatchJob streams
// its progress; a job reads an edge device's local data from an allow-listed directory; a job killed with
// kill -9 resumes after the restart and ends with exactly the parameters of the same job run without interruption;
// cancellation, early stopping and bad specs.
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "engine/io/npy.h"
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
using engine::Tensor;
using Stub = v1::TrainingService::Stub;
using testing::Call;
using testing::WatchJob;

// A learnable 4-class problem for the golden MLP (inputs [5, 8], logits [5, 4]): the label is the largest of the
// first four features.
std::pair<Tensor, Tensor> Dataset(int64_t examples, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal;
  Tensor x = *Tensor::Allocate(engine::DataType::kFloat32, {examples, 8});
  Tensor y = *Tensor::Allocate(engine::DataType::kInt64, {examples});
  for (int64_t i = 0; i < examples; ++i) {
    float* row = x.mutable_data<float>() + i * 8;
    for (int j = 0; j < 8; ++j) row[j] = normal(random);
    y.mutable_data<int64_t>()[i] = std::max_element(row, row + 4) - row;
  }
  return {x, y};
}

std::string Artifacts(Stub& stub) {
  v1::GenerateArtifactsRequest request;
  request.mutable_model()->set_onnx_bytes(testing::ReadRunfile("tests/golden/data/mlp/model.onnx"));
  request.mutable_loss()->mutable_builtin()->set_type(v1::CROSS_ENTROPY);
  request.mutable_optimizer()->mutable_adamw()->set_lr(2e-2f);
  request.add_additional_output_names("logits");
  v1::GenerateArtifactsResponse response;
  EXPECT_TRUE(Call(stub, &Stub::GenerateArtifacts, request, &response).ok());
  return response.artifact_id();
}

v1::JobSpec Spec(Stub& stub, const std::string& artifact_id, int epochs) {
  const auto [x, y] = Dataset(60, 5);
  v1::JobSpec spec;
  spec.set_artifact_id(artifact_id);
  (*spec.mutable_train_data()->mutable_npy_blobs()->mutable_blob_ids())["input"] = testing::Upload(stub, engine::SerializeNpy(x));
  (*spec.mutable_train_data()->mutable_npy_blobs()->mutable_blob_ids())["target"] = testing::Upload(stub, engine::SerializeNpy(y));
  spec.set_eval_fraction(0.25f);
  spec.set_epochs(epochs);
  spec.set_shuffle_seed(11);
  spec.set_accuracy(true);
  spec.set_num_threads(2);
  spec.mutable_scheduler()->mutable_cosine()->set_warmup_steps(3);
  return spec;
}

std::string Parameters(Stub& stub, const std::string& session) {
  v1::GetParametersRequest request;
  request.set_session_id(session);
  v1::GetParametersResponse response;
  EXPECT_TRUE(Call(stub, &Stub::GetParameters, request, &response).ok());
  return response.buffer().data();
}

TEST(JobsTest, AJobRunsToCompletionWhileItsProgressStreams) {
  auto daemon = testing::StartService();
  ASSERT_NE(daemon, nullptr);
  v1::Job job;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, Spec(*daemon->stub, Artifacts(*daemon->stub), 8), &job));
  EXPECT_EQ(job.epochs(), 8);
  EXPECT_EQ(job.total_steps(), 8 * 9);  // 45 training examples in batches of the model's 5
  const std::vector<v1::Job> updates = WatchJob(*daemon->stub, job.job_id());
  ASSERT_GE(updates.size(), 2u);
  EXPECT_EQ(updates.back().state(), v1::SUCCEEDED) << updates.back().message();
  EXPECT_EQ(updates.back().step(), 72);
  for (size_t i = 1; i < updates.size(); ++i) EXPECT_GE(updates[i].step(), updates[i - 1].step());
  const v1::Job& done = updates.back();
  ASSERT_EQ(done.evals_size(), 8);
  EXPECT_LT(done.evals(7).loss(), done.evals(0).loss());
  EXPECT_GT(done.evals(7).accuracy(), 0.5f);
  EXPECT_EQ(done.evals(7).examples(), 15);
  EXPECT_GT(done.examples_per_second(), 0);
  v1::GetSessionRequest get;
  get.set_session_id(done.session_id());
  v1::Session session;
  ASSERT_TRUE(Call(*daemon->stub, &Stub::GetSession, get, &session).ok());
  EXPECT_EQ(session.optimizer_step(), 72);
  EXPECT_EQ(session.scheduler(), "cosine_with_warmup");
  v1::ListJobsResponse list;
  ASSERT_TRUE(Call(*daemon->stub, &Stub::ListJobs, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

TEST(JobsTest, AJobKilledMidwayResumesAndEndsWithTheParametersOfAnUninterruptedRun) {
  const std::string state_dir = testing::MakeTempDir("state");
  const std::vector<std::string> flags = {"--checkpoint_every_seconds=0"};
  auto daemon = testing::StartService(flags, state_dir);
  ASSERT_NE(daemon, nullptr);
  const std::string artifacts = Artifacts(*daemon->stub);
  v1::JobSpec spec = Spec(*daemon->stub, artifacts, 12);
  spec.mutable_checkpoint_policy()->set_every_steps(4);
  // The reference: the same job, never interrupted.
  v1::Job reference;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, spec, &reference));
  ASSERT_EQ(WatchJob(*daemon->stub, reference.job_id()).back().state(), v1::SUCCEEDED);
  const std::string expected = Parameters(*daemon->stub, reference.session_id());

  v1::Job job;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, spec, &job));
  // Kill it somewhere in the middle (not at a checkpoint boundary, not at an epoch's end).
  v1::GetJobRequest get;
  get.set_job_id(job.job_id());
  v1::Job progress;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  do {
    ASSERT_TRUE(Call(*daemon->stub, &Stub::GetJob, get, &progress).ok());
  } while (progress.step() < 50 && absl::Now() < deadline);
  ASSERT_EQ(::kill(daemon->process->pid(), SIGKILL), 0);
  absl::Duration elapsed;
  daemon->process->SignalAndWait(0, absl::Seconds(10), &elapsed).IgnoreError();
  ASSERT_LT(progress.step(), 108) << "the job finished before the kill";

  daemon = testing::StartService(flags, state_dir);
  ASSERT_NE(daemon, nullptr);
  const std::vector<v1::Job> updates = WatchJob(*daemon->stub, job.job_id());
  ASSERT_FALSE(updates.empty());
  const v1::Job& done = updates.back();
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.message();
  EXPECT_EQ(done.resumed(), 1);
  EXPECT_EQ(done.evals_size(), 12);
  EXPECT_TRUE(Parameters(*daemon->stub, done.session_id()) == expected);
  v1::GetJobRequest get_reference;
  get_reference.set_job_id(reference.job_id());
  v1::Job reference_after;
  ASSERT_TRUE(Call(*daemon->stub, &Stub::GetJob, get_reference, &reference_after).ok());  // history survives
  EXPECT_EQ(reference_after.state(), v1::SUCCEEDED);
  for (int e = 0; e < 12; ++e) EXPECT_EQ(done.evals(e).loss(), reference_after.evals(e).loss()) << e;
}

TEST(JobsTest, LocalDataCancellationEarlyStoppingAndBadSpecs) {
  const std::string data_dir = testing::MakeTempDir("data");
  std::filesystem::create_directories(data_dir + "/digits");
  const auto [x, y] = Dataset(60, 9);
  ASSERT_TRUE(engine::WriteNpy(data_dir + "/digits/input.npy", x).ok());
  ASSERT_TRUE(engine::WriteNpy(data_dir + "/digits/target.npy", y).ok());
  std::filesystem::create_directories(data_dir + "/../outside");
  ASSERT_TRUE(engine::WriteNpy(data_dir + "/../outside/input.npy", x).ok());
  std::filesystem::create_symlink(data_dir + "/../outside", data_dir + "/escape");
  auto daemon = testing::StartService({"--data_dir=" + data_dir, "--max_concurrent_jobs=2"});
  ASSERT_NE(daemon, nullptr);
  const std::string artifacts = Artifacts(*daemon->stub);

  v1::JobSpec local;
  local.set_artifact_id(artifacts);
  local.mutable_train_data()->set_local_path("digits");
  local.set_epochs(2);
  v1::Job job;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, local, &job));
  EXPECT_EQ(WatchJob(*daemon->stub, job.job_id()).back().state(), v1::SUCCEEDED);

  // Early stopping: a learning rate of 0 never improves the eval loss.
  v1::JobSpec stalled = Spec(*daemon->stub, artifacts, 50);
  stalled.clear_scheduler();
  stalled.mutable_early_stopping()->set_patience(2);
  v1::Job stopping;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, stalled, &stopping));
  v1::SetLearningRateRequest zero;
  zero.set_session_id(stopping.session_id());
  zero.set_learning_rate(0);
  v1::LearningRate rate;
  ASSERT_TRUE(Call(*daemon->stub, &Stub::SetLearningRate, zero, &rate).ok());
  const v1::Job stopped = WatchJob(*daemon->stub, stopping.job_id()).back();
  EXPECT_EQ(stopped.state(), v1::STOPPED_EARLY) << stopped.message();
  EXPECT_LT(stopped.evals_size(), 50);

  // Cancellation: between two steps, promptly.
  v1::Job long_job;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, Spec(*daemon->stub, artifacts, 100000), &long_job));
  v1::CancelJobRequest cancel;
  cancel.set_job_id(long_job.job_id());
  v1::Job cancelled;
  ASSERT_TRUE(Call(*daemon->stub, &Stub::CancelJob, cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);

  struct Bad {
    std::string what;
    std::function<void(v1::JobSpec&)> spoil;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {"unknown artifacts", [](v1::JobSpec& s) { s.set_artifact_id("a-00000000000000000000000000000000"); },
       grpc::NOT_FOUND, "no artifacts"},
      {"no epochs", [](v1::JobSpec& s) { s.set_epochs(0); }, grpc::INVALID_ARGUMENT, "epochs"},
      {"a path with ..", [](v1::JobSpec& s) { s.mutable_train_data()->set_local_path("../outside"); },
       grpc::INVALID_ARGUMENT, "'..'"},
      {"a symlink out", [](v1::JobSpec& s) { s.mutable_train_data()->set_local_path("escape"); },
       grpc::INVALID_ARGUMENT, "leaves its data directory"},
      {"an absolute path", [](v1::JobSpec& s) { s.mutable_train_data()->set_local_path("/etc"); },
       grpc::INVALID_ARGUMENT, "relative"},
      {"a wrong batch size", [](v1::JobSpec& s) { s.set_batch_size(7); }, grpc::INVALID_ARGUMENT,
       "batches of exactly 5"},
      {"no data", [](v1::JobSpec& s) { s.clear_train_data(); }, grpc::INVALID_ARGUMENT, "names no data"},
      {"an unknown job", nullptr, grpc::NOT_FOUND, "no job"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.what);
    grpc::Status status;
    if (bad.spoil) {
      v1::JobSpec spec = local;
      bad.spoil(spec);
      v1::Job refused;
      status = Call(*daemon->stub, &Stub::SubmitJob, spec, &refused);
    } else {
      v1::GetJobRequest get;
      get.set_job_id("j-nope");
      v1::Job missing;
      status = Call(*daemon->stub, &Stub::GetJob, get, &missing);
    }
    EXPECT_EQ(status.error_code(), bad.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(bad.message));
  }
  // The session count did not grow with the refused jobs: sessions made for a refused job go with it.
  v1::ListSessionsResponse sessions;
  ASSERT_TRUE(Call(*daemon->stub, &Stub::ListSessions, v1::ListSessionsRequest(), &sessions).ok());
  EXPECT_EQ(sessions.sessions_size(), 3);
  // --max_concurrent_jobs=2: two long jobs, then a third is refused at once.
  v1::Job first, second, third;
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, Spec(*daemon->stub, artifacts, 100000), &first));
  ASSERT_GRPC_OK(Call(*daemon->stub, &Stub::SubmitJob, Spec(*daemon->stub, artifacts, 100000), &second));
  EXPECT_EQ(Call(*daemon->stub, &Stub::SubmitJob, Spec(*daemon->stub, artifacts, 1), &third).error_code(),
            grpc::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace traind
