#include "client/trainctl_args.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/errors.h"

namespace traind::cli {
namespace {

constexpr size_t kMaxTokenBytes = 4096;

const CommandSpec* FindCommand(const std::vector<CommandSpec>& commands, const std::string& path) {
  for (const CommandSpec& command : commands) {
    if (command.path == path) return &command;
  }
  return nullptr;
}

bool IsGroup(const std::vector<CommandSpec>& commands, const std::string& word) {
  for (const CommandSpec& command : commands) {
    if (absl::StartsWith(command.path, word + " ")) return true;
  }
  return false;
}

bool IsFlagArgument(const std::string& arg) { return absl::StartsWith(arg, "--") && arg.size() > 2; }

absl::Status ApplyGlobalFlags(const FlagValues& flags, ParsedCommandLine* parsed) {
  GlobalOptions& options = parsed->options;
  if (flags.Has("address")) options.connection.address = flags.String("address");
  options.connection.tls_ca_path = flags.String("tls-ca");
  options.connection.tls_cert_path = flags.String("tls-cert");
  options.connection.tls_key_path = flags.String("tls-key");
  options.connection.tls_server_name = flags.String("tls-server-name");
  options.json = flags.Has("json");
  parsed->token_file = flags.String("token-file");
  if (flags.Has("timeout")) {
    const std::optional<double> timeout = flags.Double("timeout");
    if (!timeout.has_value() || !(*timeout > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--timeout '", flags.String("timeout"),
                                                     "' is not a positive number of seconds"));
    }
    options.timeout_seconds = *timeout;
  }
  return absl::OkStatus();
}

std::string Synopsis(const CommandSpec& command) {
  std::string synopsis = command.path;
  if (!command.flags.empty()) absl::StrAppend(&synopsis, " [flags]");
  if (!command.arguments.empty()) absl::StrAppend(&synopsis, " ", command.arguments);
  return synopsis;
}

// "  path ARGS   summary" lines, aligned; `extra` lines (head, summary) follow the commands.
std::string CommandList(const std::vector<CommandSpec>& commands, const std::string& group,
                        std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::vector<std::pair<std::string, std::string>> lines;
  size_t width = 0;
  for (const CommandSpec& command : commands) {
    if (!group.empty() && !absl::StartsWith(command.path, group + " ")) continue;
    std::string head = command.path;
    if (!command.arguments.empty()) absl::StrAppend(&head, " ", command.arguments);
    width = std::max(width, head.size());
    lines.emplace_back(std::move(head), command.summary);
  }
  for (auto& line : extra) {
    width = std::max(width, line.first.size());
    lines.push_back(std::move(line));
  }
  std::string out;
  for (const auto& [head, summary] : lines) {
    absl::StrAppend(&out, "  ", head, std::string(width - head.size() + 2, ' '), summary, "\n");
  }
  return out;
}

}  // namespace

ParsedCommandLine ParseTrainctlArgs(const std::vector<std::string>& argv, const std::vector<CommandSpec>& commands) {
  ParsedCommandLine parsed;
  if (const char* address = std::getenv("TRAIND_ADDRESS"); address != nullptr && address[0] != '\0') {
    parsed.options.connection.address = address;
  }
  const std::vector<FlagSpec> global = GlobalFlagSpecs();
  bool help = false;
  bool token_on_command_line = false;
  for (const std::string& arg : argv) {
    if (arg == "--help" || arg == "-h") help = true;
    if (arg == "--token" || absl::StartsWith(arg, "--token=")) token_on_command_line = true;
  }

  // The command words: the first non-flag arguments, stepping over global flags (and their values) before them.
  std::vector<size_t> word_indices;
  for (size_t i = 0; i < argv.size() && word_indices.size() < 2; ++i) {
    if (argv[i] == "--") break;
    if (IsFlagArgument(argv[i])) {
      if (TakesSeparateValue(global, argv[i])) ++i;
      if (!word_indices.empty()) break;  // a command's own flag: the words have ended
      continue;
    }
    if (argv[i] == "-h") continue;
    word_indices.push_back(i);
  }
  std::vector<std::string> words;
  for (size_t index : word_indices) words.push_back(argv[index]);

  if (words.empty() || words[0] == "help") {
    parsed.action = ParsedCommandLine::Action::kHelp;
    if (words.empty() && !help) parsed.error = absl::InvalidArgumentError("no command given");
    if (words.size() < 2) return parsed;
    // "help session" or "help session create": the argument words after "help".
    std::vector<std::string> topic;
    for (size_t i = word_indices[1]; i < argv.size(); ++i) {
      if (!IsFlagArgument(argv[i])) topic.push_back(argv[i]);
    }
    if (topic.size() >= 2) parsed.command = FindCommand(commands, topic[0] + " " + topic[1]);
    if (parsed.command == nullptr) parsed.command = FindCommand(commands, topic[0]);
    if (parsed.command == nullptr && IsGroup(commands, topic[0])) {
      parsed.help_group = topic[0];
    } else if (parsed.command == nullptr) {
      parsed.error = absl::InvalidArgumentError(absl::StrCat("no command '", topic[0], "'"));
    }
    return parsed;
  }

  size_t used_words = 0;
  if (words.size() == 2) parsed.command = FindCommand(commands, words[0] + " " + words[1]);
  if (parsed.command != nullptr) {
    used_words = 2;
  } else if ((parsed.command = FindCommand(commands, words[0])) != nullptr) {
    used_words = 1;
  } else if (IsGroup(commands, words[0])) {
    parsed.help_group = words[0];
    parsed.action = ParsedCommandLine::Action::kHelp;
    if (help) return parsed;
    parsed.error = absl::InvalidArgumentError(
        words.size() < 2 ? absl::StrCat("'", words[0], "' needs a subcommand")
                         : absl::StrCat("'", words[0], "' has no subcommand '", words[1], "'"));
    return parsed;
  } else {
    parsed.action = ParsedCommandLine::Action::kHelp;
    parsed.error = absl::InvalidArgumentError(absl::StrCat("unknown command '", words[0], "'"));
    return parsed;
  }
  if (help) {
    parsed.action = ParsedCommandLine::Action::kHelp;
    return parsed;
  }

  if (token_on_command_line) {
    parsed.error = absl::InvalidArgumentError(
        "--token is not accepted: a token on the command line is visible to every user of this machine (ps); "
        "put it in a file and pass --token-file FILE, or set $TRAIND_TOKEN");
    return parsed;
  }
  std::vector<std::string> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (std::find(word_indices.begin(), word_indices.begin() + used_words, i) == word_indices.begin() + used_words) {
      rest.push_back(argv[i]);
    }
  }
  std::vector<FlagSpec> specs = global;
  specs.insert(specs.end(), parsed.command->flags.begin(), parsed.command->flags.end());
  absl::StatusOr<FlagValues> flags = ParseFlags(specs, rest);
  if (!flags.ok()) {
    parsed.error = flags.status();
    return parsed;
  }
  parsed.flags = std::move(*flags);
  if (absl::Status applied = ApplyGlobalFlags(parsed.flags, &parsed); !applied.ok()) {
    parsed.error = applied;
    return parsed;
  }
  const size_t positional = parsed.flags.positional().size();
  const CommandSpec& command = *parsed.command;
  if (positional < command.min_positional || positional > command.max_positional) {
    if (command.max_positional == 0) {
      parsed.error = absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", parsed.flags.positional().front(), "'"));
    } else {
      parsed.error = absl::InvalidArgumentError(absl::StrCat(
          "expects ", command.arguments, " (", command.min_positional,
          command.min_positional == command.max_positional ? "" : absl::StrCat(" to ", command.max_positional),
          " arguments), got ", positional));
    }
  }
  return parsed;
}

