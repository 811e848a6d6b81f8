// Structured, levelled logging to stderr in logfmt (https://brandur.org/logfmt):
//   ts=2026-11-22T02:10:00.123Z level=info msg="serving" grpc=127.0.0.1:50051
// One line per event, written with a single write(2) so concurrent lines never interleave.
#ifndef TRAIND_SERVER_LOGGING_H_
#define TRAIND_SERVER_LOGGING_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace traind {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Parses "debug", "info", "warn"/"warning", "error"; false for anything else.
bool ParseLogLevel(absl::string_view text, LogLevel* level);

// Lines below this level are dropped. Default: kInfo. Thread-safe.
void SetMinLogLevel(LogLevel level);

// A key=value field; values are quoted and escaped when they contain spaces, quotes, '=' or control characters.
using LogField = std::pair<absl::string_view, std::string>;

// Formats one logfmt line (without the trailing newline); exposed for tests.
std::string FormatLogLine(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields);

void Log(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields = {});

inline void LogInfo(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kInfo, message, fields);
}
inline void LogWarn(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kWarn, message, fields);
}
inline void LogError(absl::string_view message, std::initializer_list<LogField> fields = {}) {
  Log(LogLevel::kError, message, fields);
}

}  // namespace traind

#endif  // TRAIND_SERVER_LOGGING_H_
