#include "server/journal/journal_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace fedgather::server {
namespace {

constexpr char kMagic[] = "FGJRNL1\n";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;
constexpr size_t kRecordHeaderSize = 4 + 1 + 4;
constexpr size_t kCrcSize = 4;

void PutU32(uint32_t value, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(value >> (8 * i));
}

uint32_t GetU32(const char* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  }
  return value;
}

uint32_t Crc32(uint32_t crc, absl::string_view bytes) {
  // zlib takes lengths as uInt: feed it in pieces it can count.
  constexpr size_t kMaxPiece = 1u << 30;
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), kMaxPiece);
    crc = static_cast<uint32_t>(
        crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()),
              static_cast<uInt>(n)));
    bytes.remove_prefix(n);
  }
  return crc;
}

absl::Status WriteAll(int fd, std::vector<iovec> iov, const std::string& path) {
  size_t first = 0;
  while (first < iov.size()) {
    const ssize_t n =
        writev(fd, iov.data() + first,
               static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("cannot append to ", path));
    }
    size_t written = static_cast<size_t>(n);
    while (first < iov.size() && written >= iov[first].iov_len) {
      written -= iov[first].iov_len;
      ++first;
    }
    if (written > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + written;
      iov[first].iov_len -= written;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JournalFile>> JournalFile::Create(
    const std::string& path) {
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot create journal ", path));
  }
  std::unique_ptr<JournalFile> file(new JournalFile(path, fd));
  std::vector<iovec> magic = {{const_cast<char*>(kMagic), kMagicSize}};
  if (absl::Status written = WriteAll(fd, std::move(magic), path);
      !written.ok()) {
    return written;
  }
  return file;
}

absl::StatusOr<std::unique_ptr<JournalFile>> JournalFile::OpenForAppend(
    const std::string& path, int64_t valid_bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot open journal ", path));
  }
  std::unique_ptr<JournalFile> file(new JournalFile(path, fd));
  if (ftruncate(fd, valid_bytes) != 0 ||
      lseek(fd, valid_bytes, SEEK_SET) != valid_bytes) {
    return ErrnoToStatus(errno,
                         absl::StrCat("cannot cut the torn tail of ", path));
  }
  return file;
}

JournalFile::~JournalFile() { close(fd_); }

absl::Status JournalFile::Append(uint8_t kind, uint32_t rank,
                                 const grpc::ByteBuffer& payload) {
  std::vector<grpc::Slice> slices;
  if (payload.Valid()) {
    grpc::Status dumped = payload.Dump(&slices);
    if (!dumped.ok()) {
      return absl::InternalError(
          absl::StrCat("cannot read a frame to journal in ", path_, ": ",
                       dumped.error_message()));
    }
  }
  std::vector<absl::string_view> pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& slice : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                        slice.size());
  }
  return AppendPieces(kind, rank, pieces);
}

absl::Status JournalFile::Append(uint8_t kind, uint32_t rank,
                                 absl::string_view payload) {
  return AppendPieces(kind, rank, {payload});
}

absl::Status JournalFile::AppendPieces(
    uint8_t kind, uint32_t rank, const std::vector<absl::string_view>& pieces) {
  size_t size = 0;
  for (absl::string_view piece : pieces) size += piece.size();
  if (size > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a record of ", size, " bytes is too large for journal ", path_));
  }
  char header[kRecordHeaderSize];
  PutU32(static_cast<uint32_t>(size), header);
  header[4] = static_cast<char>(kind);
  PutU32(rank, header + 5);
  uint32_t crc = Crc32(0, absl::string_view(header + 4, 5));
  for (absl::string_view piece : pieces) crc = Crc32(crc, piece);
  char trailer[kCrcSize];
  PutU32(crc, trailer);
  std::vector<iovec> iov;
  iov.reserve(pieces.size() + 2);
  iov.push_back({header, sizeof header});
  for (absl::string_view piece : pieces) {
    if (!piece.empty()) {
      iov.push_back({const_cast<char*>(piece.data()), piece.size()});
    }
  }
  iov.push_back({trailer, sizeof trailer});
  return WriteAll(fd_, std::move(iov), path_);
}

absl::StatusOr<grpc::ByteBuffer> JournalFile::ReadAt(int64_t offset,
                                                     int64_t size) const {
  grpc::Slice slice(static_cast<size_t>(size));
  char* data = reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin()));
  int64_t done = 0;
  while (done < size) {
    const ssize_t got = pread(fd_, data + done, size - done, offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::DataLossError(
          absl::StrCat("cannot read back ", size, " bytes at offset ", offset,
                       " of journal ", path_, ": ",
                       got < 0 ? strerror(errno) : "the file is shorter"));
    }
    done += got;
  }
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status JournalFile::Sync() {
  if (fdatasync(fd_) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot sync journal ", path_));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadJournal(
    const std::string& path,
    const std::function<absl::Status(JournalRecord record)>& each) {
  FILE* file = fopen(path.c_str(), "rbe");
  if (file == nullptr) {
    return ErrnoToStatus(errno, absl::StrCat("cannot read journal ", path));
  }
  struct Closer {
    FILE* f;
    ~Closer() { fclose(f); }
  } closer{file};
  struct stat info {};
  if (fstat(fileno(file), &info) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot read journal ", path));
  }
  const int64_t file_size = info.st_size;
  char magic[kMagicSize];
  if (fread(magic, 1, kMagicSize, file) != kMagicSize ||
      std::memcmp(magic, kMagic, kMagicSize) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a fedgather journal (bad magic)"));
  }
  int64_t valid = static_cast<int64_t>(kMagicSize);
  for (;;) {
    char header[kRecordHeaderSize];
    if (fread(header, 1, sizeof header, file) != sizeof header) break;
    const uint32_t size = GetU32(header);
    if (valid + static_cast<int64_t>(kRecordHeaderSize + size + kCrcSize) >
        file_size) {
      break;  // torn: the record runs past the end of the file
    }
    JournalRecord record;
    record.kind = static_cast<uint8_t>(header[4]);
    record.rank = GetU32(header + 5);
    record.payload_offset = valid + static_cast<int64_t>(kRecordHeaderSize);
    record.payload.resize(size);
    char trailer[kCrcSize];
    if (fread(record.payload.data(), 1, size, file) != size ||
        fread(trailer, 1, kCrcSize, file) != kCrcSize) {
      break;
    }
    const uint32_t crc =
        Crc32(Crc32(0, absl::string_view(header + 4, 5)), record.payload);
    if (crc != GetU32(trailer)) break;  // corrupt
    valid += static_cast<int64_t>(kRecordHeaderSize + size + kCrcSize);
    if (absl::Status taken = each(std::move(record)); !taken.ok()) {
      return taken;
    }
  }
  return valid;
}

absl::Status SyncDirectory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoToStatus(errno, absl::StrCat("cannot open directory ", path));
  }
  const int synced = fsync(fd);
  const int error = errno;
  close(fd);
  if (synced != 0) {
    return ErrnoToStatus(error, absl::StrCat("cannot sync directory ", path));
  }
  return absl::OkStatus();
}

}  // namespace fedgather::server
