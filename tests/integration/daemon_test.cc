// Starts the real traind binary on ephemeral ports and talks to it over real sockets: plaintext, TLS and mutual
// TLS (certificates generated at test time), health, metrics, limits, config file and graceful shutdown.
#include <signal.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "client/connection.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/test_certs.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using testing::DaemonProcess;

std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> flags = {}) {
  auto daemon = DaemonProcess::Start(std::move(flags));
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  return daemon.ok() ? std::move(*daemon) : nullptr;
}

std::shared_ptr<grpc::Channel> Channel(ConnectionOptions options) {
  auto channel = Connect(options);
  EXPECT_TRUE(channel.ok()) << channel.status();
  return *channel;
}

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, HealthCheckResponse* response,
                         const std::string& service = "") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckRequest request;
  request.set_service(service);
  return Health::NewStub(channel)->Check(&context, request, response);
}

ConnectionOptions Plain(const DaemonProcess& daemon) {
  ConnectionOptions options;
  options.address = daemon.grpc_address();
  return options;
}

TEST(DaemonTest, ServesHealthOverPlaintext) {
  auto daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  HealthCheckResponse response;
  grpc::Status status = CheckHealth(Channel(Plain(*daemon)), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  status = CheckHealth(Channel(Plain(*daemon)), &response, "traind.v1.TrainingService");
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  // An unknown service name is NOT_FOUND, as the health protocol specifies.
  EXPECT_EQ(CheckHealth(Channel(Plain(*daemon)), &response, "no.such.Service").error_code(), grpc::NOT_FOUND);
}

TEST(DaemonTest, MetricsAreValidPrometheusTextWithTheRpcCounter) {
  auto daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  HealthCheckResponse response;
  ASSERT_TRUE(CheckHealth(Channel(Plain(*daemon)), &response).ok());

  absl::StatusOr<std::string> body = testing::HttpGet(daemon->metrics_address(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  auto families = testing::ParsePrometheusText(*body);
  ASSERT_TRUE(families.ok()) << families.status() << "\n" << *body;
  const testing::PrometheusSample* requests = testing::FindSample(
      *families, "traind_rpc_requests_total", {{"method", "/grpc.health.v1.Health/Check"}, {"code", "OK"}});
  ASSERT_NE(requests, nullptr) << *body;
  EXPECT_GE(requests->value, 1);
  EXPECT_NE(testing::FindSample(*families, "traind_rpc_duration_seconds_count",
                                {{"method", "/grpc.health.v1.Health/Check"}}),
            nullptr);
  EXPECT_NE(testing::FindSample(*families, "traind_build_info", {{"version", "0.1.0"}}), nullptr);
  const testing::PrometheusSample* rss = testing::FindSample(*families, "process_resident_memory_bytes", {});
  ASSERT_NE(rss, nullptr);
  EXPECT_GT(rss->value, 1e6);
}

TEST(DaemonTest, ServerInfoListsTheImplementedRpcsAndTheLimits) {
  auto daemon = StartDaemon({"--max_concurrent_steps=2", "--default_num_threads=1"});
  ASSERT_NE(daemon, nullptr);
  auto stub = traind::v1::TrainingService::NewStub(Channel(Plain(*daemon)));
  grpc::ClientContext info_context;
  traind::v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.version(), "0.1.0");
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName("traind.v1.TrainingService");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(info.implemented_rpcs().size(), static_cast<size_t>(service->method_count()));
  for (const char* rpc : {"GenerateArtifacts", "CreateSession", "TrainStep", "OptimizerStep", "Eval",
                          "SaveCheckpoint", "LoadCheckpoint", "GetParameters", "SetParameters", "ExportForInference"}) {
    EXPECT_TRUE(info.implemented_rpcs().at(rpc)) << rpc;
  }
  EXPECT_EQ(info.max_concurrent_steps(), 2);
  EXPECT_EQ(info.default_num_threads(), 1);
  EXPECT_THAT(info.losses(), ::testing::Contains("CrossEntropyLoss"));

  // Implemented for real: an empty CreateSession names what is missing.
  grpc::ClientContext context;
  traind::v1::Session session;
  EXPECT_EQ(stub->CreateSession(&context, {}, &session).error_code(), grpc::INVALID_ARGUMENT);
}

TEST(DaemonTest, OversizedMessageIsRefusedWithResourceExhausted) {
  auto daemon = StartDaemon({"--max_message_bytes=4096"});
  ASSERT_NE(daemon, nullptr);
  ConnectionOptions options = Plain(*daemon);
  auto stub = traind::v1::TrainingService::NewStub(Channel(options));
  traind::v1::TrainStepRequest request;
  request.set_session_id("s");
  request.add_inputs()->set_data(std::string(100000, 'x'));
  grpc::ClientContext context;
  traind::v1::TrainStepResponse response;
  const grpc::Status status = stub->TrainStep(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::RESOURCE_EXHAUSTED) << status.error_message();
  // The daemon is unharmed.
  HealthCheckResponse health;
  EXPECT_TRUE(CheckHealth(Channel(options), &health).ok());
}

TEST(DaemonTest, TlsRefusesPlaintextClientsAndServesTlsClients) {
  const testing::PemFiles pki = testing::GenerateTestPki(testing::MakeTempDir("pki"), "");
  auto daemon = StartDaemon({"--tls_cert=" + pki.server_cert, "--tls_key=" + pki.server_key});
  ASSERT_NE(daemon, nullptr);
  HealthCheckResponse response;
  EXPECT_EQ(CheckHealth(Channel(Plain(*daemon)), &response).error_code(), grpc::UNAVAILABLE);

  ConnectionOptions tls = Plain(*daemon);
  tls.tls_ca_path = pki.ca_cert;
  const grpc::Status status = CheckHealth(Channel(tls), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  // A client that trusts another CA refuses the server.
  const testing::PemFiles other = testing::GenerateTestPki(testing::MakeTempDir("pki"), "other-");
  ConnectionOptions wrong_ca = Plain(*daemon);
  wrong_ca.tls_ca_path = other.ca_cert;
  EXPECT_EQ(CheckHealth(Channel(wrong_ca), &response).error_code(), grpc::UNAVAILABLE);
}

TEST(DaemonTest, MutualTlsRequiresAClientCertificateFromTheClientCa) {
  const testing::PemFiles pki = testing::GenerateTestPki(testing::MakeTempDir("pki"), "");
  auto daemon = StartDaemon(
      {"--tls_cert=" + pki.server_cert, "--tls_key=" + pki.server_key, "--tls_client_ca=" + pki.ca_cert});
  ASSERT_NE(daemon, nullptr);
  HealthCheckResponse response;

  ConnectionOptions no_cert = Plain(*daemon);
  no_cert.tls_ca_path = pki.ca_cert;
  EXPECT_EQ(CheckHealth(Channel(no_cert), &response).error_code(), grpc::UNAVAILABLE);

  const testing::PemFiles other = testing::GenerateTestPki(testing::MakeTempDir("pki"), "other-");
  ConnectionOptions foreign_cert = no_cert;
  foreign_cert.tls_cert_path = other.client_cert;
  foreign_cert.tls_key_path = other.client_key;
  EXPECT_EQ(CheckHealth(Channel(foreign_cert), &response).error_code(), grpc::UNAVAILABLE);

  ConnectionOptions with_cert = no_cert;
  with_cert.tls_cert_path = pki.client_cert;
  with_cert.tls_key_path = pki.client_key;
  const grpc::Status status = CheckHealth(Channel(with_cert), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
}

TEST(DaemonTest, BadTlsFilesStopStartUpWithAClearError) {
  const testing::PemFiles pki = testing::GenerateTestPki(testing::MakeTempDir("pki"), "");
  const testing::PemFiles other = testing::GenerateTestPki(testing::MakeTempDir("pki"), "other-");
  const std::string state = "--state_dir=" + testing::MakeTempDir("state");
  testing::ExitResult mismatch =
      testing::RunToExit(testing::RunfilePath("server/traind"),
                         {"--listen=127.0.0.1:0", "--metrics_listen=", state, "--tls_cert=" + pki.server_cert,
                          "--tls_key=" + other.server_key},
                         absl::Seconds(10));
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_THAT(mismatch.output, HasSubstr("does not match the certificate"));

  testing::ExitResult missing = testing::RunToExit(
      testing::RunfilePath("server/traind"),
      {"--listen=127.0.0.1:0", "--metrics_listen=", state, "--tls_cert=/nonexistent.pem", "--tls_key=/x.key"},
      absl::Seconds(10));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent.pem"));
}

TEST(DaemonTest, SigtermDrainsReportsNotServingAndExitsZeroWithinTwoSeconds) {
  auto daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  // A Watch stream is an in-flight RPC; it must see the status flip to NOT_SERVING during the drain.
  grpc::ClientContext watch_context;
  HealthCheckRequest request;
  auto watch = Health::NewStub(Channel(Plain(*daemon)))->Watch(&watch_context, request);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  absl::Duration elapsed;
  absl::StatusOr<int> exit_code = daemon->SignalAndWait(SIGTERM, absl::Seconds(5), &elapsed);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << daemon->Log();
  EXPECT_LT(elapsed, absl::Seconds(2)) << daemon->Log();
  bool saw_not_serving = false;
  while (watch->Read(&update)) saw_not_serving |= update.status() == HealthCheckResponse::NOT_SERVING;
  EXPECT_TRUE(saw_not_serving);
  EXPECT_THAT(daemon->Log(), HasSubstr("msg=draining"));
  EXPECT_THAT(daemon->Log(), HasSubstr("msg=stopped"));
}

TEST(DaemonTest, DrainGraceKeepsAcceptingWhileNotServingThenRefuses) {
  auto daemon = StartDaemon({"--drain_grace=1s"});
  ASSERT_NE(daemon, nullptr);
  auto channel = Channel(Plain(*daemon));
  HealthCheckResponse response;
  ASSERT_TRUE(CheckHealth(channel, &response).ok());
  const pid_t pid = daemon->pid();
  kill(pid, SIGTERM);
  absl::SleepFor(absl::Milliseconds(300));
  // Inside the grace period: still answering, but NOT_SERVING.
  const grpc::Status during = CheckHealth(channel, &response);
  ASSERT_TRUE(during.ok()) << during.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  absl::Duration elapsed;
  absl::StatusOr<int> exit_code = daemon->SignalAndWait(0, absl::Seconds(5), &elapsed);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
  EXPECT_NE(CheckHealth(channel, &response).error_code(), grpc::OK);
}

TEST(DaemonTest, ConfigFileSetsFlagsAndCommandLineWins) {
  const std::string dir = testing::MakeTempDir("config");
  const std::string config = dir + "/traind.conf";
  std::ofstream(config) << "# test config\nmax_message_bytes = 12345\nmax_sessions = 7\nlisten = 127.0.0.1:1\n";
  // --listen on the command line overrides the file's unusable port 1.
  auto daemon = StartDaemon({"--config=" + config, "--listen=127.0.0.1:0"});
  ASSERT_NE(daemon, nullptr);
  auto stub = traind::v1::TrainingService::NewStub(Channel(Plain(*daemon)));
  grpc::ClientContext context;
  traind::v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.max_sessions(), 7);
  EXPECT_EQ(info.max_message_bytes(), 12345);

  std::ofstream(config) << "no_such_setting = 1\n";
  testing::ExitResult bad = testing::RunToExit(testing::RunfilePath("server/traind"), {"--config=" + config},
                                               absl::Seconds(10));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("no_such_setting"));
}

TEST(DaemonTest, SecondDaemonOnTheSameStateDirIsRefused) {
  const std::string state = "--state_dir=" + testing::MakeTempDir("shared-state");
  auto first = StartDaemon({state});
  ASSERT_NE(first, nullptr);
  testing::ExitResult second = testing::RunToExit(testing::RunfilePath("server/traind"),
                                                  {state, "--listen=127.0.0.1:0", "--metrics_listen="},
                                                  absl::Seconds(10));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_THAT(second.output, HasSubstr("in use by another traind"));
}

TEST(DaemonTest, ReflectionIsServedOnlyWhenEnabled) {
  auto with = StartDaemon({"--enable_reflection"});
  auto without = StartDaemon();
  ASSERT_NE(with, nullptr);
  ASSERT_NE(without, nullptr);
  // grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo: a stream that answers list_services.
  // The request bytes: field 7 (list_services) = "" -> 0x3a 0x00.
  auto call_reflection = [](const std::string& address, std::string* reply) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::CompletionQueue queue;
    auto call = stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
    void* tag = nullptr;
    bool ok = false;
    call->StartCall(reinterpret_cast<void*>(1));
    queue.Next(&tag, &ok);
    const std::string request("\x3a\x00", 2);
    grpc::Slice slice(request);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    queue.Next(&tag, &ok);
    call->WritesDone(reinterpret_cast<void*>(3));
    queue.Next(&tag, &ok);
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(4));
    queue.Next(&tag, &ok);
    if (ok) {
      std::vector<grpc::Slice> slices;
      (void)response.Dump(&slices);
      for (const auto& s : slices) reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    while (queue.Next(&tag, &ok) && tag != reinterpret_cast<void*>(5)) {
    }
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
    return status;
  };
  std::string reply;
  const grpc::Status enabled = call_reflection(with->grpc_address(), &reply);
  EXPECT_TRUE(enabled.ok()) << enabled.error_message();
  EXPECT_THAT(reply, HasSubstr("traind.v1.TrainingService"));
  std::string no_reply;
  EXPECT_EQ(call_reflection(without->grpc_address(), &no_reply).error_code(), grpc::UNIMPLEMENTED);
}

}  // namespace
}  // namespace traind

namespace traind {
namespace {

TEST(DaemonSignalsTest, SigintDrainsAndExitsZeroLikeSigterm) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  absl::Duration elapsed;
  absl::StatusOr<int> exit_code = (*daemon)->SignalAndWait(SIGINT, absl::Seconds(5), &elapsed);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
  EXPECT_LT(elapsed, absl::Seconds(2));
  EXPECT_THAT((*daemon)->Log(), ::testing::HasSubstr("signal=Interrupt"));
}

}  // namespace
}  // namespace traind
