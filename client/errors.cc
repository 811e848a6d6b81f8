#include "client/errors.h"

#include "absl/strings/cord.h"

namespace traind::cli {
namespace {

constexpr char kKindPayload[] = "traind.trainctl/failure-kind";
constexpr char kDetailPayload[] = "traind.trainctl/error-detail";

absl::Status WithKind(absl::Status status, absl::string_view kind) {
  status.SetPayload(kKindPayload, absl::Cord(kind));
  return status;
}

}  // namespace

absl::Status UsageError(absl::string_view message) {
  return WithKind(absl::InvalidArgumentError(message), "usage");
}

absl::Status LocalFileError(const absl::Status& status) {
  return WithKind(absl::Status(status.code(), status.message()), "local");
}

absl::Status CallError(const grpc::Status& status, const std::optional<v1::ErrorDetail>& detail) {
  absl::Status result = WithKind(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()), "call");
  if (result.ok()) return result;  // a gRPC OK maps to OK; callers only pass failures
  if (detail.has_value()) result.SetPayload(kDetailPayload, absl::Cord(detail->SerializeAsString()));
  return result;
}

absl::Status CallError(absl::StatusCode code, absl::string_view message) {
  return WithKind(absl::Status(code, message), "call");
}

FailureKind KindOf(const absl::Status& status) {
  const auto kind = status.GetPayload(kKindPayload);
  if (!kind.has_value()) return FailureKind::kCall;
  if (*kind == "usage") return FailureKind::kUsage;
  if (*kind == "local") return FailureKind::kLocalFile;
  return FailureKind::kCall;
}

int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  switch (KindOf(status)) {
    case FailureKind::kUsage:
      return kExitUsage;
    case FailureKind::kLocalFile:
      return kExitLocalFile;
    case FailureKind::kCall:
      break;
  }
  return kExitCallFailed;
}

std::optional<v1::ErrorDetail> DetailOf(const absl::Status& status) {
  const auto bytes = status.GetPayload(kDetailPayload);
  if (!bytes.has_value()) return std::nullopt;
  v1::ErrorDetail detail;
  if (!detail.ParseFromString(std::string(*bytes))) return std::nullopt;
  return detail;
}

std::optional<v1::ErrorDetail> ErrorDetailFromTrailers(
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailing_metadata) {
  const auto found = trailing_metadata.find("traind-error-detail-bin");
  if (found == trailing_metadata.end()) return std::nullopt;
  v1::ErrorDetail detail;
  if (!detail.ParseFromArray(found->second.data(), static_cast<int>(found->second.size()))) return std::nullopt;
  return detail;
}

std::string StatusCodeName(absl::StatusCode code) {
  const std::string name = absl::StatusCodeToString(code);
  return name.empty() ? "UNKNOWN" : name;
}

}  // namespace traind::cli
