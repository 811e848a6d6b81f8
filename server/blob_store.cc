#include "server/blob_store.h"

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace traind {

bool IsSha256Hex(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

BlobUpload::BlobUpload(std::string blobs_dir, int64_t total_bytes, std::string expected_sha256,
                       std::unique_ptr<AtomicFileWriter> writer)
    : blobs_dir_(std::move(blobs_dir)),
      total_bytes_(total_bytes),
      expected_sha256_(std::move(expected_sha256)),
      writer_(std::move(writer)) {}

absl::Status BlobUpload::Append(absl::string_view chunk) {
  if (static_cast<int64_t>(chunk.size()) > total_bytes_ - received_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the upload sent more than its declared ", total_bytes_, " bytes"));
  }
  received_bytes_ += static_cast<int64_t>(chunk.size());
  sha256_.Update(chunk);
  return writer_->Append(chunk);
}

absl::StatusOr<BlobInfo> BlobUpload::Finish() {
  if (received_bytes_ != total_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the upload ended after ", received_bytes_, " of its declared ", total_bytes_, " bytes"));
  }
  BlobInfo info{sha256_.FinishHex(), total_bytes_};
  if (!expected_sha256_.empty() && expected_sha256_ != info.blob_id) {
    return absl::DataLossError(absl::StrCat("the upload's SHA-256 is ", info.blob_id, ", not the declared ",
                                            expected_sha256_));
  }
  // The final name is known only now; publishing under the digest makes identical uploads converge on one file.
  if (absl::Status committed = writer_->CommitTo(blobs_dir_ + "/" + info.blob_id); !committed.ok()) {
    return committed;
  }
  return info;
}

absl::StatusOr<std::unique_ptr<BlobStore>> BlobStore::Open(const std::string& state_dir, int64_t max_blob_bytes) {
  const std::string blobs_dir = state_dir + "/blobs";
  std::error_code error;
  std::filesystem::create_directories(blobs_dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create '", blobs_dir, "': ", error.message()));
  // Leftovers of uploads interrupted by a crash (completed blobs are named by their digest alone).
  for (const auto& entry : std::filesystem::directory_iterator(blobs_dir, error)) {
    if (!IsSha256Hex(entry.path().filename().string())) std::filesystem::remove(entry.path(), error);
  }
  return std::unique_ptr<BlobStore>(new BlobStore(blobs_dir, max_blob_bytes));
}

absl::StatusOr<std::unique_ptr<BlobUpload>> BlobStore::BeginUpload(int64_t total_bytes,
                                                                   const std::string& sha256_hex) {
  if (total_bytes < 0) return absl::InvalidArgumentError("total_bytes must not be negative");
  if (total_bytes > max_blob_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a blob of ", total_bytes, " bytes exceeds the limit of ", max_blob_bytes_, " bytes"));
  }
  if (!sha256_hex.empty() && !IsSha256Hex(sha256_hex)) {
    return absl::InvalidArgumentError("sha256_hex must be 64 lower-case hex digits");
  }
  // Temporary files are named "upload.tmp.*", never a digest, so Open() can tell them from blobs.
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(blobs_dir_ + "/upload");
  if (!writer.ok()) return writer.status();
  return std::unique_ptr<BlobUpload>(new BlobUpload(blobs_dir_, total_bytes, sha256_hex, std::move(*writer)));
}

absl::StatusOr<std::string> BlobStore::Read(const std::string& blob_id) const {
  if (!IsSha256Hex(blob_id)) return absl::InvalidArgumentError(absl::StrCat("'", blob_id, "' is not a blob id"));
  absl::StatusOr<std::string> content = ReadFileLimited(blobs_dir_ + "/" + blob_id, max_blob_bytes_);
  if (!content.ok() && content.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("no blob '", blob_id, "'"));
  }
  return content;
}

absl::StatusOr<BlobInfo> BlobStore::Stat(const std::string& blob_id) const {
  if (!IsSha256Hex(blob_id)) return absl::InvalidArgumentError(absl::StrCat("'", blob_id, "' is not a blob id"));
  std::error_code error;
  const auto size = std::filesystem::file_size(blobs_dir_ + "/" + blob_id, error);
  if (error) return absl::NotFoundError(absl::StrCat("no blob '", blob_id, "'"));
  return BlobInfo{blob_id, static_cast<int64_t>(size)};
}

absl::StatusOr<std::string> BlobStore::Path(const std::string& blob_id) const {
  absl::StatusOr<BlobInfo> info = Stat(blob_id);
  if (!info.ok()) return info.status();
  return blobs_dir_ + "/" + info->blob_id;
}

}  // namespace traind
