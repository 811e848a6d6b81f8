// Crash-safe file writes and SHA-256 digests, shared by checkpoints, artifacts and uploaded blobs.
#ifndef TRAIND_ENGINE_IO_FILE_UTIL_H_
#define TRAIND_ENGINE_IO_FILE_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind::engine {

// Writes `content` to `path` so that a crash at any moment leaves either the old file or the complete new one:
// write a temporary file in the same directory, fsync it, rename it over `path`, fsync the directory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content);

// Reads a whole file, refusing files larger than `max_bytes`. Errors name the path.
absl::StatusOr<std::string> ReadFileLimited(const std::string& path, int64_t max_bytes);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

// A regular file read front to back in pieces, for files too large to hold twice (checkpoints, models' external
// data): reads go straight into the caller's memory.
class FileReader {
 public:
  // NotFound for a missing file; InvalidArgument unless it is a regular file.
  static absl::StatusOr<std::unique_ptr<FileReader>> Open(const std::string& path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  int64_t size() const { return size_; }
  int64_t position() const { return position_; }
  const std::string& path() const { return path_; }
  // Exactly `size` bytes into `out`; DataLoss when the file ends first (it shrank).
  absl::Status Read(void* out, size_t size);
  // Reads `size` bytes at `offset` (does not move position()).
  absl::Status ReadAt(int64_t offset, void* out, size_t size) const;

 private:
  FileReader(std::string path, int fd, int64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  int64_t size_;
  int64_t position_ = 0;
};

// Lower-case hex SHA-256 of a file's content, read in pieces.
absl::StatusOr<std::string> Sha256HexOfFile(const std::string& path);

// Incremental SHA-256 (for streamed data).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // Lower-case hex digest; the object must not be updated afterwards.
  std::string FinishHex();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// A file written in pieces and published atomically with Commit(); destroying it uncommitted removes the
// temporary file. For data too large to hold in memory (uploaded blobs).
class AtomicFileWriter {
 public:
  // `durable` false skips the fsyncs (files that live only as long as a call, e.g. an export being streamed): the
  // rename still publishes them whole.
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path, bool durable = true);
  ~AtomicFileWriter();

  absl::Status Append(absl::string_view data);
  // Overwrites bytes already appended (a header whose digest is known only at the end).
  absl::Status WriteAt(int64_t offset, absl::string_view data);
  // fsync, rename over the final path, fsync the directory.
  absl::Status Commit();
  // The same, publishing under `final_path` (same directory) instead: for content-addressed names that are
  // known only once all data has been seen.
  absl::Status CommitTo(const std::string& final_path);

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd, bool durable);
  std::string path_;
  std::string temp_path_;
  int fd_;
  bool durable_;
  bool committed_ = false;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_IO_FILE_UTIL_H_
