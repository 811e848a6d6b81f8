// trainctl's exit codes and the errors that lead to them. A command returns an absl::Status; the kind of failure
// travels as a status payload, so helpers deep inside a command (an upload, a .npy reader) return plain
// absl::Status and the exit code is still exact.
#ifndef TRAIND_CLIENT_ERRORS_H_
#define TRAIND_CLIENT_ERRORS_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "grpcpp/support/string_ref.h"
#include "traind/v1/training_service.pb.h"

namespace traind::cli {

// Exit codes scripts can rely on (documented in the usage text and README.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitNotServing = 1;  // health: the daemon answered, but not SERVING
inline constexpr int kExitUsage = 2;       // bad command line (unknown flag, missing or malformed value)
inline constexpr int kExitCallFailed = 3;  // an RPC failed: unreachable, TLS, deadline, NOT_FOUND, ... (or a
                                           // download that does not match its digest)
inline constexpr int kExitLocalFile = 4;   // a local file could not be read, parsed or written
inline constexpr int kExitJobFailed = 5;   // job watch / submit --watch: the job ended FAILED or CANCELLED
                                           // (set as the command's success exit code: the job is printed)

inline constexpr char kExitCodesHelp[] =
    "exit codes: 0 ok; 1 health: not serving; 2 usage error; 3 a call failed (unreachable, TLS, deadline, or the\n"
    "daemon's error, e.g. NOT_FOUND; also a download that fails its digest check); 4 a local file could not be\n"
    "read, parsed or written; 5 the watched job ended FAILED or CANCELLED\n";

enum class FailureKind { kUsage, kCall, kLocalFile };

absl::Status UsageError(absl::string_view message);
// A failure about a local file: `status`'s code and message, marked as kLocalFile.
absl::Status LocalFileError(const absl::Status& status);
// A failed RPC: its code and message (same numbering as absl), and the daemon's ErrorDetail when it sent one.
absl::Status CallError(const grpc::Status& status, const std::optional<v1::ErrorDetail>& detail = std::nullopt);
// A call-kind failure found by the client itself (a download whose digest does not match, a stream that ended
// early).
absl::Status CallError(absl::StatusCode code, absl::string_view message);

// Unmarked statuses count as kCall.
FailureKind KindOf(const absl::Status& status);
int ExitCodeFor(const absl::Status& status);
std::optional<v1::ErrorDetail> DetailOf(const absl::Status& status);

// The daemon's ErrorDetail from a finished call's trailing metadata ("traind-error-detail-bin"), if any.
std::optional<v1::ErrorDetail> ErrorDetailFromTrailers(
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailing_metadata);

// "NOT_FOUND", "UNAVAILABLE", ...
std::string StatusCodeName(absl::StatusCode code);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_ERRORS_H_
