#include "engine/model/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace traind::engine {
namespace {

// Closes a file descriptor on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

absl::Status ExternalError(const onnx::TensorProto& tensor, absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", tensor.name(), "': external data refused: ", reason));
}

}  // namespace

absl::Status ResolveExternalData(onnx::TensorProto& tensor, const std::string& base_dir,
                                 int64_t expected_bytes, int64_t& budget_bytes) {
  if (base_dir.empty()) {
    return ExternalError(tensor, "the model was not loaded from a directory");
  }
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;  // -1: to the end of the file.
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      if (!absl::SimpleAtoi(entry.value(), &offset) || offset < 0) {
        return ExternalError(tensor, absl::StrCat("bad offset '", entry.value(), "'"));
      }
    } else if (entry.key() == "length") {
      if (!absl::SimpleAtoi(entry.value(), &length) || length < 0) {
        return ExternalError(tensor, absl::StrCat("bad length '", entry.value(), "'"));
      }
    }
  }
  if (location.empty()) return ExternalError(tensor, "no location");
  if (location.find('\0') != std::string::npos) return ExternalError(tensor, "NUL in location");
  if (location.front() == '/') {
    return ExternalError(tensor, absl::StrCat("absolute path '", location, "'"));
  }
  std::vector<std::string> components;
  for (absl::string_view part : absl::StrSplit(location, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") return ExternalError(tensor, absl::StrCat("'..' in path '", location, "'"));
    components.emplace_back(part);
  }
  if (components.empty()) return ExternalError(tensor, "location names no file");

  ScopedFd fd(open(base_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    return ExternalError(tensor, absl::StrCat("cannot open model directory: ", strerror(errno)));
  }
  for (size_t i = 0; i < components.size(); ++i) {
    const bool last = i + 1 == components.size();
    // The file itself must be regular before it is opened: opening a FIFO blocks until a writer comes (forever),
    // opening a device may act on it. O_NONBLOCK as well, for what is swapped in between the check and the open.
    struct stat before;
    if (last && fstatat(fd.get(), components[i].c_str(), &before, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(before.st_mode)) {
      return ExternalError(tensor, absl::StrCat("'", location, "' is not a regular file"));
    }
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
    const int next = openat(fd.get(), components[i].c_str(), flags);
    if (next < 0) {
      const int err = errno;
      // O_NOFOLLOW reports a symlink as ELOOP; O_DIRECTORY on a symlinked dir gives ENOTDIR/ELOOP.
      if (err == ELOOP || err == ENOTDIR) {
        return ExternalError(tensor, absl::StrCat("'", location, "' is or passes a symlink"));
      }
      return ExternalError(tensor, absl::StrCat("cannot open '", location, "': ", strerror(err)));
    }
    fd.reset(next);
  }
  struct stat info;
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return ExternalError(tensor, absl::StrCat("'", location, "' is not a regular file"));
  }
  const int64_t file_size = info.st_size;
  if (offset > file_size) {
    return ExternalError(tensor, absl::StrCat("offset ", offset, " is beyond the end of '",
                                              location, "' (", file_size, " bytes)"));
  }
  if (length < 0) length = file_size - offset;
  if (length > file_size - offset) {
    return ExternalError(tensor, absl::StrCat("offset ", offset, " + length ", length,
                                              " exceeds the size of '", location, "' (",
                                              file_size, " bytes)"));
  }
  if (length != expected_bytes) {
    return ExternalError(tensor, absl::StrCat("length ", length, " does not match the ",
                                              expected_bytes, " bytes its dims need"));
  }
  if (length > budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tensor '", tensor.name(), "': external data exceeds the model's external data limit"));
  }
  budget_bytes -= length;
  std::string data(static_cast<size_t>(length), '\0');
  int64_t done = 0;
  while (done < length) {
    const ssize_t got = pread(fd.get(), &data[done], static_cast<size_t>(length - done),
                              static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return ExternalError(tensor, absl::StrCat("short read from '", location, "'"));
    done += got;
  }
  tensor.clear_external_data();
  tensor.set_data_location(onnx::TensorProto::DEFAULT);
  tensor.set_raw_data(std::move(data));
  return absl::OkStatus();
}

}  // namespace traind::engine
