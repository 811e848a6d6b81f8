// Tensors whose bytes stay in their files: memory-mapped instead of copied, for models whose weights do not fit
// a protobuf message (2 GiB) or should not be copied twice.
//
// Reading: the loader (LoadOptions::map_external_data) leaves floating-point initializers with external data in
// their files and "pins" their references (absolute path, checked offset and length, the file's identity);
// TensorFromProto then maps such a tensor copy-on-write (MAP_PRIVATE: writes, e.g. an optimizer updating a
// parameter in place, never reach the file) after checking that the file is still the one the loader checked.
// Writing: ExternalDataLayout places tensors in a data file beside a model (each offset aligned, so that a reader
// can map it) and makes standard ONNX external references to them (relative location, offset, length); the file's
// bytes are produced from the tensors in pieces, to write or to stream, never copied whole.
#ifndef TRAIND_ENGINE_MODEL_EXTERNAL_TENSOR_H_
#define TRAIND_ENGINE_MODEL_EXTERNAL_TENSOR_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/io/file_util.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// external_data keys starting with this are the loader's own (pinned references); models may not use them.
inline constexpr const char* kPinnedKeyPrefix = "traind.";

// Offsets ExternalDataLayout aligns tensors to (a page: any reader can map them).
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

// The content of an external data file made of tensors, laid out without copying them: each at an offset aligned
// to kExternalDataAlignment (zeros between). The tensors are shared, not copied: they must not change while the
// layout is read (an export streamed under its session's lock, or written to a file).
class ExternalDataLayout {
 public:
  ExternalDataLayout() = default;
  // `file_name`: the location the references carry (a plain file name beside the model).
  explicit ExternalDataLayout(std::string file_name) : file_name_(std::move(file_name)) {}

  // Places `tensor` next and sets `proto` (dtype and dims already set) to reference it.
  void Add(const Tensor& tensor, onnx::TensorProto& proto);
  const std::string& file_name() const { return file_name_; }
  bool empty() const { return segments_.empty(); }
  int64_t size_bytes() const { return size_; }
  // Bytes [offset, offset + size) of the file (tensor bytes and padding zeros).
  void Read(int64_t offset, size_t size, char* out) const;
  // SHA-256 of the whole content, computed in pieces.
  std::string Sha256Hex() const;

 private:
  struct Segment {
    int64_t offset = 0;
    Tensor tensor;
  };
  std::string file_name_;
  std::vector<Segment> segments_;
  int64_t size_ = 0;
};

// Writes the layout's content to `<directory>/<layout.file_name()>` (published atomically; without fsyncs unless
// `durable`) and returns its SHA-256.
absl::StatusOr<std::string> WriteExternalData(const ExternalDataLayout& layout, const std::string& directory,
                                              bool durable = true);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_EXTERNAL_TENSOR_H_
