#include "client/flags.h"

#include "gmock/gmock.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace traind::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<FlagSpec> kSpecs = {
    {"name", "TEXT", "a value"},
    {"steps", "N", "a count"},
    {"lr", "F", "a float"},
    {"input", "NAME=FILE", "repeated", true},
    {"dry-run", "", "a switch"},
};

TEST(FlagsTest, ParsesBothValueFormsSwitchesRepeatsAndPositionals) {
  absl::StatusOr<FlagValues> flags =
      ParseFlags(kSpecs, {"first", "--name=a b", "--steps", "7", "--input", "x=1.npy", "--dry-run", "--input=y=2.npy",
                          "second", "--", "--not-a-flag"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->String("name"), "a b");
  EXPECT_EQ(flags->Int("steps", 1, 10), 7);
  EXPECT_TRUE(flags->Has("dry-run"));
  EXPECT_FALSE(flags->Has("lr"));
  EXPECT_EQ(flags->Double("lr"), std::nullopt);
  EXPECT_THAT(flags->Values("input"), ElementsAre("x=1.npy", "y=2.npy"));
  EXPECT_THAT(flags->positional(), ElementsAre("first", "second", "--not-a-flag"));
  EXPECT_TRUE(flags->status().ok());
}

TEST(FlagsTest, ListSplitsCommas) {
  absl::StatusOr<FlagValues> flags = ParseFlags(kSpecs, {"--input", "a,b", "--input", "c,,d"});
  ASSERT_TRUE(flags.ok());
  EXPECT_THAT(flags->List("input"), ElementsAre("a", "b", "c", "d"));
}

TEST(FlagsTest, RefusesUnknownMissingValueValuedSwitchAndRepeatedSingleFlag) {
  EXPECT_THAT(ParseFlags(kSpecs, {"--bogus"}).status().message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(ParseFlags(kSpecs, {"--steps"}).status().message(), HasSubstr("--steps needs a value"));
  EXPECT_THAT(ParseFlags(kSpecs, {"--dry-run=yes"}).status().message(), HasSubstr("takes no value"));
  EXPECT_THAT(ParseFlags(kSpecs, {"--name=a", "--name=b"}).status().message(), HasSubstr("more than once"));
}

TEST(FlagsTest, TypedGettersRecordTheFirstMalformedValue) {
  absl::StatusOr<FlagValues> flags = ParseFlags(kSpecs, {"--steps=12", "--lr=abc", "--name=x"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->Int("steps", 1, 10), std::nullopt);  // out of range
  EXPECT_EQ(flags->Double("lr"), std::nullopt);
  EXPECT_THAT(std::string(flags->status().message()), HasSubstr("--steps '12' is not an integer in [1, 10]"));
  EXPECT_EQ(flags->Required("input"), "");
  EXPECT_THAT(std::string(flags->status().message()), HasSubstr("--steps"));  // the first error stays
}

TEST(FlagsTest, FloatsMustBeFiniteFloat32AndNonNegativeWhenAsked) {
  for (const char* bad : {"--lr=nan", "--lr=inf", "--lr=1e39", "--lr=-1"}) {
    absl::StatusOr<FlagValues> flags = ParseFlags(kSpecs, {bad});
    ASSERT_TRUE(flags.ok());
    EXPECT_EQ(flags->Float("lr", /*non_negative=*/true), std::nullopt) << bad;
    EXPECT_FALSE(flags->status().ok()) << bad;
  }
  absl::StatusOr<FlagValues> flags = ParseFlags(kSpecs, {"--lr=-0.5"});
  EXPECT_EQ(flags->Float("lr"), -0.5f);
}

TEST(FlagsTest, Uint64RefusesNegatives) {
  absl::StatusOr<FlagValues> flags = ParseFlags(kSpecs, {"--steps=-3"});
  EXPECT_EQ(flags->Uint64("steps"), std::nullopt);
  EXPECT_FALSE(flags->status().ok());
  flags = ParseFlags(kSpecs, {"--steps=18446744073709551615"});
  EXPECT_EQ(flags->Uint64("steps"), 18446744073709551615ull);
}

TEST(FlagsTest, TakesSeparateValue) {
  EXPECT_TRUE(TakesSeparateValue(kSpecs, "--name"));
  EXPECT_FALSE(TakesSeparateValue(kSpecs, "--name=x"));
  EXPECT_FALSE(TakesSeparateValue(kSpecs, "--dry-run"));
  EXPECT_FALSE(TakesSeparateValue(kSpecs, "--unknown"));
  EXPECT_FALSE(TakesSeparateValue(kSpecs, "name"));
}

TEST(FlagsTest, HelpListsEveryFlagWithItsValueAndWrapsLongText) {
  const std::string help = RenderFlagHelp(
      {{"model", "FILE", "the model"}, {"x", "", std::string(150, 'w') + " tail words here", false}}, 80);
  EXPECT_THAT(help, HasSubstr("  --model FILE"));
  EXPECT_THAT(help, HasSubstr("the model"));
  for (absl::string_view line : absl::StrSplit(help, '\n')) EXPECT_LE(line.size(), 180u);
  EXPECT_THAT(help, HasSubstr("tail words here"));
}

}  // namespace
}  // namespace traind::cli
