#include "engine/model/external_tensor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {
namespace {

constexpr const char* kPinnedPathKey = "traind.path";
constexpr const char* kPinnedIdentityKey = "traind.file";

void AddEntry(onnx::TensorProto& tensor, const std::string& key, const std::string& value) {
  auto* entry = tensor.add_external_data();
  entry->set_key(key);
  entry->set_value(value);
}

absl::Status PinnedError(const onnx::TensorProto& tensor, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name(), "': its external data ", reason));
}

// The region [offset, offset + length) of `fd`, mapped privately (copy-on-write).
absl::StatusOr<std::shared_ptr<Buffer>> MapRegion(int fd, int64_t offset, int64_t length) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t start = offset / page * page;
  const size_t mapped_bytes = static_cast<size_t>(offset - start + length);
  void* base = mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, static_cast<off_t>(start));
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", length, " bytes: ", strerror(errno)));
  }
  void* data = static_cast<char*>(base) + (offset - start);
  return std::make_shared<Buffer>(data, static_cast<size_t>(length), static_cast<size_t>(length),
                                  [base, mapped_bytes](void*, size_t) { munmap(base, mapped_bytes); });
}

absl::Status ReadRegion(int fd, int64_t offset, int64_t length, void* out) {
  int64_t done = 0;
  char* bytes = static_cast<char*>(out);
  while (done < length) {
    const ssize_t got = pread(fd, bytes + done, static_cast<size_t>(length - done), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return absl::DataLossError("short read");
    done += got;
  }
  return absl::OkStatus();
}

}  // namespace

std::string FileIdentity(const struct stat& info) {
  return absl::StrCat(info.st_dev, ":", info.st_ino, ":", info.st_size, ":", info.st_mtim.tv_sec, ":",
                      info.st_mtim.tv_nsec);
}

void SetPinnedReference(const PinnedFile& file, const std::string& location, int64_t offset, int64_t length,
                        onnx::TensorProto& tensor) {
  tensor.clear_external_data();
  tensor.clear_raw_data();
  tensor.set_data_location(onnx::TensorProto::EXTERNAL);
  AddEntry(tensor, "location", location);
  AddEntry(tensor, "offset", std::to_string(offset));
  AddEntry(tensor, "length", std::to_string(length));
  AddEntry(tensor, kPinnedPathKey, file.path);
  AddEntry(tensor, kPinnedIdentityKey, file.identity);
}

bool IsPinnedExternal(const onnx::TensorProto& tensor) {
  if (tensor.data_location() != onnx::TensorProto::EXTERNAL) return false;
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == kPinnedPathKey) return true;
  }
  return false;
}

absl::StatusOr<Tensor> LoadPinnedTensor(const onnx::TensorProto& tensor, DataType dtype, Shape shape,
                                        int64_t num_elements) {
  std::string path, identity;
  int64_t offset = -1, length = -1;
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == kPinnedPathKey) path = entry.value();
    if (entry.key() == kPinnedIdentityKey) identity = entry.value();
    if (entry.key() == "offset" && !absl::SimpleAtoi(entry.value(), &offset)) offset = -1;
    if (entry.key() == "length" && !absl::SimpleAtoi(entry.value(), &length)) length = -1;
  }
  const int64_t bytes = num_elements * static_cast<int64_t>(ElementSize(dtype));
  if (path.empty() || identity.empty() || offset < 0 || length != bytes) {
    return PinnedError(tensor, "reference is malformed");
  }
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return PinnedError(tensor, absl::StrCat("file went away: ", strerror(errno)));
  struct stat info;
  if (fstat(fd, &info) != 0 || FileIdentity(info) != identity) {
    close(fd);
    return PinnedError(tensor, "file changed after the model was loaded");
  }
  absl::StatusOr<Tensor> result;
  if (length > 0 && offset % static_cast<int64_t>(kTensorAlignment) == 0) {
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = MapRegion(fd, offset, length);
    if (buffer.ok()) {
      result = Tensor(dtype, std::move(shape), *std::move(buffer), num_elements);
    } else {
      result = buffer.status();
    }
  } else {
    // The region cannot give an aligned pointer (or is empty): one read into aligned memory.
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = Buffer::Allocate(static_cast<size_t>(length));
    const absl::Status read = buffer.ok() ? ReadRegion(fd, offset, length, (*buffer)->data()) : buffer.status();
    if (read.ok()) {
      result = Tensor(dtype, std::move(shape), *std::move(buffer), num_elements);
    } else {
      result = PinnedError(tensor, absl::StrCat("cannot be read: ", read.message()));
    }
  }
  close(fd);
  return result;
}

