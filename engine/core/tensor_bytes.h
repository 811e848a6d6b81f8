// Tensors to and from their dense byte form (row-major, little-endian, bool as one 0/1 byte per element): what
// clients send and receive over the network. Decoding treats every field as hostile: the dtype, every dimension
// and the byte count are checked (overflow-safely, against a caller-chosen byte limit) before anything is
// allocated, and each error says which check failed.
#ifndef TRAIND_ENGINE_CORE_TENSOR_BYTES_H_
#define TRAIND_ENGINE_CORE_TENSOR_BYTES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/tensor.h"

namespace traind::engine {

// kInvalidArgument for a dtype a tensor cannot hold, a negative dimension, an element count that overflows, a
// byte count other than elements x element size, or a bool byte other than 0 and 1; kResourceExhausted when the
// tensor would exceed `max_bytes`. `what` names the tensor in messages ("input 'x'"). With a `pool`, the tensor's
// buffer comes from it (and returns to it when the tensor goes): a batch decoded per request then reuses the last
// one's memory instead of costing a fresh mapping and its page faults every time.
absl::StatusOr<Tensor> TensorFromBytes(DataType dtype, absl::Span<const int64_t> dims, absl::string_view bytes,
                                       int64_t max_bytes, absl::string_view what, BufferPool* pool = nullptr);

// The tensor's elements as bytes (an undefined tensor gives none).
std::string TensorToBytes(const Tensor& tensor);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_TENSOR_BYTES_H_
