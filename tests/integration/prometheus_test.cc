// A real Prometheus server (Debian's prometheus) scrapes a training traind on loopback, with traind's recording and
// alerting rules (deploy/prometheus/traind.rules.yml) loaded. Checked against it: a PromQL query for every metric of
// the daemon, every expression and template query of the Grafana dashboard (deploy/grafana/traind.json), and every
// rule (evaluated without error; each recorded series has data): what an operator's dashboards and alerts read.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/service.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using google::protobuf::Struct;
using google::protobuf::Value;

std::string Golden(const std::string& path) { return testing::RunfilePath("tests/golden/data/mlp/" + path); }

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

absl::StatusOr<Struct> ParseJson(const std::string& text) {
  Struct parsed;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &parsed, options);
  if (!status.ok()) return absl::InvalidArgumentError(std::string(status.message()));
  return parsed;
}

const Value& Field(const Struct& object, const std::string& name) {
  static const Value* const kNull = new Value();
  auto it = object.fields().find(name);
  return it == object.fields().end() ? *kNull : it->second;
}

// One daemon training a job (steps, examples, jobs, checkpoints every step), a poisoned step (non-finite), a
// failing call (NOT_FOUND), and a Prometheus scraping it every second with the rules evaluated every second.
class PrometheusTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string prometheus = "/usr/bin/prometheus";
    if (!std::filesystem::exists(prometheus)) {
      skip_reason_ = new std::string("Debian's prometheus is not installed (deploy/setup.sh installs it)");
      return;
    }
    auto daemon = testing::DaemonProcess::Start({"--checkpoint_every_steps=1"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = daemon->release();
    const std::string dir = testing::MakeTempDir("prometheus");
    const int port = testing::FreeLoopbackPort();
    ASSERT_GT(port, 0);
    {
      std::ofstream config(dir + "/prometheus.yml");
      config << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             << "rule_files:\n  - " << testing::RunfilePath("deploy/prometheus/traind.rules.yml") << "\n"
             << "scrape_configs:\n  - job_name: traind\n"
             << "    static_configs:\n      - targets: ['" << daemon_->metrics_address() << "']\n";
    }
    server_ = testing::ChildProcess::Start(
                  prometheus, {"--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                               absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"})
                  .release();
    address_ = new std::string(absl::StrCat("127.0.0.1:", port));
    Train();
  }

  static void TearDownTestSuite() {
    stop_polling_ = true;
    if (poller_ != nullptr) {
      poller_->join();
      delete poller_;
    }
    if (daemon_ != nullptr && !job_id_.empty()) {
      ConnectionOptions options;
      options.address = daemon_->grpc_address();
      auto stub = v1::TrainingService::NewStub(*Connect(options));
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::CancelJobRequest cancel;
      cancel.set_job_id(job_id_);
      v1::Job cancelled;
      (void)stub->CancelJob(&context, cancel, &cancelled);
    }
    delete server_;
    delete daemon_;
  }

  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_NE(daemon_, nullptr);
  }

  static void Train() {
    ConnectionOptions options;
    options.address = daemon_->grpc_address();
    auto stub = v1::TrainingService::NewStub(*Connect(options));
    auto call = [](auto method, const auto& request, auto* response) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      return method(&context, request, response);
    };
    v1::GenerateArtifactsRequest generate;
    generate.mutable_model()->set_onnx_bytes(testing::ReadWholeFile(Golden("model.onnx")));
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
        upload(testing::ReadWholeFile(Golden("inputs/input.npy")));
    (*spec.mutable_train_data()->mutable_npy_blobs()->mutable_blob_ids())["target"] =
        upload(testing::ReadWholeFile(Golden("targets/target.npy")));
    spec.set_epochs(100000);  // still running while Prometheus looks; cancelled at the end
    v1::Job job;
    ASSERT_TRUE(call([&](auto* c, const auto& r, auto* o) { return stub->SubmitJob(c, r, o); }, spec, &job).ok());
    job_id_ = job.job_id();
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
    ASSERT_TRUE(
        call([&](auto* c, const auto& r, auto* o) { return stub->TrainStep(c, r, o); }, poisoned, &skipped).ok());
    EXPECT_TRUE(skipped.skipped());
    // A call that fails: the RPC error panels have a non-OK code to show.
    v1::GetSessionRequest unknown;
    unknown.set_session_id("s-does-not-exist");
    v1::Session session;
    EXPECT_EQ(call([&](auto* c, const auto& r, auto* o) { return stub->GetSession(c, r, o); }, unknown, &session)
                  .error_code(),
              grpc::StatusCode::NOT_FOUND);
    // A client watching the job by polling (and asking for a session that is gone now and then) for as long as the
    // suite runs: RPC rates, latency quantiles and error ratios have traffic to measure, as in production.
    poller_ = new std::thread([stub = std::shared_ptr<v1::TrainingService::Stub>(std::move(stub)), call] {
      for (int i = 0; !stop_polling_; ++i) {
        v1::GetJobRequest get;
        get.set_job_id(job_id_);
        v1::Job job;
        (void)call([&](auto* c, const auto& r, auto* o) { return stub->GetJob(c, r, o); }, get, &job);
        if (i % 4 == 0) {
          v1::GetSessionRequest gone;
          gone.set_session_id("s-gone");
          v1::Session session;
          (void)call([&](auto* c, const auto& r, auto* o) { return stub->GetSession(c, r, o); }, gone, &session);
        }
        absl::SleepFor(absl::Milliseconds(200));
      }
    });
  }

  // True once `query` answers a non-empty vector whose values are numbers (not NaN); `last` gets the last answer.
  static bool AnswersWithData(const std::string& query, std::string* last) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::StatusOr<std::string> response = testing::HttpGet(*address_, "/api/v1/query?query=" + Encode(query));
      if (response.ok()) {
        *last = *response;
        if (response->find("\"status\":\"success\"") != std::string::npos &&
            response->find("\"result\":[{") != std::string::npos && response->find("NaN") == std::string::npos) {
          return true;
        }
      }
      absl::SleepFor(absl::Milliseconds(500));
    }
    return false;
  }

  static std::string PrometheusLog() { return server_->Log(); }

  static inline testing::DaemonProcess* daemon_ = nullptr;
  static inline testing::ChildProcess* server_ = nullptr;
  static inline std::string* address_ = nullptr;
  static inline std::string job_id_;  // the training job the poller watches
  static inline std::string* skip_reason_ = nullptr;
  static inline std::thread* poller_ = nullptr;
  static inline std::atomic<bool> stop_polling_{false};
};

