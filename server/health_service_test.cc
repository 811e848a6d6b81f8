#include "server/health_service.h"

#include <thread>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace traind {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = Health::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override { server_->Shutdown(); }

  HealthService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckReportsRegisteredServicesAndNotFoundOtherwise) {
  service_.SetServingStatus("", true);
  service_.SetServingStatus("a.B", false);
  HealthCheckRequest request;
  HealthCheckResponse response;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->Check(&c1, request, &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  request.set_service("a.B");
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->Check(&c2, request, &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  request.set_service("x.Y");
  grpc::ClientContext c3;
  EXPECT_EQ(stub_->Check(&c3, request, &response).error_code(), grpc::NOT_FOUND);
}

TEST_F(HealthServiceTest, WatchSendsChangesAndEndsOnShutdown) {
  service_.SetServingStatus("", true);
  grpc::ClientContext context;
  auto reader = stub_->Watch(&context, HealthCheckRequest());
  HealthCheckResponse update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  service_.SetServingStatus("", false);
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  service_.SetServingStatus("", true);
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  service_.Shutdown();
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&update));
  EXPECT_TRUE(reader->Finish().ok());
  service_.SetServingStatus("", true);  // ignored after Shutdown
  grpc::ClientContext check_context;
  ASSERT_TRUE(stub_->Check(&check_context, HealthCheckRequest(), &update).ok());
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchOfUnknownServiceSaysServiceUnknown) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("later.Service");
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  service_.SetServingStatus("later.Service", true);
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  context.TryCancel();
}

}  // namespace
}  // namespace traind
