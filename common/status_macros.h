// Status propagation helpers. Debian's Abseil 20220623 ships none, so these
// two macros are the project's only ones.
#ifndef FEDGATHER_COMMON_STATUS_MACROS_H_
#define FEDGATHER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// FG_RETURN_IF_ERROR(expr) evaluates `expr` (an absl::Status) and returns it
// from the enclosing function when it is not OK.
#define FG_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status fg_status_ = (expr);      \
    if (!fg_status_.ok()) return fg_status_; \
  } while (0)

#define FG_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define FG_STATUS_MACROS_CONCAT_(x, y) FG_STATUS_MACROS_CONCAT_INNER_(x, y)

// FG_ASSIGN_OR_RETURN(lhs, expr) evaluates `expr` (an absl::StatusOr<T>);
// returns its status when not OK, else move-assigns the value to `lhs`, which
// may be a declaration (`auto x`) or an existing variable.
#define FG_ASSIGN_OR_RETURN(lhs, expr)                                       \
  FG_ASSIGN_OR_RETURN_IMPL_(FG_STATUS_MACROS_CONCAT_(fg_or_, __LINE__), lhs, \
                            expr)

#define FG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // FEDGATHER_COMMON_STATUS_MACROS_H_
