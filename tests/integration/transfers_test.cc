// Large transfers and streaming against the real daemon: a model over 100 MiB goes up in chunks, its artifacts,
// checkpoints and exported model come back down in chunks with their SHA-256 (the unary answers are refused as
// over the message limit); TrainStream trains as TrainStep does; stored artifacts and checkpoints are listed,
// fetched and deleted.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/connection.h"
#include "engine/io/file_util.h"
#include "engine/model/model_loader.h"
#include "engine/training/checkpoint.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using Stub = v1::TrainingService::Stub;

template <typename Request, typename Response>
grpc::Status Call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const Request& request, Response* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  return (stub.*method)(&context, request, response);
}

#define ASSERT_OK(expression)                                                              \
  do {                                                                                     \
    const grpc::Status status_ = (expression);                                             \
    ASSERT_TRUE(status_.ok()) << status_.error_code() << ": " << status_.error_message(); \
  } while (0)

// y = x W + b with W [n, n]: n = 5200 makes W 108 MB.
std::string GemmModel(int64_t n) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("big");
  auto declare = [n](onnx::ValueInfoProto* value, const std::string& name) {
    value->set_name(name);
    auto* type = value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(2);
    type->mutable_shape()->add_dim()->set_dim_value(n);
  };
  declare(graph->add_input(), "x");
  declare(graph->add_output(), "y");
  std::mt19937 random(3);
  std::uniform_real_distribution<float> uniform(-0.01f, 0.01f);
  for (const auto& [name, dims] : std::vector<std::pair<std::string, std::vector<int64_t>>>{{"W", {n, n}}, {"b", {n}}}) {
    onnx::TensorProto* initializer = graph->add_initializer();
    initializer->set_name(name);
    initializer->set_data_type(onnx::TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t dim : dims) {
      initializer->add_dims(dim);
      count *= dim;
    }
    std::vector<float> values(count);
    for (float& value : values) value = uniform(random);
    initializer->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), count * sizeof(float)));
  }
  onnx::NodeProto* gemm = graph->add_node();
  gemm->set_op_type("Gemm");
  gemm->set_name("gemm");
  for (const char* input : {"x", "W", "b"}) gemm->add_input(input);
  gemm->add_output("y");
  return model.SerializeAsString();
}