TEST_F(PrometheusTest, AScrapingPrometheusAnswersAQueryForEveryMetric) {
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
      "traind_memory_limit_bytes",
      "process_resident_memory_bytes",
      "process_cpu_seconds_total",
      "up{job=\"traind\"}",
  };
  for (const std::string& query : queries) {
    SCOPED_TRACE(query);
    std::string body;
    EXPECT_TRUE(AnswersWithData(query, &body)) << "last answer: " << body << "\nprometheus log:\n" << PrometheusLog();
  }
}

// Grafana's variables, as the dashboard's defaults resolve them here.
std::string Substitute(std::string expression) {
  return absl::StrReplaceAll(expression, {{"$__rate_interval", "1m"}, {"$job", "traind"}, {"$instance", ".*"}});
}

TEST_F(PrometheusTest, EveryExpressionOfTheGrafanaDashboardReturnsData) {
  absl::StatusOr<Struct> dashboard = ParseJson(testing::ReadWholeFile(testing::RunfilePath("deploy/grafana/traind.json")));
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  std::vector<std::string> queries;
  for (const Value& panel : Field(*dashboard, "panels").list_value().values()) {
    const std::string title = Field(panel.struct_value(), "title").string_value();
    const auto& targets = Field(panel.struct_value(), "targets").list_value().values();
    EXPECT_FALSE(targets.empty()) << title;
    for (const Value& target : targets) {
      const std::string expr = Field(target.struct_value(), "expr").string_value();
      EXPECT_FALSE(expr.empty()) << title;
      queries.push_back(expr);
    }
  }
  // Template variables: label_values(SELECTOR, LABEL) has data when SELECTOR has series carrying LABEL.
  for (const Value& variable : Field(Field(*dashboard, "templating").struct_value(), "list").list_value().values()) {
    std::string query = Field(variable.struct_value(), "query").string_value();
    ASSERT_EQ(query.rfind("label_values(", 0), 0u) << query;
    const size_t comma = query.rfind(',');
    const std::string label = std::string(absl::StripAsciiWhitespace(query.substr(comma + 1, query.size() - comma - 2)));
    queries.push_back(absl::StrCat("group by (", label, ") (", query.substr(13, comma - 13), ")"));
  }
  EXPECT_GE(queries.size(), 20u);
  for (const std::string& query : queries) {
    SCOPED_TRACE(query);
    std::string body;
    EXPECT_TRUE(AnswersWithData(Substitute(query), &body))
        << "last answer: " << body << "\nprometheus log:\n" << PrometheusLog();
  }
}

TEST_F(PrometheusTest, EveryRuleEvaluatesAndEveryRecordedSeriesHasData) {
  std::vector<std::string> recorded;
  int alerts = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::string body;
  bool all_evaluated = false;
  while (!all_evaluated && absl::Now() < deadline) {
    recorded.clear();
    alerts = 0;
    absl::StatusOr<std::string> response = testing::HttpGet(*address_, "/api/v1/rules");
    if (response.ok()) {
      body = *response;
      absl::StatusOr<Struct> parsed = ParseJson(body);
      ASSERT_TRUE(parsed.ok()) << parsed.status() << body;
      all_evaluated = true;
      for (const Value& group : Field(Field(*parsed, "data").struct_value(), "groups").list_value().values()) {
        for (const Value& rule : Field(group.struct_value(), "rules").list_value().values()) {
          const Struct& fields = rule.struct_value();
          const std::string name = Field(fields, "name").string_value();
          EXPECT_NE(Field(fields, "health").string_value(), "err")
              << name << ": " << Field(fields, "lastError").string_value();
          all_evaluated &= Field(fields, "health").string_value() == "ok";
          if (Field(fields, "type").string_value() == "recording") {
            recorded.push_back(name);
          } else {
            ++alerts;
          }
        }
      }
    }
    if (!all_evaluated) absl::SleepFor(absl::Milliseconds(500));
  }
  ASSERT_TRUE(all_evaluated) << body;
  EXPECT_EQ(recorded.size(), 9u);
  EXPECT_EQ(alerts, 7);
  for (const std::string& series : recorded) {
    SCOPED_TRACE(series);
    EXPECT_TRUE(AnswersWithData(series, &body)) << "last answer: " << body;
  }
}

}  // namespace
}  // namespace traind
