// Reads ONNX external tensor data without ever leaving the model's directory.
#ifndef TRAIND_ENGINE_MODEL_EXTERNAL_DATA_H_
#define TRAIND_ENGINE_MODEL_EXTERNAL_DATA_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Replaces `tensor`'s external data reference by inline raw_data read from `base_dir`.
// Refuses: an empty base_dir, absolute paths, any `..` component, symlinks anywhere below base_dir
// (each component is opened with O_NOFOLLOW relative to its parent, so there is no check-then-use
// race), non-regular files, bad or out-of-range offset/length, and a length that differs from
// `expected_bytes`. `budget_bytes` is decremented by the bytes read and must not go negative.
absl::Status ResolveExternalData(onnx::TensorProto& tensor, const std::string& base_dir,
                                 int64_t expected_bytes, int64_t& budget_bytes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_EXTERNAL_DATA_H_
