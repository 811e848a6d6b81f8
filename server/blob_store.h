// Content-addressed storage for uploads larger than one gRPC message (models, loss graphs, checkpoints):
// <state_dir>/blobs/<sha256 hex>. A blob becomes visible only complete and verified (atomic rename); an
// interrupted upload leaves nothing behind.
#ifndef TRAIND_SERVER_BLOB_STORE_H_
#define TRAIND_SERVER_BLOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/io/file_util.h"

namespace traind {

using engine::AtomicFileWriter;
using engine::ReadFileLimited;
using engine::Sha256;
using engine::Sha256Hex;
using engine::WriteFileAtomically;

struct BlobInfo {
  std::string blob_id;  // = sha256 hex of the content
  int64_t size_bytes = 0;
};

// One upload in progress. Destroying it before Finish() discards the data.
class BlobUpload {
 public:
  // INVALID_ARGUMENT when the chunks would exceed the declared total.
  absl::Status Append(absl::string_view chunk);
  // INVALID_ARGUMENT when fewer bytes than declared arrived; DATA_LOSS when the content does not match the
  // declared SHA-256.
  absl::StatusOr<BlobInfo> Finish();

 private:
  friend class BlobStore;
  BlobUpload(std::string blobs_dir, int64_t total_bytes, std::string expected_sha256,
             std::unique_ptr<AtomicFileWriter> writer);
  std::string blobs_dir_;
  int64_t total_bytes_;
  int64_t received_bytes_ = 0;
  std::string expected_sha256_;
  Sha256 sha256_;
  std::unique_ptr<AtomicFileWriter> writer_;
};

class BlobStore {
 public:
  // Creates <state_dir>/blobs if needed and removes temporary files of uploads interrupted by a crash.
  static absl::StatusOr<std::unique_ptr<BlobStore>> Open(const std::string& state_dir, int64_t max_blob_bytes);

  // RESOURCE_EXHAUSTED above max_blob_bytes; INVALID_ARGUMENT for a negative size or a malformed digest.
  absl::StatusOr<std::unique_ptr<BlobUpload>> BeginUpload(int64_t total_bytes, const std::string& sha256_hex);

  // NOT_FOUND for an unknown id; INVALID_ARGUMENT for an id that is not a SHA-256 hex digest.
  absl::StatusOr<std::string> Read(const std::string& blob_id) const;
  // The same errors; the blob's size without reading it.
  absl::StatusOr<BlobInfo> Stat(const std::string& blob_id) const;
  // The same errors; the blob's file, for what is read in pieces or mapped (checkpoints, external data). Blobs are
  // immutable once published.
  absl::StatusOr<std::string> Path(const std::string& blob_id) const;

  int64_t max_blob_bytes() const { return max_blob_bytes_; }

 private:
  BlobStore(std::string blobs_dir, int64_t max_blob_bytes) : blobs_dir_(std::move(blobs_dir)), max_blob_bytes_(max_blob_bytes) {}
  std::string blobs_dir_;
  int64_t max_blob_bytes_;
};

// True for 64 lower-case hex digits: the only blob ids (and so the only file names) the store accepts.
bool IsSha256Hex(absl::string_view text);

}  // namespace traind

#endif  // TRAIND_SERVER_BLOB_STORE_H_
