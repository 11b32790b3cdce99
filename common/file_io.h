// Whole-file reads and writes with errors that name the path.
#ifndef FEDGATHER_COMMON_FILE_IO_H_
#define FEDGATHER_COMMON_FILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace fedgather {

// ReadFileToString returns the contents of `path`. The status code follows
// errno (NOT_FOUND, PERMISSION_DENIED, ...) and the message names the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// WriteStringToFile replaces `path` with `contents`, creating it with `mode`
// (and forcing that mode on an existing file). Writes to a temporary file in
// the same directory, then renames, so readers never see a partial file.
absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents, int mode = 0644);

// WritePiecesToFile is WriteStringToFile for contents given as consecutive
// pieces, so large buffers are written without first joining them.
absl::Status WritePiecesToFile(const std::string& path,
                               absl::Span<const absl::string_view> pieces,
                               int mode = 0644);

// MakeDirectory creates `path` with `mode` (regardless of the umask) unless
// it is already a directory, whose mode it leaves alone.
absl::Status MakeDirectory(const std::string& path, int mode);

// MakeDirectories is MakeDirectory for `path` and each missing parent.
absl::Status MakeDirectories(const std::string& path, int mode);

// ErrnoToStatus maps an errno value to a status naming `what`.
absl::Status ErrnoToStatus(int error_number, absl::string_view what);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_FILE_IO_H_