absl::StatusOr<std::string> ReadToken(const std::string& token_file) {
  std::string token;
  std::string source;
  if (!token_file.empty()) {
    std::ifstream in(token_file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the token file '", token_file, "'"));
    // Bounded: a token file that is really a device or a huge file must not be read whole.
    token.resize(kMaxTokenBytes + 65);
    in.read(token.data(), static_cast<std::streamsize>(token.size()));
    token.resize(static_cast<size_t>(in.gcount()));
    source = absl::StrCat("the token file '", token_file, "'");
  } else if (const char* environment = std::getenv("TRAIND_TOKEN"); environment != nullptr) {
    token = environment;
    source = "$TRAIND_TOKEN";
  } else {
    return std::string();
  }
  if (token.size() > kMaxTokenBytes + 64) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds more than ", kMaxTokenBytes, " bytes"));
  }
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(source, " is empty"));
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds more than ", kMaxTokenBytes, " bytes"));
  }
  for (unsigned char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " holds a character a token cannot have (printable ASCII without spaces only)"));
    }
  }
  return token;
}

std::string TopLevelUsage(const std::vector<CommandSpec>& commands) {
  std::string out =
      "usage: trainctl [flags] <command> [flags] [arguments]\n\n"
      "The command-line client of traind: every RPC of traind.v1.TrainingService as a command.\n\n"
      "commands:\n";
  absl::StrAppend(&out, CommandList(commands, "", {{"help [COMMAND]", "this text, or a command's help (as "
                                                                        "'COMMAND --help')"}}));
  absl::StrAppend(&out, "\nflags of every command:\n", RenderFlagHelp(GlobalFlagSpecs()), "\n", kExitCodesHelp,
                  "\nrun 'trainctl <command> --help' for a command's flags and examples\n");
  return out;
}

std::string GroupUsage(const std::vector<CommandSpec>& commands, const std::string& group) {
  return absl::StrCat("usage: trainctl ", group, " <subcommand> [flags] [arguments]\n\nsubcommands:\n",
                      CommandList(commands, group), "\nrun 'trainctl ", group,
                      " <subcommand> --help' for its flags; 'trainctl help' for the flags of every command\n");
}

std::string CommandUsage(const CommandSpec& command) {
  std::string out = absl::StrCat("usage: trainctl ", Synopsis(command), "\n\n", command.summary, "\n");
  if (!command.details.empty()) absl::StrAppend(&out, "\n", command.details);
  if (!command.flags.empty()) absl::StrAppend(&out, "\nflags:\n", RenderFlagHelp(command.flags));
  absl::StrAppend(&out, "\nflags of every command: --address --tls-ca --tls-cert --tls-key --tls-server-name "
                        "--token-file --timeout --json (see 'trainctl help')\n");
  if (command.default_timeout_seconds > 0) {
    absl::StrAppend(&out, "deadline of each call: ", command.default_timeout_seconds, " s unless --timeout\n");
  } else {
    absl::StrAppend(&out, "deadline: none unless --timeout\n");
  }
  absl::StrAppend(&out, kExitCodesHelp);
  return out;
}

}  // namespace traind::cli
