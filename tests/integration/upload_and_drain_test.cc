// UploadBlob against the real daemon, and what a drain does to an upload in flight: it may finish within
// --drain_timeout, new RPCs are refused meanwhile, and an upload still open at the deadline is cancelled
// without leaving a partial file.
#include <signal.h>

#include <filesystem>
#include <string>

#include "absl/time/clock.h"
#include "client/connection.h"
#include "engine/io/file_util.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

using engine::ReadFileLimited;
using engine::Sha256Hex;
using engine::WriteFileAtomically;

namespace v1 = ::traind::v1;
using testing::DaemonProcess;

struct Fixture {
  std::string state_dir;
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<v1::TrainingService::Stub> stub;
};

Fixture Start(std::vector<std::string> flags) {
  Fixture fixture;
  fixture.state_dir = testing::MakeTempDir("state");
  flags.push_back("--state_dir=" + fixture.state_dir);
  auto daemon = DaemonProcess::Start(flags);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  if (!daemon.ok()) return fixture;
  fixture.daemon = std::move(*daemon);
  ConnectionOptions options;
  options.address = fixture.daemon->grpc_address();
  fixture.stub = v1::TrainingService::NewStub(*Connect(options));
  return fixture;
}

v1::UploadBlobRequest Header(int64_t total_bytes, const std::string& sha256 = "") {
  v1::UploadBlobRequest request;
  request.mutable_header()->set_total_bytes(total_bytes);
  request.mutable_header()->set_sha256_hex(sha256);
  return request;
}

v1::UploadBlobRequest Chunk(const std::string& data) {
  v1::UploadBlobRequest request;
  request.set_chunk(data);
  return request;
}

grpc::Status Upload(v1::TrainingService::Stub* stub, const std::vector<v1::UploadBlobRequest>& messages,
                    v1::UploadBlobResponse* response) {
  grpc::ClientContext context;
  auto writer = stub->UploadBlob(&context, response);
  for (const auto& message : messages) {
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

int CountBlobFiles(const std::string& state_dir) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/blobs")) count += !entry.path().empty();
  return count;
}

TEST(UploadBlobTest, StreamsAMultiMegabyteBlobInChunksAndStoresItUnderItsDigest) {
  Fixture fixture = Start({});
  ASSERT_NE(fixture.daemon, nullptr);
  std::string content(3 * 1024 * 1024 + 17, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>((i * 2654435761u) >> 24);
  const std::string digest = Sha256Hex(content);
  std::vector<v1::UploadBlobRequest> messages = {Header(content.size(), digest)};
  for (size_t offset = 0; offset < content.size(); offset += 64 * 1024) {
    messages.push_back(Chunk(content.substr(offset, 64 * 1024)));
  }
  v1::UploadBlobResponse response;
  const grpc::Status status = Upload(fixture.stub.get(), messages, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.blob_id(), digest);
  EXPECT_EQ(response.total_bytes(), static_cast<int64_t>(content.size()));
  auto stored = ReadFileLimited(fixture.state_dir + "/blobs/" + digest, 1 << 30);
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(*stored == content);
}

TEST(UploadBlobTest, BadUploadsGetClearStatusesAndLeaveNothingBehind) {
  Fixture fixture = Start({"--max_blob_bytes=1000"});
  ASSERT_NE(fixture.daemon, nullptr);
  v1::UploadBlobResponse response;
  EXPECT_EQ(Upload(fixture.stub.get(), {Chunk("no header")}, &response).error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(Upload(fixture.stub.get(), {Header(1001)}, &response).error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Upload(fixture.stub.get(), {Header(3), Chunk("ab")}, &response).error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(Upload(fixture.stub.get(), {Header(3), Chunk("abcd")}, &response).error_code(), grpc::INVALID_ARGUMENT);
  const grpc::Status corrupt = Upload(fixture.stub.get(), {Header(3, Sha256Hex("xyz")), Chunk("abc")}, &response);
  EXPECT_EQ(corrupt.error_code(), grpc::DATA_LOSS);
  EXPECT_THAT(corrupt.error_message(), ::testing::HasSubstr("SHA-256"));
  EXPECT_EQ(CountBlobFiles(fixture.state_dir), 0);
}

TEST(DrainTest, AnUploadInFlightFinishesDuringTheDrainWhileNewRpcsAreRefused) {
  Fixture fixture = Start({"--drain_timeout=20s"});
  ASSERT_NE(fixture.daemon, nullptr);
  grpc::ClientContext context;
  v1::UploadBlobResponse response;
  auto writer = fixture.stub->UploadBlob(&context, &response);
  ASSERT_TRUE(writer->Write(Header(6)));
  ASSERT_TRUE(writer->Write(Chunk("abc")));
  absl::SleepFor(absl::Milliseconds(200));  // the server is inside the handler now

  kill(fixture.daemon->pid(), SIGTERM);
  absl::SleepFor(absl::Milliseconds(300));
  // Draining: a new call is refused.
  grpc::ClientContext info_context;
  info_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::ServerInfo info;
  EXPECT_NE(fixture.stub->GetServerInfo(&info_context, {}, &info).error_code(), grpc::OK);
  // ... but the upload in flight completes.
  ASSERT_TRUE(writer->Write(Chunk("def")));
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.blob_id(), Sha256Hex("abcdef"));

  absl::Duration elapsed;
  absl::StatusOr<int> exit_code = fixture.daemon->SignalAndWait(0, absl::Seconds(10), &elapsed);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
  EXPECT_EQ(CountBlobFiles(fixture.state_dir), 1);
}

TEST(DrainTest, AnUploadStillOpenAtTheDrainDeadlineIsCancelledAndDiscarded) {
  Fixture fixture = Start({"--drain_timeout=1s"});
  ASSERT_NE(fixture.daemon, nullptr);
  grpc::ClientContext context;
  v1::UploadBlobResponse response;
  auto writer = fixture.stub->UploadBlob(&context, &response);
  ASSERT_TRUE(writer->Write(Header(1000)));
  ASSERT_TRUE(writer->Write(Chunk("only a part")));
  absl::SleepFor(absl::Milliseconds(200));

  absl::Duration elapsed;
  absl::StatusOr<int> exit_code = fixture.daemon->SignalAndWait(SIGTERM, absl::Seconds(10), &elapsed);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << fixture.daemon->Log();
  EXPECT_GE(elapsed, absl::Milliseconds(900));  // it waited for the upload...
  EXPECT_LT(elapsed, absl::Seconds(3));          // ...up to the deadline only
  EXPECT_THAT(fixture.daemon->Log(), ::testing::HasSubstr("drain"));
  writer->WritesDone();
  EXPECT_NE(writer->Finish().error_code(), grpc::OK);
  EXPECT_EQ(CountBlobFiles(fixture.state_dir), 0);
}

}  // namespace
}  // namespace traind
