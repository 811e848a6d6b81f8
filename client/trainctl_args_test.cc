#include "client/trainctl_args.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_split.h"
#include "client/commands/commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::cli {
namespace {

using ::testing::HasSubstr;

class TrainctlArgsTest : public ::testing::Test {
 protected:
  ParsedCommandLine Parse(const std::vector<std::string>& argv) { return ParseTrainctlArgs(argv, commands_); }
  const std::vector<CommandSpec> commands_ = AllCommands();
};

TEST_F(TrainctlArgsTest, GlobalFlagsBeforeAndAfterTheCommandWords) {
  ParsedCommandLine parsed = Parse({"--address", "10.1.1.1:7", "--json", "session", "show", "s-1", "--tls-ca",
                                    "ca.pem", "--timeout=2.5", "--token-file", "tok"});
  ASSERT_TRUE(parsed.error.ok()) << parsed.error;
  ASSERT_NE(parsed.command, nullptr);
  EXPECT_EQ(parsed.command->path, "session show");
  EXPECT_EQ(parsed.action, ParsedCommandLine::Action::kRun);
  EXPECT_EQ(parsed.options.connection.address, "10.1.1.1:7");
  EXPECT_EQ(parsed.options.connection.tls_ca_path, "ca.pem");
  EXPECT_TRUE(parsed.options.json);
  EXPECT_EQ(parsed.options.timeout_seconds, 2.5);
  EXPECT_EQ(parsed.token_file, "tok");
  EXPECT_THAT(parsed.flags.positional(), ::testing::ElementsAre("s-1"));
}

TEST_F(TrainctlArgsTest, OneWordCommandsTakeTheirOwnFlags) {
  ParsedCommandLine parsed = Parse({"train", "--session", "s", "--input", "x=a.npy", "--input=y=b.npy", "--steps=3"});
  ASSERT_TRUE(parsed.error.ok()) << parsed.error;
  EXPECT_EQ(parsed.command->path, "train");
  EXPECT_EQ(parsed.flags.String("session"), "s");
  EXPECT_EQ(parsed.flags.Values("input").size(), 2u);
}

TEST_F(TrainctlArgsTest, UsageErrors) {
  EXPECT_THAT(Parse({}).error.message(), HasSubstr("no command"));
  EXPECT_THAT(Parse({"frobnicate"}).error.message(), HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(Parse({"session"}).error.message(), HasSubstr("needs a subcommand"));
  EXPECT_THAT(Parse({"session", "explode"}).error.message(), HasSubstr("no subcommand 'explode'"));
  EXPECT_THAT(Parse({"health", "--bogus=1"}).error.message(), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(Parse({"health", "--address"}).error.message(), HasSubstr("needs a value"));
  EXPECT_THAT(Parse({"health", "--timeout=-1"}).error.message(), HasSubstr("--timeout"));
  EXPECT_THAT(Parse({"health", "--json=yes"}).error.message(), HasSubstr("takes no value"));
  EXPECT_THAT(Parse({"session", "show"}).error.message(), HasSubstr("expects ID"));
  EXPECT_THAT(Parse({"session", "show", "a", "b"}).error.message(), HasSubstr("got 2"));
  EXPECT_THAT(Parse({"info", "extra"}).error.message(), HasSubstr("unexpected argument 'extra'"));
  // The session flag belongs to train, not to health.
  EXPECT_THAT(Parse({"health", "--session=s"}).error.message(), HasSubstr("unknown flag --session"));
}

TEST_F(TrainctlArgsTest, TokenValuesOnTheCommandLineAreRefused) {
  for (const auto& argv : std::vector<std::vector<std::string>>{{"info", "--token=secret"},
                                                                {"info", "--token", "secret"}}) {
    ParsedCommandLine parsed = Parse(argv);
    EXPECT_THAT(parsed.error.message(), HasSubstr("--token-file")) << argv[1];
    EXPECT_THAT(parsed.error.message(), HasSubstr("ps"));
  }
}

TEST_F(TrainctlArgsTest, HelpForEveryCommandGroupAndTheTopLevel) {
  for (const CommandSpec& command : commands_) {
    std::vector<std::string> argv = absl::StrSplit(command.path, ' ');
    argv.push_back("--help");
    ParsedCommandLine parsed = Parse(argv);
    ASSERT_TRUE(parsed.error.ok()) << command.path;
    EXPECT_EQ(parsed.action, ParsedCommandLine::Action::kHelp);
    ASSERT_EQ(parsed.command, &command);
    const std::string usage = CommandUsage(command);
    EXPECT_THAT(usage, HasSubstr("usage: trainctl " + command.path));
    EXPECT_THAT(usage, HasSubstr("exit codes:"));
    for (const FlagSpec& flag : command.flags) EXPECT_THAT(usage, HasSubstr("--" + flag.name)) << command.path;
    // "help <command>" is the same.
    std::vector<std::string> help_argv = {"help"};
    for (absl::string_view word : absl::StrSplit(command.path, ' ')) help_argv.emplace_back(word);
    EXPECT_EQ(Parse(help_argv).command, &command);
  }
  ParsedCommandLine group = Parse({"job", "--help"});
  EXPECT_TRUE(group.error.ok());
  EXPECT_EQ(group.help_group, "job");
  EXPECT_THAT(GroupUsage(commands_, "job"), HasSubstr("job watch ID"));
  ParsedCommandLine top = Parse({"--help"});
  EXPECT_TRUE(top.error.ok());
  EXPECT_EQ(top.command, nullptr);
  const std::string usage = TopLevelUsage(commands_);
  for (const CommandSpec& command : commands_) EXPECT_THAT(usage, HasSubstr(command.path));
  EXPECT_THAT(usage, HasSubstr("--token-file"));
  EXPECT_THAT(usage, HasSubstr("5 the watched job ended FAILED or CANCELLED"));
}

TEST_F(TrainctlArgsTest, EveryCommandOfTheIssueExists) {
  for (const char* path :
       {"artifacts generate", "artifacts list", "artifacts get", "artifacts delete", "session create",
        "session list", "session show", "session close", "train", "eval", "lr get", "lr set", "checkpoint save",
        "checkpoint load", "checkpoint list", "checkpoint download", "params get", "params set", "export",
        "job submit", "job watch", "job list", "job cancel", "upload", "health", "info"}) {
    bool found = false;
    for (const CommandSpec& command : commands_) found |= command.path == path;
    EXPECT_TRUE(found) << path;
  }
}

TEST_F(TrainctlArgsTest, AddressDefaultsToEnvironment) {
  setenv("TRAIND_ADDRESS", "127.0.0.9:1234", 1);
  ParsedCommandLine parsed = Parse({"info"});
  unsetenv("TRAIND_ADDRESS");
  EXPECT_EQ(parsed.options.connection.address, "127.0.0.9:1234");
  EXPECT_EQ(Parse({"info"}).options.connection.address, "127.0.0.1:50051");
}

TEST(ReadTokenTest, FromFileThenEnvironment) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/token";
  std::ofstream(path) << "  s3cr3t-Token_1\n";
  setenv("TRAIND_TOKEN", "from-env", 1);
  EXPECT_EQ(*ReadToken(path), "s3cr3t-Token_1");
  EXPECT_EQ(*ReadToken(""), "from-env");
  unsetenv("TRAIND_TOKEN");
  EXPECT_EQ(*ReadToken(""), "");
  EXPECT_EQ(ReadToken("/no/such/token").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(path) << "two words";
  EXPECT_EQ(ReadToken(path).status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(path) << "\n\n";
  EXPECT_THAT(std::string(ReadToken(path).status().message()), HasSubstr("empty"));
  std::ofstream(path) << std::string(5000, 'a');
  EXPECT_EQ(ReadToken(path).status().code(), absl::StatusCode::kInvalidArgument);
  // Read bounded: an endless "file" is refused, not read forever.
  EXPECT_EQ(ReadToken("/dev/zero").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::cli
