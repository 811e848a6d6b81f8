#include "server/logging.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(LoggingTest, FormatsLogfmtWithTimestampLevelAndFields) {
  const std::string line = FormatLogLine(LogLevel::kInfo, "serving", {{"grpc", "127.0.0.1:50051"}, {"tls", "off"}});
  EXPECT_THAT(line, MatchesRegex("ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z level=info msg=serving "
                                 "grpc=127.0.0.1:50051 tls=off"));
}

TEST(LoggingTest, QuotesAndEscapesValuesThatNeedIt) {
  const std::string line =
      FormatLogLine(LogLevel::kError, "bad thing", {{"path", "a b"}, {"quote", "say \"hi\"\n"}, {"empty", ""}});
  EXPECT_THAT(line, HasSubstr("level=error msg=\"bad thing\""));
  EXPECT_THAT(line, HasSubstr("path=\"a b\""));
  EXPECT_THAT(line, HasSubstr("quote=\"say \\\"hi\\\"\\n\""));
  EXPECT_THAT(line, HasSubstr("empty=\"\""));
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(LoggingTest, ParsesLevels) {
  LogLevel level = LogLevel::kInfo;
  EXPECT_TRUE(ParseLogLevel("DEBUG", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  EXPECT_TRUE(ParseLogLevel("warning", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
  EXPECT_FALSE(ParseLogLevel("verbose", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
}

}  // namespace
}  // namespace traind