void ExternalDataLayout::Add(const Tensor& tensor, onnx::TensorProto& proto) {
  const int64_t offset = (size_ + kExternalDataAlignment - 1) / kExternalDataAlignment * kExternalDataAlignment;
  segments_.push_back({offset, tensor});
  size_ = offset + static_cast<int64_t>(tensor.byte_size());
  proto.clear_raw_data();
  proto.clear_external_data();
  proto.set_data_location(onnx::TensorProto::EXTERNAL);
  AddEntry(proto, "location", file_name_);
  AddEntry(proto, "offset", std::to_string(offset));
  AddEntry(proto, "length", std::to_string(tensor.byte_size()));
}

void ExternalDataLayout::Read(int64_t offset, size_t size, char* out) const {
  std::memset(out, 0, size);
  const int64_t end = offset + static_cast<int64_t>(size);
  // The first segment that ends after `offset` (segments are in offset order).
  auto it = std::upper_bound(segments_.begin(), segments_.end(), offset, [](int64_t position, const Segment& segment) {
    return position < segment.offset + static_cast<int64_t>(segment.tensor.byte_size());
  });
  for (; it != segments_.end() && it->offset < end; ++it) {
    const int64_t from = std::max(offset, it->offset);
    const int64_t to = std::min(end, it->offset + static_cast<int64_t>(it->tensor.byte_size()));
    if (to <= from) continue;
    std::memcpy(out + (from - offset), static_cast<const char*>(it->tensor.raw_data()) + (from - it->offset),
                static_cast<size_t>(to - from));
  }
}

std::string ExternalDataLayout::Sha256Hex() const {
  Sha256 digest;
  std::string piece(static_cast<size_t>(std::min<int64_t>(size_, int64_t{8} << 20)), '\0');
  for (int64_t offset = 0; offset < size_; offset += static_cast<int64_t>(piece.size())) {
    const size_t length = static_cast<size_t>(std::min<int64_t>(size_ - offset, static_cast<int64_t>(piece.size())));
    Read(offset, length, piece.data());
    digest.Update(absl::string_view(piece.data(), length));
  }
  return digest.FinishHex();
}

absl::StatusOr<std::string> WriteExternalData(const ExternalDataLayout& layout, const std::string& directory,
                                              bool durable) {
  const std::string& name = layout.file_name();
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a plain file name"));
  }
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> file,
                          AtomicFileWriter::Create(directory + "/" + name, durable));
  Sha256 digest;
  std::string piece(static_cast<size_t>(std::min<int64_t>(layout.size_bytes(), int64_t{8} << 20)), '\0');
  for (int64_t offset = 0; offset < layout.size_bytes(); offset += static_cast<int64_t>(piece.size())) {
    const size_t length =
        static_cast<size_t>(std::min<int64_t>(layout.size_bytes() - offset, static_cast<int64_t>(piece.size())));
    layout.Read(offset, length, piece.data());
    const absl::string_view bytes(piece.data(), length);
    digest.Update(bytes);
    TRAIND_RETURN_IF_ERROR(file->Append(bytes));
  }
  TRAIND_RETURN_IF_ERROR(file->Commit());
  return digest.FinishHex();
}

}  // namespace traind::engine
