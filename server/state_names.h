// Names and ids that clients send and that become file names under the state directory. Every one is
// allow-listed before it touches the file system: no separators, no "..", no leading dot, bounded length.
#ifndef TRAIND_SERVER_STATE_NAMES_H_
#define TRAIND_SERVER_STATE_NAMES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace traind {

inline constexpr size_t kMaxNameLength = 128;

// [A-Za-z0-9._-]{1,128}, not starting with '.'. InvalidArgument naming `what` otherwise.
absl::Status CheckStateName(absl::string_view name, absl::string_view what);

// A fresh id: `prefix` followed by 32 hex digits of a cryptographically secure random number, so ids cannot be
// guessed (they name another client's sessions and artifacts).
std::string NewRandomId(absl::string_view prefix);

}  // namespace traind

#endif  // TRAIND_SERVER_STATE_NAMES_H_
