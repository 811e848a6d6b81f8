// trainctl's command table, one function per command family (one .cc each).
#ifndef TRAIND_CLIENT_COMMANDS_COMMANDS_H_
#define TRAIND_CLIENT_COMMANDS_COMMANDS_H_

#include <vector>

#include "client/command.h"

namespace traind::cli {

std::vector<CommandSpec> ServerCommands();      // health, info, upload
std::vector<CommandSpec> ArtifactCommands();    // artifacts generate|list|get|delete
std::vector<CommandSpec> SessionCommands();     // session create|list|show|close|properties
std::vector<CommandSpec> TrainCommands();       // train, eval, optimizer step|reset-grad, lr get|set|schedule|step
std::vector<CommandSpec> CheckpointCommands();  // checkpoint save|load|list|download|delete, params get|set, export
std::vector<CommandSpec> JobCommands();         // job submit|watch|list|show|cancel
std::vector<CommandSpec> FleetCommands();       // fleet run|status|plot (through traind_client.fleet)

// Every command, in the order the usage text lists them.
std::vector<CommandSpec> AllCommands();

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_COMMANDS_COMMANDS_H_
