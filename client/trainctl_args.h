// trainctl's command line: `trainctl [global flags] <command words> [flags and arguments]`. The command words
// (one or two: "health", "session create") are found among the first non-flag arguments; every flag may come
// before or after them. Also the help texts, generated from the command table.
#ifndef TRAIND_CLIENT_TRAINCTL_ARGS_H_
#define TRAIND_CLIENT_TRAINCTL_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/command.h"
#include "client/flags.h"

namespace traind::cli {

struct ParsedCommandLine {
  enum class Action { kRun, kHelp };
  Action action = Action::kRun;
  // kRun: the command to run. kHelp: the command whose help to print (null for a group's or the top-level help).
  const CommandSpec* command = nullptr;
  std::string help_group;  // kHelp without a command: the group ("session"), or "" for the top level
  FlagValues flags;
  GlobalOptions options;   // everything but the token
  std::string token_file;  // --token-file, read by ReadToken
  // A usage error; `command`/`help_group` say how far parsing got (for the hint that follows the message).
  absl::Status error;
};

// Never fails as such: problems are in `error`. --address defaults to $TRAIND_ADDRESS when set.
ParsedCommandLine ParseTrainctlArgs(const std::vector<std::string>& argv, const std::vector<CommandSpec>& commands);

// The bearer token: the content of `token_file` (surrounding whitespace removed) when given, else
// $TRAIND_TOKEN, else "". A token must be printable ASCII without spaces (a legal metadata value), at most 4 KiB.
absl::StatusOr<std::string> ReadToken(const std::string& token_file);

std::string TopLevelUsage(const std::vector<CommandSpec>& commands);
std::string GroupUsage(const std::vector<CommandSpec>& commands, const std::string& group);
std::string CommandUsage(const CommandSpec& command);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_TRAINCTL_ARGS_H_
