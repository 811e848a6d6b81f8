// Reads ONNX external tensor data without ever leaving the model's directory.
#ifndef TRAIND_ENGINE_MODEL_EXTERNAL_DATA_H_
#define TRAIND_ENGINE_MODEL_EXTERNAL_DATA_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Where a tensor's external data files are found: the model's directory (paths relative to it, resolved without
// leaving it), or, when `files` is not empty, exactly the files it lists (location -> a file the caller vouches
// for, e.g. an uploaded blob of the daemon); a location it does not list is refused.
struct ExternalDataSource {
  std::string base_dir;
  std::map<std::string, std::string> files;
  bool empty() const { return base_dir.empty() && files.empty(); }
};

// Replaces `tensor`'s external data reference by inline raw_data read from `base_dir`.
// Refuses: an empty base_dir, absolute paths, any `..` component, symlinks anywhere below base_dir
// (each component is opened with O_NOFOLLOW relative to its parent, so there is no check-then-use
// race), non-regular files, bad or out-of-range offset/length, and a length that differs from
// `expected_bytes`. `budget_bytes` is decremented by the bytes read and must not go negative.
absl::Status ResolveExternalData(onnx::TensorProto& tensor, const std::string& base_dir,
                                 int64_t expected_bytes, int64_t& budget_bytes);
absl::Status ResolveExternalData(onnx::TensorProto& tensor, const ExternalDataSource& source,
                                 int64_t expected_bytes, int64_t& budget_bytes);

// The same checks, but the data stays in its file: the reference is rewritten to the file's absolute path, the
// checked offset and length and the file's identity (device, inode, size, modification time), which
// TensorFromProto later maps into memory (external_tensor.h) — after checking that the file is still the one
// that was checked. Only the loader writes such references (it refuses them in its input). `budget_bytes` is
// decremented as above.
absl::Status PinExternalData(onnx::TensorProto& tensor, const ExternalDataSource& source, int64_t expected_bytes,
                             int64_t& budget_bytes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_EXTERNAL_DATA_H_
