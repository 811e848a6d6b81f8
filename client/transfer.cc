#include "client/transfer.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/errors.h"
#include "client/progress.h"
#include "engine/io/file_util.h"

namespace traind::cli {
namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsDirectory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool IsSha256Hex(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

// The daemon's suggested file name is used only when it is one plain path component.
bool IsPlainFileName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  for (char c : name) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> FileSha256(const std::string& path, int64_t* size_bytes) {
  // Regular files only: a device or a FIFO could be endless.
  if (!IsRegularFile(path)) {
    return LocalFileError(absl::NotFoundError(absl::StrCat("'", path, "' is not a readable regular file")));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return LocalFileError(absl::NotFoundError(absl::StrCat("cannot read '", path, "'")));
  engine::Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  int64_t total = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    hasher.Update(absl::string_view(buffer.data(), static_cast<size_t>(got)));
    total += got;
  }
  if (in.bad()) return LocalFileError(absl::DataLossError(absl::StrCat("error while reading '", path, "'")));
  *size_bytes = total;
  return hasher.FinishHex();
}

absl::StatusOr<UploadResult> UploadFile(CommandContext& context, const std::string& path,
                                        const std::string& description, int64_t chunk_bytes, bool force) {
  UploadResult result;
  absl::StatusOr<std::string> digest = FileSha256(path, &result.size_bytes);
  if (!digest.ok()) return digest.status();
  result.blob_id = *digest;
  if (!force) {
    v1::GetBlobInfoRequest request;
    request.set_blob_id(result.blob_id);
    v1::UploadBlobResponse info;
    const absl::Status known = context.Call(&CommandContext::Stub::GetBlobInfo, request, &info);
    if (known.ok() && info.total_bytes() == result.size_bytes) return result;
    if (!known.ok() && known.code() != absl::StatusCode::kNotFound) return known;
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) return LocalFileError(absl::NotFoundError(absl::StrCat("cannot read '", path, "'")));
  std::unique_ptr<grpc::ClientContext> call = context.NewCallContext();
  v1::UploadBlobResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadBlobRequest>> writer = context.stub().UploadBlob(call.get(), &response);
  v1::UploadBlobRequest message;
  v1::BlobHeader* header = message.mutable_header();
  header->set_total_bytes(result.size_bytes);
  header->set_sha256_hex(result.blob_id);
  header->set_description(description);
  bool open = writer->Write(message);
  TransferProgress progress(context.out(), context.progress_style(), "upload " + BaseName(path), result.size_bytes,
                            chunk_bytes);
  std::string buffer(static_cast<size_t>(chunk_bytes), '\0');
  int64_t sent = 0;
  while (open && sent < result.size_bytes) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;  // the file shrank: the daemon will refuse the size, which names the problem
    message.set_chunk(buffer.data(), static_cast<size_t>(got));
    open = writer->Write(message);
    sent += got;
    progress.Advance(sent);
  }
  progress.Finish();
  if (open) writer->WritesDone();
  const absl::Status status = CommandContext::Finished(writer->Finish(), *call);
  if (!status.ok()) return status;
  if (response.blob_id() != result.blob_id) {
    return CallError(absl::StatusCode::kDataLoss,
                     absl::StrCat("the daemon stored '", path, "' as blob ", response.blob_id(),
                                  " but the file's SHA-256 is ", result.blob_id));
  }
  result.uploaded = true;
  return result;
}

absl::StatusOr<std::vector<DownloadResult>> DownloadFiles(CommandContext& context, v1::DownloadRequest request,
                                                          const std::string& path) {
  const int64_t chunk_bytes = request.chunk_bytes() > 0 ? request.chunk_bytes() : kDefaultChunkBytes;
  std::unique_ptr<grpc::ClientContext> call = context.NewCallContext();
  std::unique_ptr<grpc::ClientReader<v1::DownloadResponse>> reader = context.stub().Download(call.get(), request);
  // Stops the stream (the daemon sees CANCELLED) and returns `error`.
  auto abandon = [&](absl::Status error) {
    call->TryCancel();
    (void)reader->Finish();
    return error;
  };
  v1::DownloadResponse message;
  if (!reader->Read(&message)) {
    const absl::Status status = CommandContext::Finished(reader->Finish(), *call);
    if (!status.ok()) return status;
    return CallError(absl::StatusCode::kDataLoss, "the download ended before its header");
  }
  if (!message.has_header()) return abandon(CallError(absl::StatusCode::kDataLoss, "the download has no header"));
  // Every file is written to a temporary file and checked; they are published only when all of them arrived, the
  // first one (the model, which references the others) last.
  std::vector<DownloadResult> results;
  std::vector<std::unique_ptr<engine::AtomicFileWriter>> files;
  int file_count = 1;
  bool more = true;
  while (more) {
    const v1::DownloadHeader header = message.header();
    if (header.total_bytes() < 0 || !IsSha256Hex(header.sha256_hex())) {
      return abandon(CallError(absl::StatusCode::kDataLoss, "the download's header is malformed"));
    }
    if (results.empty()) {
      file_count = std::max(1, header.file_count());
      if (file_count > kMaxDownloadFiles) {
        return abandon(CallError(absl::StatusCode::kDataLoss, "the download announces too many files"));
      }
    } else if (header.file_count() != file_count) {
      return abandon(CallError(absl::StatusCode::kDataLoss, "the download's headers disagree on its file count"));
    }
    DownloadResult result;
    result.suggested_file_name = header.file_name();
    result.path = path;
    if (!results.empty()) {
      // The next files go beside the first under the names the first one references.
      if (!IsPlainFileName(header.file_name())) {
        return abandon(CallError(absl::StatusCode::kDataLoss,
                                 absl::StrCat("the download's file '", header.file_name(), "' is not a plain name")));
      }
      const size_t slash = results.front().path.rfind('/');
      result.path = slash == std::string::npos ? header.file_name()
                                               : results.front().path.substr(0, slash + 1) + header.file_name();
      for (const DownloadResult& earlier : results) {
        if (earlier.path == result.path) {
          return abandon(CallError(absl::StatusCode::kDataLoss, "the download names one file twice"));
        }
      }
    } else if (IsDirectory(path) || absl::EndsWith(path, "/")) {
      if (!IsPlainFileName(header.file_name())) {
        return abandon(UsageError(absl::StrCat("the daemon suggests no usable file name ('", header.file_name(),
                                               "'): give a file path instead of the directory '", path, "'")));
      }
      result.path = absl::StrCat(absl::StripSuffix(path, "/"), "/", header.file_name());
    }
    absl::StatusOr<std::unique_ptr<engine::AtomicFileWriter>> file = engine::AtomicFileWriter::Create(result.path);
    if (!file.ok()) return abandon(LocalFileError(file.status()));
    engine::Sha256 hasher;
    TransferProgress progress(context.out(), context.progress_style(), "download " + BaseName(result.path),
                              header.total_bytes(), chunk_bytes);
    int64_t received = 0;
    more = false;
    while (reader->Read(&message)) {
      if (message.has_header()) {
        if (static_cast<int>(results.size()) + 1 >= file_count) {
          return abandon(CallError(absl::StatusCode::kDataLoss, "the download sent more headers than files"));
        }
        more = true;
        break;
      }
      const std::string& chunk = message.chunk();
      received += static_cast<int64_t>(chunk.size());
      if (received > header.total_bytes()) {
        return abandon(CallError(absl::StatusCode::kDataLoss,
                                 absl::StrCat("the download sent more than the ", header.total_bytes(),
                                              " bytes its header announced")));
      }
      hasher.Update(chunk);
      if (absl::Status appended = (*file)->Append(chunk); !appended.ok()) return abandon(LocalFileError(appended));
      progress.Advance(received);
    }
    progress.Finish();
    if (received != header.total_bytes()) {
      if (!more) {
        const absl::Status status = CommandContext::Finished(reader->Finish(), *call);
        if (!status.ok()) return status;
      }
      return more ? abandon(CallError(absl::StatusCode::kDataLoss, "a file of the download is short"))
                  : CallError(absl::StatusCode::kDataLoss, absl::StrCat("the download ended after ", received, " of ",
                                                                        header.total_bytes(), " bytes"));
    }
    result.sha256_hex = hasher.FinishHex();
    if (result.sha256_hex != header.sha256_hex()) {
      const absl::Status mismatch =
          CallError(absl::StatusCode::kDataLoss,
                    absl::StrCat("the downloaded bytes of '", BaseName(result.path), "' have SHA-256 ",
                                 result.sha256_hex, ", not the announced ", header.sha256_hex(),
                                 "; nothing was written"));
      return more ? abandon(mismatch) : mismatch;
    }
    result.size_bytes = received;
    results.push_back(std::move(result));
    files.push_back(*std::move(file));
  }
  const absl::Status status = CommandContext::Finished(reader->Finish(), *call);
  if (!status.ok()) return status;
  if (static_cast<int>(results.size()) != file_count) {
    return CallError(absl::StatusCode::kDataLoss, absl::StrCat("the download ended after ", results.size(), " of its ",
                                                               file_count, " files"));
  }
  for (size_t f = files.size(); f-- > 0;) {
    if (absl::Status committed = files[f]->Commit(); !committed.ok()) return LocalFileError(committed);
  }
  return results;
}

absl::StatusOr<DownloadResult> DownloadToFile(CommandContext& context, v1::DownloadRequest request,
                                              const std::string& path) {
  absl::StatusOr<std::vector<DownloadResult>> files = DownloadFiles(context, std::move(request), path);
  if (!files.ok()) return files.status();
  return files->front();
}

}  // namespace traind::cli
