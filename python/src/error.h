// StatusError: how a fedgather Status leaves C++ for Python. The extension
// registers it as fedgather.Error, a subclass of RuntimeError, so every
// server error (shape mismatch, missing rank, permission denied...) reaches
// Python as a RuntimeError whose message is the status code and the
// server's message, also when it is rethrown by a c10d Work's wait().
#ifndef FEDGATHER_PYTHON_SRC_ERROR_H_
#define FEDGATHER_PYTHON_SRC_ERROR_H_

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fedgather::python {

class StatusError : public std::runtime_error {
 public:
  // `context` says what failed, e.g. "fedgather all_gather (group demo,
  // rank 1)"; the message is "<context>: <CODE>: <status message>".
  StatusError(absl::string_view context, const absl::Status& status)
      : std::runtime_error(absl::StrCat(context, ": ",
                                        absl::StatusCodeToString(status.code()),
                                        ": ", status.message())),
        code_(status.code()) {}

  absl::StatusCode code() const { return code_; }

 private:
  absl::StatusCode code_;
};

}  // namespace fedgather::python

#endif  // FEDGATHER_PYTHON_SRC_ERROR_H_
