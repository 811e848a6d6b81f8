// Overload against the real daemon: 10x its limits in concurrent requests. What does not fit is refused with
// RESOURCE_EXHAUSTED at once (not queued without bound), health stays SERVING, the admitted work completes, and the
// daemon's memory does not grow with the flood.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using Stub = v1::TrainingService::Stub;

// A chain of kDepth MatMuls of kWidth x kWidth on a batch of kBatch: steps of about ten milliseconds on 2 cores,
// with requests small enough (64 KiB) that the flood measures the daemon, not the loopback link.
constexpr int64_t kWidth = 512, kBatch = 16, kDepth = 16;

std::string GemmModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("load");
  for (const char* name : {"x", "y"}) {
    onnx::ValueInfoProto* value = name[0] == 'x' ? graph->add_input() : graph->add_output();
    value->set_name(name);
    value->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    value->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(kBatch);
    value->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(kWidth);
  }
  for (int layer = 0; layer < kDepth; ++layer) {
    const std::string weight_name = absl::StrCat("W", layer);
    onnx::TensorProto* weight = graph->add_initializer();
    weight->set_name(weight_name);
    weight->set_data_type(onnx::TensorProto::FLOAT);
    weight->add_dims(kWidth);
    weight->add_dims(kWidth);
    weight->set_raw_data(std::string(kWidth * kWidth * sizeof(float), '\0'));
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("MatMul");
    node->add_input(layer == 0 ? "x" : absl::StrCat("h", layer - 1));
    node->add_input(weight_name);
    node->add_output(layer == kDepth - 1 ? "y" : absl::StrCat("h", layer));
  }
  return model.SerializeAsString();
}

v1::TrainStepRequest Step(const std::string& session) {
  v1::TrainStepRequest request;
  request.set_session_id(session);
  for (const char* name : {"x", "target"}) {
    v1::Tensor* tensor = request.add_inputs();
    tensor->set_name(name);
    tensor->set_dtype(v1::FLOAT32);
    tensor->add_shape(kBatch);
    tensor->add_shape(kWidth);
    tensor->set_data(std::string(kBatch * kWidth * sizeof(float), '\0'));
  }
  return request;
}

int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kilobytes = 0;
      std::string number = line.substr(6);
      number.erase(number.find_last_not_of(" kB") + 1);
      number.erase(0, number.find_first_not_of(' '));
      if (absl::SimpleAtoi(number, &kilobytes)) return kilobytes * 1024;
    }
  }
  return -1;
}

struct Outcome {
  grpc::StatusCode code;
  absl::Duration latency;
};

