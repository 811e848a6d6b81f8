// trainctl's commands over the stored-object listings, streamed downloads, TrainStream and training jobs, run as
// the real binary against the real daemon (started with a --data_dir for daemon-side datasets).
#include <cmath>
#include <cstring>
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
#include "tests/integration/trainctl_testing.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::CommandResult;
using testing::Field;
using testing::ParseJson;
using testing::Trainctl;

std::string Golden(const std::string& relative) { return testing::RunfilePath("tests/golden/data/mlp/" + relative); }

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// `copies` copies of the golden batch (5 examples each) stacked along the first axis, as .npy files.
void WriteDataset(const std::string& directory, int copies) {
  for (const auto& [source, target] : {std::make_pair(Golden("inputs/input.npy"), directory + "/input.npy"),
                                       std::make_pair(Golden("targets/target.npy"), directory + "/target.npy")}) {
    absl::StatusOr<engine::Tensor> batch = engine::ReadNpy(source);
    ASSERT_TRUE(batch.ok()) << batch.status();
    engine::Shape shape = batch->shape();
    shape[0] *= copies;
    absl::StatusOr<engine::Tensor> stacked = engine::Tensor::Allocate(batch->dtype(), shape);
    ASSERT_TRUE(stacked.ok());
    for (int c = 0; c < copies; ++c) {
      std::memcpy(static_cast<char*>(stacked->mutable_raw_data()) + c * batch->byte_size(), batch->raw_data(),
                  batch->byte_size());
    }
    ASSERT_TRUE(engine::WriteNpy(target, *stacked).ok());
  }
}

class TrainctlJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("trainctl-jobs");
    std::filesystem::create_directories(dir_ + "/data");
    auto daemon = testing::DaemonProcess::Start({"--data_dir=" + dir_ + "/data"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }
  std::string Ok(std::vector<std::string> args) {
    args.push_back("--address=" + daemon_->grpc_address());
    const CommandResult result = Trainctl(args);
    EXPECT_EQ(result.exit_code, 0) << absl::StrJoin(args, " ") << "\nstdout:\n"
                                   << result.stdout_text << "\nstderr:\n" << result.stderr_text;
    return result.stdout_text;
  }
  CommandResult Run(std::vector<std::string> args) {
    args.push_back("--address=" + daemon_->grpc_address());
    return Trainctl(args);
  }
  v1::GenerateArtifactsResponse Generate() {
    v1::GenerateArtifactsResponse artifacts;
    EXPECT_TRUE(ParseJson(Ok({"artifacts", "generate", "--model", Golden("model.onnx"), "--loss", "cross_entropy",
                              "--output", "logits", "--additional-output", "logits", "--lr", "0.01", "--json"}),
                          &artifacts));
    return artifacts;
  }

  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::string dir_;
};

