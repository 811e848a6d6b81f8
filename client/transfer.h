// Files to and from the daemon in chunks, never held whole in memory: uploads by digest (GetBlobInfo first, so a
// file the daemon has already is not sent again) and streamed downloads checked against the daemon's SHA-256.
#ifndef TRAIND_CLIENT_TRANSFER_H_
#define TRAIND_CLIENT_TRANSFER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/command.h"
#include "traind/v1/training_service.pb.h"

namespace traind::cli {

inline constexpr int64_t kDefaultChunkBytes = int64_t{1} << 20;

struct UploadResult {
  std::string blob_id;  // = the file's lower-case hex SHA-256
  int64_t size_bytes = 0;
  bool uploaded = false;  // false: the daemon had the blob already
};

// SHA-256 of a file, read in chunks. Errors are LocalFileError.
absl::StatusOr<std::string> FileSha256(const std::string& path, int64_t* size_bytes);

// Makes sure the daemon has `path` as a blob: GetBlobInfo by digest, UploadBlob (with the digest, in chunks of
// `chunk_bytes`, with progress) only when it is missing. `force` uploads anyway.
absl::StatusOr<UploadResult> UploadFile(CommandContext& context, const std::string& path,
                                        const std::string& description, int64_t chunk_bytes = kDefaultChunkBytes,
                                        bool force = false);

struct DownloadResult {
  std::string path;
  int64_t size_bytes = 0;
  std::string sha256_hex;
  std::string suggested_file_name;  // DownloadHeader.file_name
};

// Streams `request` into `path` (written atomically: nothing appears at `path` unless every byte arrived and the
// content matches the header's size and SHA-256; a mismatch is DATA_LOSS). With `path` a directory (or ending in
// '/'), the file is written inside it under the daemon's suggested name.
absl::StatusOr<DownloadResult> DownloadToFile(CommandContext& context, v1::DownloadRequest request,
                                              const std::string& path);

// Most files one download may hold (DownloadHeader.file_count).
inline constexpr int kMaxDownloadFiles = 16;

// The same for a download of several files (an export with an external data file): the first goes to `path`, the
// others beside it under their announced names (plain names only). Each is checked; none is published unless all
// arrived, and the first (which references the others) is published last.
absl::StatusOr<std::vector<DownloadResult>> DownloadFiles(CommandContext& context, v1::DownloadRequest request,
                                                          const std::string& path);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_TRANSFER_H_
