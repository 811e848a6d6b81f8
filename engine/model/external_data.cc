#include "engine/model/external_data.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/model/external_tensor.h"

namespace traind::engine {
namespace {

// Closes a file descriptor on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
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

// One tensor's bytes in a checked, open file.
struct ExternalRegion {
  ScopedFd fd;
  std::string location;
  std::string path;  // absolute (for pinning)
  struct stat info;
  int64_t offset = 0;
  int64_t length = 0;
};

// Opens `location` below `base_dir` one component at a time with O_NOFOLLOW. `path` gets the absolute path when
// `want_path`.
absl::Status OpenBelowDirectory(const onnx::TensorProto& tensor, const std::string& base_dir,
                                const std::string& location, bool want_path, ExternalRegion& region) {
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

  region.fd.reset(open(base_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (region.fd.get() < 0) {
    return ExternalError(tensor, absl::StrCat("cannot open model directory: ", strerror(errno)));
  }
  if (want_path) {
    char resolved[PATH_MAX];
    if (realpath(base_dir.c_str(), resolved) == nullptr) {
      return ExternalError(tensor, absl::StrCat("cannot resolve the model directory: ", strerror(errno)));
    }
    region.path = absl::StrCat(resolved, "/", absl::StrJoin(components, "/"));
  }
  for (size_t i = 0; i < components.size(); ++i) {
    const bool last = i + 1 == components.size();
    // The file itself must be regular before it is opened: opening a FIFO blocks until a writer comes (forever),
    // opening a device may act on it. O_NONBLOCK as well, for what is swapped in between the check and the open.
    struct stat before;
    if (last && fstatat(region.fd.get(), components[i].c_str(), &before, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(before.st_mode)) {
      return ExternalError(tensor, absl::StrCat("'", location, "' is not a regular file"));
    }
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
    const int next = openat(region.fd.get(), components[i].c_str(), flags);
    if (next < 0) {
      const int err = errno;
      // O_NOFOLLOW reports a symlink as ELOOP; O_DIRECTORY on a symlinked dir gives ENOTDIR/ELOOP.
      if (err == ELOOP || err == ENOTDIR) {
        return ExternalError(tensor, absl::StrCat("'", location, "' is or passes a symlink"));
      }
      return ExternalError(tensor, absl::StrCat("cannot open '", location, "': ", strerror(err)));
    }
    region.fd.reset(next);
  }
  return absl::OkStatus();
}

// Opens exactly the file the caller listed for `location`.
absl::Status OpenListedFile(const onnx::TensorProto& tensor, const std::map<std::string, std::string>& files,
                            const std::string& location, bool want_path, ExternalRegion& region) {
  auto it = files.find(location);
  if (it == files.end()) {
    return ExternalError(tensor, absl::StrCat("its file '", location, "' was not provided with the model"));
  }
  // Never blocks on a FIFO or acts on a device: lstat first, then a non-blocking open (regularity checked again).
  struct stat before;
  if (lstat(it->second.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) {
    return ExternalError(tensor, absl::StrCat("the file of '", location, "' is not a regular file"));
  }
  region.fd.reset(open(it->second.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (region.fd.get() < 0) {
    return ExternalError(tensor, absl::StrCat("cannot open the file of '", location, "': ", strerror(errno)));
  }
  if (want_path) {
    char resolved[PATH_MAX];
    if (realpath(it->second.c_str(), resolved) == nullptr) {
      return ExternalError(tensor, absl::StrCat("cannot resolve the file of '", location, "': ", strerror(errno)));
    }
    region.path = resolved;
  }
  return absl::OkStatus();
}

// Every check of a tensor's external reference, leaving the file open in `region`.
absl::Status OpenExternalRegion(const onnx::TensorProto& tensor, const ExternalDataSource& source,
                                int64_t expected_bytes, int64_t& budget_bytes, bool want_path,
                                ExternalRegion& region) {
  if (source.empty()) {
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
    } else if (absl::StartsWith(entry.key(), kPinnedKeyPrefix)) {
      return ExternalError(tensor, absl::StrCat("reserved key '", entry.key(), "'"));
    }
  }
  if (location.empty()) return ExternalError(tensor, "no location");
  if (location.find('\0') != std::string::npos) return ExternalError(tensor, "NUL in location");
  region.location = location;
  if (source.files.empty()) {
    absl::Status opened = OpenBelowDirectory(tensor, source.base_dir, location, want_path, region);
    if (!opened.ok()) return opened;
  } else {
    absl::Status opened = OpenListedFile(tensor, source.files, location, want_path, region);
    if (!opened.ok()) return opened;
  }
  if (fstat(region.fd.get(), &region.info) != 0 || !S_ISREG(region.info.st_mode)) {
    return ExternalError(tensor, absl::StrCat("'", location, "' is not a regular file"));
  }
  const int64_t file_size = region.info.st_size;
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
  region.offset = offset;
  region.length = length;
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveExternalData(onnx::TensorProto& tensor, const std::string& base_dir,
                                 int64_t expected_bytes, int64_t& budget_bytes) {
  ExternalDataSource source;
  source.base_dir = base_dir;
  return ResolveExternalData(tensor, source, expected_bytes, budget_bytes);
}

absl::Status ResolveExternalData(onnx::TensorProto& tensor, const ExternalDataSource& source,
                                 int64_t expected_bytes, int64_t& budget_bytes) {
  ExternalRegion region;
  absl::Status opened =
      OpenExternalRegion(tensor, source, expected_bytes, budget_bytes, /*want_path=*/false, region);
  if (!opened.ok()) return opened;
  std::string data(static_cast<size_t>(region.length), '\0');
  int64_t done = 0;
  while (done < region.length) {
    const ssize_t got = pread(region.fd.get(), &data[done], static_cast<size_t>(region.length - done),
                              static_cast<off_t>(region.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return ExternalError(tensor, absl::StrCat("short read from '", region.location, "'"));
    done += got;
  }
  tensor.clear_external_data();
  tensor.set_data_location(onnx::TensorProto::DEFAULT);
  tensor.set_raw_data(std::move(data));
  return absl::OkStatus();
}

absl::Status PinExternalData(onnx::TensorProto& tensor, const ExternalDataSource& source, int64_t expected_bytes,
                             int64_t& budget_bytes) {
  ExternalRegion region;
  absl::Status opened = OpenExternalRegion(tensor, source, expected_bytes, budget_bytes, /*want_path=*/true, region);
  if (!opened.ok()) return opened;
  PinnedFile file;
  file.path = region.path;
  file.identity = FileIdentity(region.info);
  SetPinnedReference(file, region.location, region.offset, region.length, tensor);
  return absl::OkStatus();
}

}  // namespace traind::engine
