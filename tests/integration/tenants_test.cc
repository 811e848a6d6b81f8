// The auth matrix against the real daemon: no token, wrong token, another tenant's ids, quotas, a token bound to a
// client certificate, a certificate from the wrong CA, tenants reloaded on SIGHUP; health stays unauthenticated.
#include <signal.h>

#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "engine/io/file_util.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/test_certs.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using Stub = v1::TrainingService::Stub;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string MlpModel() {
  return ReadFile(absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                               "/tests/golden/data/mlp/model.onnx"));
}

std::string TenantsFile(const std::string& extra = "") {
  return absl::StrCat("[tenant alice]\ntoken_sha256 = ", engine::Sha256Hex("alice-secret"),
                      "\nmax_sessions = 2\n\n[tenant bob]\ntoken_sha256 = ", engine::Sha256Hex("bob-secret"),
                      "\nmax_stored_bytes = 200000\n\n[tenant carol]\ntoken_sha256 = ",
                      engine::Sha256Hex("carol-secret"), "\nclient_cert_cn = traind test client\n", extra);
}

// A client of one tenant: every call carries its token.
class TenantClient {
 public:
  TenantClient(std::shared_ptr<grpc::Channel> channel, std::string token)
      : stub_(v1::TrainingService::NewStub(channel)), token_(std::move(token)) {}

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
    return ((*stub_).*method)(&context, request, response);
  }

  grpc::Status Upload(const std::string& content, std::string* blob_id) {
    grpc::ClientContext context;
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
    v1::UploadBlobResponse response;
    auto writer = stub_->UploadBlob(&context, &response);
    v1::UploadBlobRequest header, chunk;
    header.mutable_header()->set_total_bytes(static_cast<int64_t>(content.size()));
    chunk.set_chunk(content);
    writer->Write(header);
    writer->Write(chunk);
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    *blob_id = response.blob_id();
    return status;
  }

  grpc::Status Generate(v1::GenerateArtifactsResponse* artifacts) {
    v1::GenerateArtifactsRequest request;
    request.mutable_model()->set_onnx_bytes(MlpModel());
    request.mutable_loss()->mutable_builtin()->set_type(v1::CROSS_ENTROPY);
    return Call(&Stub::GenerateArtifacts, request, artifacts);
  }

  grpc::Status CreateSession(const std::string& artifact_id, v1::Session* session) {
    v1::CreateSessionRequest request;
    request.set_artifact_id(artifact_id);
    return Call(&Stub::CreateSession, request, session);
  }

 private:
  std::unique_ptr<Stub> stub_;
  std::string token_;
};

std::shared_ptr<grpc::Channel> Channel(const ConnectionOptions& options) {
  auto channel = Connect(options);
  EXPECT_TRUE(channel.ok()) << channel.status();
  return *channel;
}

