// Command-line parsing for trainctl: `trainctl [flags] <command> [flags]`, GNU-style `--name=value` or
// `--name value`, flags allowed before and after the command.
#ifndef TRAIND_CLIENT_TRAINCTL_ARGS_H_
#define TRAIND_CLIENT_TRAINCTL_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/connection.h"

namespace traind {

struct TrainctlArgs {
  std::string command;  // "health", "info", "help"
  ConnectionOptions connection;
  double timeout_seconds = 5;
  bool json = false;
  std::string service;  // health: the service to check; "" = the whole server
  std::vector<std::string> positional;
};

// Defaults: --address from $TRAIND_ADDRESS when set. Errors say which flag is wrong.
absl::StatusOr<TrainctlArgs> ParseTrainctlArgs(const std::vector<std::string>& argv);

extern const char kTrainctlUsage[];

}  // namespace traind

#endif  // TRAIND_CLIENT_TRAINCTL_ARGS_H_
