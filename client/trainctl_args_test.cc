#include "client/trainctl_args.h"

#include "gtest/gtest.h"

namespace traind {
namespace {

TEST(TrainctlArgsTest, ParsesFlagsBeforeAndAfterTheCommand) {
  auto args = ParseTrainctlArgs({"--address=10.1.1.1:7", "health", "--tls-ca", "ca.pem", "--json", "--timeout=2.5"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->command, "health");
  EXPECT_EQ(args->connection.address, "10.1.1.1:7");
  EXPECT_EQ(args->connection.tls_ca_path, "ca.pem");
  EXPECT_TRUE(args->json);
  EXPECT_DOUBLE_EQ(args->timeout_seconds, 2.5);
}

TEST(TrainctlArgsTest, RejectsUnknownFlagsCommandsAndMissingValues) {
  EXPECT_FALSE(ParseTrainctlArgs({"health", "--bogus=1"}).ok());
  EXPECT_FALSE(ParseTrainctlArgs({"frobnicate"}).ok());
  EXPECT_FALSE(ParseTrainctlArgs({"health", "--address"}).ok());
  EXPECT_FALSE(ParseTrainctlArgs({"health", "--timeout=-1"}).ok());
  EXPECT_FALSE(ParseTrainctlArgs({"health", "--json=yes"}).ok());
  EXPECT_FALSE(ParseTrainctlArgs({}).ok());
}

TEST(TrainctlArgsTest, AddressDefaultsToEnvironment) {
  setenv("TRAIND_ADDRESS", "127.0.0.9:1234", 1);
  auto args = ParseTrainctlArgs({"info"});
  unsetenv("TRAIND_ADDRESS");
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->connection.address, "127.0.0.9:1234");
  EXPECT_EQ(ParseTrainctlArgs({"info"})->connection.address, "127.0.0.1:50051");
}

}  // namespace
}  // namespace traind