TEST_F(TrainctlJobsTest, StoredArtifactsAndCheckpointsListDownloadAndDelete) {
  const v1::GenerateArtifactsResponse artifacts = Generate();
  v1::ListArtifactsResponse listed;
  ASSERT_TRUE(ParseJson(Ok({"artifacts", "list", "--json"}), &listed));
  ASSERT_EQ(listed.artifacts_size(), 1);
  EXPECT_EQ(listed.artifacts(0).artifact_id(), artifacts.artifact_id());
  // get --out downloads every file, each matching its digest; in chunks of 512 bytes, with a line per 10 %.
  v1::ArtifactSet set;
  ASSERT_TRUE(ParseJson(Ok({"artifacts", "get", artifacts.artifact_id(), "--out", dir_ + "/fetched", "--json"}), &set));
  ASSERT_EQ(set.files_size(), 4);
  for (const v1::ArtifactFile& file : set.files()) {
    EXPECT_EQ(engine::Sha256Hex(ReadFile(dir_ + "/fetched/" + file.file_name())), file.sha256_hex());
  }
  // artifacts generate --out takes the streamed path on this daemon: the same files.
  Ok({"artifacts", "generate", "--model", Golden("model.onnx"), "--loss", "cross_entropy", "--out", dir_ + "/gen"});
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/gen/training_model.onnx"));

  v1::Session session;
  ASSERT_TRUE(ParseJson(Ok({"session", "create", "--artifact", artifacts.artifact_id(), "--json"}), &session));
  v1::SaveCheckpointResponse saved;
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "save", "--session", session.session_id(), "--name", "c1",
                            "--include-optimizer-state", "--json"}),
                        &saved));
  v1::ListCheckpointsResponse checkpoints;
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "list", "--json"}), &checkpoints));
  ASSERT_EQ(checkpoints.checkpoints_size(), 1);
  EXPECT_EQ(checkpoints.checkpoints(0).sha256_hex(), saved.sha256_hex());
  EXPECT_THAT(Ok({"checkpoint", "list"}), HasSubstr("c1"));
  // Download into a directory (the daemon's file name) in small chunks: progress lines, digest-checked.
  const std::string text = Ok({"checkpoint", "download", "c1", "--out", dir_ + "/", "--chunk-bytes", "512"});
  EXPECT_THAT(text, HasSubstr("100% ("));
  EXPECT_THAT(text, Not(HasSubstr("\r")));
  google::protobuf::Struct downloaded;
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "download", "c1", "--out", dir_ + "/c1.ckpt", "--json"}), &downloaded));
  EXPECT_EQ(Field(downloaded, "sha256_hex").string_value(), saved.sha256_hex());
  EXPECT_EQ(engine::Sha256Hex(ReadFile(dir_ + "/c1.ckpt")), saved.sha256_hex());
  // The export streams too.
  google::protobuf::Struct exported;
  ASSERT_TRUE(ParseJson(Ok({"export", "--session", session.session_id(), "--output", "logits", "--out",
                            dir_ + "/model.onnx", "--json"}),
                        &exported));
  EXPECT_EQ(engine::Sha256Hex(ReadFile(dir_ + "/model.onnx")), Field(exported, "sha256_hex").string_value());

  Ok({"checkpoint", "delete", "c1"});
  ASSERT_TRUE(ParseJson(Ok({"checkpoint", "list", "--json"}), &checkpoints));
  EXPECT_EQ(checkpoints.checkpoints_size(), 0);
  EXPECT_EQ(Run({"checkpoint", "download", "c1", "--out", dir_ + "/gone.ckpt"}).exit_code, 3);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gone.ckpt"));
  Ok({"session", "close", session.session_id()});
  Ok({"artifacts", "delete", artifacts.artifact_id()});
  const CommandResult gone = Run({"artifacts", "get", artifacts.artifact_id()});
  EXPECT_EQ(gone.exit_code, 3);
  EXPECT_THAT(gone.stderr_text, HasSubstr("NOT_FOUND"));
}

TEST_F(TrainctlJobsTest, TrainStreamGivesTheLossesOfSingleSteps) {
  const v1::GenerateArtifactsResponse artifacts = Generate();
  std::vector<std::vector<float>> losses;
  for (const char* mode : {"--stream", ""}) {
    v1::Session session;
    ASSERT_TRUE(ParseJson(Ok({"session", "create", "--artifact", artifacts.artifact_id(), "--json"}), &session));
    std::vector<std::string> args = {"train",   "--session", session.session_id(),
                                     "--input", "input=" + Golden("inputs/input.npy"),
                                     "--input", "target=" + Golden("targets/target.npy"),
                                     "--steps", "6", "--json"};
    if (mode[0] != '\0') args.push_back(mode);
    google::protobuf::Struct trained;
    ASSERT_TRUE(ParseJson(Ok(args), &trained));
    std::vector<float>& run = losses.emplace_back();
    for (const auto& value : Field(trained, "steps").list_value().values()) {
      v1::TrainStepResponse step;
      ASSERT_TRUE(ParseJson(testing::MessageJson(value), &step));
      run.push_back(step.loss());
    }
  }
  ASSERT_EQ(losses[0].size(), 6u);
  EXPECT_EQ(losses[0], losses[1]);  // bit for bit: the same steps, streamed or not
}

