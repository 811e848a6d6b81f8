#include "server/config_file.h"

#include <cstring>

#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/tls.h"

namespace traind {

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseConfigText(absl::string_view text) {
  std::vector<std::pair<std::string, std::string>> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": expected 'name = value'"));
    }
    std::string key(absl::StripAsciiWhitespace(line.substr(0, equals)));
    std::string value(absl::StripAsciiWhitespace(line.substr(equals + 1)));
    if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": empty name"));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    entries.emplace_back(std::move(key), std::move(value));
  }
  return entries;
}

absl::Status ApplyConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> entries = ParseConfigText(*text);
  if (!entries.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", entries.status().message()));
  for (const auto& [key, value] : *entries) {
    if (key == "config") return absl::InvalidArgumentError(absl::StrCat(path, ": a config file cannot name another"));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(key);
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, ": unknown setting '", key, "'"));
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad value for '", key, "': ", error));
    }
  }
  return absl::OkStatus();
}

std::string FindConfigFlag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    for (absl::string_view prefix : {"--config=", "-config="}) {
      if (absl::StartsWith(arg, prefix)) return std::string(arg.substr(prefix.size()));
    }
    if ((arg == "--config" || arg == "-config") && i + 1 < argc) return argv[i + 1];
  }
  return "";
}

}  // namespace traind
