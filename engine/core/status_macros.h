// Early-return helpers for absl::Status / absl::StatusOr, used throughout engine/.
#ifndef TRAIND_ENGINE_CORE_STATUS_MACROS_H_
#define TRAIND_ENGINE_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TRAIND_CONCAT_INNER_(a, b) a##b
#define TRAIND_CONCAT_(a, b) TRAIND_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define TRAIND_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::absl::Status traind_status_ = (expr);           \
    if (!traind_status_.ok()) return traind_status_;  \
  } while (0)

// `TRAIND_ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns x or returns the error.
#define TRAIND_ASSIGN_OR_RETURN(lhs, rexpr) \
  TRAIND_ASSIGN_OR_RETURN_IMPL_(TRAIND_CONCAT_(traind_statusor_, __LINE__), lhs, rexpr)

#define TRAIND_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // TRAIND_ENGINE_CORE_STATUS_MACROS_H_
