// A real Prometheus server (Debian's prometheus) scrapes a training traind on loopback, and a PromQL query for every
// metric of the daemon returns data: what an operator's dashboards and alerts will read.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
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
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using Stub = v1::TrainingService::Stub;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string Golden(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/tests/golden/data/mlp/", path);
}

// URL-encodes a PromQL expression for a query string.
std::string Encode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      char buffer[4];
      std::snprintf(buffer, sizeof(buffer), "%%%02X", c);
      out += buffer;
    }
  }
  return out;
}

TEST(PrometheusTest, AScrapingPrometheusAnswersAQueryForEveryMetric) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!std::filesystem::exists(prometheus)) {
    GTEST_SKIP() << "Debian's prometheus is not installed (deploy/setup.sh installs it): skipping the scrape check";
  }
  auto daemon = testing::DaemonProcess::Start({"--checkpoint_every_steps=1"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string dir = testing::MakeTempDir("prometheus");
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  {
    std::ofstream config(dir + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: traind\n"
           << "    static_configs:\n      - targets: ['" << (*daemon)->metrics_address() << "']\n";
  }
  auto server = testing::ChildProcess::Start(
      prometheus, {"--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                   absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"});
  const std::string address = absl::StrCat("127.0.0.1:", port);

  // Train: a job (steps, examples, jobs, checkpoints) and a poisoned step (a non-finite loss).
  ConnectionOptions options;
  options.address = (*daemon)->grpc_address();
  auto stub = v1::TrainingService::NewStub(*Connect(options));
  auto call = [](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return method(&context, request, response);
  };
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(ReadFile(Golden("model.onnx")));
  generate.mutable_loss()->mutable_builtin()->set_type(v1::CROSS_ENTROPY);
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_TRUE(call([&](auto* c, const auto& r, auto* o) { return stub->GenerateArtifacts(c, r, o); }, generate,
                   &artifacts)
                  .ok());
  auto upload = [&](const std::string& content) {
    grpc::ClientContext context;
    v1::UploadBlobResponse response;
    auto writer = stub->UploadBlob(&context, &response);
    v1::UploadBlobRequest header, chunk;
    header.mutable_header()->set_total_bytes(static_cast<int64_t>(content.size()));
    chunk.set_chunk(content);
    writer->Write(header);
    writer->Write(chunk);
    writer->WritesDone();
    EXPECT_TRUE(writer->Finish().ok());
    return response.blob_id();
  };
  v1::JobSpec spec;
  spec.set_artifact_id(artifacts.artifact_id());
  (*spec.mutable_train_data()->mutable_npy_blobs()->mutable_blob_ids())["input"] =
      upload(ReadFile(Golden("inputs/input.npy")));
  (*spec.mutable_train_data()->mutable_npy_blobs()->mutable_blob_ids())["target"] =
      upload(ReadFile(Golden("targets/target.npy")));
  spec.set_epochs(100000);  // still running while Prometheus looks; cancelled at the end
  v1::Job job;
  ASSERT_TRUE(call([&](auto* c, const auto& r, auto* o) { return stub->SubmitJob(c, r, o); }, spec, &job).ok());
  v1::TrainStepRequest poisoned;
  poisoned.set_session_id(job.session_id());
  for (const char* name : {"input", "target"}) {
    auto tensor = engine::ReadNpy(Golden(std::string(name[0] == 'i' ? "inputs/" : "targets/") + name + ".npy"));
    ASSERT_TRUE(tensor.ok());
    if (name[0] == 'i') tensor->mutable_data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    v1::Tensor* wire = poisoned.add_inputs();
    wire->set_name(name);
    wire->set_dtype(name[0] == 'i' ? v1::FLOAT32 : v1::INT64);
    for (int64_t dim : tensor->shape()) wire->add_shape(dim);
    wire->set_data(std::string(static_cast<const char*>(tensor->raw_data()), tensor->byte_size()));
  }
  v1::TrainStepResponse skipped;
  ASSERT_TRUE(call([&](auto* c, const auto& r, auto* o) { return stub->TrainStep(c, r, o); }, poisoned, &skipped).ok());
  EXPECT_TRUE(skipped.skipped());

  const std::vector<std::string> queries = {
      "traind_train_steps_total{result=\"ok\"}",
      "traind_train_steps_total{result=\"skipped\"}",
      "traind_nonfinite_steps_total",
      "rate(traind_examples_total[1m])",
      "histogram_quantile(0.9, rate(traind_step_duration_seconds_bucket[1m]))",
      "traind_sessions{tenant=\"default\"}",
      "traind_jobs{state=\"running\"}",
      "traind_checkpoint_save_duration_seconds_count",
      "traind_checkpoint_saves_total{result=\"ok\"}",
      "traind_bytes_stored",
      "sum by (code) (traind_rpc_requests_total)",
      "traind_rpc_duration_seconds_count",
      "traind_build_info",
      "process_resident_memory_bytes",
      "process_cpu_seconds_total",
      "up{job=\"traind\"}",
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (const std::string& query : queries) {
    SCOPED_TRACE(query);
    std::string body;
    bool answered = false;
    while (!answered && absl::Now() < deadline) {
      absl::StatusOr<std::string> response = testing::HttpGet(address, "/api/v1/query?query=" + Encode(query));
      if (response.ok()) {
        body = *response;
        // A non-empty vector result: at least one sample with a value.
        answered = body.find("\"status\":\"success\"") != std::string::npos &&
                   body.find("\"result\":[{") != std::string::npos && body.find("NaN") == std::string::npos;
      }
      if (!answered) absl::SleepFor(absl::Milliseconds(500));
    }
    EXPECT_TRUE(answered) << "last answer: " << body << "\nprometheus log:\n" << server->Log();
  }
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job.job_id());
  v1::Job cancelled;
  (void)call([&](auto* c, const auto& r, auto* o) { return stub->CancelJob(c, r, o); }, cancel, &cancelled);
}

}  // namespace
}  // namespace traind
