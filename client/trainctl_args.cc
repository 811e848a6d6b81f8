#include "client/trainctl_args.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace traind {

const char kTrainctlUsage[] = R"(usage: trainctl [flags] <command>

commands:
  health    check the daemon's health (grpc.health.v1); exit 0 SERVING, 1 not serving
  info      print the daemon's version, limits and implemented RPCs
  help      print this text

flags:
  --address HOST:PORT   daemon address (default $TRAIND_ADDRESS or 127.0.0.1:50051)
  --tls-ca FILE         PEM CA that signed the daemon's certificate; enables TLS
  --tls-cert FILE       PEM client certificate (mutual TLS), with --tls-key
  --tls-key FILE        PEM client private key
  --tls-server-name N   expected name in the daemon's certificate (default: the address's host)
  --timeout SECONDS     deadline of each call (default 5)
  --service NAME        health: check this service instead of the whole server
  --json                print one JSON object instead of text

exit codes: 0 ok, 1 not serving, 2 usage error, 3 the call failed (unreachable, TLS, deadline, ...)
)";

absl::StatusOr<TrainctlArgs> ParseTrainctlArgs(const std::vector<std::string>& argv) {
  TrainctlArgs args;
  if (const char* address = std::getenv("TRAIND_ADDRESS"); address != nullptr && address[0] != '\0') {
    args.connection.address = address;
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (!absl::StartsWith(arg, "--")) {
      if (args.command.empty()) {
        args.command = arg;
      } else {
        args.positional.push_back(arg);
      }
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
      has_value = true;
    }
    if (name == "json" || name == "help") {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      if (name == "json") args.json = true;
      if (name == "help") args.command = "help";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argv.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    if (name == "address") {
      args.connection.address = value;
    } else if (name == "tls-ca") {
      args.connection.tls_ca_path = value;
    } else if (name == "tls-cert") {
      args.connection.tls_cert_path = value;
    } else if (name == "tls-key") {
      args.connection.tls_key_path = value;
    } else if (name == "tls-server-name") {
      args.connection.tls_server_name = value;
    } else if (name == "service") {
      args.service = value;
    } else if (name == "timeout") {
      if (!absl::SimpleAtod(value, &args.timeout_seconds) || !(args.timeout_seconds > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("--timeout '", value, "' is not a positive number"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  if (args.command.empty()) return absl::InvalidArgumentError("no command given");
  if (args.command != "health" && args.command != "info" && args.command != "help") {
    return absl::InvalidArgumentError(absl::StrCat("unknown command '", args.command, "'"));
  }
  return args;
}

}  // namespace traind
