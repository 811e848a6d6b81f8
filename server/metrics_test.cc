#include "server/metrics.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace traind {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, CountsRpcsByMethodAndCodeName) {
  ServerMetrics metrics("1.2.3", {"/traind.v1.TrainingService/TrainStep"});
  metrics.RecordRpc("/traind.v1.TrainingService/TrainStep", grpc::StatusCode::OK, 0.002);
  metrics.RecordRpc("/traind.v1.TrainingService/TrainStep", grpc::StatusCode::OK, 0.004);
  metrics.RecordRpc("/traind.v1.TrainingService/TrainStep", grpc::StatusCode::NOT_FOUND, 0.001);
  const std::string text = metrics.SerializeForTest();
  EXPECT_THAT(text, HasSubstr("# TYPE traind_rpc_requests_total counter"));
  EXPECT_THAT(text,
              HasSubstr("traind_rpc_requests_total{code=\"OK\",method=\"/traind.v1.TrainingService/TrainStep\"} 2"));
  EXPECT_THAT(text, HasSubstr("traind_rpc_requests_total{code=\"NOT_FOUND\","
                              "method=\"/traind.v1.TrainingService/TrainStep\"} 1"));
  EXPECT_THAT(text, HasSubstr("# TYPE traind_rpc_duration_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("traind_rpc_duration_seconds_count{method=\"/traind.v1.TrainingService/TrainStep\"} 3"));
  EXPECT_THAT(text, HasSubstr("traind_build_info{grpc_version=\"" + grpc::Version() + "\",version=\"1.2.3\"} 1"));
}

TEST(MetricsTest, UnknownMethodsShareOneBoundedLabel) {
  ServerMetrics metrics("1", {"/a.B/C"});
  metrics.RecordRpc("/evil.Service/x1", grpc::StatusCode::UNIMPLEMENTED, 0.001);
  metrics.RecordRpc("/evil.Service/x2", grpc::StatusCode::UNIMPLEMENTED, 0.001);
  const std::string text = metrics.SerializeForTest();
  EXPECT_THAT(text, HasSubstr("traind_rpc_requests_total{code=\"UNIMPLEMENTED\",method=\"other\"} 2"));
  EXPECT_THAT(text, Not(HasSubstr("evil")));
}

TEST(MetricsTest, StatusCodeNamesAreCanonical) {
  EXPECT_EQ(StatusCodeName(0), "OK");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(99), "UNKNOWN");
}

TEST(ProcessCollectorTest, ReportsStandardProcessMetrics) {
  const std::vector<prometheus::MetricFamily> families = ProcessCollector().Collect();
  std::map<std::string, double> values;
  for (const auto& family : families) {
    ASSERT_EQ(family.metric.size(), 1u);
    values[family.name] = family.type == prometheus::MetricType::Counter ? family.metric[0].counter.value
                                                                          : family.metric[0].gauge.value;
  }
  EXPECT_GT(values.at("process_resident_memory_bytes"), 1e5);
  EXPECT_GE(values.at("process_virtual_memory_bytes"), values.at("process_resident_memory_bytes"));
  EXPECT_GT(values.at("process_open_fds"), 2);
  EXPECT_GT(values.at("process_max_fds"), values.at("process_open_fds"));
  EXPECT_GT(values.at("process_start_time_seconds"), 1.7e9);  // after 2023
  EXPECT_GE(values.at("process_cpu_seconds_total"), 0);
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(values.at("traind_memory_limit_bytes"), values.at("process_resident_memory_bytes"));
  EXPECT_LE(values.at("traind_memory_limit_bytes"), physical);
}

}  // namespace
}  // namespace traind
