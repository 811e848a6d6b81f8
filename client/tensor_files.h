// Wire tensors (traind.v1.Tensor) to and from NumPy .npy files, through the engine's .npy reader and writer.
// Tensors received from the daemon are checked (dtype, shape, byte count) before they are written.
#ifndef TRAIND_CLIENT_TENSOR_FILES_H_
#define TRAIND_CLIENT_TENSOR_FILES_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "traind/v1/training_service.pb.h"

namespace traind::cli {

// Reads a .npy as a wire tensor named `name`. Errors name the file (a dtype the wire has no name for, e.g. int16).
absl::StatusOr<v1::Tensor> ReadNpyTensor(const std::string& path, const std::string& name);
// Writes a wire tensor as .npy (atomically). Errors: the tensor is malformed (INVALID_ARGUMENT) or the file
// cannot be written.
absl::Status WriteNpyTensor(const std::string& path, const v1::Tensor& tensor);

// "NAME=FILE" -> {NAME, FILE}; `flag` names the flag in errors.
absl::StatusOr<std::pair<std::string, std::string>> SplitNameAndFile(absl::string_view argument,
                                                                     absl::string_view flag);

// Rows [begin, end) of the first axis. Precondition: the tensor is well formed with rank >= 1 and
// 0 <= begin <= end <= shape[0].
v1::Tensor SliceRows(const v1::Tensor& tensor, int64_t begin, int64_t end);

// "float32[5,8]".
std::string DescribeTensor(v1::DataType dtype, const google::protobuf::RepeatedField<int64_t>& shape);

// A parameter name as a file name in a directory of per-parameter .npy files: '%' and '/' are percent-encoded
// (ONNX names may contain '/'), a leading '.' too; ParameterFromFileName inverts it.
std::string ParameterFileName(const std::string& parameter);
std::string ParameterFromFileName(const std::string& file_name);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_TENSOR_FILES_H_
