// The daemon's optional config file: one `flag_name = value` per line, '#' starts a comment. Every key must be a
// flag of the daemon; flags given on the command line override the file.
//
//   # /etc/traind.conf
//   listen = 0.0.0.0:50051
//   tls_cert = /etc/traind/server.pem
#ifndef TRAIND_SERVER_CONFIG_FILE_H_
#define TRAIND_SERVER_CONFIG_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind {

// Parses the file's text into (key, value) pairs in order; errors name the line.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseConfigText(absl::string_view text);

// Reads `path` and sets each key's absl flag from its value. Errors name the file, line or flag.
absl::Status ApplyConfigFile(const std::string& path);

// Returns the value of `--config=X` / `--config X` in argv, or "" when absent; the file must be applied
// before absl::ParseCommandLine so that command-line flags win.
std::string FindConfigFlag(int argc, char** argv);

}  // namespace traind

#endif  // TRAIND_SERVER_CONFIG_FILE_H_
