#include "client/output.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/errors.h"
#include "google/protobuf/util/json_util.h"

namespace traind::cli {
namespace {

google::protobuf::util::JsonPrintOptions PrintOptions() {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  return options;
}

const char* KindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kUsage:
      return "usage";
    case FailureKind::kLocalFile:
      return "local_file";
    case FailureKind::kCall:
      break;
  }
  return "call";
}

}  // namespace

std::string MessageToJson(const google::protobuf::Message& message) {
  std::string json;
  // Printing a valid message cannot fail (no Any with unknown types in traind's schema).
  (void)google::protobuf::util::MessageToJsonString(message, &json, PrintOptions());
  return json;
}

google::protobuf::Value MessageToValue(const google::protobuf::Message& message) {
  google::protobuf::Value value;
  (void)google::protobuf::util::JsonStringToMessage(MessageToJson(message), &value);
  return value;
}

google::protobuf::Value StringValue(const std::string& text) {
  google::protobuf::Value value;
  value.set_string_value(text);
  return value;
}

google::protobuf::Value NumberValue(double number) {
  google::protobuf::Value value;
  value.set_number_value(number);
  return value;
}

google::protobuf::Value BoolValue(bool value) {
  google::protobuf::Value result;
  result.set_bool_value(value);
  return result;
}

google::protobuf::Struct Document(std::initializer_list<std::pair<std::string, google::protobuf::Value>> fields) {
  google::protobuf::Struct document;
  for (const auto& [name, value] : fields) (*document.mutable_fields())[name] = value;
  return document;
}

void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const std::vector<std::string>& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const std::vector<std::string>& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string FormatUnixTime(double seconds) {
  if (seconds == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMicros(static_cast<int64_t>(seconds * 1e6)),
                          absl::LocalTimeZone());
}

std::string FormatNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.6g", value);
}

std::string ShortDigest(const std::string& sha256_hex) { return sha256_hex.substr(0, 12); }

void ReportFailure(std::ostream& out, std::ostream& err, bool json, const std::string& command,
                   const std::string& address, const absl::Status& status) {
  const FailureKind kind = KindOf(status);
  const std::optional<v1::ErrorDetail> detail = DetailOf(status);
  if (json) {
    google::protobuf::Struct document;
    auto& fields = *document.mutable_fields();
    fields["command"] = StringValue(command);
    fields["address"] = StringValue(address);
    google::protobuf::Struct error;
    (*error.mutable_fields())["kind"] = StringValue(KindName(kind));
    (*error.mutable_fields())["code"] = StringValue(StatusCodeName(status.code()));
    (*error.mutable_fields())["message"] = StringValue(std::string(status.message()));
    (*error.mutable_fields())["exit_code"] = NumberValue(ExitCodeFor(status));
    if (detail.has_value()) (*error.mutable_fields())["detail"] = MessageToValue(*detail);
    *fields["error"].mutable_struct_value() = std::move(error);
    out << MessageToJson(document) << "\n";
    return;
  }
  if (kind == FailureKind::kUsage) {
    err << "trainctl " << command << ": " << status.message() << "\n"
        << "run 'trainctl " << command << " --help' for its flags\n";
    return;
  }
  if (kind == FailureKind::kLocalFile) {
    err << "trainctl " << command << ": " << status.message() << "\n";
    return;
  }
  err << "trainctl " << command << ": " << StatusCodeName(status.code()) << ": " << status.message();
  if (!address.empty()) err << " (daemon " << address << ")";
  err << "\n";
  if (!detail.has_value()) return;
  if (!detail->reason().empty()) err << "  reason: " << detail->reason() << "\n";
  for (const auto& blocked : detail->coverage().blocked_parameters()) {
    err << "  parameter '" << blocked.parameter() << "' has no gradient through: "
        << absl::StrJoin(blocked.blocking_nodes(), ", ") << "\n";
  }
}

}  // namespace traind::cli
