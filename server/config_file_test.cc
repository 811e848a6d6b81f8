#include "server/config_file.h"

#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, config_test_address, "unset", "test flag");
ABSL_FLAG(int, config_test_count, 1, "test flag");

namespace traind {
namespace {

std::string WriteTemp(const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/traind.conf";
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigFileTest, ParsesKeysValuesCommentsAndQuotes) {
  auto entries = ParseConfigText("# comment\n\n listen = 0.0.0.0:1 \nname=\"a b\"\n");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].first, "listen");
  EXPECT_EQ((*entries)[0].second, "0.0.0.0:1");
  EXPECT_EQ((*entries)[1].second, "a b");
}

TEST(ConfigFileTest, RejectsLineWithoutEqualsNamingTheLine) {
  auto entries = ParseConfigText("a = 1\nbroken\n");
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("line 2"), std::string::npos);
}

TEST(ConfigFileTest, AppliesValuesToFlags) {
  ASSERT_TRUE(ApplyConfigFile(WriteTemp("config_test_address = 10.0.0.1:5\nconfig_test_count = 7\n")).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_address), "10.0.0.1:5");
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 7);
}

TEST(ConfigFileTest, RejectsUnknownKeysAndBadValues) {
  absl::Status unknown = ApplyConfigFile(WriteTemp("no_such_flag = 1\n"));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("no_such_flag"), std::string::npos);
  absl::Status bad = ApplyConfigFile(WriteTemp("config_test_count = many\n"));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyConfigFile("/nonexistent/traind.conf").code(), absl::StatusCode::kNotFound);
}

TEST(ConfigFileTest, FindsConfigFlagInBothSpellings) {
  const char* argv1[] = {"traind", "--log_level=debug", "--config=/a.conf"};
  EXPECT_EQ(FindConfigFlag(3, const_cast<char**>(argv1)), "/a.conf");
  const char* argv2[] = {"traind", "--config", "/b.conf"};
  EXPECT_EQ(FindConfigFlag(3, const_cast<char**>(argv2)), "/b.conf");
  const char* argv3[] = {"traind"};
  EXPECT_EQ(FindConfigFlag(1, const_cast<char**>(argv3)), "");
}

}  // namespace
}  // namespace traind
