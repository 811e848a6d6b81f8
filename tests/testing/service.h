// What the integration tests of the training service share: a daemon with a stub on it, unary calls with a
// deadline (and a bearer token, and the ErrorDetail of a failure), uploads, and files of the runfiles.
#ifndef TRAIND_TESTS_TESTING_SERVICE_H_
#define TRAIND_TESTS_TESTING_SERVICE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind::testing {

using Stub = traind::v1::TrainingService::Stub;

// A file of this workspace's runfiles ("tests/golden/data/mlp/model.onnx"), and any file's bytes.
std::string ReadRunfile(const std::string& workspace_relative_path);
std::string ReadWholeFile(const std::string& path);

// A running traind and a stub on it.
struct Service {
  std::string state_dir;
  std::unique_ptr<DaemonProcess> process;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<Stub> stub;
};

// Starts traind with `flags` (and --state_dir=`state_dir`, a fresh one when empty) and connects to it over
// plaintext. Null (with a test failure) when it does not start.
std::unique_ptr<Service> StartService(std::vector<std::string> flags = {}, std::string state_dir = "");

struct CallOptions {
  std::string token;                                // sent as "authorization: Bearer <token>" when not empty
  traind::v1::ErrorDetail* detail = nullptr;        // receives the ErrorDetail of a failed call
  std::chrono::seconds timeout = std::chrono::seconds(120);
};

// One unary call with a deadline.
template <typename Request, typename Response>
grpc::Status Call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const Request& request, Response* response, const CallOptions& options = {}) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options.timeout);
  if (!options.token.empty()) context.AddMetadata("authorization", "Bearer " + options.token);
  const grpc::Status status = (stub.*method)(&context, request, response);
  if (options.detail != nullptr) {
    options.detail->Clear();
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find("traind-error-detail-bin");
    if (it != trailers.end()) options.detail->ParseFromString(std::string(it->second.data(), it->second.size()));
  }
  return status;
}

// The same, keeping the ErrorDetail of a failure.
template <typename Request, typename Response>
grpc::Status Call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const Request& request, Response* response, traind::v1::ErrorDetail* detail) {
  CallOptions options;
  options.detail = detail;
  return Call(stub, method, request, response, options);
}

// Streams `content` with UploadBlob in 1 MiB chunks; the blob id, or the failure in `status`.
std::string Upload(Stub& stub, const std::string& content, grpc::Status* status = nullptr,
                   const std::string& token = "");

// WatchJob's updates of `job_id` until the job ends (or 120 s pass): the job as it was, then every change.
std::vector<traind::v1::Job> WatchJob(Stub& stub, const std::string& job_id);

}  // namespace traind::testing

// For a grpc::Status: the code and message in the failure.
#define ASSERT_GRPC_OK(expression)                                                           \
  do {                                                                                     \
    const ::grpc::Status grpc_status_ = (expression);                                      \
    ASSERT_TRUE(grpc_status_.ok()) << grpc_status_.error_code() << ": " << grpc_status_.error_message(); \
  } while (0)
#define EXPECT_GRPC_OK(expression)                                                           \
  do {                                                                                     \
    const ::grpc::Status grpc_status_ = (expression);                                      \
    EXPECT_TRUE(grpc_status_.ok()) << grpc_status_.error_code() << ": " << grpc_status_.error_message(); \
  } while (0)

#endif  // TRAIND_TESTS_TESTING_SERVICE_H_
