#include "server/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace traind {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

bool NeedsQuoting(absl::string_view value) {
  if (value.empty()) return true;
  for (unsigned char c : value) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

void AppendValue(std::string* out, absl::string_view value) {
  if (!NeedsQuoting(value)) {
    out->append(value.data(), value.size());
    return;
  }
  out->push_back('"');
  for (unsigned char c : value) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < ' ' || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

}  // namespace

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug") {
    *level = LogLevel::kDebug;
  } else if (lower == "info") {
    *level = LogLevel::kInfo;
  } else if (lower == "warn" || lower == "warning") {
    *level = LogLevel::kWarn;
  } else if (lower == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }

std::string FormatLogLine(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields) {
  std::string line = absl::StrCat(
      "ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " level=", LevelName(level),
      " msg=");
  AppendValue(&line, message);
  for (const LogField& field : fields) {
    line.push_back(' ');
    line.append(field.first.data(), field.first.size());
    line.push_back('=');
    AppendValue(&line, field.second);
  }
  return line;
}

void Log(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < g_min_level.load(std::memory_order_relaxed)) return;
  std::string line = FormatLogLine(level, message, fields);
  line.push_back('\n');
  // One write per line: lines from concurrent threads never interleave (stderr is unbuffered and writes of
  // this size to a pipe or file are not split by the kernel in practice).
  const char* data = line.data();
  size_t remaining = line.size();
  while (remaining > 0) {
    const ssize_t written = ::write(STDERR_FILENO, data, remaining);
    if (written <= 0) return;
    data += written;
    remaining -= static_cast<size_t>(written);
  }
}

}  // namespace traind
