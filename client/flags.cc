#include "client/flags.h"

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace traind::cli {
namespace {

const FlagSpec* FindSpec(const std::vector<FlagSpec>& specs, absl::string_view name) {
  for (const FlagSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// "--name=value" -> ("name", "value", true); "--name" -> ("name", "", false).
struct SplitFlag {
  std::string name;
  std::string value;
  bool has_value = false;
};
SplitFlag Split(absl::string_view arg) {
  SplitFlag split;
  absl::string_view body = arg.substr(2);
  if (const size_t equals = body.find('='); equals != absl::string_view::npos) {
    split.name = std::string(body.substr(0, equals));
    split.value = std::string(body.substr(equals + 1));
    split.has_value = true;
  } else {
    split.name = std::string(body);
  }
  return split;
}

bool IsFlag(absl::string_view arg) { return absl::StartsWith(arg, "--") && arg.size() > 2; }

}  // namespace

bool FlagValues::Has(absl::string_view name) const { return values_.find(name) != values_.end(); }

std::string FlagValues::String(absl::string_view name, const std::string& fallback) const {
  const auto found = values_.find(name);
  return found == values_.end() ? fallback : found->second.back();
}

std::vector<std::string> FlagValues::Values(absl::string_view name) const {
  const auto found = values_.find(name);
  return found == values_.end() ? std::vector<std::string>() : found->second;
}

std::vector<std::string> FlagValues::List(absl::string_view name) const {
  std::vector<std::string> items;
  for (const std::string& value : Values(name)) {
    for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) items.emplace_back(item);
  }
  return items;
}

std::string FlagValues::Required(absl::string_view name) const {
  if (!Has(name)) {
    AddError(absl::StrCat("--", name, " is required"));
    return "";
  }
  return String(name);
}

std::optional<double> FlagValues::Double(absl::string_view name) const {
  if (!Has(name)) return std::nullopt;
  double value = 0;
  if (!absl::SimpleAtod(String(name), &value) || !std::isfinite(value)) {
    AddError(absl::StrCat("--", name, " '", String(name), "' is not a finite number"));
    return std::nullopt;
  }
  return value;
}

std::optional<float> FlagValues::Float(absl::string_view name, bool non_negative) const {
  const std::optional<double> value = Double(name);
  if (!value.has_value()) return std::nullopt;
  if (std::fabs(*value) > std::numeric_limits<float>::max() || (non_negative && *value < 0)) {
    AddError(absl::StrCat("--", name, " '", String(name), "' is out of range",
                          non_negative ? " (a non-negative float32)" : " (a float32)"));
    return std::nullopt;
  }
  return static_cast<float>(*value);
}

std::optional<int64_t> FlagValues::Int(absl::string_view name, int64_t min, int64_t max) const {
  if (!Has(name)) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(String(name), &value) || value < min || value > max) {
    AddError(absl::StrCat("--", name, " '", String(name), "' is not an integer in [", min, ", ", max, "]"));
    return std::nullopt;
  }
  return value;
}

std::optional<uint64_t> FlagValues::Uint64(absl::string_view name) const {
  if (!Has(name)) return std::nullopt;
  uint64_t value = 0;
  if (absl::StartsWith(String(name), "-") || !absl::SimpleAtoi(String(name), &value)) {
    AddError(absl::StrCat("--", name, " '", String(name), "' is not a non-negative integer"));
    return std::nullopt;
  }
  return value;
}

void FlagValues::AddError(const std::string& message) const {
  if (status_.ok()) status_ = absl::InvalidArgumentError(message);
}

absl::StatusOr<FlagValues> ParseFlags(const std::vector<FlagSpec>& specs, const std::vector<std::string>& args) {
  FlagValues values;
  bool only_positional = false;  // after "--"
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (only_positional || !IsFlag(arg)) {
      if (arg == "--") {
        only_positional = true;
      } else {
        values.positional_.push_back(arg);
      }
      continue;
    }
    SplitFlag split = Split(arg);
    const FlagSpec* spec = FindSpec(specs, split.name);
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", split.name));
    if (spec->value_name.empty()) {
      if (split.has_value) return absl::InvalidArgumentError(absl::StrCat("--", split.name, " takes no value"));
    } else if (!split.has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", split.name, " needs a value (", spec->value_name, ")"));
      }
      split.value = args[++i];
    }
    std::vector<std::string>& slot = values.values_[split.name];
    if (!slot.empty() && !spec->repeated) {
      return absl::InvalidArgumentError(absl::StrCat("--", split.name, " given more than once"));
    }
    slot.push_back(std::move(split.value));
  }
  return values;
}

bool TakesSeparateValue(const std::vector<FlagSpec>& specs, absl::string_view arg) {
  if (!IsFlag(arg)) return false;
  const SplitFlag split = Split(arg);
  const FlagSpec* spec = FindSpec(specs, split.name);
  return spec != nullptr && !spec->value_name.empty() && !split.has_value;
}

std::string RenderFlagHelp(const std::vector<FlagSpec>& specs, int width) {
  std::vector<std::string> heads;
  size_t head_width = 0;
  for (const FlagSpec& spec : specs) {
    std::string head = absl::StrCat("  --", spec.name);
    if (!spec.value_name.empty()) absl::StrAppend(&head, " ", spec.value_name);
    if (spec.repeated) absl::StrAppend(&head, " ...");
    head_width = std::max(head_width, head.size());
    heads.push_back(std::move(head));
  }
  head_width = std::min<size_t>(head_width + 2, 34);
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string line = heads[i];
    if (line.size() + 1 > head_width) {
      out += line + "\n";
      line.clear();
    }
    line.resize(head_width, ' ');
    // Greedy word wrap of the help text into the column after the heads.
    const size_t text_width = std::max<size_t>(static_cast<size_t>(width) - head_width, 30);
    size_t column = 0;
    for (absl::string_view word : absl::StrSplit(specs[i].help, ' ', absl::SkipEmpty())) {
      if (column > 0 && column + 1 + word.size() > text_width) {
        out += line + "\n";
        line = std::string(head_width, ' ');
        column = 0;
      }
      if (column > 0) {
        line += ' ';
        ++column;
      }
      absl::StrAppend(&line, word);
      column += word.size();
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace traind::cli