TEST(OverloadTest, TenTimesTheLimitsIsRefusedAtOnceWhileTheAdmittedWorkCompletes) {
  auto daemon = testing::DaemonProcess::Start(
      {"--max_concurrent_steps=1", "--max_queued_steps=2", "--max_sessions=4", "--max_waiting_calls_per_session=2",
       "--default_num_threads=2"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ConnectionOptions options;
  options.address = (*daemon)->grpc_address();
  auto channel = *Connect(options);
  auto stub = v1::TrainingService::NewStub(channel);
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(GemmModel());
  generate.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
  v1::GenerateArtifactsResponse artifacts;
  grpc::ClientContext generate_context;
  ASSERT_TRUE(stub->GenerateArtifacts(&generate_context, generate, &artifacts).ok());

  // Sessions: 10x the limit of 4 at once.
  std::vector<std::string> sessions;
  std::vector<Outcome> creations;
  {
    std::vector<std::thread> clients;
    std::mutex outcomes_mu;
    for (int i = 0; i < 40; ++i) {
      clients.emplace_back([&] {
        v1::CreateSessionRequest create;
        create.set_artifact_id(artifacts.artifact_id());
        v1::Session session;
        grpc::ClientContext context;
        const absl::Time start = absl::Now();
        const grpc::Status status = stub->CreateSession(&context, create, &session);
        std::lock_guard<std::mutex> lock(outcomes_mu);
        creations.push_back({status.error_code(), absl::Now() - start});
        if (status.ok()) sessions.push_back(session.session_id());
      });
    }
    for (std::thread& client : clients) client.join();
  }
  ASSERT_EQ(sessions.size(), 4u);
  for (const Outcome& outcome : creations) {
    if (outcome.code == grpc::OK) continue;
    EXPECT_EQ(outcome.code, grpc::RESOURCE_EXHAUSTED);
  }
  for (int i = 0; i < 3; ++i) {  // warm up each session (first runs allocate)
    for (const std::string& session : sessions) {
      v1::TrainStepResponse response;
      grpc::ClientContext context;
      ASSERT_TRUE(stub->TrainStep(&context, Step(session), &response).ok());
    }
  }
  // Steps: one runs and two may wait (--max_queued_steps), and two more may wait for each session: 3 calls are in
  // the daemon at most. 120 arrive at once, spread over the sessions; it happens twice.
  std::vector<Outcome> steps;
  std::vector<absl::Duration> health_latencies;
  std::vector<int64_t> resident;
  for (int flood = 0; flood < 2; ++flood) {
    std::mutex steps_mu;
    std::atomic<bool> flooding{true};
    std::thread health_client([&] {
      // Its own connection, as a load balancer's probe has.
      auto health = grpc::health::v1::Health::NewStub(*Connect(options));
      while (flooding) {
        grpc::ClientContext context;
        grpc::health::v1::HealthCheckResponse response;
        const absl::Time start = absl::Now();
        const grpc::Status status = health->Check(&context, {}, &response);
        EXPECT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
        health_latencies.push_back(absl::Now() - start);
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
    // 120 clients on 12 connections, every thread and connection ready before the flood starts, so that the
    // latencies measure the daemon rather than thread start-up or one connection's queue.
    std::vector<std::unique_ptr<Stub>> stubs;
    for (int c = 0; c < 12; ++c) {
      grpc::ChannelArguments arguments;
      arguments.SetInt("flood_connection", c);  // distinct arguments: distinct connections
      auto connection = grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), arguments);
      ASSERT_TRUE(connection->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
      stubs.push_back(v1::TrainingService::NewStub(connection));
    }
    std::vector<v1::TrainStepRequest> requests;
    for (int i = 0; i < 120; ++i) requests.push_back(Step(sessions[i % sessions.size()]));
    std::atomic<int> ready{0};
    absl::Notification go;
    std::vector<std::thread> clients;
    for (int i = 0; i < 120; ++i) {
      clients.emplace_back([&, i] {
        v1::TrainStepResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        ++ready;
        go.WaitForNotification();
        const absl::Time start = absl::Now();
        const grpc::Status status = stubs[i % stubs.size()]->TrainStep(&context, requests[i], &response);
        const absl::Time end = absl::Now();
        std::lock_guard<std::mutex> lock(steps_mu);
        steps.push_back({status.error_code(), end - start});
      });
    }
    while (ready < 120) absl::SleepFor(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(50));  // every client is blocked in the wait now
    go.Notify();
    for (std::thread& client : clients) client.join();
    flooding = false;
    health_client.join();
    resident.push_back(ResidentBytes((*daemon)->pid()));
  }

  int admitted = 0, refused = 0;
  absl::Duration slowest_refusal;
  for (const Outcome& outcome : steps) {
    if (outcome.code == grpc::OK) {
      ++admitted;
    } else {
      ASSERT_EQ(outcome.code, grpc::RESOURCE_EXHAUSTED);
      ++refused;
      slowest_refusal = std::max(slowest_refusal, outcome.latency);
    }
  }
  // The running step, the queue and each session's waiting callers are the admitted ones; the rest are refused.
  EXPECT_GE(admitted, 6);
  EXPECT_GE(refused, 120);
  EXPECT_EQ(admitted + refused, 240);
  std::vector<absl::Duration> refusals;
  for (const Outcome& outcome : steps) {
    if (outcome.code != grpc::OK) refusals.push_back(outcome.latency);
  }
  std::sort(refusals.begin(), refusals.end());
  std::vector<absl::Duration> admissions;
  for (const Outcome& outcome : steps) {
    if (outcome.code == grpc::OK) admissions.push_back(outcome.latency);
  }
  std::sort(admissions.begin(), admissions.end());
  std::printf("admitted: %zu, median %s, slowest %s\n", admissions.size(),
              absl::FormatDuration(admissions[admissions.size() / 2]).c_str(),
              absl::FormatDuration(admissions.back()).c_str());
  std::printf("refusals: %zu, median %s, p90 %s, slowest %s\n", refusals.size(),
              absl::FormatDuration(refusals[refusals.size() / 2]).c_str(),
              absl::FormatDuration(refusals[refusals.size() * 9 / 10]).c_str(),
              absl::FormatDuration(slowest_refusal).c_str());
  // A refusal must not wait for compute. On a quiet machine it takes a few milliseconds; on a loaded one (other
  // tests beside it on two cores) every call slows, refusals included (slowest 60-100 ms seen), so the bound is the
  // larger of 50 ms and half the slowest admitted call, which waited for the steps before its own: a refusal
  // queued behind the compute would take about as long as that.
  const absl::Duration refusal_bound = std::max(absl::Milliseconds(50), admissions.back() / 2);
  EXPECT_LT(slowest_refusal, refusal_bound) << "a refusal waited";
  ASSERT_FALSE(health_latencies.empty());
  for (const absl::Duration latency : health_latencies) EXPECT_LT(latency, absl::Seconds(1));
  // Memory is bounded (by --max_rpc_threads x the message size, whatever gRPC reads in): a second flood does not
  // grow the daemon further.
  EXPECT_LT(resident[1], resident[0] + (32 << 20)) << resident[0] << " -> " << resident[1];
}

}  // namespace
}  // namespace traind