std::string Upload(Stub& stub, const std::string& content) {
  grpc::ClientContext context;
  v1::UploadBlobResponse response;
  auto writer = stub.UploadBlob(&context, &response);
  v1::UploadBlobRequest header;
  header.mutable_header()->set_total_bytes(static_cast<int64_t>(content.size()));
  header.mutable_header()->set_sha256_hex(engine::Sha256Hex(content));
  writer->Write(header);
  for (size_t offset = 0; offset < content.size(); offset += 4 << 20) {
    v1::UploadBlobRequest chunk;
    chunk.set_chunk(content.substr(offset, 4 << 20));
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.blob_id();
}

// Downloads in chunks; checks the announced size and digest.
std::string Download(Stub& stub, const v1::DownloadRequest& request, int* chunks = nullptr) {
  grpc::ClientContext context;
  auto reader = stub.Download(&context, request);
  v1::DownloadResponse part;
  EXPECT_TRUE(reader->Read(&part) && part.has_header());
  const v1::DownloadHeader header = part.header();
  std::string content;
  int count = 0;
  while (reader->Read(&part)) {
    content += part.chunk();
    ++count;
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(static_cast<int64_t>(content.size()), header.total_bytes());
  EXPECT_EQ(engine::Sha256Hex(content), header.sha256_hex());
  if (chunks != nullptr) *chunks = count;
  return content;
}

v1::TrainStepRequest Batch(const std::string& session, int64_t n) {
  v1::TrainStepRequest request;
  request.set_session_id(session);
  for (const char* name : {"x", "target"}) {
    v1::Tensor* tensor = request.add_inputs();
    tensor->set_name(name);
    tensor->set_dtype(v1::FLOAT32);
    tensor->add_shape(2);
    tensor->add_shape(n);
    std::vector<float> values(2 * n);
    for (int64_t i = 0; i < 2 * n; ++i) values[i] = std::string(name) == "x" ? 0.001f * (i % 97) : 0.5f;
    tensor->set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  }
  return request;
}

TEST(TransfersTest, AModelOver100MiBGoesUpAndItsArtifactsCheckpointsAndExportComeBackInChunks) {
  auto daemon = testing::DaemonProcess::Start({"--max_message_bytes=67108864"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ConnectionOptions options;
  options.address = (*daemon)->grpc_address();
  auto stub = v1::TrainingService::NewStub(*Connect(options));
  constexpr int64_t n = 5200;
  const std::string model = GemmModel(n);
  ASSERT_GT(model.size(), 100u << 20);

  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(model);
  generate.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
  v1::GenerateArtifactsResponse artifacts;
  EXPECT_EQ(Call(*stub, &Stub::GenerateArtifacts, generate, &artifacts).error_code(), grpc::RESOURCE_EXHAUSTED);
  generate.mutable_model()->set_blob_id(Upload(*stub, model));
  generate.set_return_artifact_bytes(true);  // the checkpoint alone is over the message limit
  EXPECT_EQ(Call(*stub, &Stub::GenerateArtifacts, generate, &artifacts).error_code(), grpc::RESOURCE_EXHAUSTED);
  generate.set_return_artifact_bytes(false);
  ASSERT_OK(Call(*stub, &Stub::GenerateArtifacts, generate, &artifacts));

  v1::DownloadRequest checkpoint_file;
  checkpoint_file.mutable_artifact_file()->set_artifact_id(artifacts.artifact_id());
  checkpoint_file.mutable_artifact_file()->set_kind("checkpoint");
  checkpoint_file.set_chunk_bytes(8 << 20);
  int chunks = 0;
  const std::string initial = Download(*stub, checkpoint_file, &chunks);
  EXPECT_GE(chunks, 13);
  auto state = engine::ParseCheckpoint(initial);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->parameters[0].data.num_elements(), n * n);
  for (const v1::ArtifactFile& file : artifacts.files()) {
    if (file.kind() == "checkpoint") {
      EXPECT_EQ(engine::Sha256Hex(initial), file.sha256_hex());
    }
  }

  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  v1::Session session;
  ASSERT_OK(Call(*stub, &Stub::CreateSession, create, &session));
  v1::TrainStepResponse stepped;
  ASSERT_OK(Call(*stub, &Stub::TrainStep, Batch(session.session_id(), n), &stepped));
  v1::SaveCheckpointRequest save;
  save.set_session_id(session.session_id());
  save.set_name("big");
  save.set_include_optimizer_state(true);
  v1::SaveCheckpointResponse saved;
  ASSERT_OK(Call(*stub, &Stub::SaveCheckpoint, save, &saved));
  EXPECT_GT(saved.size_bytes(), 300 << 20);  // parameters and two AdamW moments
  v1::DownloadRequest named;
  named.set_checkpoint_name("big");
  const std::string trained = Download(*stub, named);
  EXPECT_EQ(engine::Sha256Hex(trained), saved.sha256_hex());

  v1::ExportForInferenceRequest export_request;
  export_request.set_session_id(session.session_id());
  v1::ExportForInferenceResponse exported;
  EXPECT_EQ(Call(*stub, &Stub::ExportForInference, export_request, &exported).error_code(), grpc::RESOURCE_EXHAUSTED);
  v1::DownloadRequest export_download;
  *export_download.mutable_export_() = export_request;
  const std::string inference = Download(*stub, export_download);
  auto loaded = engine::LoadModelFromBytes(inference);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->graph().initializer_size(), 2);
}

TEST(TransfersTest, TrainStreamTrainsAsTrainStepDoesOneAnswerPerRequestInOrder) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ConnectionOptions options;
  options.address = (*daemon)->grpc_address();
  auto stub = v1::TrainingService::NewStub(*Connect(options));
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(GemmModel(16));
  generate.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
  v1::GenerateArtifactsResponse artifacts;
  ASSERT_OK(Call(*stub, &Stub::GenerateArtifacts, generate, &artifacts));
  v1::CreateSessionRequest create;
  create.set_artifact_id(artifacts.artifact_id());
  v1::Session streamed, stepped;
  ASSERT_OK(Call(*stub, &Stub::CreateSession, create, &streamed));
  ASSERT_OK(Call(*stub, &Stub::CreateSession, create, &stepped));

  grpc::ClientContext context;
  auto stream = stub->TrainStream(&context);
  for (int i = 0; i < 20; ++i) {
    v1::TrainStepRequest request = Batch(i == 0 ? streamed.session_id() : "", 16);
    ASSERT_TRUE(stream->Write(request));
    v1::TrainStreamResponse answer;
    ASSERT_TRUE(stream->Read(&answer));
    EXPECT_EQ(answer.sequence(), i);
    v1::TrainStepResponse reference;
    ASSERT_OK(Call(*stub, &Stub::TrainStep, Batch(stepped.session_id(), 16), &reference));
    EXPECT_EQ(answer.step().loss(), reference.loss()) << i;
    EXPECT_EQ(answer.step().optimizer_step(), i + 1);
  }
  stream->WritesDone();
  ASSERT_OK(stream->Finish());

  // A stream must name its session first, and trains one session.
  grpc::ClientContext anonymous_context;
  auto anonymous = stub->TrainStream(&anonymous_context);
  anonymous->Write(Batch("", 16));
  anonymous->WritesDone();
  v1::TrainStreamResponse ignored;
  while (anonymous->Read(&ignored)) {
  }
  EXPECT_EQ(anonymous->Finish().error_code(), grpc::INVALID_ARGUMENT);
  grpc::ClientContext bad_context;
  auto bad = stub->TrainStream(&bad_context);
  bad->Write(Batch(streamed.session_id(), 16));
  v1::TrainStepRequest wrong = Batch(streamed.session_id(), 16);
  wrong.mutable_inputs(0)->set_name("nope");
  bad->Write(wrong);
  bad->WritesDone();
  while (bad->Read(&ignored)) {
  }
  const grpc::Status refused = bad->Finish();
  EXPECT_EQ(refused.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("request 1: unknown input 'nope'"));
}

TEST(TransfersTest, StoredArtifactsAndCheckpointsAreListedAndDeleted) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ConnectionOptions options;
  options.address = (*daemon)->grpc_address();
  auto stub = v1::TrainingService::NewStub(*Connect(options));
  v1::GenerateArtifactsRequest generate;
  generate.mutable_model()->set_onnx_bytes(GemmModel(8));
  generate.mutable_loss()->mutable_builtin()->set_type(v1::MSE);
  generate.set_prefix("tiny_");
  v1::GenerateArtifactsResponse first, second;
  ASSERT_OK(Call(*stub, &Stub::GenerateArtifacts, generate, &first));
  ASSERT_OK(Call(*stub, &Stub::GenerateArtifacts, generate, &second));
  v1::ListArtifactsResponse list;
  ASSERT_OK(Call(*stub, &Stub::ListArtifacts, v1::ListArtifactsRequest(), &list));
  ASSERT_EQ(list.artifacts_size(), 2);
  v1::GetArtifactRequest get;
  get.set_artifact_id(first.artifact_id());
  v1::ArtifactSet set;
  ASSERT_OK(Call(*stub, &Stub::GetArtifact, get, &set));
  ASSERT_EQ(set.files_size(), 4);
  EXPECT_EQ(set.files(0).file_name(), "tiny_training_model.onnx");
  EXPECT_EQ(set.files(3).sha256_hex(), first.files(3).sha256_hex());

  v1::CreateSessionRequest create;
  create.set_artifact_id(first.artifact_id());
  v1::Session session;
  ASSERT_OK(Call(*stub, &Stub::CreateSession, create, &session));
  v1::DeleteArtifactRequest remove;
  remove.set_artifact_id(first.artifact_id());
  v1::DeleteArtifactResponse removed;
  EXPECT_EQ(Call(*stub, &Stub::DeleteArtifact, remove, &removed).error_code(), grpc::FAILED_PRECONDITION);
  for (const char* name : {"b", "a"}) {
    v1::SaveCheckpointRequest save;
    save.set_session_id(session.session_id());
    save.set_name(name);
    v1::SaveCheckpointResponse saved;
    ASSERT_OK(Call(*stub, &Stub::SaveCheckpoint, save, &saved));
  }
  v1::ListCheckpointsResponse checkpoints;
  ASSERT_OK(Call(*stub, &Stub::ListCheckpoints, v1::ListCheckpointsRequest(), &checkpoints));
  ASSERT_EQ(checkpoints.checkpoints_size(), 2);
  EXPECT_EQ(checkpoints.checkpoints(0).name(), "a");
  v1::DeleteCheckpointRequest delete_checkpoint;
  delete_checkpoint.set_name("a");
  v1::DeleteCheckpointResponse deleted;
  ASSERT_OK(Call(*stub, &Stub::DeleteCheckpoint, delete_checkpoint, &deleted));
  EXPECT_EQ(Call(*stub, &Stub::DeleteCheckpoint, delete_checkpoint, &deleted).error_code(), grpc::NOT_FOUND);

  v1::CloseSessionRequest close;
  close.set_session_id(session.session_id());
  v1::CloseSessionResponse closed;
  ASSERT_OK(Call(*stub, &Stub::CloseSession, close, &closed));
  ASSERT_OK(Call(*stub, &Stub::DeleteArtifact, remove, &removed));
  EXPECT_EQ(Call(*stub, &Stub::GetArtifact, get, &set).error_code(), grpc::NOT_FOUND);
  EXPECT_EQ(Call(*stub, &Stub::CreateSession, create, &session).error_code(), grpc::NOT_FOUND);
  ASSERT_OK(Call(*stub, &Stub::ListArtifacts, v1::ListArtifactsRequest(), &list));
  EXPECT_EQ(list.artifacts_size(), 1);
}

}  // namespace
}  // namespace traind
