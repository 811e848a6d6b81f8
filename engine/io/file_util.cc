#include "engine/io/file_util.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace traind::engine {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int error = errno;
  const std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == ENOSPC || error == EDQUOT) return absl::ResourceExhaustedError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A temporary name unique within this process and across processes.
std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", ::getpid(), ".", counter++);
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", directory);
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) return ErrnoError("cannot fsync directory", directory);
  return absl::OkStatus();
}

std::string ToHex(const unsigned char* bytes, unsigned int size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(size * 2, '0');
  for (unsigned int i = 0; i < size; ++i) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return hex;
}

}  // namespace

struct Sha256::Context {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : context_(std::make_unique<Context>()) { EVP_DigestInit_ex(context_->md, EVP_sha256(), nullptr); }
Sha256::~Sha256() = default;

void Sha256::Update(absl::string_view data) { EVP_DigestUpdate(context_->md, data.data(), data.size()); }

std::string Sha256::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(context_->md, digest, &size);
  return ToHex(digest, size);
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 sha;
  sha.Update(data);
  return sha.FinishHex();
}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(const std::string& path, bool durable) {
  std::string temp_path = TempPathFor(path);
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp_path);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, std::move(temp_path), fd, durable));
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd, bool durable)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd), durable_(durable) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

absl::Status AtomicFileWriter::Append(absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError("writer already committed or failed");
  return WriteAll(fd_, data, temp_path_);
}

absl::Status AtomicFileWriter::WriteAt(int64_t offset, absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError("writer already committed or failed");
  while (!data.empty()) {
    const ssize_t written = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", temp_path_);
    }
    data.remove_prefix(static_cast<size_t>(written));
    offset += written;
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() { return CommitTo(path_); }

absl::Status AtomicFileWriter::CommitTo(const std::string& final_path) {
  if (fd_ < 0) return absl::FailedPreconditionError("writer already committed or failed");
  const int fd = fd_;
  fd_ = -1;
  if (durable_ && ::fsync(fd) != 0) {
    absl::Status error = ErrnoError("cannot fsync", temp_path_);
    ::close(fd);
    return error;
  }
  if (::close(fd) != 0) return ErrnoError("cannot close", temp_path_);
  if (std::rename(temp_path_.c_str(), final_path.c_str()) != 0) return ErrnoError("cannot rename into", final_path);
  committed_ = true;
  return durable_ ? SyncDirectory(DirectoryOf(final_path)) : absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status appended = (*writer)->Append(content); !appended.ok()) return appended;
  return (*writer)->Commit();
}

absl::StatusOr<std::string> ReadFileLimited(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused as not a regular file below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    absl::Status error = ErrnoError("cannot stat", path);
    ::close(fd);
    return error;
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  if (info.st_size > max_bytes) {
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("'", path, "' has ", info.st_size, " bytes, more than the limit of ", max_bytes));
  }
  std::string content(static_cast<size_t>(info.st_size), '\0');
  size_t offset = 0;
  while (offset < content.size()) {
    const ssize_t got = ::read(fd, content.data() + offset, content.size() - offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      absl::Status error = got < 0 ? ErrnoError("cannot read", path)
                                   : absl::DataLossError(absl::StrCat("'", path, "' shrank while being read"));
      ::close(fd);
      return error;
    }
    offset += static_cast<size_t>(got);
  }
  ::close(fd);
  return content;
}

absl::StatusOr<std::unique_ptr<FileReader>> FileReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  return std::unique_ptr<FileReader>(new FileReader(path, fd, info.st_size));
}

FileReader::~FileReader() { ::close(fd_); }

absl::Status FileReader::Read(void* out, size_t size) {
  absl::Status read = ReadAt(position_, out, size);
  if (read.ok()) position_ += static_cast<int64_t>(size);
  return read;
}

absl::Status FileReader::ReadAt(int64_t offset, void* out, size_t size) const {
  char* bytes = static_cast<char*>(out);
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd_, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("cannot read", path_);
    if (got == 0) return absl::DataLossError(absl::StrCat("'", path_, "' ended early (truncated while read?)"));
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Sha256HexOfFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<FileReader>> reader = FileReader::Open(path);
  if (!reader.ok()) return reader.status();
  Sha256 sha;
  std::string buffer(size_t{4} << 20, '\0');
  for (int64_t left = (*reader)->size(); left > 0;) {
    const size_t piece = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buffer.size())));
    if (absl::Status read = (*reader)->Read(buffer.data(), piece); !read.ok()) return read;
    sha.Update(absl::string_view(buffer.data(), piece));
    left -= static_cast<int64_t>(piece);
  }
  return sha.FinishHex();
}

}  // namespace traind::engine
