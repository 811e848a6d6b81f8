// Tensors whose bytes stay in their files: memory-mapped instead of copied, for models whose weights do not fit
// a protobuf message (2 GiB) or should not be copied twice.
//
// Reading: the loader (LoadOptions::map_external_data) leaves floating-point initializers with external data in
// their files and "pins" their references (absolute path, checked offset and length, the file's identity);
// TensorFromProto then maps such a tensor copy-on-write (MAP_PRIVATE: writes, e.g. an optimizer updating a
// parameter in place, never reach the file) after checking that the file is still the one the loader checked.
// Writing: ExternalDataWriter appends tensors to a data file beside a model and makes standard ONNX external
// references to them (relative location, offset, length), each tensor's offset aligned so that a reader can map it.
#ifndef TRAIND_ENGINE_MODEL_EXTERNAL_TENSOR_H_
#define TRAIND_ENGINE_MODEL_EXTERNAL_TENSOR_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/io/file_util.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// external_data keys starting with this are the loader's own (pinned references); models may not use them.
inline constexpr const char* kPinnedKeyPrefix = "traind.";

// Offsets ExternalDataWriter aligns tensors to (a page: any reader can map them).
inline constexpr int64_t kExternalDataAlignment = 4096;

struct PinnedFile {
  std::string path;      // absolute
  std::string identity;  // FileIdentity of the file when it was checked
};

// "device:inode:size:mtime_s:mtime_ns".
std::string FileIdentity(const struct stat& info);

// Rewrites `tensor`'s external data reference into a pinned one.
void SetPinnedReference(const PinnedFile& file, const std::string& location, int64_t offset, int64_t length,
                        onnx::TensorProto& tensor);
bool IsPinnedExternal(const onnx::TensorProto& tensor);

// The tensor of a pinned reference (dtype, shape and element count already checked by the caller): its file
// region mapped copy-on-write (or read, when the offset does not allow the tensor's alignment). InvalidArgument
// when the file changed or went away since it was pinned.
absl::StatusOr<Tensor> LoadPinnedTensor(const onnx::TensorProto& tensor, DataType dtype, Shape shape,
                                        int64_t num_elements);

// Appends tensors to `<directory>/<file_name>` (published atomically by Commit) and turns TensorProtos into
// external references to them.
class ExternalDataWriter {
 public:
  // `file_name`: a plain file name (no directory part), the location the references carry.
  static absl::StatusOr<std::unique_ptr<ExternalDataWriter>> Create(const std::string& directory,
                                                                    const std::string& file_name,
                                                                    bool durable = true);
  // Appends `tensor`'s bytes and sets `proto` (dtype and dims already set) to reference them.
  absl::Status Append(const Tensor& tensor, onnx::TensorProto& proto);
  // Bytes written so far and their SHA-256 (after Commit).
  int64_t size_bytes() const { return offset_; }
  absl::Status Commit();
  std::string sha256_hex() const { return sha256_hex_; }

 private:
  ExternalDataWriter(std::string file_name, std::unique_ptr<AtomicFileWriter> writer)
      : file_name_(std::move(file_name)), writer_(std::move(writer)) {}
  absl::Status Write(absl::string_view bytes);
  std::string file_name_;
  std::unique_ptr<AtomicFileWriter> writer_;
  Sha256 sha256_;
  std::string sha256_hex_;
  int64_t offset_ = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_EXTERNAL_TENSOR_H_
