#include "server/training_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "engine/model/model_loader.h"
#include "server/version.h"

namespace traind {

namespace v1 = ::traind::v1;

namespace {


grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

const google::protobuf::ServiceDescriptor* ServiceDescriptor() {
  return google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::TrainingService::service_full_name());
}

}  // namespace

const std::vector<std::string>& TrainingServiceImpl::ImplementedRpcs() {
  static const std::vector<std::string>* const kImplemented = new std::vector<std::string>{"GetServerInfo", "UploadBlob"};
  return *kImplemented;
}

std::vector<std::string> TrainingServiceImpl::FullMethodNames() {
  const google::protobuf::ServiceDescriptor* service = ServiceDescriptor();
  std::vector<std::string> names;
  for (int i = 0; i < service->method_count(); ++i) {
    names.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  return names;
}

grpc::Status TrainingServiceImpl::GetServerInfo(grpc::ServerContext* /*context*/,
                                                const v1::GetServerInfoRequest* /*request*/,
                                                v1::ServerInfo* response) {
  response->set_version(kTraindVersion);
  response->set_grpc_version(grpc::Version());
  response->add_executors("cpu");
  response->set_min_opset(engine::kMinOnnxOpset);
  response->set_max_opset(engine::kMaxOnnxOpset);
  response->set_max_message_bytes(limits_.max_message_bytes);
  response->set_max_sessions(limits_.max_sessions);
  const std::vector<std::string>& implemented = ImplementedRpcs();
  const google::protobuf::ServiceDescriptor* service = ServiceDescriptor();
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string& name = service->method(i)->name();
    (*response->mutable_implemented_rpcs())[name] =
        std::find(implemented.begin(), implemented.end(), name) != implemented.end();
  }
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::UploadBlob(grpc::ServerContext* context,
                                             grpc::ServerReader<v1::UploadBlobRequest>* reader,
                                             v1::UploadBlobResponse* response) {
  v1::UploadBlobRequest message;
  if (!reader->Read(&message) || !message.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first UploadBlob message must be a header");
  }
  absl::StatusOr<std::unique_ptr<BlobUpload>> upload =
      blobs_->BeginUpload(message.header().total_bytes(), message.header().sha256_hex());
  if (!upload.ok()) return ToGrpcStatus(upload.status());
  while (reader->Read(&message)) {
    if (!message.has_chunk() && message.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "only the first UploadBlob message may be a header");
    }
    if (absl::Status appended = (*upload)->Append(message.chunk()); !appended.ok()) return ToGrpcStatus(appended);
  }
  // Read() also ends when the call is cancelled (client gone, or the drain deadline passed): then the partial
  // upload is discarded with `upload`.
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled");
  absl::StatusOr<BlobInfo> info = (*upload)->Finish();
  if (!info.ok()) return ToGrpcStatus(info.status());
  response->set_blob_id(info->blob_id);
  response->set_total_bytes(info->size_bytes);
  response->set_sha256_hex(info->blob_id);
  return grpc::Status::OK;
}

}  // namespace traind
