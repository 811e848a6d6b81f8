// Runs the real trainctl binary against a real traind: output, --json and exit codes.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/test_certs.h"

namespace traind {
namespace {

using ::testing::HasSubstr;

testing::ExitResult Trainctl(const std::vector<std::string>& args) {
  return testing::RunToExit(testing::RunfilePath("client/trainctl"), args, absl::Seconds(20));
}

TEST(TrainctlTest, HealthPrintsServingAndExitsZero) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  testing::ExitResult text = Trainctl({"health", "--address", (*daemon)->grpc_address()});
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("SERVING"));
  testing::ExitResult json = Trainctl({"--json", "health", "--address=" + (*daemon)->grpc_address()});
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_THAT(json.output, HasSubstr("\"status\": \"SERVING\""));
  testing::ExitResult info = Trainctl({"info", "--address=" + (*daemon)->grpc_address(), "--json"});
  EXPECT_EQ(info.exit_code, 0);
  EXPECT_THAT(info.output, HasSubstr("\"GetServerInfo\":true"));
}

TEST(TrainctlTest, UnreachableDaemonExitsThreeWithJsonError) {
  testing::ExitResult result = Trainctl({"health", "--address=127.0.0.1:1", "--timeout=2", "--json"});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_THAT(result.output, HasSubstr("\"code\": \"UNAVAILABLE\""));
}

TEST(TrainctlTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Trainctl({"health", "--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(Trainctl({}).exit_code, 2);
  EXPECT_EQ(Trainctl({"health", "--tls-cert=/x.pem"}).exit_code, 2);  // a certificate without its key
}

TEST(TrainctlTest, MutualTlsFlagsWork) {
  const testing::PemFiles pki = testing::GenerateTestPki(testing::MakeTempDir("pki"), "");
  auto daemon = testing::DaemonProcess::Start(
      {"--tls_cert=" + pki.server_cert, "--tls_key=" + pki.server_key, "--tls_client_ca=" + pki.ca_cert});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string address = "--address=" + (*daemon)->grpc_address();
  testing::ExitResult without_cert = Trainctl({"health", address, "--tls-ca=" + pki.ca_cert, "--timeout=3"});
  EXPECT_EQ(without_cert.exit_code, 3) << without_cert.output;
  testing::ExitResult with_cert = Trainctl({"health", address, "--tls-ca=" + pki.ca_cert,
                                            "--tls-cert=" + pki.client_cert, "--tls-key=" + pki.client_key});
  EXPECT_EQ(with_cert.exit_code, 0) << with_cert.output;
}

}  // namespace
}  // namespace traind
