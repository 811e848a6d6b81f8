#include "tests/testing/service.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "client/connection.h"
#include "gtest/gtest.h"

namespace traind::testing {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string ReadRunfile(const std::string& workspace_relative_path) {
  return ReadWholeFile(RunfilePath(workspace_relative_path));
}

std::unique_ptr<Service> StartService(std::vector<std::string> flags, std::string state_dir) {
  auto service = std::make_unique<Service>();
  service->state_dir = state_dir.empty() ? MakeTempDir("state") : std::move(state_dir);
  flags.push_back("--state_dir=" + service->state_dir);
  auto process = DaemonProcess::Start(flags);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return nullptr;
  service->process = std::move(*process);
  ConnectionOptions options;
  options.address = service->process->grpc_address();
  auto channel = Connect(options);
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return nullptr;
  service->channel = *channel;
  service->stub = traind::v1::TrainingService::NewStub(service->channel);
  return service;
}

std::string Upload(Stub& stub, const std::string& content, grpc::Status* status, const std::string& token) {
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  traind::v1::UploadBlobResponse response;
  auto writer = stub.UploadBlob(&context, &response);
  traind::v1::UploadBlobRequest header;
  header.mutable_header()->set_total_bytes(static_cast<int64_t>(content.size()));
  writer->Write(header);
  for (size_t offset = 0; offset < content.size(); offset += 1 << 20) {
    traind::v1::UploadBlobRequest chunk;
    chunk.set_chunk(content.substr(offset, 1 << 20));
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  const grpc::Status finished = writer->Finish();
  if (status != nullptr) {
    *status = finished;
  } else {
    EXPECT_TRUE(finished.ok()) << finished.error_message();
  }
  return response.blob_id();
}

std::vector<traind::v1::Job> WatchJob(Stub& stub, const std::string& job_id) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  traind::v1::WatchJobRequest request;
  request.set_job_id(job_id);
  auto reader = stub.WatchJob(&context, request);
  std::vector<traind::v1::Job> updates;
  traind::v1::Job job;
  while (reader->Read(&job)) updates.push_back(job);
  const grpc::Status finished = reader->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  return updates;
}

}  // namespace traind::testing