TEST(TenantsTest, TokensOwnershipQuotasAndReload) {
  const std::string dir = testing::MakeTempDir("tenants");
  const std::string tenants_path = dir + "/tenants.conf";
  ASSERT_TRUE(engine::WriteFileAtomically(tenants_path, TenantsFile()).ok());
  auto daemon = testing::DaemonProcess::Start({"--tenants_file=" + tenants_path});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ConnectionOptions options;
  options.address = (*daemon)->grpc_address();
  auto channel = Channel(options);
  TenantClient anonymous(channel, ""), mallory(channel, "mallory-guess"), alice(channel, "alice-secret"),
      bob(channel, "bob-secret");

  // No token, a wrong token: UNAUTHENTICATED, whatever the call.
  v1::GenerateArtifactsResponse artifacts;
  for (TenantClient* stranger : {&anonymous, &mallory}) {
    EXPECT_EQ(stranger->Generate(&artifacts).error_code(), grpc::UNAUTHENTICATED);
    v1::ListSessionsResponse list;
    EXPECT_EQ(stranger->Call(&Stub::ListSessions, v1::ListSessionsRequest(), &list).error_code(),
              grpc::UNAUTHENTICATED);
    std::string blob;
    EXPECT_EQ(stranger->Upload("x", &blob).error_code(), grpc::UNAUTHENTICATED);
  }
  // Health and server information stay open.
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext health_context;
  grpc::health::v1::HealthCheckResponse serving;
  ASSERT_TRUE(health->Check(&health_context, {}, &serving).ok());
  EXPECT_EQ(serving.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  v1::ServerInfo info;
  EXPECT_TRUE(anonymous.Call(&Stub::GetServerInfo, v1::GetServerInfoRequest(), &info).ok());

  // Alice's artifacts, session, checkpoint and blob do not exist for Bob.
  ASSERT_TRUE(alice.Generate(&artifacts).ok());
  v1::Session session;
  ASSERT_TRUE(alice.CreateSession(artifacts.artifact_id(), &session).ok());
  EXPECT_EQ(session.tenant(), "alice");
  v1::SaveCheckpointRequest save;
  save.set_session_id(session.session_id());
  save.set_name("alice-ckpt");
  v1::SaveCheckpointResponse saved;
  ASSERT_TRUE(alice.Call(&Stub::SaveCheckpoint, save, &saved).ok());
  std::string alice_blob;
  ASSERT_TRUE(alice.Upload("alice's data", &alice_blob).ok());

  v1::Session stolen;
  EXPECT_EQ(bob.CreateSession(artifacts.artifact_id(), &stolen).error_code(), grpc::NOT_FOUND);
  v1::GetSessionRequest get;
  get.set_session_id(session.session_id());
  EXPECT_EQ(bob.Call(&Stub::GetSession, get, &stolen).error_code(), grpc::NOT_FOUND);
  v1::GetParametersRequest parameters;
  parameters.set_session_id(session.session_id());
  v1::GetParametersResponse values;
  EXPECT_EQ(bob.Call(&Stub::GetParameters, parameters, &values).error_code(), grpc::NOT_FOUND);
  v1::CloseSessionRequest close;
  close.set_session_id(session.session_id());
  v1::CloseSessionResponse closed;
  EXPECT_EQ(bob.Call(&Stub::CloseSession, close, &closed).error_code(), grpc::NOT_FOUND);
  v1::GetBlobInfoRequest blob_info;
  blob_info.set_blob_id(alice_blob);
  v1::UploadBlobResponse blob;
  EXPECT_EQ(bob.Call(&Stub::GetBlobInfo, blob_info, &blob).error_code(), grpc::NOT_FOUND);
  EXPECT_TRUE(alice.Call(&Stub::GetBlobInfo, blob_info, &blob).ok());
  v1::GenerateArtifactsResponse bob_artifacts;
  ASSERT_TRUE(bob.Generate(&bob_artifacts).ok());
  v1::Session bob_session;
  ASSERT_TRUE(bob.CreateSession(bob_artifacts.artifact_id(), &bob_session).ok());
  v1::LoadCheckpointRequest load;
  load.set_session_id(bob_session.session_id());
  load.set_name("alice-ckpt");
  v1::LoadCheckpointResponse loaded;
  EXPECT_EQ(bob.Call(&Stub::LoadCheckpoint, load, &loaded).error_code(), grpc::NOT_FOUND);
  v1::ListSessionsResponse bob_list;
  ASSERT_TRUE(bob.Call(&Stub::ListSessions, v1::ListSessionsRequest(), &bob_list).ok());
  ASSERT_EQ(bob_list.sessions_size(), 1);
  EXPECT_EQ(bob_list.sessions(0).session_id(), bob_session.session_id());

  // Quotas: Alice may have two sessions; Bob may store 200000 bytes.
  v1::Session second, third;
  ASSERT_TRUE(alice.CreateSession(artifacts.artifact_id(), &second).ok());
  const grpc::Status over = alice.CreateSession(artifacts.artifact_id(), &third);
  EXPECT_EQ(over.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over.error_message(), HasSubstr("quota of 2 sessions"));
  std::string big_blob;
  const grpc::Status too_big = bob.Upload(std::string(300000, 'b'), &big_blob);
  EXPECT_EQ(too_big.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_THAT(too_big.error_message(), HasSubstr("quota"));

  // A new tenant after SIGHUP; a bad file keeps the configuration that works.
  TenantClient dave(channel, "dave-secret");
  EXPECT_EQ(dave.Generate(&artifacts).error_code(), grpc::UNAUTHENTICATED);
  ASSERT_TRUE(engine::WriteFileAtomically(
                  tenants_path, TenantsFile(absl::StrCat("\n[tenant dave]\ntoken_sha256 = ",
                                                         engine::Sha256Hex("dave-secret"), "\n")))
                  .ok());
  ASSERT_EQ(::kill((*daemon)->pid(), SIGHUP), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!dave.Generate(&artifacts).ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(dave.Generate(&artifacts).ok());
  ASSERT_TRUE(engine::WriteFileAtomically(tenants_path, "[tenant broken\n").ok());
  ASSERT_EQ(::kill((*daemon)->pid(), SIGHUP), 0);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(dave.Generate(&artifacts).ok());
  EXPECT_THAT((*daemon)->Log(), HasSubstr("tenants file not reloaded"));
}

TEST(TenantsTest, ATokenBoundToAClientCertificateNeedsThatCertificate) {
  const std::string dir = testing::MakeTempDir("mtls-tenants");
  const testing::PemFiles pki = testing::GenerateTestPki(dir, "");
  const testing::PemFiles other = testing::GenerateTestPki(dir, "other-");
  const std::string tenants_path = dir + "/tenants.conf";
  ASSERT_TRUE(engine::WriteFileAtomically(tenants_path, TenantsFile()).ok());
  auto daemon = testing::DaemonProcess::Start({"--tenants_file=" + tenants_path, "--tls_cert=" + pki.server_cert,
                                               "--tls_key=" + pki.server_key, "--tls_client_ca=" + pki.ca_cert});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ConnectionOptions bound;
  bound.address = (*daemon)->grpc_address();
  bound.tls_ca_path = pki.ca_cert;
  bound.tls_cert_path = pki.client_cert;  // common name "traind test client": carol's
  bound.tls_key_path = pki.client_key;
  ConnectionOptions unbound = bound;
  unbound.tls_cert_path = pki.other_client_cert;
  unbound.tls_key_path = pki.other_client_key;
  ConnectionOptions foreign = bound;
  foreign.tls_cert_path = other.client_cert;  // same name, wrong CA
  foreign.tls_key_path = other.client_key;

  v1::GenerateArtifactsResponse artifacts;
  EXPECT_TRUE(TenantClient(Channel(bound), "carol-secret").Generate(&artifacts).ok());
  const grpc::Status wrong_certificate = TenantClient(Channel(unbound), "carol-secret").Generate(&artifacts);
  EXPECT_EQ(wrong_certificate.error_code(), grpc::UNAUTHENTICATED);
  EXPECT_THAT(wrong_certificate.error_message(), HasSubstr("client certificate"));
  // Tokens of tenants bound to no certificate work over any accepted one.
  EXPECT_TRUE(TenantClient(Channel(unbound), "alice-secret").Generate(&artifacts).ok());
  // A certificate from another CA never gets past the handshake.
  const grpc::Status handshake = TenantClient(Channel(foreign), "carol-secret").Generate(&artifacts);
  EXPECT_EQ(handshake.error_code(), grpc::UNAVAILABLE) << handshake.error_message();
}

}  // namespace
}  // namespace traind
