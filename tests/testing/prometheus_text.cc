#include "tests/testing/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace traind::testing {
namespace {

bool IsNameStart(char c, bool allow_colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}
bool IsNameChar(char c, bool allow_colon) { return IsNameStart(c, allow_colon) || (c >= '0' && c <= '9'); }

// Reads a metric (allow_colon) or label name at text[*pos]; false if none.
bool ReadName(const std::string& text, size_t* pos, bool allow_colon, std::string* name) {
  const size_t start = *pos;
  if (start >= text.size() || !IsNameStart(text[start], allow_colon)) return false;
  size_t end = start + 1;
  while (end < text.size() && IsNameChar(text[end], allow_colon)) ++end;
  *name = text.substr(start, end - start);
  *pos = end;
  return true;
}

bool ParseValue(const std::string& text, double* value) {
  if (text == "NaN" || text == "Nan" || text == "nan") {
    *value = std::nan("");
    return true;
  }
  if (text == "+Inf" || text == "Inf") {
    *value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    *value = -INFINITY;
    return true;
  }
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// The family a sample name belongs to, given the declared type of the base name.
std::string FamilyOf(const std::string& sample_name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (absl::EndsWith(sample_name, suffix)) {
      const std::string base = sample_name.substr(0, sample_name.size() - std::string(suffix).size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return sample_name;
}

absl::Status ParseSample(const std::string& line, PrometheusSample* sample) {
  size_t pos = 0;
  if (!ReadName(line, &pos, true, &sample->name)) return absl::InvalidArgumentError("bad metric name");
  if (pos < line.size() && line[pos] == '{') {
    ++pos;
    while (true) {
      if (pos < line.size() && line[pos] == '}') {
        ++pos;
        break;
      }
      std::string label;
      if (!ReadName(line, &pos, false, &label)) return absl::InvalidArgumentError("bad label name");
      if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
        return absl::InvalidArgumentError("expected =\" after label name");
      }
      pos += 2;
      std::string value;
      while (true) {
        if (pos >= line.size()) return absl::InvalidArgumentError("unterminated label value");
        const char c = line[pos++];
        if (c == '"') break;
        if (c == '\\') {
          if (pos >= line.size()) return absl::InvalidArgumentError("dangling escape");
          const char e = line[pos++];
          if (e == 'n') {
            value.push_back('\n');
          } else if (e == '\\' || e == '"') {
            value.push_back(e);
          } else {
            return absl::InvalidArgumentError("bad escape in label value");
          }
        } else {
          value.push_back(c);
        }
      }
      if (!sample->labels.emplace(label, value).second) return absl::InvalidArgumentError("duplicate label");
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
  }
  if (pos >= line.size() || line[pos] != ' ') return absl::InvalidArgumentError("expected space before value");
  std::vector<std::string> rest = absl::StrSplit(line.substr(pos + 1), ' ', absl::SkipEmpty());
  if (rest.empty() || rest.size() > 2) return absl::InvalidArgumentError("expected value [timestamp]");
  if (!ParseValue(rest[0], &sample->value)) return absl::InvalidArgumentError("bad sample value");
  if (rest.size() == 2) {
    char* end = nullptr;
    std::strtoll(rest[1].c_str(), &end, 10);
    if (end != rest[1].c_str() + rest[1].size()) return absl::InvalidArgumentError("bad timestamp");
  }
  return absl::OkStatus();
}

absl::Status CheckHistogram(const PrometheusFamily& family) {
  // Group bucket series by their labels without `le`.
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;
  std::map<std::string, double> counts;
  for (const PrometheusSample& sample : family.samples) {
    std::map<std::string, std::string> labels = sample.labels;
    const std::string le = labels.count("le") ? labels["le"] : "";
    labels.erase("le");
    std::string key;
    for (const auto& [k, v] : labels) absl::StrAppend(&key, k, "=", v, ",");
    if (sample.name == family.name + "_bucket") {
      double bound = 0;
      if (!ParseValue(le, &bound)) return absl::InvalidArgumentError(absl::StrCat(family.name, ": bad le '", le, "'"));
      buckets[key].emplace_back(bound, sample.value);
    } else if (sample.name == family.name + "_count") {
      counts[key] = sample.value;
    }
  }
  for (const auto& [key, series] : buckets) {
    for (size_t i = 1; i < series.size(); ++i) {
      if (!(series[i].first > series[i - 1].first) || series[i].second < series[i - 1].second) {
        return absl::InvalidArgumentError(absl::StrCat(family.name, ": buckets not cumulative/sorted"));
      }
    }
    if (series.empty() || !std::isinf(series.back().first)) {
      return absl::InvalidArgumentError(absl::StrCat(family.name, ": no +Inf bucket"));
    }
    if (!counts.count(key) || counts[key] != series.back().second) {
      return absl::InvalidArgumentError(absl::StrCat(family.name, ": _count differs from the +Inf bucket"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PrometheusFamily>> ParsePrometheusText(const std::string& text) {
  std::vector<PrometheusFamily> families;
  std::map<std::string, std::string> types;
  std::set<std::string> finished_families;  // families whose samples are complete (another family started)
  std::set<std::string> series_seen;
  int line_number = 0;
  auto error = [&line_number](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", what));
  };
  auto family_named = [&families, &finished_families](const std::string& name) -> PrometheusFamily& {
    if (families.empty() || families.back().name != name) {
      if (!families.empty()) finished_families.insert(families.back().name);
      families.push_back(PrometheusFamily{name, "untyped", "", {}});
    }
    return families.back();
  };
  if (!text.empty() && text.back() != '\n') return absl::InvalidArgumentError("text must end with a newline");
  for (const absl::string_view raw_line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string line(raw_line);
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() < 3 || (parts[1] != "HELP" && parts[1] != "TYPE")) continue;  // a plain comment
      size_t pos = 0;
      std::string name;
      if (!ReadName(parts[2], &pos, true, &name) || pos != parts[2].size()) return error("bad name in " + parts[1]);
      if (finished_families.count(name)) return error(parts[1] + " for a family that already ended: " + name);
      PrometheusFamily& family = family_named(name);
      if (parts[1] == "TYPE") {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
        if (parts.size() != 4 || !kTypes.count(parts[3])) return error("bad TYPE");
        if (types.count(name)) return error("second TYPE for " + name);
        if (!family.samples.empty()) return error("TYPE after samples of " + name);
        types[name] = parts[3];
        family.type = parts[3];
      } else {
        family.help = parts.size() == 4 ? parts[3] : "";
      }
      continue;
    }
    PrometheusSample sample;
    if (absl::Status parsed = ParseSample(line, &sample); !parsed.ok()) return error(std::string(parsed.message()));
    const std::string family_name = FamilyOf(sample.name, types);
    if (finished_families.count(family_name)) return error("samples of " + family_name + " are not grouped");
    std::string series = sample.name;
    for (const auto& [k, v] : sample.labels) absl::StrAppend(&series, ",", k, "=", v);
    if (!series_seen.insert(series).second) return error("duplicate series " + series);
    PrometheusFamily& family = family_named(family_name);
    if (family.type == "counter" && !(sample.value >= 0)) return error("negative or NaN counter " + sample.name);
    family.samples.push_back(std::move(sample));
  }
  for (const PrometheusFamily& family : families) {
    if (family.type == "histogram") {
      if (absl::Status checked = CheckHistogram(family); !checked.ok()) return checked;
    }
  }
  return families;
}

const PrometheusSample* FindSample(const std::vector<PrometheusFamily>& families, const std::string& name,
                                   const std::map<std::string, std::string>& labels) {
  for (const PrometheusFamily& family : families) {
    for (const PrometheusSample& sample : family.samples) {
      if (sample.name != name) continue;
      bool matches = true;
      for (const auto& [k, v] : labels) {
        auto it = sample.labels.find(k);
        if (it == sample.labels.end() || it->second != v) matches = false;
      }
      if (matches) return &sample;
    }
  }
  return nullptr;
}

}  // namespace traind::testing