TEST_F(TrainctlJobsTest, JobRunsToCompletionWithProgressAndCanBeCancelled) {
  const v1::GenerateArtifactsResponse artifacts = Generate();
  WriteDataset(dir_, 4);  // 20 examples: 4 batches of 5 (the model's fixed batch)
  const std::vector<std::string> data = {"--data-input", "input=" + dir_ + "/input.npy", "--data-input",
                                         "target=" + dir_ + "/target.npy"};
  std::vector<std::string> submit = {"job", "submit", "--artifact", artifacts.artifact_id(), "--epochs", "3",
                                     "--batch-size", "5", "--shuffle-seed", "3", "--name", "golden", "--watch"};
  submit.insert(submit.end(), data.begin(), data.end());
  // Text, not a terminal: a line per update, then the job.
  const std::string text = Ok(submit);
  EXPECT_THAT(text, HasSubstr("submitted"));
  EXPECT_THAT(text, HasSubstr("SUCCEEDED epoch 3/3 step 12/12"));
  EXPECT_THAT(text, Not(HasSubstr("\r")));
  // JSON: the final job only.
  submit.push_back("--json");
  v1::Job job;
  ASSERT_TRUE(ParseJson(Ok(submit), &job));
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.step(), 12);
  EXPECT_EQ(job.total_steps(), 12);
  EXPECT_EQ(job.display_name(), "golden");
  EXPECT_TRUE(std::isfinite(job.loss()));
  v1::Job shown;
  ASSERT_TRUE(ParseJson(Ok({"job", "show", job.job_id(), "--json"}), &shown));
  EXPECT_EQ(shown.job_id(), job.job_id());
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(ParseJson(Ok({"job", "list", "--json"}), &jobs));
  EXPECT_EQ(jobs.jobs_size(), 2);
  // A watch of a finished job answers at once with its end; on a terminal as a bar.
  EXPECT_THAT(Ok({"job", "watch", job.job_id()}), HasSubstr("SUCCEEDED"));
  const CommandResult on_tty = testing::RunCommand(
      "/usr/bin/script", {"-qec",
                          absl::StrCat("'", testing::RunfilePath("client/trainctl"), "' job watch ", job.job_id(),
                                       " --address=", daemon_->grpc_address()),
                          "/dev/null"});
  EXPECT_EQ(on_tty.exit_code, 0) << on_tty.stdout_text;
  EXPECT_THAT(on_tty.stdout_text, HasSubstr("\r\x1b[K[==============================] SUCCEEDED epoch 3/3"));

  // A long job, cancelled: watch exits 5 and says so.
  std::vector<std::string> long_job = {"job", "submit", "--artifact", artifacts.artifact_id(), "--epochs", "100000",
                                       "--batch-size", "5", "--json"};
  long_job.insert(long_job.end(), data.begin(), data.end());
  v1::Job running;
  ASSERT_TRUE(ParseJson(Ok(long_job), &running));
  Ok({"job", "cancel", running.job_id()});
  const CommandResult watched = Run({"job", "watch", running.job_id()});
  EXPECT_EQ(watched.exit_code, 5) << watched.stdout_text << watched.stderr_text;
  EXPECT_THAT(watched.stderr_text, HasSubstr("CANCELLED"));
  const CommandResult watched_json = Run({"job", "watch", running.job_id(), "--json"});
  EXPECT_EQ(watched_json.exit_code, 5);
  v1::Job cancelled;
  ASSERT_TRUE(ParseJson(watched_json.stdout_text, &cancelled));
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(Run({"job", "show", "j-unknown"}).exit_code, 3);
}

TEST_F(TrainctlJobsTest, JobDataFromAnNpzOrTheDaemonsDataDirectoryWithEvaluation) {
  const v1::GenerateArtifactsResponse artifacts = Generate();
  WriteDataset(dir_ + "/data", 4);
  // An .npz of the same arrays, written by numpy.
  const testing::CommandResult saved = testing::RunCommand(
      "/usr/bin/python3",
      {"-c", absl::StrCat("import numpy as n; d='", dir_, "/data'; n.savez(d + '/set.npz', input=n.load(d + "
                          "'/input.npy'), target=n.load(d + '/target.npy'))")});
  ASSERT_EQ(saved.exit_code, 0) << saved.stderr_text;
  v1::Job from_npz;
  ASSERT_TRUE(ParseJson(Ok({"job", "submit", "--artifact", artifacts.artifact_id(), "--data", dir_ + "/data/set.npz",
                            "--epochs", "2", "--batch-size", "5", "--eval-fraction", "0.25", "--accuracy", "--watch",
                            "--json"}),
                        &from_npz));
  EXPECT_EQ(from_npz.state(), v1::SUCCEEDED);
  EXPECT_EQ(from_npz.evals_size(), 2);
  for (const v1::EvalMetrics& eval : from_npz.evals()) {
    EXPECT_EQ(eval.examples(), 5);
    EXPECT_GE(eval.accuracy(), 0);
    EXPECT_LE(eval.accuracy(), 1);
  }
  v1::Job from_path;
  ASSERT_TRUE(ParseJson(Ok({"job", "submit", "--artifact", artifacts.artifact_id(), "--data-path", "set.npz",
                            "--eval-path", "set.npz", "--epochs", "1", "--batch-size", "5", "--watch", "--json"}),
                        &from_path));
  EXPECT_EQ(from_path.state(), v1::SUCCEEDED);
  EXPECT_EQ(from_path.evals_size(), 1);
  // A path outside the data directory is refused by the daemon.
  const CommandResult escaped = Run({"job", "submit", "--artifact", artifacts.artifact_id(), "--data-path",
                                     "../set.npz", "--batch-size", "5"});
  EXPECT_EQ(escaped.exit_code, 3);
}

}  // namespace
}  // namespace traind
