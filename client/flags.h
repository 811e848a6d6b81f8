// trainctl's command-line flags: each command declares its flags (name, value, help) once, and the same table
// parses the command line and renders the command's --help. GNU style: `--name=value` or `--name value`, switches
// take no value, flags may come before or after positional arguments.
#ifndef TRAIND_CLIENT_FLAGS_H_
#define TRAIND_CLIENT_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind::cli {

struct FlagSpec {
  std::string name;        // without the leading "--"
  std::string value_name;  // "FILE", "N", ...; empty: a switch that takes no value
  std::string help;
  bool repeated = false;   // may be given several times (each value kept, in order)
};

// The values of one parsed command line. The typed getters check the value's form; the first malformed value
// is remembered and status() reports it, so a command reads every flag and then checks once.
class FlagValues {
 public:
  bool Has(absl::string_view name) const;
  // The value of a flag given at most once; `fallback` when absent.
  std::string String(absl::string_view name, const std::string& fallback = "") const;
  // Every value of a repeated flag, in order, as given.
  std::vector<std::string> Values(absl::string_view name) const;
  // The same, a value with commas counting as several ("--names a,b"): for lists of graph names.
  std::vector<std::string> List(absl::string_view name) const;
  // Absent: records "--name is required" and returns "".
  std::string Required(absl::string_view name) const;
  std::optional<double> Double(absl::string_view name) const;
  // Absent: nullopt. Present: an integer in [min, max] or a recorded error.
  std::optional<int64_t> Int(absl::string_view name, int64_t min, int64_t max) const;
  std::optional<uint64_t> Uint64(absl::string_view name) const;
  // A float32 that must be finite (and >= 0 with `non_negative`).
  std::optional<float> Float(absl::string_view name, bool non_negative = false) const;

  const std::vector<std::string>& positional() const { return positional_; }
  // Records a usage error found by the command itself (e.g. two flags that exclude each other).
  void AddError(const std::string& message) const;
  absl::Status status() const { return status_; }

 private:
  friend absl::StatusOr<FlagValues> ParseFlags(const std::vector<FlagSpec>& specs,
                                               const std::vector<std::string>& args);
  std::map<std::string, std::vector<std::string>, std::less<>> values_;
  std::vector<std::string> positional_;
  mutable absl::Status status_;
};

// Parses `args` against `specs`. Errors (INVALID_ARGUMENT) name the flag: unknown, missing value, a value given to
// a switch, a non-repeated flag given twice.
absl::StatusOr<FlagValues> ParseFlags(const std::vector<FlagSpec>& specs, const std::vector<std::string>& args);

// Whether `arg` (e.g. "--address" or "--address=x") names a flag of `specs` that takes a separate value: the
// command-word scanner uses it to step over flag values that come before the command.
bool TakesSeparateValue(const std::vector<FlagSpec>& specs, absl::string_view arg);

// "  --name VALUE   help" lines, aligned, help wrapped to `width` columns.
std::string RenderFlagHelp(const std::vector<FlagSpec>& specs, int width = 100);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_FLAGS_H_
