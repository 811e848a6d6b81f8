// trainctl: the command-line client of traind. The commands live in client/commands/ (one file per family);
// this file only parses the command line, connects and turns the outcome into an exit code (client/errors.h).
#include <iostream>
#include <string>
#include <vector>

#include "client/command.h"
#include "client/commands/commands.h"
#include "client/connection.h"
#include "client/errors.h"
#include "client/output.h"
#include "client/trainctl_args.h"

namespace traind::cli {
namespace {

int Run(int argc, char** argv) {
  const std::vector<CommandSpec> commands = AllCommands();
  ParsedCommandLine parsed = ParseTrainctlArgs(std::vector<std::string>(argv + 1, argv + argc), commands);
  const std::string path = parsed.command != nullptr ? parsed.command->path : parsed.help_group;
  if (!parsed.error.ok()) {
    if (parsed.command != nullptr) {
      ReportFailure(std::cout, std::cerr, false, path, "", UsageError(parsed.error.message()));
    } else {
      std::cerr << "trainctl: " << parsed.error.message() << "\n\n"
                << (parsed.help_group.empty() ? TopLevelUsage(commands) : GroupUsage(commands, parsed.help_group));
    }
    return kExitUsage;
  }
  if (parsed.action == ParsedCommandLine::Action::kHelp) {
    if (parsed.command != nullptr) {
      std::cout << CommandUsage(*parsed.command);
    } else {
      std::cout << (parsed.help_group.empty() ? TopLevelUsage(commands) : GroupUsage(commands, parsed.help_group));
    }
    return kExitOk;
  }
  const bool json = parsed.options.json;
  const std::string& address = parsed.options.connection.address;
  absl::StatusOr<std::string> token = ReadToken(parsed.token_file);
  if (!token.ok()) {
    ReportFailure(std::cout, std::cerr, json, path, address, UsageError(token.status().message()));
    return kExitUsage;
  }
  parsed.options.token = std::move(*token);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect(parsed.options.connection);
  if (!channel.ok()) {
    ReportFailure(std::cout, std::cerr, json, path, address, UsageError(channel.status().message()));
    return kExitUsage;
  }
  CommandContext context(*parsed.command, std::move(parsed.flags), parsed.options, *channel);
  const absl::Status status = parsed.command->run(context);
  if (!status.ok()) {
    ReportFailure(std::cout, std::cerr, json, path, address, status);
    return ExitCodeFor(status);
  }
  return context.success_exit_code();
}

}  // namespace
}  // namespace traind::cli

int main(int argc, char** argv) { return traind::cli::Run(argc, argv); }
