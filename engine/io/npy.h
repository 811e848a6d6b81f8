// NumPy .npy files (format 1.0–3.0, C order, little-endian) as engine tensors: benchmark inputs, golden data,
// and dumps that other frameworks read directly.
#ifndef TRAIND_ENGINE_IO_NPY_H_
#define TRAIND_ENGINE_IO_NPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// dtypes: <f4 <f8 <i8 <i4 <i2 |i1 |u1 |b1 (and their '=' spellings). Errors name the file and what is wrong
// (Fortran order, big-endian, truncated data, a header that lies about the size).
absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes, absl::string_view name_for_errors = "npy");
absl::StatusOr<Tensor> ReadNpy(const std::string& path);

// Precondition: the tensor's dtype is one ParseNpy reads.
std::string SerializeNpy(const Tensor& tensor);
// Atomically (temp file + rename).
absl::Status WriteNpy(const std::string& path, const Tensor& tensor);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_IO_NPY_H_
